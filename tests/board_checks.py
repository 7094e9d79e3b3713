"""The emulated Cortex-M55 in the tests (`memsched.board`): every ``.tflite`` a test writes runs
in TFLite Micro with the CMSIS-NN MVE kernels on the board, outputs bit-equal to the original
file's there, and its minimal arena on the board never larger than the original's.

Called after a test's host checks: where the board cannot run (no ``../shared``, no QEMU or
toolchain) the test is skipped with that reason.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from memsched import board


def tflm_board():
    """The TFLM firmware's directory, or the reason the board is not here (a str)."""
    try:
        return board.firmware("tflm")
    except board.BoardUnavailable as e:
        return str(e)


def board_inputs(path, count: int = 1, seed: int = 0) -> list[list]:
    """``count`` random input sets for the file (LiteRT's input details, in input order)."""
    from memsched.tflite.litert import make_interpreter, random_inputs

    details = make_interpreter(str(path)).get_input_details()
    return [[feed[d["name"]] for d in details]
            for feed in random_inputs(details, count, seed)]


def assert_tflite_equal_on_board(original, written, tmp: Path, count: int = 1, seed: int = 0,
                                 never_larger: bool = True) -> tuple[dict, dict]:
    """Run ``original`` and ``written`` in TFLite Micro on the emulated M55 on the same random
    inputs: outputs bit-equal, and (``never_larger``) the written file's minimal arena on the
    board at most the original's. Returns the board's results (original, written) of the
    first input, each with ``min_arena_bytes``."""
    fw = tflm_board()
    if isinstance(fw, str):
        pytest.skip(f"host checks passed; the board: {fw}")
    first = None
    for k, ins in enumerate(board_inputs(original, count, seed)):
        ra, a = board.run_tflite(original, ins, Path(tmp) / f"m55-original-{k}", min_arena=k == 0)
        rb, b = board.run_tflite(written, ins, Path(tmp) / f"m55-written-{k}", min_arena=k == 0)
        assert ra["status"] == "ok", ra
        assert rb["status"] == "ok", rb
        assert a == b, f"outputs differ on the board ({Path(written).name}, input set {k})"
        if first is None:
            first = (ra, rb)
    ra, rb = first
    if never_larger:
        assert rb["min_arena_bytes"] <= ra["min_arena_bytes"], (
            f"{Path(written).name} needs {rb['min_arena_bytes']:,} B on the board, the "
            f"original {ra['min_arena_bytes']:,} B")
    return ra, rb


def assert_segments_equal_on_board(original, segments, tmp: Path, seed: int = 0) -> None:
    """Pipeline segments (``memsched partition``'s files) chained on the emulated M55 in
    TFLite Micro: each segment takes its inputs by name from the model's inputs and the
    earlier segments' outputs; every output of the original equals the original's on the
    board, bit for bit."""
    from memsched.tflite.litert import make_interpreter

    fw = tflm_board()
    if isinstance(fw, str):
        pytest.skip(f"host checks passed; the board: {fw}")
    names = lambda p, kind: [d["name"] for d in getattr(  # noqa: E731
        make_interpreter(str(p)), f"get_{kind}_details")()]
    (ins,) = board_inputs(original, 1, seed)
    ra, want = board.run_tflite(original, ins, Path(tmp) / "m55-original")
    assert ra["status"] == "ok", ra
    have = dict(zip(names(original, "input"), (a.tobytes() for a in ins)))
    for i, seg in enumerate(segments):
        feed = [have[n] for n in names(seg, "input")]
        r, outs = board.run_tflite(seg, feed, Path(tmp) / f"m55-seg{i}")
        assert r["status"] == "ok", (seg, r)
        have.update(zip(names(seg, "output"), outs))
    for n, b in zip(names(original, "output"), want):
        assert have[n] == b, f"output {n!r} differs on the board"


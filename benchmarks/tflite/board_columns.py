"""The board columns of the `memsched tile` tables: a file and its rewrite in TFLite Micro with
the CMSIS-NN MVE kernels on the emulated Cortex-M55 (`memsched.board`, a test oracle built from
../shared): minimal arena on the board (head + tail), instructions per inference, memsched's
predicted instructions of each file (`memsched.tflite.memory.instructions`, what
``memsched analyze X.tflite --json`` reports as ``cpu_instructions``) and their error against
the board, outputs bit-equal to the original's there."""
from __future__ import annotations

import tempfile
from pathlib import Path


def board_measure(src: str, dst: str, seed: int = 0) -> dict:
    """``{"m55_arena_original", "m55_arena_patched", "m55_ratio", "m55_equal",
    "m55_instructions_original", "m55_instructions_patched", "predicted_instructions_original",
    "predicted_instructions_patched", ...}``, or ``{"m55": reason}`` where the board cannot
    run here."""
    from memsched import board
    from memsched.tflite.memory.instructions import model_instructions
    from memsched.tflite.litert import make_interpreter, random_inputs

    try:
        board.firmware("tflm")
    except board.BoardUnavailable as e:
        return {"m55": f"not run: {e}"}
    details = make_interpreter(src).get_input_details()
    (feed,) = random_inputs(details, 1, seed)
    ins = [feed[d["name"]] for d in details]
    work = Path(tempfile.mkdtemp(prefix="m55-tile-"))
    (ra, a), (rb, b) = (board.run_tflite(p, ins, work / k, min_arena=True)
                        for k, p in (("original", src), ("patched", dst)))
    if ra.get("status") != "ok" or rb.get("status") != "ok":
        return {"m55": f"FAILS on the M55: {ra.get('reason') or rb.get('reason')}"}
    return {"m55": "bit-equal" if a == b else "DIFFER",
            "m55_equal": a == b,
            "m55_arena_original": ra["min_arena_bytes"], "m55_arena_patched": rb["min_arena_bytes"],
            "m55_head_tail_original": (ra["head"], ra["tail"]),
            "m55_head_tail_patched": (rb["head"], rb["tail"]),
            "m55_ratio": round(ra["min_arena_bytes"] / max(rb["min_arena_bytes"], 1), 3),
            "m55_instructions_original": ra["invoke_instructions"],
            "m55_instructions_patched": rb["invoke_instructions"],
            # the prediction the user gets before flashing (None: an operator without a model)
            "predicted_instructions_original": model_instructions(src).total,
            "predicted_instructions_patched": model_instructions(dst).total}


def prediction_error(predicted, measured) -> str:
    """``+0.1 %``: the prediction against the board; "-" where either is missing."""
    if not predicted or not measured:
        return "-"
    return f"{100 * (predicted - measured) / measured:+.1f} %"


def board_text(m: dict) -> str:
    """One line's board part."""
    if "m55_arena_original" not in m:
        return f"M55 {m.get('m55', '-')}"
    io, ip = m["m55_instructions_original"], m["m55_instructions_patched"]
    po, pp = m.get("predicted_instructions_original"), m.get("predicted_instructions_patched")
    return (f"M55 {m['m55_arena_original']:,} -> {m['m55_arena_patched']:,} B "
            f"({m['m55_ratio']}x) insns {io:,} -> {ip:,} ({ip / max(io, 1):.3f}x; predicted "
            f"{po or 0:,} -> {pp or 0:,}, error {prediction_error(po, io)} / "
            f"{prediction_error(pp, ip)}) {m['m55']}")

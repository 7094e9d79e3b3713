"""`memsched.tflite.memory.arena` prices TFLite Micro's DECODE (the custom ``TFLM_DECODE``:
weights decoded at run time from a lookup table, a prune bitmap or Huffman codes) and names
ETHOSU with the reason it cannot (issue 60, item 2, `memory.kernels_misc`).

On generated int8 and float32 files (`memsched.generators.tflite_ops_decode`: one DECODE with
two or three outputs feeding convolutions and a fully connected layer) the computed arena
equals the emulated Cortex-M55's minimal arena to the byte (head and tail too) and, for
``target="host"``, the ``tflite-micro`` package's bisection; both runtimes decode the weights
bit-equal to the same model with the weights stored plainly. A Vela-style ``ethos-u`` file is
rejected by both at any arena size; the report says why.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from memsched import board
from memsched.generators import tflite_ops_decode as synth
from memsched.generators.tflite_ops_misc import ethosu_model
from memsched.tflite import tflm
from memsched.tflite.format.read import read_tflite
from memsched.tflite.memory.abi import ABIS, ALIGN, DECODE_STATE, round_up
from memsched.tflite.memory.arena import UnpricedModelError, arena, priced_operators

from test_tflite_arena_ops import _check_board, _check_host, _inputs

CASES = [(c, q) for q in (True, False) for c in synth.CODECS if q or c != "HUFFMAN"]


def _ids(codec, quantized):
    return f"{codec}-{'int8' if quantized else 'f32'}"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("arena_decode")
    out = {}
    for codec, q in CASES:
        for plain in (False, True):
            p = d / f"decode_{codec.lower()}_{'int8' if q else 'f32'}{'_plain' if plain else ''}" \
                    ".tflite"
            p.write_bytes(synth.decode_model(codec, q, plain=plain))
            out[codec, q, plain] = str(p)
    p = d / "ethosu.tflite"
    p.write_bytes(ethosu_model())
    out["ETHOSU"] = str(p)
    return out


def _decode_op(path):
    tg = read_tflite(path)
    codes = tg.model.operatorCodes
    ops = [op for op in tg.subgraph.operators
           if codes[op.opcodeIndex].customCode in (b"TFLM_DECODE", "TFLM_DECODE")]
    assert len(ops) == 1
    return tg, ops[0]


@pytest.mark.parametrize("codec,quantized", [pytest.param(c, q, id=_ids(c, q))
                                             for c, q in CASES])
def test_decode_priced_as_the_board_allocates(codec, quantized, files, fw, tmp_path):
    path = files[codec, quantized, False]
    assert "DECODE" in priced_operators()
    _check_board(path, tmp_path)
    # the firmware decodes what the generator encoded: the outputs of the same model with the
    # weights stored plainly, bit for bit
    ins = _inputs(path)
    res, outs = board.run_tflite(path, ins, tmp_path / "decode")
    res_plain, outs_plain = board.run_tflite(files[codec, quantized, True], ins,
                                             tmp_path / "plain")
    assert res["status"] == res_plain["status"] == "ok", (res, res_plain)
    assert outs == outs_plain


@pytest.mark.skipif(not tflm.available(), reason="tflite-micro not installed")
@pytest.mark.parametrize("codec,quantized", [  # host bisections take about 7 s each
    pytest.param(c, q, id=_ids(c, q), marks=[] if q else [pytest.mark.heavy])
    for c, q in CASES])
def test_decode_priced_as_the_host_package_allocates(codec, quantized, files):
    path = files[codec, quantized, False]
    _check_host(path)
    r = arena(path, "host")
    assert tflm.arena_sections(path, r.arena_bytes)["head"] == r.head_bytes
    ins = _inputs(path)
    n = len(read_tflite(path).subgraph.outputs)
    got = tflm.run_tflm(path, ins, n)
    want = tflm.run_tflm(files[codec, quantized, True], ins, n)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("codec,quantized", [pytest.param(c, q, id=_ids(c, q))
                                             for c, q in CASES])
def test_what_decode_keeps(codec, quantized, files):
    """What DECODE's Prepare keeps in the tail, beyond the same model with plain weights: an
    array of one pointer per output and each output's decode state (LUT 36 / 72 B, Huffman
    28 / 56, prune 40 / 80 on the Cortex-M / the host), each 16-aligned, and for the int8
    prune file's per-channel output with non-zero zero points a copy of its 4 zero points.
    With plain weights CMSIS-NN's int8 fully connected layer keeps its kernel sums (4 B per
    unit) in the tail; decoded, its filter is not constant and they become a scratch
    buffer."""
    path, plain = files[codec, quantized, False], files[codec, quantized, True]
    tg, op = _decode_op(path)
    n_out = len(op.outputs)
    kinds = [int(tg.model.buffers[tg.subgraph.tensors[t].buffer].data[0])
             for t in op.inputs[1::2]]
    assert kinds == [{"LUT": 0, "HUFFMAN": 1, "PRUNE": 2}[codec]] * n_out
    for target in ("cortex-m", "host"):
        abi = ABIS[target]
        want = round_up(abi.word * n_out, ALIGN) + \
            sum(round_up(DECODE_STATE[target][k], ALIGN) for k in kinds)
        if codec == "PRUNE" and quantized:
            want += ALIGN  # 4 int8 zero points
        moved = 0
        if target == "cortex-m" and quantized and codec != "LUT":
            moved = 4 * 4  # the fully connected layer's kernel sums (4 units)
            assert (3, "FULLY_CONNECTED", 16) in arena(path, target).scratch
        got = arena(path, target).tail_parts["prepare"] - \
            arena(plain, target).tail_parts.get("prepare", 0) + moved
        assert got == want, (target, got, want)


def test_decode_that_tflite_micro_rejects(files):
    """Ancillary data TFLite Micro's Prepare refuses at any arena size is named, not priced:
    an unknown decode type (127: custom), a second version, a non-constant encoded tensor."""
    path = files["LUT", True, False]
    for byte, value, match in ((0, 127, "decode type 127"), (1, 2, "version 2")):
        tg, op = _decode_op(path)
        buf = tg.model.buffers[tg.subgraph.tensors[op.inputs[1]].buffer]
        buf.data = np.array(buf.data, np.uint8)
        buf.data[byte] = value
        with pytest.raises(UnpricedModelError, match=match):
            arena(tg)
    tg, op = _decode_op(path)
    tg.subgraph.tensors[op.inputs[0]].buffer = 0  # no data: not constant
    with pytest.raises(UnpricedModelError, match="not constant"):
        arena(tg, "host")


def test_ethosu_named_with_the_reason(files, capsys):
    """A Vela-style ``ethos-u`` operator is named ETHOSU with why it is not priced (stock
    TFLite Micro registers no kernel for it), not as an unknown custom operator; `memsched
    analyze --json` keeps ``arena_bytes`` null with that reason."""
    from memsched.cli import main

    path = files["ETHOSU"]
    for target in ("cortex-m", "host"):
        with pytest.raises(UnpricedModelError) as e:
            arena(path, target)
        msg = str(e.value)
        assert "ETHOSU (operator 1): stock TFLite Micro registers no kernel for it" in msg
        assert "Ethos-U build" in msg and "CUSTOM" not in msg and "\n" not in msg
    assert main(["analyze", path, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["arena_bytes"] is None
    assert "ETHOSU (operator 1): stock TFLite Micro registers no kernel" in res["arena_unpriced"]


def test_reorder_and_tile_name_why_the_arena_is_not_computed(files, tmp_path, capsys):
    """`memsched reorder` and `memsched tile` price the same kernels as analyze: on a file
    with an operator the model does not price, ``arena_bytes`` is null and
    ``arena_unpriced`` names it (JSON and text)."""
    from memsched.cli import main

    path = files["ETHOSU"]
    for cmd in ("reorder", "tile"):
        out = tmp_path / f"{cmd}.tflite"
        code = main([cmd, path, "-o", str(out), "--json"])
        res = json.loads(capsys.readouterr().out)
        assert code == 0, (cmd, res)
        res = res.get("result", res)
        assert res["arena_bytes"] is None, cmd
        assert "ETHOSU (operator 1)" in res["arena_unpriced"], cmd
    assert main(["reorder", path, "-o", str(tmp_path / "r.tflite")]) == 0
    out = capsys.readouterr().out
    assert "arena on cortex-m: not computed (" in out and "ETHOSU (operator 1)" in out


def test_ethosu_rejected_by_the_board(files, fw, tmp_path):
    path = files["ETHOSU"]
    res, _ = board.run_tflite(path, _inputs(path), tmp_path / "ethosu", arena=1 << 20)
    assert res["status"] == "error", res


@pytest.mark.skipif(not tflm.available(), reason="tflite-micro not installed")
def test_ethosu_rejected_by_the_host_package(files):
    assert not tflm.allocates(files["ETHOSU"], 1 << 24)

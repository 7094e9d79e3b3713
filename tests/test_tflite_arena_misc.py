"""`memsched.tflite.memory.arena` prices TFLite Micro's DETECTION_POSTPROCESS (the custom
``TFLite_Detection_PostProcess``: 11 scratch buffers), DYNAMIC_UPDATE_SLICE, CIRCULAR_BUFFER
(custom), the resource variables (VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE) and the control
flow (CALL_ONCE, IF, WHILE: every subgraph allocated, prepared and planned together) (issue 60,
item 2, `memory.kernels_misc`): on generated int8 and float32 files the computed arena equals
the emulated Cortex-M55's minimal arena to the byte (head and tail too) and, for
``target="host"``, the ``tflite-micro`` package's bisection. The board's runner creates no
``MicroResourceVariables`` (VAR_HANDLE then fails in ``Prepare``), so the resource variables
are checked against the host package only.
"""
from __future__ import annotations

import pytest

from memsched import board
from memsched.generators import tflite_ops_misc as synth
from memsched.tflite import tflm
from memsched.tflite.memory.arena import UnpricedModelError, arena, priced_operators

from test_tflite_arena_ops import _check_board, _check_host, _inputs, _kinds

BOARD = ["DETECTION_POSTPROCESS", "DYNAMIC_UPDATE_SLICE", "CIRCULAR_BUFFER", "CALL_ONCE", "IF",
         "IF_ELSE", "WHILE"]
# host bisections (about 4 s each) run by default
HOST_DEFAULT = {("DETECTION_POSTPROCESS", True), ("RESOURCE_VARIABLES", True),
                ("CALL_ONCE_VARIABLES", True), ("WHILE", False)}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("arena_misc")
    out = {}
    for quantized in (True, False):
        for op, data in synth.misc_models(quantized).items():
            p = d / f"{op.lower()}_{'int8' if quantized else 'f32'}.tflite"
            p.write_bytes(data)
            out[op, quantized] = str(p)
    p = d / "detection_wide.tflite"  # more boxes than classes x detections, other seed
    p.write_bytes(synth.detection_model(True, seed=2, size=6, anchors=3, classes=6,
                                        max_detections=4))
    out["DETECTION_WIDE", True] = str(p)
    return out


def _ids(op, quantized):
    return f"{op}-{'int8' if quantized else 'f32'}"


@pytest.mark.parametrize("op,quantized", [
    pytest.param(op, q, id=_ids(op, q)) for op in BOARD + ["DETECTION_WIDE"]
    for q in (True, False) if (op, q) not in {("CIRCULAR_BUFFER", False),
                                              ("DETECTION_WIDE", False)}])
def test_operator_priced_as_the_board_allocates(op, quantized, files, fw, tmp_path):
    path = files[op, quantized]
    kind = op.replace("_WIDE", "_POSTPROCESS").replace("_ELSE", "")
    assert kind in _kinds(path) or kind in ("DETECTION_POSTPROCESS", "CIRCULAR_BUFFER")
    assert kind in priced_operators()
    _check_board(path, tmp_path, kind)


@pytest.mark.skipif(not tflm.available(), reason="tflite-micro not installed")
@pytest.mark.parametrize("op,quantized", [
    pytest.param(op, q, id=_ids(op, q),
                 marks=[] if (op, q) in HOST_DEFAULT else [pytest.mark.heavy])
    for op in synth.OPERATORS + ("DETECTION_WIDE",) for q in (True, False)
    if (op, q) not in {("CIRCULAR_BUFFER", False), ("DETECTION_WIDE", False)}])
def test_operator_priced_as_the_host_package_allocates(op, quantized, files):
    _check_host(files[op, quantized])


def test_what_the_kernels_keep(files):
    """DETECTION_POSTPROCESS's 11 scratch buffers (8x8 x 2 anchors = 128 boxes, 3 classes, 5
    detections) and 112 B of op data on both targets; a resource variable's buffer (the
    value's bytes) in the tail once per variable, after MicroResourceVariables (12 + 20 B per
    variable on the Cortex-M, 16 + 40 on the host); a VAR_HANDLE's output is not planned."""
    det = files["DETECTION_POSTPROCESS", False]
    sizes = [s[2] for s in arena(det).scratch if s[1] == "DETECTION_POSTPROCESS"]
    assert sizes == [128, 2048, 2048, 512, 512, 2560, 2560, 512, 2560, 2560, 2560] == \
        [s[2] for s in arena(det, "host").scratch]
    rv = files["RESOURCE_VARIABLES", True]
    for target, parts in (("cortex-m", 16 + 48), ("host", 16 + 80)):
        r = arena(rv, target)
        assert parts <= r.tail_parts["resource_variables"] < parts + 16  # + alignment
    # the two variables' buffers (8x8x8 int8 each) and the two convolutions' per-channel
    # multipliers and shifts (8 and 4 channels, 4 B each)
    assert arena(rv).tail_parts["prepare"] == 2 * 512 + 2 * 4 * (8 + 4)


def test_resource_variables_need_the_applications_setup(files, fw, tmp_path):
    """The board's runner passes no MicroResourceVariables to the interpreter: TFLite Micro
    then fails AllocateTensors at any size (the host package creates them; `arena` prices
    that setup on both targets)."""
    path = files["RESOURCE_VARIABLES", True]
    res, _ = board.run_tflite(path, _inputs(path), tmp_path / "rv", arena=1 << 20)
    assert res["status"] == "error"
    assert arena(path).arena_bytes > 0


def test_detection_needs_float_inputs(files):
    from memsched.tflite.format.read import read_tflite

    tg = read_tflite(files["DETECTION_POSTPROCESS", True])
    sg = tg.subgraph
    det = sg.operators[-1]
    sg.tensors[det.inputs[0]].type = 9  # an int8 box input: TFLite Micro's kernel fails
    with pytest.raises(UnpricedModelError, match="float32"):
        arena(tg)


def test_analyze_answers_for_files_it_cannot_schedule(files, capsys):
    """Control flow and resource tensors stop the scheduler, not the arena: `memsched analyze`
    prints why it does not schedule and TFLite Micro's arena (exit 0)."""
    import json

    from memsched.cli import main

    for op in ("WHILE", "CALL_ONCE_VARIABLES"):
        path = files[op, True]
        assert main(["analyze", path, "--json"]) == 0
        res = json.loads(capsys.readouterr().out)
        assert res["scheduled"] is False and res["not_scheduled"]
        assert res["arena_bytes"] == arena(path).arena_bytes
    assert main(["analyze", files["IF", False], "--target", "host"]) == 0
    out = capsys.readouterr().out
    assert "not scheduled (control flow" in out
    assert f"{arena(files['IF', False], 'host').arena_bytes:,} B" in out

"""`memsched.tflite.memory.arena`: TFLite Micro's minimal arena computed from the file equals what
the emulated Cortex-M55 (CMSIS-NN kernels, `memsched.board`) and the host's ``tflite-micro``
package (reference kernels, `memsched.tflite.tflm.min_arena_bytes`) measure by bisection, within
the bisection's 16-B step: on person_detect, its ``reorder --offline-plan`` and ``tile
--offline-plan`` files (a tight offline plan: CMSIS-NN's scratch buffers go above it), and
synthetic int8 models without a plan. A stack of FULLY_CONNECTED layers, whose allocation needs
more room while it runs than it keeps, is checked at the computed size and 16 B below it (the
board's own bisection faults on it, see the module's docstring).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from memsched import board
from memsched.cli import main
from memsched.generators.tflite_synth import _Net, custom_op_model, mobilenet_like
from memsched.tflite import tflm
from memsched.tflite.format.read import NUMPY_DTYPES, TFLiteModelError, read_tflite
from memsched.tflite.memory.arena import UnpricedModelError, arena, greedy_plan

STEP = 16


def _person_detect() -> Path | None:
    from memsched.executorch.host_kernels import shared_dir

    shared = shared_dir()
    p = shared and shared / "third_party/tflite-micro/tensorflow/lite/micro/models" \
        / "person_detect.tflite"
    return p if p and p.is_file() else None


def fc_stack(sizes=(640, 128, 128, 8, 128, 640)) -> bytes:
    """int8 FULLY_CONNECTED layers, per-tensor quantized (an MLPerf Tiny anomaly-detection-like
    autoencoder): tiny activations, CMSIS-NN kernel sums in the tail."""
    n = _Net("fc_stack", True, 0)
    s, b = n.s, n.b
    x = n.act("x", [1, sizes[0]], 0.05, 0)
    b.inputs = [x]
    for i, m in enumerate(sizes[1:]):
        wf = n.rng.normal(0, 1 / np.sqrt(sizes[i]), size=(m, sizes[i])).astype(np.float32)
        wt, ws = n.weight(f"w{i}", wf, None)
        y = n.act(f"y{i}", [1, m], 0.1, 3)
        o = s.FullyConnectedOptionsT()
        o.fusedActivationFunction = s.ActivationFunctionType.RELU
        b.op("FULLY_CONNECTED", [x, wt, n.bias(f"b{i}", x, ws, m)], [y],
             s.BuiltinOptions.FullyConnectedOptions, o)
        x = y
    b.outputs = [x]
    return b.finish()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from memsched.tflite.plan.reorder import reorder_tflite
    from memsched.tflite.patch.tile import tile_tflite

    d = tmp_path_factory.mktemp("arena")
    out = {}
    pd = _person_detect()
    if pd is not None:
        out["person_detect"] = str(pd)
        out["person_detect_reorder"] = str(d / "pd_reorder.tflite")
        reorder_tflite(str(pd), out["person_detect_reorder"], offline_plan=True)
        # planned for tensors only (target=None): the plan is tight, the scratch goes above
        out["person_detect_tile"] = str(d / "pd_tile.tflite")
        tile_tflite(str(pd), out["person_detect_tile"], offline_plan=True, target=None)
        # planned for the Cortex-M (the default): the plan leaves the scratch buffers room
        out["person_detect_tile_m"] = str(d / "pd_tile_m.tflite")
        tile_tflite(str(pd), out["person_detect_tile_m"], offline_plan=True)
    mbl = d / "mobilenet_like.tflite"  # int8, no offline plan
    mbl.write_bytes(mobilenet_like(blocks=6))
    out["mobilenet_like"] = str(mbl)
    out["mobilenet_like_tile"] = str(d / "mbl_tile.tflite")
    tile_tflite(str(mbl), out["mobilenet_like_tile"], offline_plan=True)
    fc = d / "fc_stack.tflite"
    fc.write_bytes(fc_stack())
    out["fc_stack"] = str(fc)
    return out


def _inputs(path) -> list:
    sg = read_tflite(path).subgraph
    rng = np.random.default_rng(0)
    return [rng.integers(-20, 20, [int(x) for x in sg.tensors[t].shape])
            .astype(NUMPY_DTYPES[int(sg.tensors[t].type)]) for t in sg.inputs]


BISECTED = ["person_detect", "person_detect_reorder", "person_detect_tile",
            "person_detect_tile_m", "mobilenet_like", "mobilenet_like_tile"]


@pytest.mark.parametrize("name", BISECTED)
def test_computed_arena_equals_the_boards(name, files, fw, tmp_path):
    if name not in files:
        pytest.skip("person_detect.tflite is not in ../shared")
    path = files[name]
    r = arena(path)
    res, outs = board.run_tflite(path, _inputs(path), tmp_path, min_arena=True)
    assert res["status"] == "ok" and outs is not None, res
    assert abs(r.arena_bytes - res["min_arena_bytes"]) < STEP, (r, res["min_arena_bytes"])
    # in the board's minimal arena, the plan and the persistent part are the computed ones
    assert (r.head_bytes, r.tail_bytes) == (res["head"], res["tail"])
    if name == "person_detect_tile":  # CMSIS-NN's scratch buffers above the tight plan
        assert r.plan_bytes is not None and r.head_bytes == r.plan_bytes + r.scratch_bytes > \
            r.plan_bytes
    if name == "person_detect_tile_m":  # planned for the target: room left, a smaller arena
        assert r.head_bytes == r.plan_bytes and r.scratch_bytes == 0
        assert r.arena_bytes < arena(files["person_detect_tile"]).arena_bytes


@pytest.mark.skipif(not tflm.available(), reason="tflite-micro not installed")
@pytest.mark.parametrize("name", ["person_detect_tile", "mobilenet_like", "fc_stack"])
def test_computed_host_arena_equals_the_packages(name, files):
    if name not in files:
        pytest.skip("person_detect.tflite is not in ../shared")
    r = arena(files[name], target="host")
    assert abs(r.arena_bytes - tflm.min_arena_bytes(files[name])) < STEP
    if name == "fc_stack":  # more room while allocating than the arena keeps
        assert r.transient_bytes > 0


def test_fc_stack_allocates_at_the_computed_size_and_not_below(files, fw, tmp_path):
    """The board's bisection cannot measure this file: a probe that is too small lets
    FULLY_CONNECTED's kernel sums overwrite its temporary tensors and the planner faults. So
    the computed minimum is checked directly: it allocates (same outputs as a large arena),
    16 B less does not."""
    path = files["fc_stack"]
    r = arena(path)
    assert r.transient_bytes > 0 and r.tail_parts["prepare"] >= 4 * (128 + 128 + 8 + 128 + 640)
    ins = _inputs(path)
    big, out_big = board.run_tflite(path, ins, tmp_path / "big", timeout=120)
    at, out_at = board.run_tflite(path, ins, tmp_path / "at", arena=r.arena_bytes, timeout=120)
    below, _ = board.run_tflite(path, ins, tmp_path / "below", arena=r.arena_bytes - STEP,
                                timeout=120)
    assert big["status"] == at["status"] == "ok" and out_at == out_big, at
    assert (at["head"], at["tail"]) == (r.head_bytes, r.tail_bytes)
    assert below["status"] != "ok", below


def test_analyze_reports_the_arena(files, capsys):
    path = files["mobilenet_like_tile"]
    assert main(["analyze", path, "--json", "--time-limit", "5"]) == 0
    res = json.loads(capsys.readouterr().out)
    r = arena(path)
    assert res["target"] == "cortex-m" and res["arena_bytes"] == r.arena_bytes
    assert (res["arena_head_bytes"], res["arena_tail_bytes"]) == (r.head_bytes, r.tail_bytes)
    assert res["peak_bytes"] > 0  # the existing fields stay
    assert main(["analyze", path, "--target", "host", "--time-limit", "5"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    host = arena(path, "host")
    assert line.startswith(f"TFLite Micro arena on host (reference kernels): "
                           f"{host.arena_bytes:,} B = planned {host.head_bytes:,} + persistent")


def test_unpriced_and_bad_files(tmp_path, capsys):
    with pytest.raises(UnpricedModelError, match="CUSTOM"):
        arena(custom_op_model())
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\0" * 64)
    with pytest.raises(TFLiteModelError):
        arena(bad)
    with pytest.raises(ValueError, match="target"):
        arena(fc_stack(), target="riscv")
    p = tmp_path / "custom.tflite"
    p.write_bytes(custom_op_model())
    assert main(["analyze", str(p), "--json", "--time-limit", "5"]) == 0
    res = json.loads(capsys.readouterr().out)  # the schedule is reported, the arena says why not
    assert res["peak_bytes"] > 0 and res["arena_bytes"] is None
    assert "CUSTOM 'MyCustomOp'" in res["arena_unpriced"]


def test_greedy_plan_matches_tflm_rules():
    # largest first; a tie goes to the later buffer; a gap is reused only when it fits
    assert greedy_plan([(32, 0, 1, -1), (32, 1, 2, -1), (16, 2, 3, -1)]) == [32, 0, 32]
    # offline offsets are kept, online buffers go around them
    assert greedy_plan([(16, 0, 3, 16), (16, 0, 3, -1), (48, 0, 3, -1)]) == [16, 0, 32]


def _rewritten_tensor_model(reuse: bool) -> bytes:
    """int8 conv1 -> a, conv2(a) -> b, conv3(b) -> a again (``reuse``: the tensor conv1 wrote,
    dead by then) or a fresh tensor, conv4 -> out."""
    net = _Net("rewritten", True, 0)
    s = net.s
    x = net.act("x", [1, 8, 8, 4])
    net.b.inputs = [x]
    a, shape = net.conv(x, [1, 8, 8, 4], 4)
    b, _ = net.conv(a, shape, 4)
    c = a if reuse else net.act("c", shape, like=a)
    wt, wscale = net.weight("c/w", net.rng.normal(0, 0.3, size=[4, 3, 3, 4]).astype(np.float32),
                            0)
    o = s.Conv2DOptionsT()
    o.padding, o.strideW, o.strideH = s.Padding.SAME, 1, 1
    o.fusedActivationFunction = s.ActivationFunctionType.RELU
    o.dilationWFactor = o.dilationHFactor = 1
    net.b.op("CONV_2D", [b, wt, net.bias("c/b", b, wscale, 4)], [c],
             s.BuiltinOptions.Conv2DOptions, o)
    d, _ = net.conv(c, shape, 4)
    net.b.outputs = [d]
    return net.b.finish()


def test_a_tensor_written_by_two_operators(fw, tmp_path):
    """A runtime fact for patch copies (issue 52): one tensor written by two operators at
    disjoint times runs in LiteRT, in TFLite Micro here and on the board, with the outputs of
    the model that writes two tensors, and the board's minimal arena is smaller (measured
    2,016 -> 1,936 B: a tensor's records, not its bytes, which the planner reused anyway)."""
    from ai_edge_litert.interpreter import Interpreter

    x = np.random.default_rng(0).integers(-128, 127, size=(1, 8, 8, 4), dtype=np.int8)
    outs, arenas = {}, {}
    for reuse in (False, True):
        path = tmp_path / f"m{int(reuse)}.tflite"
        path.write_bytes(_rewritten_tensor_model(reuse))
        it = Interpreter(model_path=str(path))
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        outs.setdefault("litert", []).append(
            it.get_tensor(it.get_output_details()[0]["index"]).tobytes())
        outs.setdefault("tflm", []).append(tflm.run_tflm(str(path), [x], 1)[0].tobytes())
        res, got = board.run_tflite(path.read_bytes(), [x], tmp_path / f"b{int(reuse)}",
                                    min_arena=True)
        assert got is not None, res
        outs.setdefault("board", []).append(got[0])
        arenas[reuse] = res["min_arena_bytes"]
    for name, (a, b) in outs.items():
        assert a == b, name
    assert arenas[True] < arenas[False]

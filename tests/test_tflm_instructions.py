"""`memsched.tflite.memory.instructions`: TFLite Micro's instructions per Invoke() on the Cortex-M55
(CMSIS-NN MVE) predicted from the file. Host: the API, unknown kernels named, hand-checked
copies, the patch search's plan pricing equal to the written file's prediction, `analyze`'s
fields. Board: within 5 % of the emulated M55's ``invoke_instructions`` on small generated files
and a `memsched tile` output (the fit's own files are other shapes)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from memsched.cli import main
from memsched.generators.tflite_synth import _Net, mobilenet_like, pad_slice_model
from memsched.tflite.memory import instructions as ti
from memsched.tflite.format.read import NUMPY_DTYPES, read_tflite


def small_resnet(size: int = 16) -> bytes:
    """An MLPerf-Tiny-like ResNet block (3x3 convs, a strided 1x1 shortcut, ADD, FC)."""
    net = _Net("small_resnet", True, 3)
    x = net.act("x", [1, size, size, 3], 0.05, 0)
    net.b.inputs = [x]
    t, sh = net.conv(x, [1, size, size, 3], 8)
    y, ysh = net.conv(t, sh, 16, stride=2)
    y, ysh = net.conv(y, ysh, 16, relu=False)
    sc, _ = net.conv(t, sh, 16, k=1, stride=2, relu=False)
    t = net.add(y, sc, ysh)
    n = ysh[1] * ysh[2] * ysh[3]
    r, _ = net.reshape(t, [1, n])
    net.b.outputs = [net.fc(r, n, 10)]
    return net.b.finish()


def test_op_instructions_api():
    conv = ti.op_instructions("CONV_2D", [(1, 8, 8, 16)], (1, 8, 8, 32), filter=(3, 3))
    bigger = ti.op_instructions("CONV_2D", [(1, 16, 16, 16)], (1, 16, 16, 32), filter=(3, 3))
    assert 0 < conv < bigger
    # a window of the same operator (what the patch search prices) is cheaper
    win = ti.op_instructions("CONV_2D", [(1, 6, 6, 16)], (1, 4, 4, 32), filter=(3, 3),
                             padding="VALID")
    assert 0 < win < conv
    assert ti.op_instructions("TRANSPOSE", [(1, 8)], (1, 8)) is None
    assert ti.op_instructions("CONV_2D", [(1, 8, 8, 16)], (1, 8, 8, 16), "float32",
                              filter=(1, 1)) is None


def test_copies_hand_checked():
    # newlib memcpy, aligned, from its disassembly: 4 (alignment test) + 10 (size tests,
    # return) + 36 per 64 B + 12 per 16 B + 4 per word + 5 (+2) for 1-3 bytes
    assert ti._memcpy_insns(0, 0, 64) == 50
    assert ti._memcpy_insns(0, 0, 128 + 16 + 4 + 3) == 14 + 72 + 12 + 4 + 7
    # RESHAPE of a 4-D input: 148 + 3 per input dimension + one memcpy (coefficient 1.0), + 12
    assert ti.op_instructions("RESHAPE", [(1, 4, 4, 8)], (1, 128)) == 160 + 4 + 10 + 72 + 12
    # STRIDED_SLICE: one memcpy per output pixel (its channels), 36 per run, 30 per row
    got = ti.op_instructions("STRIDED_SLICE", [(1, 8, 8, 16)], (1, 4, 8, 16), begin=(0, 2, 0, 0))
    assert got == 825 + 30 * 4 + 36 * 32 + 32 * (14 + 12) + 12
    # GATHER of 4 consecutive rows: one memcpy of a row (128 B, aligned) per index, 17.11
    # each, 288 per call (fitted on the board), + 12
    got = ti.op_instructions("GATHER", [(1, 8, 8, 16)], (1, 4, 8, 16), axis=1, begin=2)
    assert got == round(288 + 17.11 * 4 + 4 * (4 + 10 + 2 * 36)) + 12


def test_model_instructions_sums_and_names_unknown_kernels(tmp_path):
    r = ti.model_instructions(small_resnet())
    assert r.unknown == [] and len(r.ops) == 7
    assert r.total == sum(c.instructions for c in r.ops) + ti.PER_INVOKE
    assert json.loads(json.dumps(r.as_dict()))["total"] == r.total
    net = _Net("float_conv", False, 0)
    x = net.act("x", [1, 8, 8, 4])
    net.b.inputs = [x]
    y, _ = net.conv(x, [1, 8, 8, 4], 8)
    net.b.outputs = [net.fc(net.reshape(y, [1, 512])[0], 512, 4)]
    r = ti.model_instructions(net.b.finish())  # float CONV_2D: TFLite's loops, not fitted
    assert r.total is None and r.unknown == ["CONV_2D (float32)"]
    assert r.ops[0].instructions is None and r.ops[0].reason == "not calibrated"
    assert r.ops[2].instructions is not None  # the float FULLY_CONNECTED is
    assert ti.tflm_time(read_tflite(net.b.finish())) is None


@pytest.mark.parametrize("views", [False, True])
def test_plan_pricing_equals_the_written_file(views):
    """The search's price of a plan is the written file's prediction; ``views``: windows read
    as rows, whose RESHAPEs run in place under the offline plan (no memcpy)."""
    from memsched.patches import Described, PatchOptions, search_model
    from memsched.tflite.format.read import graph_of
    from memsched.tflite.plan.reorder import reorder_model
    from memsched.tflite.patch.describe import spatial_model
    from memsched.tflite.memory.model import TFLMMemory, tflm_runtime
    from memsched.tflite.patch.tile import rewrite_model
    from memsched.tflite.format.write import finish_model

    tg = read_tflite(mobilenet_like(blocks=4, size=32, width=8))
    sm = spatial_model(tg)
    time = ti.tflm_time(tg, views)
    assert time.program(sm) == ti.model_instructions(tg).total
    rt = tflm_runtime(TFLMMemory(n_tensors=len(tg.subgraph.tensors), views=views), time=time)
    assert rt.time is time
    res = search_model(Described(sm, tg.graph, tg.tensor_index), rt,
                       PatchOptions(grid="2x2", padding="explicit"))
    plans = res.plans_of(res.choice)
    pred = time.program(sm) + sum(time.plan(sm, p) - sum(time.op(sm, k) for k in p.region.ops)
                                  for p in plans)
    model = rewrite_model(tg, sm, plans, views=views)
    if views:  # the offline plan puts each view at its input's offset
        data, _ = reorder_model(graph_of(model), offline_plan=True, views=True)
        kinds = [k for _, k, _ in ti.file_ops(read_tflite(data))]
        assert kinds.count("RESHAPE") > 1
    else:
        data = finish_model(model)
    assert pred == ti.model_instructions(data).total
    if views:  # the same file planned without the alias copies in each view RESHAPE
        plain, _ = reorder_model(graph_of(rewrite_model(tg, sm, plans, views=True)),
                                 offline_plan=True, views=False)
        assert ti.model_instructions(plain).total > pred


def test_analyze_reports_instructions(tmp_path, capsys):
    p = tmp_path / "r.tflite"
    p.write_bytes(small_resnet())
    assert main(["analyze", str(p), "--json", "--time-limit", "5"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cpu_instructions"] == ti.model_instructions(str(p)).total
    assert d["cpu_instructions_unknown"] == []
    assert main(["analyze", str(p), "--time-limit", "5"]) == 0
    assert f"{d['cpu_instructions']:,} instructions per Invoke()" in capsys.readouterr().out
    assert main(["analyze", str(p), "--json", "--target", "host", "--time-limit", "5"]) == 0
    assert "cpu_instructions" not in json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------------------ the board
def _inputs(data: bytes) -> list:
    sg = read_tflite(data).subgraph
    rng = np.random.default_rng(0)
    return [rng.integers(-100, 100, [int(x) for x in sg.tensors[t].shape])
            .astype(NUMPY_DTYPES[int(sg.tensors[t].type)]) for t in sg.inputs]


def _tiled(views: bool | None = None) -> bytes:
    from memsched.tflite.patch.tile import tile_tflite

    data, res = tile_tflite(mobilenet_like(blocks=4, size=32, width=8), grid="2x2",
                            offline_plan=True, views=views)
    assert res.choice is not None
    return data


@pytest.mark.parametrize("name", ["small_resnet", "pad_slice", "mobilenet_like_tiled",
                                  "mobilenet_like_views"])
def test_prediction_within_5_percent_of_the_board(name, fw, tmp_path):
    from memsched import board

    data = {"small_resnet": small_resnet, "pad_slice": pad_slice_model,
            "mobilenet_like_tiled": _tiled,
            "mobilenet_like_views": lambda: _tiled(views=True)}[name]()
    pred = ti.model_instructions(data)
    assert pred.unknown == []
    res, _ = board.run_tflite(data, _inputs(data), tmp_path)
    assert res["status"] == "ok"
    measured = res["invoke_instructions"]
    assert abs(pred.total - measured) <= 0.05 * measured, (pred.total, measured)

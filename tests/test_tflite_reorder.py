"""`memsched reorder`: .tflite files reordered for TFLite / TFLite Micro, measured with the real
interpreters (LiteRT for bit-equality of every tensor, TFLM for the planned arena)."""
import json
import os

import pytest

from memsched.cli import main
from memsched.generators.examples import example_tflite
from memsched.tflite.format.read import TFLiteModelError, read_tflite
from memsched.tflite.plan.reorder import reorder_tflite
from memsched.tflite.memory.model import TFLM_MODEL, lifetimes
from memsched.generators.tflite_synth import residual_concat_model
from memsched.memory import Problem
from memsched.tflite import tflm

from board_checks import assert_tflite_equal_on_board

needs_tflm = pytest.mark.skipif(not tflm.available(), reason="tflite-micro not installed")


@pytest.fixture(params=[False, True], ids=["float", "int8"])
def randwire(tmp_path, request):
    path = tmp_path / "randwire.tflite"
    path.write_bytes(example_tflite("randwire", quantized=request.param))
    return str(path)


def test_reorder_is_topological_lower_and_bit_equal(randwire, tmp_path):
    out = str(tmp_path / "r.tflite")
    data, res = reorder_tflite(randwire, out)
    assert res.optimal and res.peak < res.input_peak  # BFS emission is bad for memory
    back = read_tflite(out)  # raises if an operator reads a tensor before it is written
    assert back.graph.is_topological(list(range(len(back.graph))))
    assert sorted(res.order) == list(range(res.ops)) and res.order != sorted(res.order)
    # the file's new order has the peak the scheduler promised
    assert Problem.from_graph(back.graph, TFLM_MODEL).evaluate(range(res.ops)).peak == res.peak
    cmp = tflm.compare_models(randwire, out, count=2, tflm=tflm.available())
    assert cmp["litert_equal"] and cmp["tensors_compared"] > res.ops
    assert cmp["tflm_equal"] in (True, None)
    assert_tflite_equal_on_board(randwire, out, tmp_path)


def test_compare_models_detects_a_changed_weight(tmp_path):
    a, b = tmp_path / "a.tflite", tmp_path / "b.tflite"
    a.write_bytes(example_tflite("two_branch", seed=0))
    b.write_bytes(example_tflite("two_branch", seed=1))  # same graph, other weights
    assert not tflm.compare_models(str(a), str(b), count=1, tflm=False)["litert_equal"]


@needs_tflm
def test_tflm_head_matches_offline_plan_and_never_grows(randwire, tmp_path):
    reo, off = str(tmp_path / "reo.tflite"), str(tmp_path / "off.tflite")
    _, r1 = reorder_tflite(randwire, reo)
    _, r2 = reorder_tflite(randwire, off, offline_plan=True)
    big = 1 << 22
    head = {p: tflm.arena_sections(p, big)["head"] for p in (randwire, reo, off)}
    assert head[reo] <= head[randwire] and head[off] <= head[reo]
    # TFLM takes memsched's offsets: its planned section is exactly the offline arena, which
    # equals the certified liveness optimum on these graphs
    assert head[off] == r2.offline_arena == r2.peak
    assert tflm.compare_models(randwire, off, count=1)["tflm_equal"]
    assert_tflite_equal_on_board(randwire, off, tmp_path)  # the offline plan on the board


def test_lifetimes_follow_tflm_rules():
    tg = read_tflite(residual_concat_model())
    n = len(tg.graph)
    lts = dict(lifetimes(tg, list(range(n))))
    sg = tg.subgraph
    for t in sg.inputs:
        assert lts[int(t)].start == 0
    for t in sg.outputs:
        assert lts[int(t)].end == n - 1


def test_already_optimal_file_keeps_its_order(tmp_path):
    src = tmp_path / "m.tflite"
    src.write_bytes(residual_concat_model())
    _, res = reorder_tflite(str(src), str(tmp_path / "o.tflite"))
    assert res.order == list(range(res.ops)) and res.peak == res.input_peak


def test_cli_reorder_json_and_errors(randwire, tmp_path, capsys):
    out = str(tmp_path / "o.tflite")
    assert main(["reorder", randwire, "-o", out, "--offline-plan", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["peak_bytes"] < rep["input_order_peak_bytes"] and rep["optimal"]
    assert rep["offline_arena_bytes"] == rep["peak_bytes"] and os.path.exists(out)
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\x00" * 64)
    for argv in (["reorder", str(bad)], ["reorder", randwire, "-o", "/nonexistent/x.tflite"],
                 ["reorder", randwire, "--time-limit", "nan"],
                 ["reorder", randwire, "-o", randwire]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("memsched: error:")
    with pytest.raises(TFLiteModelError):
        reorder_tflite(str(bad))


@needs_tflm
@pytest.mark.heavy
def test_measured_minimal_arena_shrinks(randwire, tmp_path):
    off = str(tmp_path / "off.tflite")
    reorder_tflite(randwire, off, offline_plan=True)
    before, after = tflm.min_arena_bytes(randwire), tflm.min_arena_bytes(off)
    assert after < before
    assert not tflm.allocates(off, after - 64)

"""Files the project writes are never silently wrong: offline plans are re-planned, never kept
stale; orphaned buffers are dropped; the independent checker runs on every written file;
``--measure`` fails loudly on a difference; permissions follow the umask."""
import json
import os
import stat

import pytest

from memsched.cli import main
from memsched.generators.examples import example_tflite
from memsched.fileio import write_atomic, write_atomic_with
from memsched.tflite.plan import reorder as tflite_reorder
from memsched.tflite.format.check import check_tflite
from memsched.tflite.format.read import read_tflite
from memsched.tflite.plan.reorder import offline_offsets, reorder_tflite
from memsched.tflite.segments import write_segments
from memsched.tflite.format.write import (pack_model, read_offline_plan, set_offline_plan)
from memsched.tflite import tflm

from board_checks import assert_tflite_equal_on_board

needs_tflm = pytest.mark.skipif(not tflm.available(), reason="tflite-micro not installed")


@pytest.fixture(scope="module")
def int8_randwire(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "randwire.tflite"
    path.write_bytes(example_tflite("randwire", quantized=True))
    return str(path)


def _with_plan_for_own_order(src: str, dst: str) -> list[int]:
    """Write ``src`` with a valid offline plan for its own operator order (as Vela would)."""
    tg = read_tflite(src)
    offsets, _ = offline_offsets(tg, list(range(len(tg.graph))))
    set_offline_plan(tg.model, offsets)
    with open(dst, "wb") as f:
        f.write(pack_model(tg.model))
    return offsets


def _stale(planned: str, res) -> bytes:
    """The reordered model with the old plan kept: what the issue's bug wrote."""
    tg = read_tflite(planned)
    ops = list(tg.subgraph.operators)
    tg.subgraph.operators = [ops[i] for i in res.order]
    return pack_model(tg.model)


@pytest.fixture(scope="module")
def planned(int8_randwire, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("p") / "planned.tflite")
    _with_plan_for_own_order(int8_randwire, path)
    assert check_tflite(path).ok
    return path


def test_existing_plan_is_replanned_for_the_new_order(planned, tmp_path):
    out = str(tmp_path / "out.tflite")
    data, res = reorder_tflite(planned, out)
    assert res.order != sorted(res.order)  # the order changed ...
    assert res.offline_plan_action == "replanned" and res.notes
    rep = check_tflite(out)
    assert rep.ok and rep.has_plan and rep.planned > 0
    assert read_offline_plan(read_tflite(out).model) != read_offline_plan(
        read_tflite(planned).model)
    # ... and the checker is able to fail: the old plan under the new order overlaps
    stale = check_tflite(_stale(planned, res))
    assert not stale.ok and stale.overlaps > 0 and "co-live" in stale.problems[0]
    assert len(read_tflite(out).model.buffers) == len(read_tflite(planned).model.buffers)


@needs_tflm
def test_replanned_file_runs_equal_in_tflm(planned, tmp_path):
    out = str(tmp_path / "out.tflite")
    reorder_tflite(planned, out)
    cmp = tflm.compare_models(planned, out, count=1)
    assert cmp["litert_equal"] and cmp["tflm_equal"] is True and cmp["equal"]
    assert_tflite_equal_on_board(planned, out, tmp_path)  # a stale plan replanned


def test_valid_plan_of_an_unchanged_order_is_kept(int8_randwire, tmp_path):
    # reorder once; the result is optimal, so a second run keeps the order
    first = str(tmp_path / "first.tflite")
    reorder_tflite(int8_randwire, first)
    planned = str(tmp_path / "planned.tflite")
    offsets = _with_plan_for_own_order(first, planned)
    out = str(tmp_path / "out.tflite")
    _, res = reorder_tflite(planned, out)
    assert res.order == sorted(res.order) and res.offline_plan_action == "kept"
    assert read_offline_plan(read_tflite(out).model) == offsets and check_tflite(out).ok


@needs_tflm
def test_planned_twice_keeps_buffers_and_runs_equal(int8_randwire, tmp_path):
    once, twice = str(tmp_path / "once.tflite"), str(tmp_path / "twice.tflite")
    _, r1 = reorder_tflite(int8_randwire, once, offline_plan=True)
    _, r2 = reorder_tflite(once, twice, offline_plan=True)
    b0 = len(read_tflite(int8_randwire).model.buffers)
    assert len(read_tflite(once).model.buffers) == b0 + 1  # the plan's buffer
    assert len(read_tflite(twice).model.buffers) == b0 + 1  # not one more per run
    assert r2.offline_plan_action == "written" and check_tflite(twice).ok
    cmp = tflm.compare_models(int8_randwire, twice, count=1)
    assert cmp["equal"] and cmp["tflm_equal"] is True
    assert_tflite_equal_on_board(int8_randwire, twice, tmp_path)


def test_written_files_honour_the_umask(int8_randwire, tmp_path):
    old = os.umask(0o022)
    try:
        out = str(tmp_path / "r.tflite")
        assert main(["reorder", int8_randwire, "-o", out]) == 0
        segs = write_segments(read_tflite(int8_randwire), [0] * 5 + [1] * (
            len(read_tflite(int8_randwire).graph) - 5), str(tmp_path / "segs"))
        plain = str(tmp_path / "plain.bin")
        write_atomic(plain, b"x")
        lib = str(tmp_path / "lib.so")
        write_atomic_with(lib, lambda p: open(p, "wb").close(), executable=True)
        for p in [out, plain] + segs:
            assert stat.S_IMODE(os.stat(p).st_mode) == 0o644, p
        assert stat.S_IMODE(os.stat(lib).st_mode) == 0o755
        for p in segs:
            assert check_tflite(p).ok
        os.umask(0o077)
        write_atomic(plain, b"y")  # replacing a file keeps its mode
        assert stat.S_IMODE(os.stat(plain).st_mode) == 0o644
        write_atomic(str(tmp_path / "new.bin"), b"y")
        assert stat.S_IMODE(os.stat(tmp_path / "new.bin").st_mode) == 0o600
    finally:
        os.umask(old)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".memsched-")]


@needs_tflm
def test_measure_exits_nonzero_on_a_difference(int8_randwire, planned, tmp_path, capsys,
                                               monkeypatch):
    """A writer bug (kept stale plan, changed weights) must be caught by --measure: exit 1, one
    line naming what differs, and no file."""
    out = str(tmp_path / "out.tflite")
    _, res = reorder_tflite(planned, None)
    stale = _stale(planned, res)
    other = example_tflite("randwire", quantized=True, seed=1)  # same graph, other weights
    real = tflite_reorder.reorder_tflite
    for bad, expect in ((stale, "TFLM output"), (other, "LiteRT output")):
        monkeypatch.setattr(tflite_reorder, "reorder_tflite",
                            lambda *a, _b=bad, **k: (_b, real(planned, None)[1]))
        assert main(["reorder", planned, "-o", out, "--measure", "--json"]) == 1
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert len(err) == 1 and expect in err[0] and "not written" in err[0], err
        rep = json.loads(captured.out)
        assert rep["measured"]["equal"] is False and rep["written"] is False
        assert rep["measured"]["difference"]
        assert not os.path.exists(out)
    monkeypatch.setattr(tflite_reorder, "reorder_tflite", real)
    assert main(["reorder", planned, "-o", out, "--measure", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    m = rep["measured"]
    assert m["equal"] and m["check"]["ok"] and rep["offline_plan_action"] == "replanned"
    assert m["check"]["plan_extent_bytes"] <= m["head_after"]

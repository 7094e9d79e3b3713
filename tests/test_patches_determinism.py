"""The same model and options give the same patch search result on an idle and on a loaded
machine (issue 46): the search's decisions are bounded by work counts (`patches.budget`),
and the wall-clock limit only stops it, saying so."""
import os
import subprocess
import sys
import time

from memsched.memory import MemoryModel
from memsched.patches.budget import Budget
from patch_reference import stack_model
from memsched.patches import RuntimeMemory
from test_patches_se import _graph_of, search

MEMORY = RuntimeMemory("test", MemoryModel.get("tvm"))
SPECS = [("CONV_2D", 3, 2, 1, "SAME"), ("DEPTHWISE_CONV_2D", 3, 1, 1, "SAME"),
         ("CONV_2D", 1, 1, 1, "SAME"), ("DEPTHWISE_CONV_2D", 3, 2, 1, "SAME"),
         ("CONV_2D", 1, 1, 1, "SAME"), ("DEPTHWISE_CONV_2D", 3, 1, 1, "SAME"),
         ("CONV_2D", 1, 1, 1, "SAME"), ("DEPTHWISE_CONV_2D", 3, 2, 1, "SAME"),
         ("CONV_2D", 1, 1, 1, "SAME")]


def _outcome(res) -> tuple:
    """Everything an adapter writes from a search: the regions, their grids and variants,
    the orders, the priced bytes and MACs; and the frontier."""
    c = res.choice
    seq = None if c is None else [(r.region_start, r.region_ops, r.grid, r.keep, r.margins,
                                   tuple(r.node_order or ())) for r in c.sequence]
    return (seq, c and (c.peak, c.persistent, c.macs, c.certified),
            [(f.key, f.total, f.macs) for f in res.frontier], res.evaluated)


def _search(time_limit: float = 10.0):
    sm = stack_model(SPECS, 64, 64, 8)
    graph, index = _graph_of(sm)
    return search(sm, graph, index, MEMORY, time_limit=time_limit)


def test_a_loaded_machine_gives_the_same_result(monkeypatch):
    idle = _search()
    assert getattr(idle, "stopped", None) is None and idle.choice is not None
    # another process takes the CPU for 6 s early in the search (a jump of the clock after
    # the first few reads): the old search, which spent shares of the time limit, then
    # counted fewer regions and priced a single candidate
    real = time.perf_counter
    reads = [0]

    def busy() -> float:
        reads[0] += 1
        return real() + (6.0 if reads[0] > 3 else 0.0)

    monkeypatch.setattr(time, "perf_counter", busy)
    loaded = _search()
    monkeypatch.undo()
    assert reads[0] > 3
    assert _outcome(loaded) == _outcome(idle)
    assert loaded.stopped is None


def test_the_time_limit_stops_and_says_so(monkeypatch):
    real = time.perf_counter
    reads = [0]

    def stalled() -> float:  # past any limit after the first reads
        reads[0] += 1
        return real() + (1e6 if reads[0] > 3 else 0.0)

    monkeypatch.setattr(time, "perf_counter", stalled)
    res = _search()
    monkeypatch.undo()
    assert res.stopped  # the stage it stopped in
    assert res.as_dict()["stopped_by_time_limit"] == res.stopped


def test_budgets_bound_the_work():
    sm = stack_model(SPECS, 64, 64, 8)
    graph, index = _graph_of(sm)
    small = search(sm, graph, index, MEMORY, budget=Budget(priced=2, extend_priced=1,
                                                           total_priced=4, steps=3))
    assert small.stopped is None
    assert small.evaluated <= 2 + 8  # the one-region search, and its margins tries
    assert small.priced <= 4 + 8 + 1


def test_hash_seed_does_not_change_the_result():
    code = ("import sys; sys.path.insert(0, 'tests'); import test_patches_determinism as t; "
            "print(t._outcome(t._search()))")
    out = []
    for seed in ("0", "1"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out.append(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                  capture_output=True, text=True,
                                  cwd=os.path.dirname(os.path.dirname(__file__))).stdout)
    assert out[0] == out[1] and out[0]

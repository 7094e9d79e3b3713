"""Soundness of the lower bounds (`memsched.schedulers.bounds`): never above the optimum, and
per op never above the op's footprint in *any* topological order (enumerated on small DAGs,
so an unsound bound fails here)."""
from hypothesis import given, settings, strategies as st

from memsched import MemoryModel, Problem, schedule
from memsched.generators.random_graphs import random_dag
from memsched.schedulers.base import trivial_bound
from memsched.schedulers.bounds import (ancestry_bound, ancestry_bounds, branch_cut_bound,
                                        mincut_bound, mincut_bounds, reachability)
from memsched.schedulers.exact import cut_segments

MODELS = [MemoryModel.get("paper"), MemoryModel.get("tvm"),
          MemoryModel(inplace=True, name="inplace")]


def _all_orders(p: Problem, limit: int = 3000):
    """Every topological order of ``p`` (at most ``limit``), depth first."""
    out = []

    def rec(mask, order):
        if len(out) >= limit:
            return
        if mask == p.full:
            out.append(list(order))
            return
        for v in range(p.n):
            if not mask >> v & 1 and not p.pred_mask[v] & ~mask:
                order.append(v)
                rec(mask | 1 << v, order)
                order.pop()

    rec(0, [])
    return out


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 8), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS))
def test_ancestry_bound_per_op_never_exceeds_a_footprint(n, seed, m):
    p = Problem.from_graph(random_dag(n, seed, window=4), m)
    bounds = ancestry_bounds(p)
    for order in _all_orders(p):
        prof = p.evaluate(order)
        for k, v in enumerate(order):
            assert bounds[v] <= prof.steps[k], (v, bounds[v], prof.steps[k], order)


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 8), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS))
def test_mincut_bound_per_op_is_the_smallest_footprint(n, seed, m):
    """Per op, the min-cut bound is at most its footprint in every order, at least the
    ancestry bound, and (without in-place credits) equal to the smallest footprint."""
    p = Problem.from_graph(random_dag(n, seed, window=4), m)
    cut, anc = mincut_bounds(p), ancestry_bounds(p)
    orders = _all_orders(p)
    least = [None] * p.n
    for order in orders:
        prof = p.evaluate(order)
        for k, v in enumerate(order):
            assert cut[v] <= prof.steps[k], (v, cut[v], prof.steps[k], order)
            least[v] = prof.steps[k] if least[v] is None else min(least[v], prof.steps[k])
    for v in range(p.n):
        assert anc[v] <= cut[v]
        if not p.inplace[v] and len(orders) < 3000:
            assert cut[v] == least[v], (v, cut[v], least[v])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 10), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS))
def test_bounds_at_most_brute_force_optimum(n, seed, m):
    g = random_dag(n, seed)
    p = Problem.from_graph(g, m)
    opt = schedule(g, "brute", m).peak
    assert trivial_bound(p) <= ancestry_bound(p) <= mincut_bound(p) <= opt
    # on the segments between cut points too (sub-problems carry base and pinned tensors)
    before = 0
    for seg in cut_segments(p):
        sub, _ = p.restrict(seg, before)
        before |= sum(1 << v for v in seg)
        assert ancestry_bound(sub) <= mincut_bound(sub) <= opt


def test_mincut_bound_quantized_sizes_stay_sound(monkeypatch):
    """Capacities rounded down to a coarse quantum (huge tensors) only lower the bound."""
    import memsched.schedulers.bounds as b

    p = Problem.from_graph(random_dag(9, 5), "paper")
    exact = mincut_bound(p)
    monkeypatch.setattr(b, "INT32_CAP", 3)
    coarse = mincut_bound(p)
    assert ancestry_bound(p) <= coarse <= exact


def test_reachability_is_strict_ancestry():
    p = Problem.from_graph(random_dag(12, 3), "paper")
    r = reachability(p)
    for v in range(p.n):
        assert not r[v, v]
        for u in p.preds[v]:
            assert r[u, v]
            assert (r[:, u] <= r[:, v]).all()  # ancestors of a pred are ancestors


def test_ancestry_bound_counts_a_waiting_skip_tensor():
    """A residual block: the skip tensor is live while the branch runs; the trivial bound
    misses it, the ancestry bound counts it and equals the optimum."""
    from memsched.graph import GraphBuilder

    b = GraphBuilder("res")
    x = b.input("x", 100)
    v0 = b.op("stem", "conv", [x], [("s", 100)])
    s = b.ops[v0].outputs[0]
    v1 = b.op("a", "conv", [s], [("a", 100)])
    v2 = b.op("b", "conv", [b.ops[v1].outputs[0]], [("b", 100)])
    v3 = b.op("add", "add", [s, b.ops[v2].outputs[0]], [("y", 100)])
    b.mark_output(b.ops[v3].outputs[0])
    g = b.build()
    p = Problem.from_graph(g, "tvm")
    opt = schedule(g, "brute", "tvm").peak
    assert trivial_bound(p) < opt
    assert ancestry_bound(p) == opt


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 8), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS),
       over=st.integers(0, 2))
def test_branch_cut_bound_never_exceeds_the_optimum(n, seed, m, over):
    """Asked to reach a goal above the optimum, the branching bound stops at most at the
    optimum (its leaves are total orders, whose cuts are their exact footprints); asked for
    the optimum itself (no in-place credits), it proves it."""
    g = random_dag(n, seed, window=4)
    p = Problem.from_graph(g, m)
    opt = schedule(g, "brute", m).peak
    bound, proved, nodes = branch_cut_bound(p, opt + over, max_nodes=3000, stall=None)
    assert bound <= opt
    assert proved == (bound >= opt + over)
    if over == 0 and m.name != "inplace" and nodes < 3000:
        assert proved and bound == opt


def test_branch_cut_bound_respects_its_budget():
    from memsched.limits import Deadline

    p = Problem.from_graph(random_dag(60, 1), "paper")
    opt_upper = schedule(random_dag(60, 1), "heuristic", "paper").peak
    bound, proved, nodes = branch_cut_bound(p, opt_upper, max_nodes=3)
    assert nodes <= 3 + 2 and bound <= opt_upper
    bound2, _, _ = branch_cut_bound(p, opt_upper, Deadline(0.0))
    assert bound2 <= opt_upper

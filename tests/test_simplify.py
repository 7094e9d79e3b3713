"""Optimality-preserving fusion (memsched.simplify): the fused problem has the same optimum, and
every fused order expands to an original order of exactly the same peak."""
import random

from hypothesis import given, settings, strategies as st

from memsched import MemoryModel, Problem
from memsched.generators.random_graphs import random_dag
from memsched.schedulers.base import run
from memsched.schedulers.heuristics import _kahn
from memsched.simplify import simplify

MODELS = [MemoryModel.get("paper"), MemoryModel.get("tvm"),
          MemoryModel(inplace=True, name="inplace")]


def _random_orders(p, seed, k=4):
    rng = random.Random(seed)
    for _ in range(k):
        yield _kahn(p, lambda r: r.pop(rng.randrange(len(r))))


def _check_representation(p, s, seed):
    q = s.problem
    assert sorted(v for ms in s.members for v in ms) == list(range(p.n))
    for o in _random_orders(q, seed):
        full = s.expand(o)
        assert q.evaluate(o).peak == p.evaluate(full).peak
        pos = {v: i for i, v in enumerate(full)}
        for ms in s.members:  # every group runs contiguously, in its internal order
            assert [pos[v] for v in ms] == list(range(pos[ms[0]], pos[ms[0]] + len(ms)))


@settings(max_examples=80, deadline=None)
@given(n=st.integers(2, 10), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS),
       window=st.sampled_from([2, 3, 6]))
def test_fusion_keeps_brute_force_optimum(n, seed, m, window):
    g = random_dag(n, seed, window=window)
    p = Problem.from_graph(g, m)
    s = simplify(p)
    _check_representation(p, s, seed)
    opt = p.evaluate(run(p, "brute")[0]).peak
    fused = s.problem.evaluate(run(s.problem, "brute")[0]).peak
    assert fused == opt


@settings(max_examples=40, deadline=None)
@given(n=st.integers(10, 24), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS),
       window=st.sampled_from([2, 3, 4, 6]), fanin=st.sampled_from([1, 2, 3]))
def test_fusion_keeps_exact_optimum(n, seed, m, window, fanin):
    g = random_dag(n, seed, window=window, max_fanin=fanin)
    p = Problem.from_graph(g, m)
    s = simplify(p)
    _check_representation(p, s, seed)
    o1, _, ok1, _ = run(p, "exact", time_limit=None)
    o2, _, ok2, _ = run(s.problem, "exact", time_limit=None)
    assert ok1 and ok2
    assert p.evaluate(o1).peak == s.problem.evaluate(o2).peak
    assert p.evaluate(s.expand(o2)).peak == p.evaluate(o1).peak


def test_chains_and_blocks_fuse_to_a_fixed_point():
    from memsched.graph import GraphBuilder

    # x -> [a -> b -> c] residual block added back to x, three times: everything fuses
    b = GraphBuilder("res")
    x = b.input("x", 64)
    for i in range(3):
        a = b.ops[b.op(f"a{i}", "conv", [x], [(f"ta{i}", 128)])].outputs[0]
        c = b.ops[b.op(f"b{i}", "relu", [a], [(f"tb{i}", 128)])].outputs[0]
        d = b.ops[b.op(f"c{i}", "conv", [c], [(f"tc{i}", 64)])].outputs[0]
        x = b.ops[b.op(f"add{i}", "add", [d, x], [(f"x{i + 1}", 64)])].outputs[0]
    b.mark_output(x)
    g = b.build()
    p = Problem.from_graph(g)
    s = simplify(p)
    assert s.problem.n == 1
    assert s.expand([0]) == list(range(len(g)))
    assert s.problem.evaluate([0]).peak == p.evaluate(range(len(g))).peak


def test_parallel_branches_are_not_forced_together():
    # Two branches that must interleave for the optimum: fusion must not serialise them.
    from memsched.graph import GraphBuilder

    b = GraphBuilder("interleave")
    x = b.input("x", 10)
    big1 = b.ops[b.op("up1", "conv", [x], [("u1", 100)])].outputs[0]
    small1 = b.ops[b.op("down1", "conv", [big1], [("d1", 1)])].outputs[0]
    big2 = b.ops[b.op("up2", "conv", [x], [("u2", 100)])].outputs[0]
    small2 = b.ops[b.op("down2", "conv", [big2], [("d2", 1)])].outputs[0]
    y = b.ops[b.op("cat", "concat", [small1, small2], [("y", 2)])].outputs[0]
    b.mark_output(y)
    g = b.build()
    p = Problem.from_graph(g)
    s = simplify(p)
    opt = p.evaluate(run(p, "brute")[0]).peak
    assert s.problem.evaluate(run(s.problem, "brute")[0]).peak == opt
    _check_representation(p, s, 0)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 40), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS),
       window=st.sampled_from([2, 3, 4, 6]), fanin=st.sampled_from([1, 2, 3]))
def test_canonicalize_groups_any_order_without_raising_its_peak(n, seed, m, window, fanin):
    # the exchange arguments of the fusion theorems, executed: any order can be rewritten so
    # that every group runs contiguously in its internal order, at no higher peak
    g = random_dag(n, seed, window=window, max_fanin=fanin)
    p = Problem.from_graph(g, m)
    s = simplify(p)
    orders = [list(range(n))] + list(_random_orders(p, seed, 3))
    for o in orders:
        c = s.canonicalize(o)
        assert g.is_topological(c)
        assert p.evaluate(c).peak <= p.evaluate(o).peak
        pos = {v: i for i, v in enumerate(c)}
        for ms in s.members:
            assert [pos[v] for v in ms] == list(range(pos[ms[0]], pos[ms[0]] + len(ms)))


def _with_implied_edges(p, seed, share=0.3):
    """``p`` with ordering edges from random ancestors (the same partial order)."""
    from memsched.simplify.fusion import closure

    rng = random.Random(seed)
    anc = closure(p)[0]
    preds = [list(p.preds[v]) + [u for u in range(v) if anc[v] >> u & 1 and
                                 u not in p.preds[v] and rng.random() < share]
             for v in range(p.n)]
    return Problem(n=p.n, preds=preds, creates=p.creates, reads=p.reads,
                   workspace=p.workspace, inplace=p.inplace, size=p.size, initial=p.initial,
                   pinned=p.pinned, consumers=p.consumers, base=p.base, names=p.names)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 10), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS),
       window=st.sampled_from([2, 3, 6]))
def test_implied_edges_dropped_keep_order_and_optimum(n, seed, m, window):
    from memsched.simplify.edges import drop_implied_edges
    from memsched.simplify.fusion import closure

    p = Problem.from_graph(random_dag(n, seed, window=window), m)
    q = _with_implied_edges(p, seed)
    r = drop_implied_edges(q)
    assert closure(r)[0] == closure(q)[0]  # the same partial order
    prod = {t: v for v, ts in enumerate(q.creates) for t in ts}
    for v in range(p.n):  # data edges stay, and nothing beyond q's edges
        data = {prod[t] for t in q.reads[v] if t in prod}
        assert data <= set(r.preds[v]) <= set(q.preds[v])
    s = simplify(q)
    _check_representation(q, s, seed)
    opt = q.evaluate(run(q, "brute")[0]).peak
    assert opt == p.evaluate(run(p, "brute")[0]).peak
    assert s.problem.evaluate(run(s.problem, "brute")[0]).peak == opt


def test_implied_edges_do_not_hide_fusable_groups():
    """Every ancestor also a direct predecessor (as op 0 of ExecuTorch's graph was of every
    op): fusion finds what it finds on the bare graph (this one: 4 ops -> 3)."""
    p = Problem.from_graph(random_dag(4, 4, window=3), MemoryModel.get("paper"))
    q = _with_implied_edges(p, 4, share=1.0)
    assert sum(map(len, q.preds)) > sum(map(len, p.preds))
    assert simplify(q).problem.n == simplify(p).problem.n == 3

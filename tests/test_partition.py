"""Pipeline partition: the objective on hand-checked graphs, solvers against brute force."""
import itertools
import random

import pytest
from hypothesis import given, settings, strategies as st

from memsched.graph import GraphBuilder
from memsched.partition import (PartitionError, PartitionProblem, evaluate, solve,
                                param_balanced_cut)
from memsched.generators.random_graphs import random_dag


def residual():
    """x -> conv0 -> t0 -> conv1 -> t1 -> add(t0, t1) -> t2 (output); conv2 reads x too.

    Buffers: 0: w0 (10 B), 1: w1 (20 B), 2: bias shared by conv0 and conv1 (1 B), 3: w2 (5 B).
    """
    b = GraphBuilder("residual")
    x = b.input("x", 100)
    c0 = b.op("conv0", "conv", [x], [("t0", 50)])
    c1 = b.op("conv1", "conv", [b.ops[c0].outputs[0]], [("t1", 30)])
    a = b.op("add", "add", [b.ops[c0].outputs[0], b.ops[c1].outputs[0]], [("t2", 40)])
    c2 = b.op("conv2", "conv", [x, b.ops[a].outputs[0]], [("t3", 7)])
    b.mark_output(b.ops[a].outputs[0])
    b.mark_output(b.ops[c2].outputs[0])
    g = b.build()
    return PartitionProblem.from_graph(g, [(0, 2), (1, 2), (), (3,)], [10, 20, 1, 5])


def test_hand_checked_costs():
    p = residual()
    c = evaluate(p, [0, 1, 1, 1], sram_bytes=15)
    # stage 0 caches w0 + bias; stage 1 w1 + bias (again) + w2
    assert c.m == [11, 26] and c.P == 26 and c.O == 11
    # boundary 0: t0 (read by conv1/add in stage 1) and x (read by conv2 in stage 1)
    assert c.c == [150] and c.C == 150
    c = evaluate(p, [0, 0, 1, 1], sram_bytes=15)
    assert c.m == [31, 5] and c.O == 16
    assert c.c == [50 + 30 + 100]  # t0, t1 and the graph input x
    c = evaluate(p, [0, 1, 2, 2], sram_bytes=100)
    assert c.m == [11, 21, 5] and c.O == 0
    # boundary 0: t0, x; boundary 1: t0 (relayed), t1, x (relayed)
    assert c.c == [150, 180] and c.C == 180
    c = evaluate(p, [0, 0, 0, 1], sram_bytes=100)
    # t2 is a graph output produced in stage 0: it crosses boundary 0; x too
    assert c.c == [40 + 100] and c.m == [31, 5]
    c = evaluate(p, [0, 0, 0, 0])
    assert (c.P, c.O, c.C, c.c) == (36, 0, 0, [])


@pytest.mark.parametrize("bad, msg", [
    ([1, 0, 1, 1], "depends on op"),
    ([0, 0, 2, 2], "empty"),
    ([0, 1, 1], "entries"),
    ([0, -1, 1, 1], "outside"),
])
def test_invalid_assignments(bad, msg):
    with pytest.raises(PartitionError, match=msg):
        evaluate(residual(), bad)


def test_bad_requests():
    p = residual()
    with pytest.raises(PartitionError, match="non-empty stages"):
        solve(p, 5)
    with pytest.raises(PartitionError, match="positive integer"):
        solve(p, 0)
    with pytest.raises(PartitionError, match="unknown partition method"):
        solve(p, 2, method="nope")
    with pytest.raises(PartitionError, match="unknown parameter buffer"):
        PartitionProblem.from_graph(p.graph, [(0,), (), (), (9,)], [1])


def brute_costs(p, k, sram):
    """Every valid assignment with its cost, computed independently of `evaluate`."""
    out = []
    for s in itertools.product(range(k), repeat=p.n):
        if set(s) != set(range(k)):
            continue
        if any(s[u] > s[v] for v in range(p.n) for u in p.preds[v]):
            continue
        m = []
        for j in range(k):
            bufs = {b for v in range(p.n) if s[v] == j for b in p.op_params[v]}
            m.append(sum(p.param_bytes[b] for b in bufs))
        c = []
        for j in range(k - 1):
            tot = 0
            for t in p.tensors:
                made = t.producer < 0 or s[t.producer] <= j
                needed = t.is_output or any(s[r] > j for r in t.consumers)
                if made and needed:
                    tot += t.nbytes
            c.append(tot)
        out.append((s, (max(m), sum(max(0, x - sram) for x in m), max(c, default=0))))
    return out


def random_problem(n, seed, shared=0.3):
    g = random_dag(n, seed)
    rng = random.Random(seed)
    nbuf = max(1, n // 2)
    sizes = [rng.choice([0, 8, 16, 40, 100, 250]) for _ in range(nbuf)]
    op_params = []
    for v in range(n):
        ids = [rng.randrange(nbuf)] if rng.random() < 0.8 else []
        if rng.random() < shared:
            ids.append(0)  # a buffer many ops share (like an all-zero bias)
        op_params.append(tuple(ids))
    return PartitionProblem.from_graph(g, op_params, sizes)


def test_evaluate_matches_brute_force():
    for seed in range(6):
        p = random_problem(7, seed)
        for k in (2, 3):
            for s, key in brute_costs(p, k, 120):
                assert evaluate(p, s, 120).key == key


@settings(max_examples=25, deadline=None)
@given(n=st.integers(3, 8), seed=st.integers(0, 10_000), k=st.integers(2, 3),
       sram=st.sampled_from([0, 60, 150, 10_000]))
def test_exact_is_the_lexicographic_minimum(n, seed, k, sram):
    p = random_problem(n, seed)
    if k > n:
        return
    best = min(key for _, key in brute_costs(p, k, sram))
    r = solve(p, k, sram_bytes=sram, method="exact")
    assert r.key == best
    assert r.optimal and r.lower_bounds == {"P": best[0], "O": best[1], "C": best[2]}
    base = solve(p, k, sram_bytes=sram, method="param-balanced")
    assert r.key <= base.key and base.baseline.key == base.key
    # bounds are on the lexicographic optimum's components
    assert all(base.lower_bounds[x] <= v for x, v in zip("POC", best)) and base.key >= best


def test_param_balanced_is_the_compiler_rule():
    # a chain of 6 ops with 10 B each: k=3 cuts after every 20 B
    b = GraphBuilder("chain")
    t = b.input("x", 4)
    for i in range(6):
        v = b.op(f"op{i}", "conv", [t], [(f"t{i}", 4)])
        t = b.ops[v].outputs[0]
    b.mark_output(t)
    p = PartitionProblem.from_graph(b.build(), [(i,) for i in range(6)], [10] * 6)
    assert param_balanced_cut(p, 3) == [0, 0, 1, 1, 2, 2]
    # all parameters in the first op: later stages still get one op each
    p = PartitionProblem.from_graph(p.graph, [(0,)] + [()] * 5, [10])
    s = param_balanced_cut(p, 3)
    assert evaluate(p, s).P == 10 and sorted(set(s)) == [0, 1, 2]


@settings(max_examples=20, deadline=None)
@given(n=st.integers(4, 40), seed=st.integers(0, 10_000), k=st.integers(2, 6))
def test_solvers_return_valid_cuts(n, seed, k):
    p = random_problem(n, seed)
    if k > n:
        return
    from memsched.partition.param_balanced import linear_cut

    evaluate(p, linear_cut(p, k), 200, k)  # raises unless valid
    for method in ("param-balanced", "exact", "auto"):
        r = solve(p, k, sram_bytes=200, method=method, time_limit=5)
        evaluate(p, r.assignment, 200, k)  # raises unless valid
        assert all(r.lower_bounds[x] <= v for x, v in zip("POC", r.key))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(4, 30), seed=st.integers(0, 10_000), k=st.integers(2, 5),
       gamma=st.sampled_from([0, 1, 10]), sram=st.sampled_from([0, 200, 10_000]))
def test_inc_ilp_certifies_the_exact_optimum(n, seed, k, gamma, sram):
    p = random_problem(n, seed)
    if k > n:
        return
    ex = solve(p, k, sram_bytes=sram, method="exact")
    inc = solve(p, k, sram_bytes=sram, method="inc-ilp", gamma=gamma,
                initial="param-balanced", certify_box=0.5)
    assert ex.optimal and inc.optimal and inc.key == ex.key
    assert inc.lower_bounds == ex.lower_bounds
    evaluate(p, inc.assignment, sram, k)


def test_relaxation_window_frees_ops_around_the_cut():
    from memsched.partition.inc_ilp import relaxation_window

    b = GraphBuilder("chain")
    t = b.input("x", 4)
    for i in range(12):
        v = b.op(f"op{i}", "conv", [t], [(f"t{i}", 4)])
        t = b.ops[v].outputs[0]
    p = PartitionProblem.from_graph(b.build(), [(i,) for i in range(12)], [1] * 12)
    s = [0] * 6 + [1] * 6  # cut edge op5 -> op6 (levels 5 -> 6)
    lo, hi, free = relaxation_window(p, s, p.asap_levels(), 2)
    assert free == 6  # levels 3..8
    assert [(a, c) for a, c in zip(lo, hi)][3:9] == [(0, 1)] * 6
    assert lo[:3] == hi[:3] == [0, 0, 0] and lo[9:] == hi[9:] == [1, 1, 1]


@pytest.mark.heavy
@pytest.mark.parametrize("k", [4, 6])
def test_large_synthetic_certified_by_every_route(k):
    from memsched.partition.synthetic import synthetic_problem

    p = synthetic_problem(400, 4, seed=k)
    ex = solve(p, k, method="exact", time_limit=120)
    assert ex.optimal
    for method in ("inc-ilp", "auto"):
        r = solve(p, k, method=method, time_limit=120)
        assert r.optimal and r.key == ex.key
    assert ex.key <= solve(p, k, method="param-balanced").key


def _problem(edges, n, params):
    """Ops 0..n-1 (op v reads the outputs of its predecessors in ``edges``, op 0 the input),
    op v with one constant buffer of ``params[v]`` bytes; ops without successors are outputs."""
    b = GraphBuilder("g")
    x = b.input("x", 4)
    for v in range(n):
        ins = [b.ops[u].outputs[0] for u, w in edges if w == v] or [x]
        b.op(f"op{v}", "conv", ins, [(f"t{v}", 4)])
    for v in range(n):
        if not any(u == v for u, _ in edges):
            b.mark_output(b.ops[v].outputs[0])
    return PartitionProblem.from_graph(b.build(), [(v,) for v in range(n)], list(params))


def test_libcoral_rule_as_published():
    from memsched.partition.param_balanced import libcoral_cut, libcoral_order

    # a diamond: libcoral's stack takes the successor pushed last first (0, 2, 1, 3)
    p = _problem([(0, 1), (0, 2), (1, 3), (2, 3)], 4, [10, 10, 10, 10])
    assert libcoral_order(p) == [0, 2, 1, 3]
    # average = 40 // 2 + 1 = 21: segment 0 takes 10 + 10, stops before 30
    assert libcoral_cut(p, 2) == [0, 1, 0, 1]
    # an op without successors goes to the bottom of the stack (a plain stack: 0, 2, 1, 3)
    p = _problem([(0, 1), (0, 2), (1, 3)], 4, [1, 1, 1, 1])
    assert libcoral_order(p) == [0, 1, 2, 3]
    # a first op heavier than the average leaves segment 0 empty: libcoral aborts
    p = _problem([(0, 1), (1, 2)], 3, [100, 1, 1])
    with pytest.raises(PartitionError, match="gets no operator"):
        libcoral_cut(p, 2)
    s = param_balanced_cut(p, 2)  # the baseline repairs it: every stage non-empty
    assert sorted(set(s)) == [0, 1]


def monotone_cuts(p, k):
    """Every monotone assignment (empty stages allowed: the bounds do not use non-emptiness)
    with its per-stage parameter bytes and per-boundary activation bytes, computed directly."""
    for s in itertools.product(range(k), repeat=p.n):
        if any(s[u] > s[v] for v in range(p.n) for u in p.preds[v]):
            continue
        m = [sum(p.param_bytes[b] for b in {b for v in range(p.n) if s[v] == j
                                              for b in p.op_params[v]}) for j in range(k)]
        c = [sum(t.nbytes for t in p.tensors
                 if (t.producer < 0 or s[t.producer] <= j)
                 and (t.is_output or any(s[r] > j for r in t.consumers)))
             for j in range(k - 1)]
        yield s, m, c


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 7), seed=st.integers(0, 10_000), k=st.integers(2, 4),
       shared=st.sampled_from([0.0, 0.3, 0.8]), slack=st.integers(-60, 120))
def test_combinatorial_bounds_match_brute_force(n, seed, k, shared, slack):
    """Stage windows, the P bound and the boundary-cut bound never exclude a cut they must
    keep (every monotone cut with P <= Pmax lies in the windows and crosses at least the
    cut bound's bytes at every boundary)."""
    from memsched.partition.bounds import StageWindows, comm_lower_bound

    p = random_problem(n, seed, shared)
    cuts = list(monotone_cuts(p, k))
    best_p = min(max(m) for _, m, _ in cuts)
    sw = StageWindows(p)
    pmax = max(0, best_p + slack)
    w = sw.tighten(k, pmax)
    inside = [(s, c) for s, m, c in cuts if max(m) <= pmax]
    if w is None:
        assert not inside
    else:
        lo, hi = w
        for s, c in inside:
            assert all(a <= x <= b for a, x, b in zip(lo, s, hi))
        cb = comm_lower_bound(p, k, lo, hi)
        for j in range(k - 1):
            assert all(c[j] >= cb[j] for _, c in inside)
        # with empty stages allowed and no effective P cap the min cut is exact
        if pmax >= sw.total:
            for j in range(k - 1):
                assert min(c[j] for _, _, c in cuts) == cb[j]
    lb = sw.p_lower_bound(k, 0, max(1, sw.total))
    assert lb <= best_p
    # the prefix chain keeps every cut with P <= Pmax inside its windows and weight limits
    from memsched.partition.bounds import prefix_chain

    if w is not None:
        pc = prefix_chain(sw, k, pmax, *w)
        if pc is None:
            assert not inside
        else:
            lo, hi, R, L = pc
            for s, _ in inside:
                assert all(a <= x <= b for a, x, b in zip(lo, s, hi))
                for j in range(k - 1):
                    d = sum(int(sw.own[v]) for v in range(p.n) if s[v] <= j)
                    assert L[j] <= d <= R[j]


def shared_heavy_problem(n, seed):
    """A random DAG whose ops share three buffers as heavy as their own ones, so the shared
    bytes a stage must cache (`bounds.forced_shared`) matter."""
    g = random_dag(n, seed)
    rng = random.Random(seed)
    sizes = [rng.choice([0, 5, 20, 60, 150]) for _ in range(n + 3)]
    op_params = []
    for v in range(n):
        ids = [v + 3] if rng.random() < 0.8 else []
        ids += [b for b in range(3) if rng.random() < 0.35]
        op_params.append(tuple(ids))
    return PartitionProblem.from_graph(g, op_params, sizes)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 7), seed=st.integers(0, 10_000), k=st.integers(2, 4),
       slack=st.integers(-40, 40))
def test_prefix_chain_with_forced_shared_keeps_every_cut(n, seed, k, slack):
    """The prefix chain (with the forced shared bytes per stage) refutes a cap only when no
    monotone cut meets it, keeps every cut under the cap inside its windows and weight limits,
    and so do the windows of a smaller cap started from these (the P loop's warm start)."""
    from memsched.partition.bounds import StageWindows, forced_shared, prefix_chain

    p = shared_heavy_problem(n, seed)
    cuts = list(monotone_cuts(p, k))
    best_p = min(max(m) for _, m, _ in cuts)
    sw = StageWindows(p)
    pmax = max(0, best_p + slack)

    def check(cap, start=None):
        inside = [(s, m) for s, m, _ in cuts if max(m) <= cap]
        w = sw.tighten(k, cap, *(start or (None, None)))
        pc = None if w is None else prefix_chain(sw, k, cap, *w)
        if pc is None:
            assert not inside
            return None
        lo, hi, R, L = pc
        for s, m in inside:
            assert all(a <= x <= b for a, x, b in zip(lo, s, hi))
            for j in range(k - 1):
                assert L[j] <= sum(int(sw.own[v]) for v in range(p.n) if s[v] <= j) <= R[j]
            for j in range(k):
                own_j = sum(int(sw.own[v]) for v in range(p.n) if s[v] == j)
                assert own_j + forced_shared(sw, lo, hi, j) <= m[j]
        return lo, hi

    w = check(pmax)
    if w is not None:
        for cap in range(max(0, pmax - 40), pmax, 9):
            check(cap, w)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(3, 7), seed=st.integers(0, 10_000), k=st.integers(2, 4),
       budget=st.sampled_from([1e-6, 1e-3, 0.25]), sram=st.sampled_from([0, 60, 10_000]))
def test_p_loop_certifies_the_brute_force_optimum(n, seed, k, budget, sram):
    """The P level's descending decisions (CP-SAT on a deterministic budget, windows and
    prefix chain re-tightened for each lower cap) end with the brute-force optimum, proven,
    however small the budget (tiny budgets stop CP-SAT before a proof: more turns)."""
    from unittest.mock import patch

    import memsched.partition.exact as exact_mod

    p = shared_heavy_problem(n, seed)
    if k > n:
        return
    best = min(key for _, key in brute_costs(p, k, sram))
    with patch.object(exact_mod, "P_DET_BUDGET", budget):
        r = solve(p, k, sram_bytes=sram, method="auto")
    assert r.key == best and r.optimal
    assert r.lower_bounds == {"P": best[0], "O": best[1], "C": best[2]}
    caps = [s["p_max"] for s in r.stats["solves"] if "p_max" in s]
    assert all(a >= b for a, b in zip(caps, caps[1:]))


@settings(max_examples=12, deadline=None)
@given(n=st.integers(12, 30), seed=st.integers(0, 10_000), k=st.integers(3, 5),
       heavy=st.booleans())
def test_p_level_matches_plain_cpsat(n, seed, k, heavy):
    """Beyond brute force: the certified P (bounds + descending decisions) equals the optimum
    of the plain CP-SAT model (no windows, no prefix limits)."""
    from memsched.partition.cpsat import CutModel

    p = shared_heavy_problem(n, seed) if heavy else random_problem(n, seed, 0.5)
    r = solve(p, k, sram_bytes=100, method="auto")
    assert r.optimal
    plain = CutModel(p, k, 100, [0] * n, [k - 1] * n, "P")
    opt, _, val, _ = plain.solve(60)
    assert opt and val == r.P == r.lower_bounds["P"]

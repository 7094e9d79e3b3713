"""Symmetry breaking between twin chains (memsched.simplify.symmetry): the constrained
problem keeps the brute-force optimum, every order maps to a constrained one of the same peak,
and `auto` (which searches the constrained segments) still finds the optimum."""
import random

from hypothesis import given, settings, strategies as st

from memsched import Problem
from memsched.schedulers.auto import solve_auto
from memsched.schedulers.base import run
from memsched.schedulers.heuristics import _kahn
from memsched.simplify.symmetry import break_symmetry


def _patches(seed: int) -> Problem:
    """A source, chains drawn from two templates (so some are twins) feeding one of two
    joins, and an op beside them: the shape of a patch grid's rows."""
    rng = random.Random(seed)
    templates = [[(rng.choice([1, 2, 3, 5]), rng.choice([0, 0, 2])) for _ in range(rng.randint(
        1, 3))] for _ in range(2)]
    preds, creates, reads, ws = [[]], [[0]], [[]], [0]
    size, consumers = [rng.choice([2, 4, 6])], [[]]
    joins = [[], []]
    for _ in range(rng.randint(2, 4)):
        prev_t, prev_v = 0, 0
        for sz, w in rng.choice(templates):
            v = len(preds)
            preds.append([prev_v])
            reads.append([prev_t])
            consumers[prev_t].append(v)
            creates.append([len(size)])
            size.append(sz)
            consumers.append([])
            ws.append(w)
            prev_t, prev_v = len(size) - 1, v
        joins[rng.randrange(2)].append((prev_v, prev_t))
    side = len(preds)  # an op beside the chains, reading the source
    preds.append([0])
    reads.append([0])
    consumers[0].append(side)
    creates.append([len(size)])
    size.append(rng.choice([1, 3, 7]))
    consumers.append([])
    ws.append(0)
    for j in joins:
        if not j:
            continue
        v = len(preds)
        preds.append([u for u, _ in j])
        reads.append([t for _, t in j])
        for _, t in j:
            consumers[t].append(v)
        creates.append([len(size)])
        size.append(rng.choice([4, 8]))
        consumers.append([])
        ws.append(0)
    n = len(preds)
    return Problem(n=n, preds=preds, creates=creates, reads=reads, workspace=ws,
                   inplace=[[] for _ in range(n)], size=size, initial=[False] * len(size),
                   pinned=[False] * (len(size) - 1) + [True], consumers=consumers)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_twin_chains_keep_the_optimum(seed):
    p = _patches(seed)
    q, sym = break_symmetry(p)
    ref = "brute" if p.n <= 12 else "exact"  # exact: the Python A*, without symmetry breaking
    opt = p.evaluate(run(p, ref, time_limit=None)[0]).peak
    assert q.evaluate(run(q, ref, time_limit=None)[0]).peak == opt
    if sym.classes:
        assert sum(map(len, q.preds)) > sum(map(len, p.preds))
    rng = random.Random(seed)
    for _ in range(5):  # any order maps to a constrained order of the same peak
        o = _kahn(p, lambda r: r.pop(rng.randrange(len(r))))
        c = sym.canonical(o)
        assert sorted(c) == list(range(p.n))
        assert q.evaluate(c).peak == p.evaluate(o).peak
    order, lb, optimal, _ = solve_auto(p, time_limit=None)
    assert optimal and lb == opt and p.evaluate(order).peak == opt


def test_a_patch_row_has_twins():
    """Two equal interior patches of one row (same sizes, same join) are twins, a border
    patch of another size is not."""
    size = [8, 3, 2, 3, 2, 4, 2, 6]
    preds = [[], [0], [1], [0], [3], [0], [5], [2, 4, 6]]
    reads = [[], [0], [1], [0], [3], [0], [5], [2, 4, 6]]
    creates = [[i] for i in range(8)]
    consumers = [[1, 3, 5], [2], [7], [4], [7], [6], [7], []]
    p = Problem(n=8, preds=preds, creates=creates, reads=reads, workspace=[0] * 8,
                inplace=[[] for _ in range(8)], size=size, initial=[False] * 8,
                pinned=[False] * 7 + [True], consumers=consumers)
    q, sym = break_symmetry(p)
    assert sym.classes == [[[1, 2], [3, 4]]]
    assert 1 in q.preds[3] and 2 in q.preds[4]
    assert sym.canonical([0, 3, 4, 5, 6, 1, 2, 7]) == [0, 1, 2, 5, 6, 3, 4, 7]

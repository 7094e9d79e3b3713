"""Arena offset assignment (memsched.arena): validity, bounds, exactness."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsched.arena import (ArenaPlan, Lifetime, align_up, max_live, plan, plan_cpsat,
                            plan_greedy, stacked_offsets, verify)

pytest.importorskip("ortools")


@st.composite
def lifetimes(draw, max_n=24, max_units=40, horizon=30, unit=None):
    n = draw(st.integers(0, max_n))
    out = []
    for _ in range(n):
        start = draw(st.integers(0, horizon))
        dur = draw(st.integers(0, 10))
        if unit is None:
            size = draw(st.integers(0, max_units * 64))
        else:
            size = draw(st.integers(1, max_units)) * unit
        out.append(Lifetime(size, start, start + dur))
    return out


def _overlaps(a: Lifetime, b: Lifetime) -> bool:
    return a.start <= b.end and b.start <= a.end


def _check(lts, p: ArenaPlan, alignment):
    verify(lts, p.offsets, alignment, p.arena)  # no two time-overlapping tensors overlap
    for i, j in itertools.combinations(range(len(lts)), 2):  # the same, spelled out
        a, b = lts[i], lts[j]
        if a.size and b.size and _overlaps(a, b):
            oa, ob = p.offsets[i], p.offsets[j]
            assert oa + a.size <= ob or ob + b.size <= oa
    assert all(o % alignment == 0 for o in p.offsets)
    assert p.arena % alignment == 0
    assert p.arena >= max_live(lts, alignment) >= max_live(lts) == p.live_peak
    assert p.lower_bound >= max_live(lts, alignment) or p.lower_bound == p.arena
    assert p.lower_bound <= p.arena
    assert p.optimal == (p.arena == p.lower_bound)


@settings(max_examples=150, deadline=None)
@given(lifetimes(), st.sampled_from([1, 8, 64]))
def test_greedy_is_valid(lts, alignment):
    _check(lts, plan_greedy(lts, alignment), alignment)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lifetimes(max_n=16), st.sampled_from([1, 64]))
def test_cpsat_is_valid_and_no_worse(lts, alignment):
    g = plan_greedy(lts, alignment)
    c = plan_cpsat(lts, alignment, time_limit=5.0)
    _check(lts, c, alignment)
    assert c.arena <= g.arena


def _first_fit(lts, order):
    """Each tensor at the lowest offset free of the already placed, time-overlapping ones."""
    offs = {}
    for i in order:
        busy = sorted((offs[j], offs[j] + lts[j].size) for j in offs
                      if _overlaps(lts[i], lts[j]))
        o = 0
        for lo, hi in busy:
            if o + lts[i].size <= lo:
                break
            o = max(o, hi)
        offs[i] = o
    return max((offs[i] + lts[i].size for i in offs), default=0)


def _brute_force(lts):
    """Minimum arena: some order's first fit is optimal (place tensors by their offset in an
    optimal packing; first fit puts each no higher than there)."""
    return min((_first_fit(lts, p) for p in itertools.permutations(range(len(lts)))),
               default=0)


@settings(max_examples=60, deadline=None)
@given(lifetimes(max_n=6, max_units=6, horizon=6, unit=1))
def test_cpsat_matches_brute_force(lts):
    best = _brute_force(lts)
    c = plan_cpsat(lts, alignment=1, time_limit=10.0)
    assert c.optimal and c.arena == best
    assert plan_greedy(lts, 1).arena >= best
    # from a poor warm start (every tensor on its own level) CP-SAT must do the work itself
    arena, offs = stacked_offsets([[i] for i in range(len(lts))], [t.size for t in lts],
                                  len(lts), 1)
    poor = ArenaPlan(arena, offs, 0, False, "stacked", 1)
    c = plan_cpsat(lts, alignment=1, time_limit=10.0, initial=poor)
    _check(lts, c, 1)
    assert c.optimal and c.arena == best


def test_greedy_can_be_beaten():
    """Every greedy ordering leaves a gap here (found by random search); CP-SAT closes it."""
    lts = [Lifetime(*t) for t in [(2, 6, 9), (1, 6, 7), (4, 1, 4), (2, 2, 4), (2, 0, 0),
                                  (9, 2, 2), (1, 5, 5), (7, 3, 4), (6, 4, 8), (8, 5, 5)]]
    g, c = plan_greedy(lts, 1), plan_cpsat(lts, 1, time_limit=5)
    _check(lts, g, 1)
    _check(lts, c, 1)
    assert g.arena == 20 and not g.optimal
    assert c.arena == 19 == max_live(lts) and c.optimal


def test_lower_bound_and_small_cases():
    assert max_live([]) == 0
    assert plan_greedy([], 64).arena == 0
    assert plan_cpsat([], 64).arena == 0
    lts = [(100, 0, 2), (50, 1, 3), (70, 3, 4)]
    assert max_live(lts) == 150
    assert max_live(lts, 64) == 128 + 64
    p = plan(lts, "greedy", 64)
    assert p.arena == 192 and p.optimal
    # freed at the end of step 2, so a tensor starting at step 3 may reuse the bytes
    p = plan([(64, 0, 2), (64, 3, 5)], "greedy", 64)
    assert p.arena == 64 and p.offsets == [0, 0]
    p = plan([(64, 0, 2), (64, 2, 5)], "greedy", 64)
    assert p.arena == 128


def test_time_split_groups():
    """Independent time segments are packed separately; the arena is the largest."""
    lts = [(640, 0, 1), (640, 1, 2), (6400, 10, 11), (64, 10, 10), (64, 11, 11)]
    c = plan_cpsat(lts, 64, time_limit=5)
    assert c.arena == 6400 + 64 and c.optimal


def test_stacked_offsets():
    arena, offs = stacked_offsets([[0, 2], [1]], [100, 30], 3, 64)
    assert arena == 128 + 64 and offs == [0, 128, 0]
    assert align_up(0, 64) == 0 and align_up(65, 64) == 128 and align_up(5, 1) == 5


def test_verify_rejects():
    with pytest.raises(ValueError):
        verify([(64, 0, 1), (64, 1, 2)], [0, 0], 64)
    with pytest.raises(ValueError):
        verify([(64, 0, 1)], [32], 64)
    with pytest.raises(ValueError):
        verify([(64, 0, 1)], [0], 64, arena=32)
    with pytest.raises(ValueError):
        plan([(1, 0, 0)], "magic")
    with pytest.raises(ValueError):
        plan([(1, 3, 0)])

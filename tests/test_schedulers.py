"""Property tests: schedulers against each other and against brute force on random DAGs."""
import pytest
from hypothesis import given, settings, strategies as st

from memsched import MemoryModel, Problem, schedule
from memsched.generators.random_graphs import random_dag
from memsched.schedulers import BASELINES, cut_segments

MODELS = [MemoryModel.get("paper"), MemoryModel.get("tvm"),
          MemoryModel(inplace=True, name="inplace")]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 9), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS))
def test_exact_equals_brute_force(n, seed, m):
    g = random_dag(n, seed)
    brute = schedule(g, "brute", m)
    for algo in ("exact", "dp"):
        s = schedule(g, algo, m, time_limit=None)
        assert s.peak == brute.peak, (algo, s.peak, brute.peak)
        assert s.optimal and s.lower_bound == s.peak


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS))
def test_every_schedule_is_valid_and_no_worse_than_input(n, seed, m):
    g = random_dag(n, seed)
    base = schedule(g, "input", m).peak
    for algo in BASELINES + ("heuristic", "auto"):
        s = schedule(g, algo, m, time_limit=2.0)
        assert g.is_topological(s.order)
        assert s.lower_bound <= s.peak
    assert schedule(g, "auto", m, time_limit=2.0).peak <= base
    assert schedule(g, "heuristic", m).peak <= base


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 14), seed=st.integers(0, 10_000))
def test_divide_and_conquer_keeps_optimum(n, seed):
    g = random_dag(n, seed, window=2)  # narrow windows create cut points
    whole = schedule(g, "exact", divide=False, time_limit=None)
    split = schedule(g, "exact", divide=True, time_limit=None)
    assert whole.peak == split.peak
    p = Problem.from_graph(g)
    segs = cut_segments(p)
    assert sorted(v for s in segs for v in s) == list(range(len(g)))


def test_exact_is_deterministic():
    g = random_dag(30, 7)
    a = schedule(g, "auto", time_limit=5)
    b = schedule(g, "auto", time_limit=5)
    assert a.order == b.order and a.peak == b.peak


def test_time_limit_returns_valid_anytime_result():
    g = random_dag(120, 3, window=12, max_fanin=2)
    s = schedule(g, "exact", time_limit=0.5)
    assert g.is_topological(s.order)
    assert s.lower_bound <= s.peak
    assert s.seconds < 5


def test_unknown_algorithm_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown scheduling algorithm"):
        schedule(random_dag(3), "nope")


def _greedy_by_masks(p: Problem, key) -> list[int]:
    """The greedy baselines as first written: every footprint by `Problem.step` on the set of
    executed ops (the reference the counting version must match)."""
    done, mask, live, order = set(), 0, p.initial_live(), []
    while len(order) < p.n:
        ready = [v for v in range(p.n) if v not in done and all(u in done for u in p.preds[v])]
        (_, v), after = min((((key(*p.step(mask, live, v), live), v), p.step(mask, live, v)[1])
                             for v in ready))
        done.add(v)
        mask |= 1 << v
        live = after
        order.append(v)
    return order


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 16), st.integers(0, 10_000), st.sampled_from(MODELS))
def test_greedy_baselines_match_the_executed_set_reference(n, seed, m):
    from memsched.schedulers import heuristics

    p = Problem.from_graph(random_dag(n, seed=seed), m)
    for run, key in ((heuristics._list, lambda foot, after, live: (after - live, foot)),
                     (heuristics._lpmf, lambda foot, after, live: (foot, after))):
        assert run(p) == _greedy_by_masks(p, key)

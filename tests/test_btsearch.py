"""BTSearch (memsched.schedulers.btsearch) is exact: it equals brute force and the A* search."""
from hypothesis import given, settings, strategies as st

from memsched import MemoryModel, schedule
from memsched.generators.random_graphs import random_dag

MODELS = [MemoryModel.get("paper"), MemoryModel.get("tvm"),
          MemoryModel(inplace=True, name="inplace")]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 9), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS),
       divide=st.booleans(), bound=st.booleans())
def test_btsearch_equals_brute_force(n, seed, m, divide, bound):
    g = random_dag(n, seed)
    brute = schedule(g, "brute", m)
    s = schedule(g, "btsearch", m, time_limit=None, divide=divide, bound=bound)
    assert g.is_topological(s.order)
    assert s.peak == brute.peak and s.optimal and s.lower_bound == s.peak


@settings(max_examples=30, deadline=None)
@given(n=st.integers(10, 22), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS))
def test_btsearch_equals_exact(n, seed, m):
    g = random_dag(n, seed, window=3, max_fanin=2)
    ex = schedule(g, "exact", m, time_limit=None)
    s = schedule(g, "btsearch", m, time_limit=None)
    assert s.peak == ex.peak and s.optimal


def test_btsearch_is_anytime():
    g = random_dag(150, 3, window=14, max_fanin=2)
    s = schedule(g, "btsearch", time_limit=0.5)
    assert g.is_topological(s.order)
    assert s.lower_bound <= s.peak <= schedule(g, "heuristic").peak
    assert s.seconds < 5

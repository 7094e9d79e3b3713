"""CP-SAT scheduling ILP (memsched.schedulers.ilp): equals the exact search on small graphs,
with and without variable pruning, on original and fused problems; partitioning is valid."""
import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("ortools")

from memsched import MemoryModel, Problem, schedule  # noqa: E402
from memsched.generators.random_graphs import random_dag  # noqa: E402
from memsched.schedulers.base import run  # noqa: E402
from memsched.schedulers.ilp import acyclic_partition, count_variables  # noqa: E402
from memsched.simplify import simplify  # noqa: E402

MODELS = [MemoryModel.get("paper"), MemoryModel.get("tvm"),
          MemoryModel(inplace=True, name="inplace")]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 12), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS),
       prune=st.booleans(), window=st.sampled_from([2, 3, 6]))
def test_cpsat_equals_exact(n, seed, m, prune, window):
    g = random_dag(n, seed, window=window)
    ex = schedule(g, "exact", m, time_limit=None)
    s = schedule(g, "ilp", m, time_limit=30, prune=prune, divide=False)
    assert g.is_topological(s.order)
    assert s.peak == ex.peak and s.lower_bound == ex.peak and s.optimal


@settings(max_examples=20, deadline=None)
@given(n=st.integers(8, 20), seed=st.integers(0, 10_000), m=st.sampled_from(MODELS))
def test_cpsat_on_fused_problem(n, seed, m):
    p = Problem.from_graph(random_dag(n, seed, window=3, max_fanin=2), m)
    q = simplify(p).problem
    opt = p.evaluate(run(p, "exact", time_limit=None)[0]).peak
    o, lb, ok, _ = run(q, "ilp", time_limit=30)
    assert q.evaluate(o).peak == opt and lb == opt and ok


def test_pruning_removes_variables():
    p = Problem.from_graph(random_dag(30, 5, window=4))
    assert count_variables(p, prune=True) < count_variables(p, prune=False)


def test_lower_bound_under_time_limit_is_valid():
    g = random_dag(60, 11, window=10, max_fanin=2)
    s = schedule(g, "ilp", time_limit=1.0, divide=False)
    ex = schedule(g, "exact", time_limit=20)
    assert g.is_topological(s.order)
    assert s.lower_bound <= ex.peak and ex.lower_bound <= s.peak


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 60), seed=st.integers(0, 10_000), parts=st.integers(1, 6))
def test_partitioning_is_acyclic_and_schedules_are_valid(n, seed, parts):
    g = random_dag(n, seed)
    p = Problem.from_graph(g)
    order = list(range(n))
    pieces = acyclic_partition(p, order, parts)
    assert [v for x in pieces for v in x] == order
    s = schedule(g, "ilp-partition", time_limit=5, parts=parts)
    assert g.is_topological(s.order)
    assert s.peak <= schedule(g, "heuristic").peak
    s2 = schedule(g, "ilp-partition", time_limit=5, parts=parts, part_solver="exact")
    assert g.is_topological(s2.order)

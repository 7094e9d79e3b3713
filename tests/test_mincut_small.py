"""The pure-Python max-flow of small min-cut bounds (no scipy import at CLI start-up) gives
exactly scipy's bounds."""
import subprocess
import sys

from hypothesis import given, settings, strategies as st

from memsched import Problem
from memsched.generators.random_graphs import random_dag
from memsched.schedulers import bounds


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 40), st.integers(0, 10_000), st.sampled_from(["paper", "tvm"]),
       st.booleans())
def test_small_max_flow_equals_scipy(n, seed, model, some):
    import scipy.sparse.csgraph  # noqa: F401 - the scipy path needs it loaded

    p = Problem.from_graph(random_dag(n, seed, window=4), model)
    ops = list(range(0, n, 2)) if some else None
    with_scipy = bounds.mincut_bounds(p, ops)
    edges, nodes, src, sink, inf, quantum = bounds._cut_network(p)
    small = bounds._mincut_bounds_small(p, list(range(n)) if ops is None else ops,
                                        bounds.Checker(None, 1), None, edges, nodes, src,
                                        sink, inf, quantum)
    assert small == with_scipy


def test_small_graphs_do_not_import_scipy():
    code = ("import sys; from memsched import Problem; "
            "from memsched.generators.random_graphs import random_dag; "
            "from memsched.schedulers.bounds import mincut_bound; "
            "p = Problem.from_graph(random_dag(12, 1), 'paper'); b = mincut_bound(p); "
            "print(b > 0, 'scipy.sparse.csgraph' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False"]

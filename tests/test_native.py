"""The native core (passes/, libmemsched_native): C++ search == Python reference, footprint
evaluator, PassContext config keys, and passes/ usable from a parent CMake project."""
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import memsched
from memsched import native
from memsched.memory import Problem
from memsched.generators.random_graphs import random_dag
from memsched.schedulers import exact as py_exact
from memsched.schedulers.heuristics import best_heuristic

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    os.environ.get("MEMSCHED_SKIP_NATIVE") == "1", reason="native core not built (by request)")


def check_topological(p: Problem, order):
    assert sorted(order) == list(range(p.n))
    pos = {v: i for i, v in enumerate(order)}
    for v in range(p.n):
        assert all(pos[u] < pos[v] for u in p.preds[v])


def test_library_loads():
    f = native.load()
    assert "memsched-native" in str(f.version())
    assert native.available()
    assert "exact_native" in memsched.available()


def test_missing_library_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMSCHED_NATIVE_LIB", str(tmp_path / "nope.so"))
    saved = dict(native._state)
    native._state.clear()
    try:
        with pytest.raises(native.NativeUnavailable, match="pip install"):
            native.load()
        assert not native.available()
    finally:
        native._state.clear()
        native._state.update(saved)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 26), seed=st.integers(0, 10**6),
       model=st.sampled_from(["paper", "tvm"]), inplace=st.booleans())
def test_astar_matches_python(n, seed, model, inplace):
    g = random_dag(n, seed=seed, inputs=1 + seed % 2)
    mm = memsched.MemoryModel.get(model)
    if inplace:
        mm = memsched.MemoryModel(mm.count_inputs, mm.count_outputs, True, True, "inplace")
    p = Problem.from_graph(g, mm)
    order, peak, _ = best_heuristic(p)
    target = 0 if seed % 3 else py_exact.trivial_bound(p)
    po, ppk, plb, _ = py_exact.astar(p, (order, peak), target, py_exact._Deadline(None))
    no, npk, nlb, _ = native.astar(p, (order, peak), target)
    check_topological(p, no)
    assert npk == ppk
    assert p.evaluate(no).peak == npk
    assert nlb == plb  # both optimal: lower bound = max(optimum, target)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 22), seed=st.integers(0, 10**6),
       model=st.sampled_from(["paper", "tvm"]), inplace=st.booleans(),
       workspace=st.booleans(), base=st.integers(0, 3))
def test_backward_search_matches_forward(n, seed, model, inplace, workspace, base):
    """The search from the schedule's end proves the same optimum as the forward one and the
    Python reference, and its order is valid with exactly that peak (in-place ops, pinned
    outputs, workspaces and a constant base included)."""
    import dataclasses

    g = random_dag(n, seed=seed, inputs=1 + seed % 2)
    mm = memsched.MemoryModel.get(model)
    if inplace:
        mm = memsched.MemoryModel(mm.count_inputs, mm.count_outputs, True, True, "inplace")
    p = Problem.from_graph(g, mm)
    rng = random.Random(seed)
    p = dataclasses.replace(
        p, base=base * 1000,
        workspace=[rng.choice([0, 0, 512, 4096]) if workspace else 0 for _ in range(p.n)])
    order, peak, _ = best_heuristic(p)
    target = 0 if seed % 3 else py_exact.trivial_bound(p)
    _, ppk, plb, _ = py_exact.astar(p, (order, peak), target, py_exact._Deadline(None))
    fwd = native.astar_full(p, (order, peak), target)
    bwd = native.astar_full(p, (order, peak), target, backward=True)
    check_topological(p, bwd.order)
    assert bwd.reason == "done"
    assert bwd.peak == fwd.peak == ppk
    assert p.evaluate(bwd.order).peak == bwd.peak
    assert bwd.lower_bound == fwd.lower_bound == plb


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 30), seed=st.integers(0, 10**6), inplace=st.booleans())
def test_evaluate_matches_python(n, seed, inplace):
    g = random_dag(n, seed=seed)
    mm = memsched.MemoryModel(True, True, inplace, True, "x")
    p = Problem.from_graph(g, mm)
    rng = random.Random(seed)
    # a random topological order
    indeg = [len(set(ps)) for ps in p.preds]
    succ = [[] for _ in range(p.n)]
    for v, ps in enumerate(p.preds):
        for u in set(ps):
            succ[u].append(v)
    ready = [v for v in range(p.n) if indeg[v] == 0]
    order = []
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        order.append(v)
        for s in succ[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    prof = p.evaluate(order)
    peak, steps, lives = native.evaluate(p, order)
    assert (peak, steps, lives) == (prof.peak, prof.steps, prof.lives)


def test_evaluate_rejects_bad_orders():
    p = Problem.from_graph(random_dag(8, seed=1))
    with pytest.raises(ValueError, match="predecessor"):
        native.evaluate(p, list(reversed(range(p.n))))
    with pytest.raises(ValueError, match="every op"):
        native.evaluate(p, [0])


@pytest.mark.parametrize("seed", range(4))
def test_exact_native_scheduler_matches_exact(seed):
    g = random_dag(40, seed=seed, window=4)
    a = memsched.schedule(g, "exact", time_limit=None)
    b = memsched.schedule(g, "exact_native", time_limit=None)
    assert b.stats["native"]
    assert b.peak == a.peak
    assert b.optimal and a.optimal and b.lower_bound == a.lower_bound
    g.check_order(b.order)


def test_wide_graph_over_64_ops():
    """Bitsets wider than one word: a segment of > 64 ops searched in one piece."""
    g = random_dag(90, seed=7, window=3)
    p = Problem.from_graph(g)
    order, peak, _ = best_heuristic(p)
    no, npk, nlb, states = native.astar(p, (order, peak), py_exact.trivial_bound(p),
                                        time_limit=20)
    check_topological(p, no)
    assert p.evaluate(no).peak == npk <= peak
    assert nlb <= npk


def test_anytime_limits():
    g = random_dag(60, seed=3, window=8)
    p = Problem.from_graph(g)
    order, peak, _ = best_heuristic(p)
    no, npk, nlb, states = native.astar(p, (order, peak), 0, max_states=1)
    check_topological(p, no)
    assert nlb <= npk <= peak
    no, npk, nlb, states = native.astar(p, (order, peak), 0, time_limit=0.0)
    assert nlb <= npk <= peak


def test_pass_context_config_keys():
    import tvm

    import memsched.transform  # noqa: F401  (loads the library: registers the keys)
    from memsched.transform.memory_aware_schedule import MemoryAwareSchedule

    cfg = {"memsched.time_limit_s": 5, "memsched.algorithm": "exact_native",
           "memsched.memory_model": "paper"}
    with tvm.transform.PassContext(config=cfg) as ctx:
        algo, tl, model = MemoryAwareSchedule()._options(ctx)
    assert (algo, tl, model.name) == ("exact_native", 5.0, "paper")
    with tvm.transform.PassContext() as ctx:
        algo, tl, model = MemoryAwareSchedule()._options(ctx)
    assert (algo, tl, model.name) == ("auto", 10.0, "tvm")
    with pytest.raises(Exception):
        tvm.transform.PassContext(config={"memsched.time_limit_s": "soon"})
    names = tvm.get_global_func("transform.ListConfigs")()
    assert {"memsched.algorithm", "memsched.time_limit_s", "memsched.memory_model"} <= set(names)


def test_pass_runs_with_config():
    import tvm

    from memsched.generators.examples import example_model
    from memsched.transform.memory_aware_schedule import MemoryAwareSchedule

    mod = example_model("randwire")
    with tvm.transform.PassContext(config={"memsched.algorithm": "exact_native",
                                           "memsched.time_limit_s": 20}):
        new = MemoryAwareSchedule()(mod)
    ref = MemoryAwareSchedule(algorithm="exact", time_limit=20)(mod)
    a, b = new["main"].attrs, ref["main"].attrs
    assert a["memsched.peak_after"] == b["memsched.peak_after"]


@pytest.mark.heavy  # ~20 s of CMake configure + compile on a shared 2-core machine
def test_add_subdirectory_from_parent_project(tmp_path):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake not installed")
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\n"
        "project(parent LANGUAGES CXX)\n"
        f'add_subdirectory("{ROOT / "passes"}" memsched_passes)\n'
        "set_target_properties(memsched_native PROPERTIES LIBRARY_OUTPUT_DIRECTORY "
        '"${CMAKE_BINARY_DIR}/lib")\n')
    build = tmp_path / "build"
    for cmd in ([cmake, "-S", str(tmp_path), "-B", str(build),
                 f"-DPython_EXECUTABLE={sys.executable}"],
                [cmake, "--build", str(build), "--parallel", "2"]):
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout[-3000:]
    lib = build / "lib" / "libmemsched_native.so"
    assert lib.exists()
    # the freshly built library works (fresh interpreter: global names are process-wide)
    code = ("import os, memsched.native as n; from memsched.memory import Problem; "
            "from memsched.generators.random_graphs import random_dag; "
            "p = Problem.from_graph(random_dag(10, seed=2)); "
            "print(n.evaluate(p, list(range(p.n)))[0] == p.evaluate(list(range(p.n))).peak)")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ,
                         "MEMSCHED_NATIVE_LIB": str(lib)}, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    assert out.stdout.strip().endswith("True"), out.stdout[-3000:]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(8, 40), chunk=st.integers(1, 200))
@example(seed=70, n=35, chunk=1)  # a stopped run used to re-queue its entry at the back
def test_resumed_search_equals_one_run(seed, n, chunk):
    """A search stopped every ``chunk`` expansions and resumed ends exactly where one
    uninterrupted run does: same order, peak, bound and expansions."""
    p = Problem.from_graph(random_dag(n, seed=seed, window=6))
    order, peak, _ = best_heuristic(p)
    whole = native.astar_full(p, (order, peak), 0)
    with native.AstarSession(p, (order, peak), 0) as s:
        for _ in range(10_000):
            r = s.run(max_states=chunk)
            assert r.lower_bound <= r.peak
            if r.reason == "done":
                break
        again = s.run(max_states=1)  # a finished search keeps its answer
    assert r.reason == "done" and again.reason == "done"
    assert (r.order, r.peak, r.lower_bound, r.states) == \
        (whole.order, whole.peak, whole.lower_bound, whole.states)
    assert (again.order, again.peak, again.lower_bound) == (r.order, r.peak, r.lower_bound)


def test_resumed_search_takes_bounds_from_outside():
    """A bound proven elsewhere (target) or a better order passed to a running search only
    tightens it, and a closed handle is an error."""
    p = Problem.from_graph(random_dag(60, seed=3, window=8))
    order, peak, _ = best_heuristic(p)
    best = native.astar_full(p, (order, peak), 0)
    assert best.reason == "done"
    s = native.AstarSession(p, (order, peak), 0)
    r = s.run(max_states=1)
    r = s.run(max_states=1, target=best.peak, upper=(best.order, best.peak))
    assert (r.peak, r.lower_bound) == (best.peak, best.peak)
    s.close()
    s.close()  # idempotent
    with pytest.raises(ValueError):
        s.run(max_states=1)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(6, 30), first=st.integers(1, 40),
       cap=st.sampled_from([3, 50, 10**6]))
def test_both_directions_in_turns_prove_the_optimum(seed, n, first, cap):
    """`astar_both` (forward and backward in doubling turns): the optimum when its state cap
    allows, otherwise an order of the peak it reports and a bound no higher than the
    optimum."""
    from memsched.limits import Deadline
    from memsched.schedulers import native_exact

    p = Problem.from_graph(random_dag(n, seed=seed, window=6))
    order, peak, _ = best_heuristic(p)
    best = native.astar_full(p, (order, peak), 0)
    saved = native_exact.QUICK_FIRST_STATES
    native_exact.QUICK_FIRST_STATES = first
    try:
        o, pk, lb, states = native_exact.astar_both(p, (order, peak), 0, Deadline(None), cap)
    finally:
        native_exact.QUICK_FIRST_STATES = saved
    check_topological(p, o)
    assert p.evaluate(o).peak == pk and lb <= best.peak <= pk <= peak
    if cap == 10**6:
        assert pk == lb == best.peak


_ORDERS = """
import json, sys
if sys.argv[1] == "ffi":
    import tvm_ffi  # noqa: F401  (as inside TVM or ExecuTorch: the C++ kernel is cheap to load)
import memsched
from memsched.generators.random_graphs import random_dag
print(json.dumps([memsched.schedule(random_dag(50, seed=s), "auto", time_limit=None, cpsat=False,
                                    interleave=False, max_states=2000).order for s in range(8)]))
"""


def test_work_bounded_orders_do_not_depend_on_what_the_process_loaded():
    """Without a time limit the order is the graph's alone: a process that has not imported
    tvm_ffi (the C++ kernel costs ~1 s to load there) gets the orders of one that has (before,
    the first ran the Python A* with its smaller quick cap: 4 of these 8 orders differed)."""
    runs = [subprocess.run([sys.executable, "-c", _ORDERS, mode], capture_output=True, text=True,
                           check=True).stdout for mode in ("ffi", "plain")]
    assert runs[0] == runs[1]

"""Limits of one scheduling call (memsched.limits): memory caps, determinism under time limits,
Ctrl-C during native search, input validation, PassContext keys right after import.

No wall-time assertions: speed is measured by benchmarks/search/time_limits.py. Timeouts below only
guard against hangs (a search that ignores Ctrl-C or its cap would run for minutes).
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import memsched
from memsched import native
from memsched.graph import GraphBuilder
from memsched.limits import Deadline, Expired, resolve_memory_limit
from memsched.memory import Problem
from memsched.generators.random_graphs import random_dag

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON_DIR = os.path.join(ROOT, "python")


def chains(k: int = 40, length: int = 4, seed: int = 0):
    """``k`` parallel chains of ``length`` ops from one input into a concat: 161 ops for the
    defaults, the shape on which the uncapped A* grew to 3 GB (issue 11)."""
    rng = random.Random(seed)
    b = GraphBuilder("chains")
    x = b.input("x", 64)
    ends = []
    for c in range(k):
        t = x
        for i in range(length):
            size = rng.choice([64, 256, 1024, 4096]) if i < length - 1 else 128
            v = b.op(f"c{c}_{i}", "conv", [t], [(f"t{c}_{i}", size)])
            t = b.ops[v].outputs[0]
        ends.append(t)
    v = b.op("concat", "concat", ends, [("out", 128 * k)])
    b.mark_output(b.ops[v].outputs[0])
    return b.build()


CAP = 8 << 20  # 8 MiB of search tables: a few seconds of native search, far less in Python


@pytest.mark.skipif(not native.available(), reason="libmemsched_native not built")
def test_native_memory_cap_returns_best_order_with_gap():
    g = chains()
    assert len(g) == 161
    s = memsched.schedule(g, "exact_native", "paper", time_limit=None, memory_limit=CAP)
    g.check_order(s.order)
    assert not s.optimal
    assert s.lower_bound <= s.peak
    assert s.stats["stopped"] == {"memory": 1}
    # the cap is on the tables it holds, accounted from their capacities
    p = Problem.from_graph(g, "paper")
    o, pk, _ = memsched.schedulers.best_heuristic(p)
    r = native.astar_full(p, (o, pk), 0, memory_limit=CAP)
    assert r.reason == "memory" and r.memory_bytes >= CAP
    assert r.memory_bytes < 3 * CAP  # stops at the first poll past the cap
    # deterministic: the same cap stops at the same state
    r2 = native.astar_full(p, (o, pk), 0, memory_limit=CAP)
    assert (r2.states, r2.lower_bound, r2.order) == (r.states, r.lower_bound, r.order)


def test_python_memory_cap():
    g = chains()
    s = memsched.schedule(g, "exact", "paper", time_limit=None, memory_limit=2 << 20)
    g.check_order(s.order)
    assert not s.optimal and s.lower_bound <= s.peak
    assert s.stats["stopped"] == {"memory": 1}
    b = memsched.schedule(g, "btsearch", "paper", time_limit=None, memory_limit=2 << 20)
    g.check_order(b.order)
    assert b.stats["stopped"] == {"memory": 1} and not b.stats["timed_out"]


def test_memory_limit_validation():
    g = random_dag(10, seed=0)
    for bad in (0, -5, float("nan"), "1G", True):
        with pytest.raises(ValueError, match="memory_limit"):
            memsched.schedule(g, "exact", memory_limit=bad)
    assert resolve_memory_limit(None) > 0


@pytest.mark.parametrize("bad", [-1, float("nan"), "10", True])
def test_time_limit_validation(bad):
    with pytest.raises(ValueError, match="time_limit"):
        memsched.schedule(random_dag(10, seed=0), "auto", time_limit=bad)


def test_expired_deadline_still_returns_a_valid_order():
    """A limit of 0 s: every algorithm still returns a valid order (at worst the input
    order) with a sound lower bound."""
    g = random_dag(120, seed=4, window=12)
    for algo in ("auto", "exact", "ilp", "hmcos", "btsearch", "ilp-partition", "dp",
                 "heuristic", "list"):
        s = memsched.schedule(g, algo, "paper", time_limit=0.0)
        g.check_order(s.order)
        assert s.lower_bound <= s.peak


def test_deadline_shares():
    d = Deadline(10.0)
    c = d.share(0.5)
    assert c.end <= d.end and 4.0 < c.remaining() <= 5.0
    assert d.cap(100).end == d.end
    assert Deadline().share(0.5).end is None
    e = Deadline(0.0)
    with pytest.raises(Expired):
        e.check()


def test_same_input_same_order_whatever_the_time_limit():
    """A graph whose searches cannot finish: the order comes from the work-bounded stages
    (fusion, baselines, HMCOS), so it is the same for any time limit, run after run."""
    g = random_dag(200, seed=7, window=30)
    # the exact searches are capped by work, not seconds (A* by states, no CP-SAT): on a fast
    # machine they would otherwise finish within the limit and the orders would differ by the
    # machine's speed. Whether a time-shared lower bound proves the order optimal may still
    # depend on the clock; the order may not.
    opts = dict(hmcos_work=3000, segment_hmcos_work=1000, max_states=2000, cpsat=False)
    # limits well above what HMCOS needs for its work budget (0.04 s idle), so a loaded machine
    # (CI with two workers) still stops it by work
    runs = [memsched.schedule(g, "auto", "paper", time_limit=t, **opts) for t in (3.0, 3.0, 6.0)]
    for s in runs:
        g.check_order(s.order)
        assert s.stats["hmcos_stopped"] == "work"  # HMCOS ran to its budget, not to the clock
        assert not s.stats.get("stages_cut")
    assert runs[0].order == runs[1].order == runs[2].order


def test_hmcos_is_deterministic_and_not_time_budgeted():
    g = random_dag(150, seed=5, window=10)
    a = memsched.schedule(g, "hmcos", "paper", time_limit=30, max_work=20000)
    b = memsched.schedule(g, "hmcos", "paper", time_limit=60, max_work=20000)
    assert a.order == b.order
    assert a.stats["work"] == b.stats["work"]


def _run_and_interrupt(code: str, after: float = 1.5, guard: float = 60.0):
    """Start ``code`` in a fresh interpreter, wait for it to print 'go', wait ``after`` s,
    send SIGINT, and return (returncode, stderr). ``guard`` only stops a hang."""
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    # SIGINT at its default in the child, as in a terminal: a parent that ignores it (a
    # pytest-xdist worker) would pass SIG_IGN on, and Python then installs no
    # KeyboardInterrupt handler at all
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stdout.readline()
        assert line.strip() == "go", line + proc.stderr.read()
        time.sleep(after)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=guard)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


@pytest.mark.skipif(not native.available(), reason="libmemsched_native not built")
def test_ctrl_c_stops_native_search():
    """Without a stop flag the C++ loop runs until its (large) cap: minutes."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.join(ROOT, "tests")!r})
        from test_limits import chains
        import memsched
        from memsched import native
        native.load()
        print("go", flush=True)
        try:
            memsched.schedule(chains(16), "exact_native", time_limit=None,
                              memory_limit=64 << 30)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            sys.exit(130)
        sys.exit(3)
    """)
    rc, err = _run_and_interrupt(code)
    assert rc == 130, err


@pytest.mark.heavy
def test_ctrl_c_stops_cpsat():
    code = textwrap.dedent("""
        import sys
        import memsched
        from memsched.generators.random_graphs import random_dag
        from ortools.sat.python import cp_model  # noqa: F401  (import before 'go')
        g = random_dag(300, seed=3, window=40)
        print("go", flush=True)
        try:
            memsched.schedule(g, "ilp", time_limit=None)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            sys.exit(130)
        sys.exit(3)
    """)
    rc, err = _run_and_interrupt(code, after=3.0)
    assert rc == 130, err


CONFIG = ('{"memsched.time_limit_s": 5, "memsched.algorithm": "exact", '
          '"memsched.memory_model": "paper", "memsched.memory_limit": 1 << 30}')


@pytest.mark.skipif(not native.available(), reason="libmemsched_native not built")
@pytest.mark.parametrize("imports", ["import tvm, memsched",
                                     pytest.param("import memsched, tvm",
                                                  marks=pytest.mark.heavy)])
def test_pass_context_keys_right_after_import(imports):
    code = textwrap.dedent(f"""
        {imports}
        ctx = tvm.transform.PassContext(config={CONFIG})
        assert int(ctx.config["memsched.memory_limit"]) == 1 << 30
        assert float(ctx.config["memsched.time_limit_s"]) == 5.0
        from memsched.generators.examples import example_model
        with ctx:  # the keys reach the pass
            mod = memsched.MemoryAwareSchedule()(example_model("two_branch"))
        attrs = mod["main"].attrs
        assert str(attrs["memsched.algorithm"]) == "exact", attrs
        assert str(attrs["memsched.memory_model"]) == "paper", attrs
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_import_memsched_does_not_import_tvm():
    code = ("import sys, memsched; "
            "print(sorted(m for m in ('tvm', 'tvm_ffi', 'torch') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_collector_paused_restores_the_collector_as_it_was():
    import gc

    from memsched.limits import collector_paused

    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("the block fails")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a caller's own pause is kept
    finally:
        gc.enable()

"""Benchmark: exact search in C++ (``exact_native``, libmemsched_native) vs the Python reference
(``exact``) on random irregular cells (and, with ``--zoo``, networks of benchmarks/zoo).

Prints a markdown table: graph, ops, largest segment, peak and lower bound of each, states
expanded, search time of each and the speedup. Both get the same time limit; a row where either
timed out compares anytime results, not equal work.

    .venv/bin/python benchmarks/search/native_vs_python.py [--time-limit 60] [--sizes 30 40 60]
        [--seeds 3] [--zoo darts-v2-cifar ...]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from memsched import native  # noqa: E402
from memsched.memory import Problem  # noqa: E402
from memsched.generators.random_graphs import random_dag  # noqa: E402
from memsched.schedulers import exact, native_exact  # noqa: E402


def run(p: Problem, fn, time_limit):
    t0 = time.perf_counter()
    order, lb, optimal, stats = fn(p, time_limit=time_limit)
    dt = time.perf_counter() - t0
    return p.evaluate(order).peak, lb, optimal, stats, dt


def row(name, p, time_limit):
    py = run(p, exact.solve, time_limit)
    nat = run(p, native_exact.solve, time_limit)
    speed = py[4] / nat[4] if nat[4] > 0 else float("inf")
    mark = lambda r: "yes" if r[2] else ("timeout" if r[3].get("timed_out") else "no")  # noqa
    print(f"| {name} | {p.n} | {py[3]['largest_segment']} | {py[0]} / {py[1]} ({mark(py)}) | "
          f"{nat[0]} / {nat[1]} ({mark(nat)}) | {py[3]['states']} | {nat[3]['states']} | "
          f"{py[4]:.3f} | {nat[4]:.4f} | {speed:.0f}x |", flush=True)
    return py[4], nat[4]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--sizes", type=int, nargs="*", default=[20, 30, 40, 50])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--window", type=int, default=8, help="random_dag wiring window")
    ap.add_argument("--zoo", nargs="*", default=[], help="benchmarks/zoo network names")
    ap.add_argument("--model", default="paper", help="memory model")
    args = ap.parse_args(argv)
    native.load()  # fail early, clearly
    print(f"time limit {args.time_limit:g} s each, memory model {args.model}\n")
    print("| graph | ops | largest segment | Python peak / LB (optimal) | native peak / LB "
          "(optimal) | Python states | native states | Python (s) | native (s) | speedup |")
    print("|---|---:|---:|---|---|---:|---:|---:|---:|---:|")
    tot_py = tot_nat = 0.0
    for n in args.sizes:
        for seed in range(args.seeds):
            g = random_dag(n, seed=seed, window=args.window)
            a, b = row(f"random{n}_s{seed}", Problem.from_graph(g, args.model), args.time_limit)
            tot_py += a
            tot_nat += b
    for name in args.zoo:
        from benchmarks.zoo import build_relax
        from memsched.importers.relax import from_relax

        g = from_relax(build_relax(name, fold_bn=True))
        a, b = row(name, Problem.from_graph(g, args.model), args.time_limit)
        tot_py += a
        tot_nat += b
    if tot_nat > 0:
        print(f"\ntotal: Python {tot_py:.2f} s, native {tot_nat:.3f} s, "
              f"speedup {tot_py / tot_nat:.0f}x")


if __name__ == "__main__":
    main()

"""Benchmark: exact scheduling of small irregular ONNX graphs (the example generators).

Prints a markdown table: graph, ops, peak (paper memory model) for the input order, the best
baseline heuristic and ours with lower bound and optimal flag, scheduling time, and TVM's real
planned storage (default CPU pipeline) with TVM's order and with ours.

    .venv/bin/python benchmarks/search/random_cells.py [--time-limit 60] [--no-tvm]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

import onnx  # noqa: E402

from memsched import schedule  # noqa: E402
from memsched.generators.examples import example_onnx  # noqa: E402
from memsched.importers.onnx import from_onnx  # noqa: E402
from memsched.schedulers import best_heuristic  # noqa: E402
from memsched.memory import Problem  # noqa: E402

CASES = [("randwire", dict(seed=s, nodes=n)) for n in (8, 12) for s in (0, 1, 2, 3)] + \
    [("nas_cell", dict(cells=2)), ("nas_cell", dict(cells=3))]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--no-tvm", action="store_true", help="skip TVM planned-storage columns")
    args = ap.parse_args(argv)
    print("| graph | ops | input order (B) | best heuristic (B) | ours (B) | lower bound (B) | "
          "optimal | time (s) | TVM planned, TVM order (B) | TVM planned, ours (B) | "
          "memsched.pipeline, ours + PlanArena (B) |")
    print("|---|---:|---:|---:|---:|---:|:---:|---:|---:|---:|---:|")
    for name, kw in CASES:
        model = example_onnx(name, **kw)
        g = from_onnx(model)
        p = Problem.from_graph(g, "paper")
        base = p.evaluate(range(len(g))).peak
        _, hpeak, hname = best_heuristic(p)
        s = schedule(g, "auto", "paper", time_limit=args.time_limit)
        tvm_cols = ["-", "-", "-"]
        if not args.no_tvm:
            import memsched

            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "m.onnx")
                onnx.save(model, path)
                mod = memsched.load_relax(path)
            tvm_cols = [f"{memsched.planned_bytes(mod, schedule=False, plan_arena=False):,}",
                        f"{memsched.planned_bytes(mod, plan_arena=False):,}",
                        f"{memsched.planned_bytes(mod):,}"]
        label = f"{name}({', '.join(f'{k}={v}' for k, v in kw.items())})"
        print(f"| {label} | {len(g)} | {base:,} | {hpeak:,} ({hname}) | {s.peak:,} | "
              f"{s.lower_bound:,} | {'yes' if s.optimal else 'no'} | {s.seconds:.2f} | "
              f"{tvm_cols[0]} | {tvm_cols[1]} | {tvm_cols[2]} |", flush=True)


if __name__ == "__main__":
    main()

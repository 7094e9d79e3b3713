"""Benchmark: are random DAGs of ~100 ops certified? (issue 15: "random DAGs up to 100 ops").

`memsched.schedule(graph, "auto", "paper", time_limit=T)` with the C++ kernel loaded, on
`random_dag(100, seed, window=W)` (window 6: the generator's default, narrow; 24: wide, many
ops ready at once) and on the `randwire` example cells of 16 nodes. Prints a markdown table:
graph, ops, peak, proven lower bound, optimal, seconds.

    .venv/bin/python benchmarks/search/random_dags.py [--time-limit 60] [--seeds 10]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

from memsched import native, schedule  # noqa: E402
from memsched.generators.examples import example_onnx  # noqa: E402
from memsched.importers.onnx import from_onnx  # noqa: E402
from memsched.generators.random_graphs import random_dag  # noqa: E402


def graphs(seeds: int):
    for window in (6, 24):
        for seed in range(seeds):
            yield f"random_dag(100, seed={seed}, window={window})", random_dag(
                100, seed=seed, window=window)
    for seed in range(4):
        yield f"randwire(nodes=16, seed={seed})", from_onnx(example_onnx(
            "randwire", seed=seed, nodes=16))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--seeds", type=int, default=10)
    args = ap.parse_args(argv)
    native.load()
    print(f"`auto`, memory model paper, time limit {args.time_limit:g} s, C++ kernel\n")
    print("| graph | ops | peak (B) | lower bound (B) | optimal | s |")
    print("|---|---:|---:|---:|:---:|---:|")
    proven = total = 0
    for name, g in graphs(args.seeds):
        t = time.perf_counter()
        s = schedule(g, "auto", "paper", time_limit=args.time_limit)
        total += 1
        proven += bool(s.optimal)
        print(f"| {name} | {len(g)} | {s.peak:,} | {s.lower_bound:,} | "
              f"{'yes' if s.optimal else 'no'} | {time.perf_counter() - t:.2f} |", flush=True)
    print(f"\n{proven} of {total} certified")


if __name__ == "__main__":
    main()

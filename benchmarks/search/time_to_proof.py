"""Time to a proof against the time limit: does granting more time ever delay the same proof?

`memsched.schedule(graph, "auto", time_limit=T)` for T in ``--limits`` (default 10 60 300), with
the proof stage as shipped (A* and CP-SAT interleaved in doubling turns, `schedulers.auto`) and,
with ``--fixed-split``, the earlier fixed split (A* 70 % of a segment's time first, CP-SAT the
rest) for comparison. Prints a markdown table: graph, schedule, limit, wall seconds, proven
(and by what), gap, seconds spent in A* and in CP-SAT.

    .venv/bin/python benchmarks/search/time_to_proof.py                      # the default graphs
    .venv/bin/python benchmarks/search/time_to_proof.py --limits 10 60 --fixed-split
    .venv/bin/python benchmarks/search/time_to_proof.py \
        --onnx /tmp/memsched_zoo_onnx/randwire-ws-1.onnx

Default graphs: random DAGs. The first two were chosen when the A* searched forward only
(``random_dag(100, seed=2, window=24)``: proven by CP-SAT in 14 s; ``random_dag(200, seed=1,
window=10)``: by A* in 7 s); since the A* also searches from the schedule's end the quick A*
proves both in well under a second. The last two are the hardest of a scan of 40 random DAGs
with both directions (``random_dag(150, seed=1, window=32)``, ``random_dag(200, seed=1,
window=24)``: the full interleaved proof, about 3 and 7 s).
The native kernel is loaded once before timing (its first load is excluded).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))

DEFAULT = [(100, 2, 24), (200, 1, 10), (150, 1, 32), (200, 1, 24)]


def graphs(args):
    from memsched.generators.random_graphs import random_dag

    for n, seed, window in DEFAULT:
        yield f"random_dag({n}, seed={seed}, window={window})", random_dag(n, seed=seed,
                                                                          window=window)
    for path in args.onnx:
        from memsched.importers.onnx import from_onnx

        yield os.path.basename(path), from_onnx(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limits", type=float, nargs="+", default=[10.0, 60.0, 300.0])
    ap.add_argument("--fixed-split", action="store_true",
                    help="also run the earlier fixed A*-then-CP-SAT split")
    ap.add_argument("--onnx", nargs="*", default=[], help="ONNX files to add (file view)")
    args = ap.parse_args(argv)
    import memsched
    from memsched import native

    native.load()
    schedules = [("interleaved", {})] + ([("fixed split", {"interleave": False})]
                                         if args.fixed_split else [])
    print("| graph | schedule | limit (s) | wall (s) | proven (by) | gap | A* (s) | CP-SAT (s) |")
    print("|---|---|---:|---:|---|---:|---:|---:|")
    for name, g in graphs(args):
        for label, opts in schedules:
            for limit in args.limits:
                t = time.perf_counter()
                r = memsched.schedule(g, "auto", time_limit=limit, native=True, **opts)
                wall = time.perf_counter() - t
                st = r.stats
                proven = f"yes ({st.get('proof')})" if r.optimal else "no"
                print(f"| {name} | {label} | {limit:g} | {wall:.2f} | {proven} | "
                      f"{100 * (st.get('gap') or 0):.2f} % | {st.get('astar_seconds', 0):.2f} | "
                      f"{st.get('cpsat_seconds', 0):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

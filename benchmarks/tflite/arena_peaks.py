"""Does every offline plan `memsched reorder --offline-plan` writes equal the liveness peak?

For each .tflite given (default: the Keras models under benchmarks/edgetpu/models and
benchmarks/tflite/models, built by their make_models.py scripts), `reorder_tflite(...,
offline_plan=True)` (what ``memsched reorder MODEL --offline-plan -o OUT`` runs) and a table:
model, operators, planned tensors, the arena written, the liveness peak of the written order
(bytes live at once, 16-byte TFLM alignment padding excluded), the proven lower bound (the peak
with alignment), whether the arena is proven optimal, the packer used (greedy or the exact
packer) and seconds.

    .venv/bin/python benchmarks/tflite/arena_peaks.py [MODEL.tflite ...] [--time-limit 10]
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--time-limit", type=float, default=10.0, help="arena packer seconds")
    args = ap.parse_args(argv)
    from memsched import arena
    from memsched.tflite.format.read import read_tflite
    from memsched.tflite.plan.reorder import offline_offsets, reorder_tflite
    from memsched.tflite.memory.model import TFLM_ALIGNMENT, lifetimes

    models = args.models or sorted(
        glob.glob(os.path.join(ROOT, "benchmarks", "edgetpu", "models", "*.tflite")) +
        glob.glob(os.path.join(ROOT, "benchmarks", "tflite", "models", "*.tflite")))
    print("| model | ops | planned tensors | arena (B) | liveness peak (B) | lower bound (B) | "
          "optimal | packer | seconds |")
    print("|---|---:|---:|---:|---:|---:|:---:|---|---:|")
    n_opt = 0
    for path in models:
        t = time.perf_counter()
        data, res = reorder_tflite(path, None, offline_plan=True,
                                   arena_time_limit=args.time_limit)
        tg = read_tflite(data)
        order = list(range(len(tg.graph.ops)))  # the written file's order
        _, plan = offline_offsets(tg, order, args.time_limit, TFLM_ALIGNMENT)
        lts = [lt for _, lt in lifetimes(tg, order)]
        secs = time.perf_counter() - t
        assert plan.arena == res.offline_arena, (plan.arena, res.offline_arena)
        n_opt += plan.optimal
        print(f"| {os.path.basename(path)[:-7]} | {len(order)} | {len(lts)} | {plan.arena:,} | "
              f"{arena.max_live(lts):,} | {plan.lower_bound:,} | "
              f"{'yes' if plan.optimal else 'no'} | {plan.method} | {secs:.2f} |", flush=True)
    print(f"\n{n_opt} of {len(models)} arenas proven equal to their lower bound")
    return 0


if __name__ == "__main__":
    sys.exit(main())

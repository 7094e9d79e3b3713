"""Arena packing on MiniMalloc's 11 "challenging" instances (shared/benchmarks/minimalloc/).

For each instance: buffers, liveness peak, the exact packer's arena at the capacity in the file
name (``memsched.packing.pack``, MiniMalloc's setting), whether it fits / is proven optimal
(arena == liveness peak), its seconds (the search, after a one-time library load), and the
greedy packer's arena (``memsched.arena.plan_greedy``, alignment 1) for comparison. With
``--minimise`` also the smallest arena found without a capacity, and its proven bound.

    .venv/bin/python benchmarks/search/packing.py [--time-limit 15] [--minimise] [--json out.json]

Robustness (``--shuffles N``): instead of the table, pack N copies of every instance with its rows
shuffled (seeds ``--seed``, ``--seed + 1``, ...), optionally with ``--drop K`` random buffers
removed (a packing of the whole fits the rest, so every copy still fits the capacity) and/or all
sizes and times multiplied by ``--scale F``; prints every run, then the fit rate and the
percentiles of the seconds.

    .venv/bin/python benchmarks/search/packing.py --shuffles 3 --seed 1 [--drop 3] [--scale 3]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from memsched import arena, native, packing  # noqa: E402

DEFAULT_DIR = ROOT.parent / "shared" / "benchmarks" / "minimalloc"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--time-limit", type=float, default=15.0)
    ap.add_argument("--minimise", action="store_true",
                    help="also minimise the arena without a capacity")
    ap.add_argument("--only", default="", help="comma-separated instance letters")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--shuffles", type=int, default=0,
                    help="robustness: pack N row-shuffled copies of every instance")
    ap.add_argument("--seed", type=int, default=1, help="first shuffle seed")
    ap.add_argument("--drop", type=int, default=0,
                    help="with --shuffles: remove this many random buffers from every copy")
    ap.add_argument("--scale", type=int, default=1,
                    help="with --shuffles: multiply sizes, times and capacity by this")
    args = ap.parse_args(argv)
    files = sorted(args.dir.glob("*.csv"))
    if args.only:
        keep = set(args.only.split(","))
        files = [f for f in files if f.name.split(".")[0] in keep]
    if not files:
        print(f"no instances in {args.dir}", file=sys.stderr)
        return 2
    native.hide_torch_on_load()
    t = time.perf_counter()
    packing._native_pack()
    print(f"library load {time.perf_counter() - t:.2f} s (not counted below)\n")
    if args.shuffles > 0:
        return robustness(files, args)
    rows = []
    hdr = ("| instance | buffers | liveness peak | capacity | arena | fits | optimal | seconds "
           "| nodes | greedy arena (s) |")
    if args.minimise:
        hdr += " minimised arena / bound (s) |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for f in files:
        name = f.name.split(".")[0]
        capacity = int(f.name.split(".")[1])
        bufs = packing.read_minimalloc_csv(f)
        lts = [arena.Lifetime(b.size, b.lower, b.upper - 1) for b in bufs]
        t = time.perf_counter()
        g = arena.plan_greedy(lts, 1)
        g_s = time.perf_counter() - t
        t = time.perf_counter()
        r = packing.pack(bufs, capacity=capacity, time_limit=args.time_limit)
        sec = time.perf_counter() - t
        if r.fits:
            packing_ok = [(b.lower, b.upper, b.size) for b in bufs]
            arena.verify([arena.Lifetime(s, lo, hi - 1) for lo, hi, s in packing_ok],
                         r.offsets, 1, capacity)
        row = {"instance": name, "buffers": len(bufs), "live_peak": r.live_peak,
               "capacity": capacity, "arena": r.arena, "fits": r.fits,
               "optimal": bool(r.fits and r.arena == r.live_peak), "seconds": round(sec, 2),
               "nodes": r.nodes, "stop": r.stop, "greedy": g.arena,
               "greedy_seconds": round(g_s, 2)}
        line = (f"| {name} | {len(bufs)} | {r.live_peak:,} | {capacity:,} | "
                f"{r.arena:,} | {'yes' if r.fits else 'no'} | "
                f"{'yes' if row['optimal'] else 'no'} | {sec:.2f} | {r.nodes:,} | "
                f"{g.arena:,} ({g_s:.2f}) |")
        if args.minimise:
            t = time.perf_counter()
            m = packing.pack(bufs, None, time_limit=args.time_limit)
            m_s = time.perf_counter() - t
            row.update(min_arena=m.arena, min_bound=m.lower_bound, min_seconds=round(m_s, 2))
            line += f" {m.arena:,} / {m.lower_bound:,} ({m_s:.2f}) |"
        print(line, flush=True)
        rows.append(row)
    fit = [r for r in rows if r["fits"]]
    print(f"\nfit: {len(fit)}/{len(rows)}; seconds of the fitting ones: "
          f"{', '.join(str(r['seconds']) for r in fit)}"
          + (f"; median {statistics.median(r['seconds'] for r in fit):.2f}" if fit else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def robustness(files, args) -> int:
    """Row-shuffled (optionally thinned / scaled) copies of every instance at its capacity."""
    runs = []
    print("| instance | seed | buffers | arena | fits | seconds | nodes | stop |")
    print("|---|---|---|---|---|---|---|---|")
    for f in files:
        name = f.name.split(".")[0]
        capacity = int(f.name.split(".")[1]) * args.scale
        base = packing.read_minimalloc_csv(f)
        for k in range(args.shuffles):
            seed = args.seed + k
            rng = random.Random(f"{name}:{seed}")
            bufs = list(base)
            rng.shuffle(bufs)
            for _ in range(min(args.drop, len(bufs) - 1)):
                bufs.pop(rng.randrange(len(bufs)))
            bufs = [(b.lower * args.scale, b.upper * args.scale, b.size * args.scale)
                    for b in bufs]
            t = time.perf_counter()
            r = packing.pack(bufs, capacity=capacity, time_limit=args.time_limit)
            sec = time.perf_counter() - t
            if r.fits:
                arena.verify([arena.Lifetime(s, lo, hi - 1) for lo, hi, s in bufs], r.offsets,
                             1, capacity)
            runs.append({"instance": name, "seed": seed, "buffers": len(bufs),
                         "arena": r.arena, "fits": bool(r.fits), "seconds": round(sec, 2),
                         "nodes": r.nodes, "stop": r.stop})
            print(f"| {name} | {seed} | {len(bufs)} | {r.arena:,} | "
                  f"{'yes' if r.fits else 'no'} | {sec:.2f} | {r.nodes:,} | {r.stop} |",
                  flush=True)
    secs = [r["seconds"] for r in runs]
    fit = sum(r["fits"] for r in runs)
    print(f"\nfit: {fit}/{len(runs)} (shuffles {args.shuffles}, seed {args.seed}, drop "
          f"{args.drop}, scale {args.scale}, limit {args.time_limit:g} s); seconds p50 "
          f"{percentile(secs, 0.5):.2f}, p90 {percentile(secs, 0.9):.2f}, max {max(secs):.2f}")
    missed = [f"{r['instance']}/{r['seed']}" for r in runs if not r["fits"]]
    if missed:
        print("missed: " + ", ".join(missed))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

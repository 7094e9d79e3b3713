"""Whole-process time of `memsched analyze` on every zoo network (issue: certified in ~1 s).

    python -m benchmarks.search.whole_process                       # all zoo networks, 5 runs each
    python -m benchmarks.search.whole_process --zoo amoebanet-a-cifar nasnet-a-cifar -n 7
    python -m benchmarks.search.whole_process --analyze-args "--view file" --json out.json

What a user waits for is the whole process: interpreter start, imports, reading the file,
scheduling, printing. So every network is exported once to ONNX (batch norm folded into the
convolutions, as in the HMCOS comparison: the same files HMCOS was run on) and
``memsched analyze FILE --json`` is run as a fresh process ``-n`` times after one warm-up run
(file cache and native library warm, as for a user's second call); the table gives the median
wall time with min and max, and from the last run's JSON the peak, lower bound, whether it is
certified optimal and which technique proved it (``stats.proof``).

HMCOS's whole-process times (its own binary on the same files, measured earlier on this kind of
machine and quoted in the issue) are listed for the three networks the issue quotes; '-' means
not quoted here (HMCOS crashes or runs out of 16 GiB on 7 of the 18 networks it was run on).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import statistics
import subprocess
import sys
import time

# the repo root, for `benchmarks.zoo` when run as a file (`python -m` has it already)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# HMCOS whole-process seconds on identical fold-BN ONNX files (quoted from the issue)
HMCOS_SECONDS = {"amoebanet-a-cifar": 0.93, "nasnet-a-cifar": 15.3, "hrnet-w18-small-v1": 124.9}


def export(name: str, onnx_dir: pathlib.Path) -> pathlib.Path:
    path = onnx_dir / f"{name}.onnx"
    if not path.exists():
        from benchmarks.zoo import export_onnx

        export_onnx(name, path, fold_bn=True)
    return path


def time_analyze(path: pathlib.Path, runs: int, time_limit: float, extra: list[str]):
    """Wall seconds of ``runs`` fresh ``memsched analyze`` processes (after one warm-up) and the
    last run's JSON."""
    exe = pathlib.Path(sys.executable).with_name("memsched")
    cmd = [str(exe), "analyze", str(path), "--json", "--time-limit", str(time_limit), *extra]
    walls, out = [], None
    for i in range(runs + 1):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-400:]}")
        if i:
            walls.append(wall)
        out = json.loads(proc.stdout)
    return walls, out


def main(argv=None) -> int:
    from benchmarks.zoo import NETWORKS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zoo", nargs="*", default=list(NETWORKS), help="zoo network names")
    ap.add_argument("-n", type=int, default=5, help="counted runs per network (default 5)")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--onnx-dir", default=os.environ.get("MEMSCHED_ZOO_ONNX",
                                                         "/tmp/memsched_zoo_onnx"))
    ap.add_argument("--analyze-args", default="", help="extra arguments for memsched analyze")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args(argv)
    onnx_dir = pathlib.Path(args.onnx_dir)
    extra = shlex.split(args.analyze_args)
    rows = []
    print(f"`memsched analyze FILE.onnx --json --time-limit {args.time_limit:g}"
          f"{' ' + args.analyze_args if extra else ''}`, fold-BN ONNX, median of {args.n} "
          f"whole-process runs after one warm-up\n")
    print("| network | ops | peak (B) | lower bound (B) | optimal | proved by | search (s) | "
          "whole process median (s) | min–max (s) | HMCOS whole process (s) |")
    print("|---|---:|---:|---:|:---:|---|---:|---:|---:|---:|")
    for name in args.zoo:
        path = export(name, onnx_dir)
        try:
            walls, out = time_analyze(path, args.n, args.time_limit, extra)
        except RuntimeError as e:  # a version that cannot read the file: a row, not a crash
            err = str(e).rsplit("failed: ", 1)[-1].splitlines()[-1][:120]
            rows.append({"network": name, "error": err})
            print(f"| {name} | fails: {err} |||||||||", flush=True)
            continue
        stats = out.get("stats") or {}
        row = {"network": name, "ops": out["ops"], "peak_bytes": out["peak_bytes"],
               "lower_bound": out["lower_bound"], "optimal": out["optimal"],
               "proof": stats.get("proof"), "search_s": out["seconds"],
               "wall_median_s": statistics.median(walls), "wall_min_s": min(walls),
               "wall_max_s": max(walls), "hmcos_s": HMCOS_SECONDS.get(name)}
        rows.append(row)
        hm = f"{row['hmcos_s']:.2f}" if row["hmcos_s"] else "-"
        print(f"| {name} | {row['ops']} | {row['peak_bytes']:,} | {row['lower_bound']:,} | "
              f"{'yes' if row['optimal'] else 'no'} | {row['proof'] or '-'} | "
              f"{row['search_s']:.2f} | {row['wall_median_s']:.2f} | "
              f"{row['wall_min_s']:.2f}–{row['wall_max_s']:.2f} | {hm} |", flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Whole-process time of `memsched analyze` and `memsched reorder` on ExecuTorch programs.

    python -m benchmarks.executorch.pte_whole_process            # randwire-ws-1, darts-v2-cifar
    python -m benchmarks.executorch.pte_whole_process --zoo amoebanet-a-cifar nasnet-a-cifar -n 7
    python -m benchmarks.executorch.pte_whole_process --measure  # reorder --measure too

Each zoo network is exported once with ExecuTorch's defaults (``to_edge(export(m))
.to_executorch()``, cached in ``--pte-dir``), then ``python -m memsched.cli analyze X.pte
--json`` and ``reorder X.pte -o Y.pte --json`` run as fresh processes ``-n`` times after one
warm-up; the table gives medians with min and max (what a user waits for: interpreter start,
imports, reading, search, packing, writing). The last run's JSON gives the instruction count,
the planned bytes before and after, and the search seconds. Timings belong here, not in tests.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time


def export(name: str, pte_dir: pathlib.Path) -> pathlib.Path:
    path = pte_dir / f"{name}.pte"
    if not path.exists():
        import warnings

        import torch
        from executorch.exir import to_edge

        from benchmarks.zoo import build_torch

        model, x = build_torch(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            et = to_edge(torch.export.export(model.eval(), (x,))).to_executorch()
        path.write_bytes(et.buffer)
    return path


def timed(cmd: list[str], runs: int):
    """Wall seconds of ``runs`` fresh processes (after one warm-up) and the last stdout."""
    walls, out = [], ""
    for i in range(runs + 1):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-300:]}")
        if i:
            walls.append(wall)
        out = proc.stdout
    return walls, json.loads(out)


def _cell(walls) -> str:
    return f"{statistics.median(walls):.2f} ({min(walls):.2f}–{max(walls):.2f})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zoo", nargs="*", default=["randwire-ws-1", "darts-v2-cifar"])
    ap.add_argument("-n", type=int, default=5, help="counted runs per command (default 5)")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--measure", action="store_true", help="also time reorder --measure")
    ap.add_argument("--pte-dir", default=os.environ.get("MEMSCHED_ZOO_PTE",
                                                        "/tmp/memsched_zoo_pte"))
    args = ap.parse_args(argv)
    pte_dir = pathlib.Path(args.pte_dir)
    pte_dir.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "memsched.cli"]
    limit = ["--time-limit", str(args.time_limit)]
    print(f"whole process, median (min–max) of {args.n} runs after one warm-up, seconds\n")
    print("| network | instructions | planned as written (B) | after reorder (B) | search (s) "
          "| analyze | reorder |" + (" reorder --measure |" if args.measure else ""))
    print("|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if args.measure else ""))
    for name in args.zoo:
        src = export(name, pte_dir)
        out = pte_dir / f"{name}.memsched.pte"
        wa, a = timed(cli + ["analyze", str(src), "--json"] + limit, args.n)
        wr, r = timed(cli + ["reorder", str(src), "-o", str(out), "--json"] + limit, args.n)
        row = next(iter(a["methods"].values()))
        rr = next(iter(r["methods"].values()))
        cells = [name, f"{row['instructions']:,}", f"{row['planned_bytes']:,}",
                 f"{rr['planned_after']:,}", f"{row.get('schedule_seconds', '-')}",
                 _cell(wa), _cell(wr)]
        if args.measure:
            wm, _ = timed(cli + ["reorder", str(src), "-o", str(out), "--json", "--measure"]
                          + limit, args.n)
            cells.append(_cell(wm))
        print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

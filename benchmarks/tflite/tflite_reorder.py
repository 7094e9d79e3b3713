"""Benchmark `memsched reorder` with the real interpreters: TFLite Micro's minimal arena for the
original file, the reordered file and the reordered file with memsched's offline plan, next to
memsched's certified optimum; outputs compared bit for bit in LiteRT (every tensor) and TFLM.

    .venv/bin/python benchmarks/tflite/tflite_reorder.py [--models DIR] [--quick] [--json out.json]

Models: the built-in irregular examples as .tflite (BFS-emitted, float32 and int8) and every
``*.tflite`` in ``--models`` (default ``benchmarks/tflite/models``, built by
``benchmarks/tflite/make_models.py`` in a tensorflow venv; absent files are skipped). The
minimal arena is found by bisection to 16 bytes, one subprocess per probe (TFLM can abort the
process on a too-small arena); "head" is the planned (non-persistent) section TFLM reports.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

from memsched.generators.examples import example_tflite  # noqa: E402
from memsched.tflite.plan.reorder import reorder_tflite  # noqa: E402
from memsched.tflite import tflm  # noqa: E402

EXAMPLES = [("randwire", dict(nodes=8, seed=0)), ("randwire", dict(nodes=12, seed=0)),
            ("randwire", dict(nodes=16, seed=3)), ("randwire", dict(nodes=24, seed=1)),
            ("nas_cell", dict(cells=2)), ("nas_cell", dict(cells=3))]


def measure(path: str) -> tuple[int, int]:
    size = tflm.min_arena_bytes(path)
    return size, tflm.arena_sections(path, size)["head"]


def row(label: str, src: str, work: str, time_limit: float) -> dict:
    reo, off = os.path.join(work, "reo.tflite"), os.path.join(work, "off.tflite")
    t0 = time.perf_counter()
    _, res = reorder_tflite(src, reo, time_limit=time_limit)
    _, res2 = reorder_tflite(src, off, offline_plan=True, time_limit=time_limit)
    seconds = time.perf_counter() - t0
    try:
        a0, h0 = measure(src)
        a1, h1 = measure(reo)
        a2, h2 = measure(off)
    except RuntimeError as e:  # TFLM has no kernel for an op of the model, ...
        print(f"{label}: TFLM cannot allocate it: {e}", file=sys.stderr)
        return None
    cmp = tflm.compare_models(src, off, count=2)
    return {"model": label, "ops": res.ops, "file_order_peak": res.input_peak,
            "optimum": res.peak, "lower_bound": res.lower_bound, "optimal": res.optimal,
            "offline_arena": res2.offline_arena, "tflm_arena": [a0, a1, a2],
            "tflm_head": [h0, h1, h2], "ratio": round(a0 / a2, 3),
            "head_vs_optimum": round(h2 / res.peak - 1, 4) if res.peak else 0.0,
            "litert_equal": cmp["litert_equal"], "tflm_equal": cmp["tflm_equal"],
            "seconds": round(seconds / 2, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=os.path.join(os.path.dirname(__file__), "models"))
    ap.add_argument("--quick", action="store_true", help="two examples only")
    ap.add_argument("--no-examples", action="store_true", help="only the files in --models")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        cases = []
        for name, kw in ([] if args.no_examples else EXAMPLES[:2] if args.quick else EXAMPLES):
            for q in (False, True):
                path = os.path.join(work, f"{name}_{len(cases)}.tflite")
                with open(path, "wb") as f:
                    f.write(example_tflite(name, quantized=q, **kw))
                kws = ",".join(f"{k}={v}" for k, v in kw.items())
                cases.append((f"{name}({kws}) {'int8' if q else 'float'}", path))
        if not args.quick:
            for path in sorted(glob.glob(os.path.join(args.models, "*.tflite"))):
                base = os.path.basename(path)[:-7]
                label = base.replace("_float", "") + (" float" if base.endswith("_float")
                                                      else " int8")
                cases.append((label, path))
        for label, path in cases:
            r = row(label, path, work, args.time_limit)
            if r is None:
                continue
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    print("| model | ops | file-order peak (B) | optimum (B) | optimal | TFLM arena: original "
          "(B) | reordered (B) | reordered + offline plan (B) | original / ours | planned head: "
          "original -> ours (B) | head vs optimum | outputs equal (LiteRT, TFLM) | time (s) |")
    print("|---|---:|---:|---:|:---:|---:|---:|---:|---:|---:|---:|:---:|---:|")
    for r in rows:
        a, h = r["tflm_arena"], r["tflm_head"]
        print(f"| {r['model']} | {r['ops']} | {r['file_order_peak']:,} | {r['optimum']:,} | "
              f"{'yes' if r['optimal'] else 'no'} | {a[0]:,} | {a[1]:,} | {a[2]:,} | "
              f"{r['ratio']:.2f}x | {h[0]:,} -> {h[2]:,} | {100 * r['head_vs_optimum']:+.2f}% | "
              f"{r['litert_equal']}, {r['tflm_equal']} | {r['seconds']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

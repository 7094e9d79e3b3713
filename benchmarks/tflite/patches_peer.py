"""`memsched tile --offline-plan` against XMOS xformer's builtin-only operator split (the peer,
`../shared/notes/peers.md`): TFLite Micro's minimal total arena, MACs, outputs bit-equal.

For every model of `benchmarks/tflite/patches.py` (``MODELS``) the script sweeps xformer's (B, N)
(B = the last split operator, over the first ``--max-b`` operators; N = height bands in
``--bands``), screens each written file with one TFLite Micro allocation (the recording
allocator's total at a large arena equals the minimal arena), then takes the best file whose
outputs are bit-equal to the original in LiteRT and TFLite Micro and measures its minimal arena
by bisection. The memsched column is `tile_tflite(..., offline_plan=True)`, measured the same
way. MACs: CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED of the written file.

xformer is never a project dependency: install it in its own venv
(``python3 -m venv /tmp/xvenv && /tmp/xvenv/bin/pip install xmos-ai-tools==1.4.2``) and pass
its ``xcore-opt`` with ``--xformer`` or ``$XCORE_OPT``; without it the column is skipped.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/tflite/patches_peer.py [models...]
[--xformer /tmp/xvenv/bin/xcore-opt] [--max-b 12] [--bands 2-10] [--json out.json]``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))

MAC_KINDS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


def macs(path: str) -> int:
    from memsched.tflite.format.read import op_macs, read_tflite

    tg = read_tflite(path)
    return sum(m for v, m in enumerate(op_macs(tg)) if tg.graph.ops[v].kind in MAC_KINDS)


def screen(path: str) -> int | None:
    """TFLite Micro's total arena from one allocation at 8 MiB (None: it cannot allocate)."""
    from memsched.tflite import tflm

    try:
        return int(tflm.arena_sections(path, 1 << 23)["total"])
    except Exception:  # noqa: BLE001 - a file TFLM rejects
        return None


def xformer_split(xcore: str, src: str, dst: str, b: int, n: int) -> bool:
    args = [xcore, "--xcore-op-split", "--xcore-plan-memory", "--xcore-op-split-tensor-arena",
            "--xcore-op-split-top-op=0", f"--xcore-op-split-bottom-op={b}",
            f"--xcore-op-split-num-splits={n}", "-o", dst, src]
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0 and os.path.exists(dst)


def xformer_suggestion(xcore: str, src: str) -> tuple[int, int] | None:
    """xformer's own suggested (B, N) (``--xcore-run-memory-analysis``)."""
    try:
        r = subprocess.run([xcore, "--xcore-run-memory-analysis", src], capture_output=True,
                           text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None
    m = re.search(r"bottom-op=(\d+) --xcore-op-split-num-splits=(\d+)", r.stdout + r.stderr)
    return (int(m.group(1)), int(m.group(2))) if m else None


def equal(src: str, dst: str) -> bool:
    from memsched.tflite.patch.tile import compare_outputs

    c = compare_outputs(src, dst, count=1)
    return bool(c["litert_equal"] and c["tflm_equal"])


def sweep(xcore: str, src: str, d: str, max_b: int, bands, n_ops: int) -> dict:
    """The best xformer (B, N) by measured minimal arena among bit-equal files."""
    from memsched.tflite import tflm

    rows = []
    for b in range(min(max_b, n_ops - 1)):
        for n in bands:
            out = os.path.join(d, f"x_{b}_{n}.tflite")
            if not xformer_split(xcore, src, out, b, n):
                continue
            total = screen(out)
            if total is not None:
                rows.append((total, b, n, out))
    rows.sort()
    tried = 0
    for total, b, n, out in rows:
        tried += 1
        if tried > 6:
            break
        if not equal(src, out):
            continue
        arena = tflm.min_arena_bytes(out, hi=total + 64)
        return {"B": b, "N": n, "arena": arena, "macs": macs(out), "files": len(rows),
                "suggested": xformer_suggestion(xcore, src)}
    return {"files": len(rows), "suggested": xformer_suggestion(xcore, src)}


def run(name: str, xcore: str | None, max_b: int, bands, max_overhead: float,
        cached: dict | None = None, logits: bool = False) -> dict:
    from patches import MODELS, strip_softmax

    from memsched.tflite import tflm
    from memsched.tflite.format.read import read_tflite
    from memsched.tflite.patch.tile import tile_tflite

    data = MODELS[name]() if name in MODELS else open(name, "rb").read()
    if logits:  # Keras files: TFLM's Python interpreter cannot allocate their final SOFTMAX
        data = strip_softmax(data)
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "m.tflite")
        with open(src, "wb") as f:
            f.write(data)
        n_ops = len(read_tflite(src).graph.ops)
        row = {"model": os.path.basename(name), "ops": n_ops,
               "original": tflm.min_arena_bytes(src), "macs": macs(src)}
        dst = os.path.join(d, "p.tflite")
        t0 = time.perf_counter()
        _, res = tile_tflite(src, dst, offline_plan=True, max_overhead=max_overhead)
        row["memsched_seconds"] = round(time.perf_counter() - t0, 2)
        c = res.choice
        row["memsched"] = {"arena": tflm.min_arena_bytes(dst), "macs": macs(dst),
                           "equal": equal(src, dst),
                           "estimate": c.total if c else None,
                           "choice": c.as_dict() if c else None,
                           "bound": res.bound}
        if cached and "xformer" in cached:  # --reuse: the sweep of an earlier run
            row["xformer"] = cached["xformer"]
            row["xformer_seconds"] = cached.get("xformer_seconds")
        elif xcore:
            t0 = time.perf_counter()
            row["xformer"] = sweep(xcore, src, d, max_b, bands, n_ops)
            row["xformer_seconds"] = round(time.perf_counter() - t0, 1)
    return row


def _fmt(row: dict) -> str:
    o, m0 = row["original"], row["macs"]
    m = row["memsched"]
    c = m["choice"]
    def region(c):
        return f"ops {c.get('region_start', 0)}-{c['region_ops'] - 1} {c['grid']}" if c else "-"

    regions = (c or {}).get("regions") or [c]
    ms = (f"{m['arena']:>9,} {o / m['arena']:.3f}x MACs {100 * (m['macs'] / m0 - 1):+.1f}% "
          f"[{' + '.join(region(r) for r in regions)}]"
          f"{'' if m['equal'] else ' NOT EQUAL'}")
    x = row.get("xformer")
    if x is None:
        xs, who = "(no xformer)", ""
    elif "arena" not in x:
        xs, who = f"(no bit-equal split of {x['files']} files)", ""
    else:
        xs = (f"{x['arena']:>9,} {o / x['arena']:.3f}x MACs {100 * (x['macs'] / m0 - 1):+.1f}% "
              f"B={x['B']} N={x['N']} (suggests {x['suggested']})")
        gain = 1 - m["arena"] / x["arena"]
        who = f"memsched {100 * gain:+.1f} %" if gain >= 0 else f"xformer {100 * -gain:+.1f} %"
    return f"| {row['model']} | {o:,} | {xs} | {ms} | {who} |"


def main(argv=None) -> int:
    from patches import MODELS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--xformer", default=os.environ.get("XCORE_OPT"),
                    help="path of xmos-ai-tools' xcore-opt (default: $XCORE_OPT)")
    ap.add_argument("--max-b", type=int, default=12)
    ap.add_argument("--bands", default="2-10")
    ap.add_argument("--max-overhead", type=float, default=0.3)
    ap.add_argument("--json")
    ap.add_argument("--reuse", help="a --json file of an earlier run: its xformer sweeps")
    ap.add_argument("--logits", action="store_true",
                    help="measure up to the logits (drop a final SOFTMAX; Keras files)")
    a = ap.parse_args(argv)
    cache = {}
    if a.reuse:
        with open(a.reuse) as f:
            cache = {r["model"]: r for r in json.load(f)}
    lo, _, hi = a.bands.partition("-")
    bands = range(int(lo), int(hi or lo) + 1)
    if (not a.xformer or not os.path.exists(a.xformer)) and not cache:
        print("xformer not given (--xformer or $XCORE_OPT): its column is skipped", flush=True)
        a.xformer = None
    print("| model | original | xformer best (arena, ratio, MACs, B, N) | memsched tile "
          "(arena, ratio, MACs, region, grid) | ahead |", flush=True)
    rows = []
    for name in a.models:
        row = run(name, a.xformer, a.max_b, bands, a.max_overhead, cache.get(name), a.logits)
        rows.append(row)
        print(_fmt(row), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

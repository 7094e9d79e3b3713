"""Zoo tables: per network, peaks of the input order, RPO, the best industry heuristic and ours
(with lower bound, gap and optimal flag), TVM's real planned storage with the input order and
with ours, and scheduling time. Markdown on stdout, ``--json PATH`` writes the rows.

    .venv/bin/python benchmarks/tvm/run.py --quick              # representative subset, minutes
    .venv/bin/python benchmarks/tvm/run.py                      # every zoo network
    .venv/bin/python benchmarks/tvm/run.py --networks darts-v2-cifar,randwire-ws-0 --json out.json

Graphs: each network is built with `benchmarks.zoo.build_relax` (torch.export -> Relax, constants
folded), batch-norm folded into convs with ``--fold-bn`` (as the papers' graphs are); the op
graph is the Relax dataflow block before legalization, memory model ``paper`` (inputs and
outputs counted, weights not). TVM columns: ``memsched.planned_bytes`` (default CPU build
pipeline, sum of alloc_storage) with ``schedule=False`` and with the memsched pipeline
(reorder under the ``tvm`` memory model).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, ROOT)

QUICK = ["darts-v2-cifar", "nasnet-a-mobile", "randwire-ws-1", "mobilenet-v2"]

# Published peaks (MB) for comparison: hmcos.txt Table 1 (R = RPO, S = SERENITY, H = HMCOS)
# and ilp-fusion-partition.txt Table II (KB in the paper; converted to MB here).
PAPERS = {
    "nasnet-a-cifar": "HMCOS T1: R 2.25 / S 2.25 / H 1.70",
    "amoebanet-a-cifar": "HMCOS T1: R 1.75 / S 1.27 / H 1.13",
    "darts-v2-cifar": "HMCOS T1: R 2.32 / S 1.69 / H 1.34",
    "nasnet-a-mobile": "HMCOS T1: R 5.06 / S 4.40 / H 4.13; ILP T2: 3.94",
    "amoebanet-a-mobile": "HMCOS T1: R 4.92 / S 4.29 / H 4.22; ILP T2: 7.73",
    "darts-v2-imagenet": "HMCOS T1: R 4.91 / S 4.53 / H 3.66; ILP T2: 1.76",
    "randwire-ws-1": "HMCOS T1 RandWire1: R 5.37 / H 4.43; ILP T2: 4.54",
    "randwire-ws-2": "HMCOS T1 RandWire2: R 5.37 / H 4.90; ILP T2: 6.21",
    "randwire-ws-3": "HMCOS T1 RandWire3: R 5.83 / H 4.20; ILP T2: 4.78",
    "hrnet-w18-small-v1": "ILP T2: RPO 7.94 / HMCOS 7.94 / ILP 6.37",
    "hrnet-w18-small-v2": "ILP T2: RPO 7.94 / HMCOS 7.75 / ILP 6.43",
    "hrnet-w32": "ILP T2: RPO 7.94 / HMCOS 7.81 / ILP 7.30",
}


def measure(name: str, time_limit: float, fold_bn: bool, tvm_columns: bool) -> dict:
    import memsched
    from benchmarks.zoo import build_relax
    from memsched.memory import Problem
    from memsched.schedulers import best_heuristic

    t0 = time.perf_counter()
    mod = build_relax(name, fold_bn=fold_bn)
    build_s = time.perf_counter() - t0
    g = memsched.from_relax(mod)
    p = Problem.from_graph(g, "paper")
    input_peak = p.evaluate(range(len(g))).peak
    rpo = memsched.schedule(g, "rpo", "paper").peak
    _, hpeak, hname = best_heuristic(p)
    s = memsched.schedule(g, "auto", "paper", time_limit=time_limit)
    row = {
        "network": name, "ops": len(g), "input_order_peak_bytes": input_peak,
        "rpo_peak_bytes": rpo, "heuristic_peak_bytes": hpeak, "heuristic": hname,
        "peak_bytes": s.peak, "lower_bound": s.lower_bound, "gap": round(s.gap, 4),
        "optimal": bool(s.optimal), "schedule_seconds": round(s.seconds, 3),
        "build_seconds": round(build_s, 1), "stats": s.stats,
        "tvm_planned_bytes_input_order": None, "tvm_planned_bytes": None, "arena_bytes": None,
    }
    if tvm_columns:
        row["tvm_planned_bytes_input_order"] = memsched.planned_bytes(mod, schedule=False,
                                                                      plan_arena=False)
        row["tvm_planned_bytes"] = memsched.planned_bytes(mod, time_limit=time_limit,
                                                          plan_arena=False)
        row["arena_bytes"] = memsched.planned_bytes(mod, time_limit=time_limit)
    return row


def mb(x):
    return "-" if x is None else f"{x / 2**20:.2f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--networks", help="comma-separated zoo names (default: all)")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--time-limit", type=float, default=60.0, help="per network, seconds")
    ap.add_argument("--fold-bn", action="store_true", help="fold batch norm into convs")
    ap.add_argument("--no-tvm", action="store_true", help="skip TVM planned-storage columns")
    ap.add_argument("--json", metavar="PATH", help="write the rows as a JSON list")
    args = ap.parse_args(argv)
    from benchmarks.zoo import NETWORKS

    names = QUICK if args.quick else (args.networks.split(",") if args.networks
                                      else list(NETWORKS))
    unknown = [n for n in names if n not in NETWORKS]
    if unknown:
        ap.error(f"unknown networks {unknown}; see python -m benchmarks.zoo list")
    print("| network | ops | input order | RPO | best heuristic | ours | lower bound | gap | "
          "optimal | TVM planned, input order | TVM planned, ours | memsched.pipeline (ours + "
          "PlanArena) | time (s) | papers (MB) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|---:|---:|---|")
    rows = []
    for name in names:
        try:
            r = measure(name, args.time_limit, args.fold_bn, not args.no_tvm)
        except Exception as e:  # noqa: BLE001 - report and go on with the other networks
            print(f"| {name} | failed: {type(e).__name__}: {str(e).splitlines()[0][:120]} |",
                  flush=True)
            continue
        rows.append(r)
        print(f"| {name} | {r['ops']} | {mb(r['input_order_peak_bytes'])} | "
              f"{mb(r['rpo_peak_bytes'])} | {mb(r['heuristic_peak_bytes'])} ({r['heuristic']}) | "
              f"{mb(r['peak_bytes'])} | {mb(r['lower_bound'])} | {100 * r['gap']:.1f}% | "
              f"{'yes' if r['optimal'] else 'no'} | {mb(r['tvm_planned_bytes_input_order'])} | "
              f"{mb(r['tvm_planned_bytes'])} | {mb(r['arena_bytes'])} | "
              f"{r['schedule_seconds']:.2f} | "
              f"{PAPERS.get(name, '')} |", flush=True)
    print("\nPeaks in MiB (2^20 B), memory model 'paper'. Our graphs are torch.export imports: "
          "batch norm and ReLU are separate ops unless --fold-bn, pooling and padding follow "
          "PyTorch, so absolute numbers differ from the papers' TFLite/ONNX graphs; compare "
          "the reductions.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

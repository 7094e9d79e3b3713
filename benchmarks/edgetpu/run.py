"""Edge TPU pipeline cuts on the Inc-ILP paper's ten Keras models: table for k = 4, 5, 6.

    .venv/bin/python benchmarks/edgetpu/run.py [--models DIR] [--stages 4,5,6] [--only NAMES]
        [--large]
        [--sram BYTES] [--check-segments] [--json out.json]

Models come from ``make_models.py`` (int8 .tflite, not in git). For every (model, k): the
param-balanced cut (the Edge TPU compiler's rule), the learned initial cut alone (greedy and
best of 16 samples), Inc-ILP from the learned cut and from the param-balanced cut, ``auto``, and
the full exact solve -- each (P, O, C),
proof status and solve seconds (ortools is imported before timing) -- plus the modelled
pipeline time per inference (`memsched.partition.latency`, defaults documented there) of the
param-balanced cut, of ours, and of the latency-balanced cut (`balance_latency`, time limit
``--time-limit`` / 6; ``*``: not proven). ``--check-segments`` writes the certified cut's
segments and checks that chained they reproduce every tensor of the unsplit model on two
random inputs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["Xception", "ResNet50", "ResNet101", "ResNet152", "ResNet101V2", "ResNet152V2",
          "DenseNet121", "DenseNet169", "DenseNet201", "InceptionResNetV2"]
LARGE = ["NASNetLarge", "EfficientNetB7"]  # 750+ ops: make_models.py --large; run.py --large
PAPER_GAP = {4: 1.88, 5: 1.12, 6: 4.50}  # learned cut's P gap to optimum, % (paper, Fig. 8)


def mib(x: int) -> str:
    return f"{x / 2**20:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=os.path.join(HERE, "models"))
    ap.add_argument("--stages", default="4,5,6")
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--large", action="store_true",
                    help=f"the 750+-operator models instead ({', '.join(LARGE)})")
    ap.add_argument("--sram", type=int, default=8 << 20)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--repeat", type=int, default=3, help="timing: best of N solves")
    ap.add_argument("--check-segments", action="store_true")
    ap.add_argument("--json", help="write all results to this file")
    args = ap.parse_args()

    from ortools.sat.python import cp_model  # noqa: F401  (import cost kept out of timings)

    from memsched.tflite.format.read import op_macs, read_tflite
    from memsched.partition import PartitionProblem, available, evaluate, solve
    from memsched.partition.latency import EdgeTPUCostModel, balance_latency

    have_learned = "learned" in available()
    cm = EdgeTPUCostModel(sram_bytes=args.sram)
    stages = [int(x) for x in args.stages.split(",")]
    names = args.only.split(",") if args.only else (LARGE if args.large else MODELS)
    rows, results = [], []

    def timed(problem, k, method, **kw):
        best = None
        for _ in range(args.repeat):
            r = solve(problem, k, sram_bytes=args.sram, method=method,
                      time_limit=args.time_limit, **kw)
            if best is None or r.seconds < best.seconds:
                best = r
        return best

    for name in names:
        path = os.path.join(args.models, f"{name}.tflite")
        if not os.path.exists(path):
            print(f"{name}: {path} missing (run make_models.py)", file=sys.stderr)
            continue
        meta = {}
        if os.path.exists(path[:-7] + ".json"):
            with open(path[:-7] + ".json") as f:
                meta = json.load(f)
        tg = read_tflite(path)
        macs = op_macs(tg)
        problem = PartitionProblem.from_graph(tg.graph, tg.op_params, tg.param_bytes)
        for k in stages:
            base = solve(problem, k, sram_bytes=args.sram, method="param-balanced")
            libcoral_aborts = base.stats.get("libcoral") if base.stats else None
            ex = timed(problem, k, "exact")
            inc_pb = timed(problem, k, "inc-ilp", initial="param-balanced")
            rec = {"model": name, "k": k, "keras_layers": meta.get("keras_layers"),
                   "ops": problem.n, "params": problem.total_param_bytes,
                   "param_balanced": base.key, "exact": ex.key, "exact_optimal": ex.optimal,
                   "exact_s": ex.seconds, "inc_pb": inc_pb.key, "inc_pb_optimal": inc_pb.optimal,
                   "inc_pb_s": inc_pb.seconds, "lower_bounds": ex.lower_bounds}
            auto = timed(problem, k, "auto")
            rec.update(auto=auto.key, auto_optimal=auto.optimal, auto_s=auto.seconds)
            if have_learned:
                from memsched.partition.learned import learned_cut

                lr = solve(problem, k, sram_bytes=args.sram, method="learned")
                greedy = evaluate(problem, learned_cut(problem, k, samples=0), args.sram)
                inc = timed(problem, k, "inc-ilp", initial="learned")
                rec.update(learned=lr.key, learned_s=lr.seconds, inc=inc.key,
                           inc_optimal=inc.optimal, inc_s=inc.seconds,
                           learned_gap=100.0 * (lr.P - ex.P) / ex.P,
                           greedy_gap=100.0 * (greedy.P - ex.P) / ex.P)
            else:
                inc = inc_pb
                rec.update(inc=inc.key, inc_optimal=inc.optimal, inc_s=inc.seconds)
            ours = inc.assignment if inc.key <= ex.key else ex.assignment
            pb_t = cm.pipeline(problem, base.assignment, macs)
            our_t = cm.pipeline(problem, ours, macs)
            _, lat = balance_latency(problem, k, macs, cm, time_limit=args.time_limit / 6,
                                     candidates=[base.assignment, ours])
            rec.update(libcoral_aborts=libcoral_aborts,
                       latency_balanced_ms=1000 * max(lat["stage_seconds"]),
                       latency_balanced_optimal=lat["optimal"])
            rec.update(latency_pb_ms=1000 * pb_t[0], latency_ours_ms=1000 * our_t[0],
                       e2e_pb_ms=1000 * pb_t[1], e2e_ours_ms=1000 * our_t[1],
                       never_worse=evaluate(problem, ours, args.sram).key <= base.key)
            if args.check_segments:
                from memsched.tflite.segments import write_segments
                from memsched.tflite.litert import (check_segments, make_interpreter,
                                                       random_inputs)

                with tempfile.TemporaryDirectory() as d:
                    paths = write_segments(tg, ours, d)
                    ins = random_inputs(make_interpreter(paths[0]).get_input_details(), 2)
                    rep = check_segments(path, paths, ins)
                rec.update(segments_equal=rep.equal, tensors_compared=rep.tensors_compared)
            results.append(rec)
            rows.append(rec)
            print(f"{name} k={k}: exact {ex.key} {ex.optimal} {ex.seconds:.3f}s, "
                  f"inc {rec['inc']} {rec['inc_s']:.3f}s", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ table
    head = ["model", "k", "|V| Keras / ops", "param-balanced P / O / C",
            "learned P gap greedy / best of 16", "optimum P / O / C", "proven",
            "exact s", "Inc-ILP s (learned init)", "Inc-ILP s (pb init)", "auto s",
            "speedup vs exact (learned / pb init)", "ΔP vs pb",
            "pipeline ms/inf pb → ours → latency-balanced"]
    if args.check_segments:
        head.append("segments equal")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        pb, ex = r["param_balanced"], r["exact"]
        same = all(r[m] == ex for m in ("inc", "inc_pb", "auto"))
        learned = (f"{r['greedy_gap']:+.1f}% / {r['learned_gap']:+.1f}%" if "learned" in r
                   else "-")
        proven = all(r[m] for m in ("exact_optimal", "inc_optimal", "inc_pb_optimal",
                                    "auto_optimal"))
        cells = [r["model"], str(r["k"]), f"{r['keras_layers']} / {r['ops']}",
                 f"{mib(pb[0])} / {mib(pb[1])} / {pb[2] // 1024}"
                 + (" (libcoral aborts)" if r["libcoral_aborts"] else ""),
                 learned, f"{mib(ex[0])} / {mib(ex[1])} / {ex[2] // 1024}"
                 + ("" if same else " (methods differ!)"),
                 "yes" if proven else "NO",
                 f"{r['exact_s']:.3f}", f"{r['inc_s']:.3f}", f"{r['inc_pb_s']:.3f}",
                 f"{r['auto_s']:.3f}",
                 f"{r['exact_s'] / r['inc_s']:.2f}x / {r['exact_s'] / r['inc_pb_s']:.2f}x",
                 f"{100 * (ex[0] - pb[0]) / pb[0]:+.1f}%",
                 f"{r['latency_pb_ms']:.2f} → {r['latency_ours_ms']:.2f} → "
                 f"{r['latency_balanced_ms']:.2f}{'' if r['latency_balanced_optimal'] else '*'}"]
        if args.check_segments:
            cells.append(f"{'yes' if r['segments_equal'] else 'NO'} "
                         f"({r['tensors_compared']} tensors)")
        print("| " + " | ".join(cells) + " |")
    print("\nP, O in MiB, C in KiB; seconds: best of "
          f"{args.repeat} solves; speedup = exact s / Inc-ILP s.")
    if rows and "learned" in rows[0]:
        for k in stages:
            g = [r["greedy_gap"] for r in rows if r["k"] == k]
            s16 = [r["learned_gap"] for r in rows if r["k"] == k]
            print(f"learned cut mean P gap to optimum, k={k}: greedy {sum(g) / len(g):.2f}%, "
                  f"best of 16 samples {sum(s16) / len(s16):.2f}% "
                  f"(paper: {PAPER_GAP.get(k, '-')}%)")
    for m, key in (("exact", "exact_s"), ("Inc-ILP (learned init)", "inc_s"),
                   ("Inc-ILP (pb init)", "inc_pb_s"), ("auto", "auto_s")):
        ts = [r[key] for r in rows]
        if ts:
            print(f"{m}: slowest {max(ts):.3f} s, mean {sum(ts) / len(ts):.3f} s, total "
                  f"{sum(ts):.2f} s")
    print(f"certified: exact {sum(r['exact_optimal'] for r in rows)}/{len(rows)}, "
          f"Inc-ILP {sum(r['inc_optimal'] for r in rows)}/{len(rows)}, auto "
          f"{sum(r['auto_optimal'] for r in rows)}/{len(rows)}; never worse than "
          f"param-balanced: {all(r['never_worse'] for r in rows)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"(benchmark wall time {time.perf_counter() - t0:.0f} s)", file=sys.stderr)

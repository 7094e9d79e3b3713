"""``memsched partition`` and ``memsched run-segments`` (`memsched.cli`).

    memsched partition model.tflite --stages K [--sram BYTES] [--method auto|exact|inc-ilp|
        learned|param-balanced] [--balance params|latency] [--time-limit S] [--json] [-o DIR]
    memsched run-segments DIR [--model model.tflite] [-n N] [--json]

``partition`` cuts the model's operators into K pipeline stages minimising (P, O, C)
lexicographically (`memsched.partition`) and writes ``DIR/<model>_segment_<i>_of_<K>.tflite``;
``--balance latency`` instead writes the cut with the smallest slowest-stage time under the
Edge TPU latency model (`memsched.partition.latency`). Every cut shown (libcoral's
parameter-count rule, the (P, O, C) optimum, the latency-balanced cut) comes with its modelled
stage times.
``run-segments`` streams N random inputs through the segments, one interpreter per segment on its
own thread, and with ``--model`` checks every tensor against the unsplit model. Errors are one
line on stderr, exit status 2.
"""
from __future__ import annotations

import json
import os
import sys

from .common import parse_bytes, seconds


def _errors():
    from ..errors import ModelLoadError
    from ..partition import PartitionError
    from ..tflite.litert import SegmentError

    return (ModelLoadError, PartitionError, SegmentError, ValueError, OSError)


def _guard(fn):
    def run(args):
        try:
            return fn(args)
        except BrokenPipeError:
            raise  # a closed stdout: the CLI's runner ends quietly
        except _errors() as e:
            msg = str(e) if not isinstance(e, OSError) else f"{e.strerror}: {e.filename}"
            print(f"memsched: error: {msg}", file=sys.stderr)
            return 2
    return run


@_guard
def cmd_partition(args) -> int:
    from ..tflite.format.read import TFLiteModelError, op_macs, read_tflite
    from ..tflite.segments import write_segments
    from ..partition import PartitionProblem, evaluate, param_balanced_cut, solve
    from ..partition.latency import EdgeTPUCostModel, balance_latency

    if not args.model.lower().endswith(".tflite"):
        raise TFLiteModelError(f"cannot partition {args.model!r}: expected a .tflite file")
    sram = parse_bytes(args.sram)
    tg = read_tflite(args.model)
    problem = PartitionProblem.from_graph(tg.graph, tg.op_params, tg.param_bytes)
    result = solve(problem, args.stages, sram_bytes=sram, method=args.method,
                   time_limit=args.time_limit)
    # the modelled pipeline time of every cut shown (memsched.partition.latency)
    macs = op_macs(tg)
    tpu = EdgeTPUCostModel(sram_bytes=sram)
    cuts = {"param-balanced": param_balanced_cut(problem, args.stages),
            result.method: result.assignment}
    lat_stats = None
    if args.balance == "latency":
        cut, lat_stats = balance_latency(problem, args.stages, macs, tpu, args.time_limit,
                                         candidates=[result.assignment])
        cuts["latency-balanced"] = cut
    chosen = cuts["latency-balanced"] if lat_stats is not None else result.assignment
    files = write_segments(tg, chosen, args.output) if args.output else []
    rows = {}
    for name, cut in cuts.items():
        c = evaluate(problem, cut, sram, args.stages)
        t = tpu.stage_seconds(problem, cut, macs)
        rows[name] = {"P": c.P, "O": c.O, "C": c.C, "slowest_stage_ms": max(t) * 1e3,
                      "sum_ms": sum(t) * 1e3}
    if args.json:
        out = {"model": args.model, "ops": problem.n, "sram_bytes": sram,
               "balance": args.balance}
        out.update(result.to_json())
        out["cuts"] = rows
        if lat_stats is not None:
            out["latency_balanced"] = {"assignment": cuts["latency-balanced"],
                                       "optimal": lat_stats["optimal"],
                                       "seconds": round(lat_stats["seconds"], 3)}
        out["files"] = files
        print(json.dumps(out))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{os.path.basename(args.model)}: {problem.n} operators, "
                        f"{args.stages} stages, SRAM {sram:,} B")
    for col in ("cut", "P (peak params)", "O (off-chip)", "C (max transfer)",
                "slowest stage ms", "sum ms"):
        table.add_column(col, justify="right" if col != "cut" else "left")
    labels = {"param-balanced": "param-balanced (libcoral's rule)"}
    for name, r in rows.items():
        table.add_row(labels.get(name, name), f"{r['P']:,}", f"{r['O']:,}", f"{r['C']:,}",
                      f"{r['slowest_stage_ms']:.3f}", f"{r['sum_ms']:.3f}")
    lb = result.lower_bounds
    table.add_row("lower bound", f"{lb['P']:,}", f"{lb['O']:,}", f"{lb['C']:,}", "", "")
    console.print(table)
    ce = evaluate(problem, chosen, sram, args.stages)
    kind = "latency-balanced" if lat_stats else result.method
    stages = Table(title=f"stages of the written cut ({kind})")
    for col in ("stage", "ops", "params (B)", "sends (B)"):
        stages.add_column(col, justify="right")
    for j in range(args.stages):
        stages.add_row(str(j), str(list(chosen).count(j)), f"{ce.m[j]:,}",
                       f"{ce.c[j]:,}" if j < len(ce.c) else "-")
    console.print(stages)
    status = "proven optimal" if result.optimal else "not proven optimal (time limit)"
    console.print(f"(P, O, C): {status}; {result.seconds:.2f} s")
    if lat_stats is not None:
        status = "proven optimal" if lat_stats["optimal"] else "not proven (time limit)"
        console.print(f"latency-balanced (written): slowest stage {status}; "
                      f"{lat_stats['seconds']:.2f} s")
    console.print("stage times: modelled (memsched.partition.latency), not measured")
    for f in files:
        console.print(f"wrote {f}")
    return 0


@_guard
def cmd_run_segments(args) -> int:
    from ..tflite.litert import (check_segments, find_segments, pipeline_runner,
                                   random_inputs, run_model)

    if args.count < 1:
        raise ValueError(f"-n must be at least 1, got {args.count}")
    paths = find_segments(args.directory)
    pipe = pipeline_runner(paths)
    inputs = random_inputs(pipe.input_details, args.count, args.seed)
    outs, stats = pipe.run(inputs)
    result = {"segments": paths, "inputs": args.count,
              "throughput_per_s": round(stats.throughput, 3),
              "stage_latency_s": [round(x, 6) for x in stats.stage_latency],
              "outputs_equal": None, "tensors_compared": None, "single_model_per_s": None}
    if args.model:
        ref, secs = run_model(args.model, inputs)
        result["single_model_per_s"] = round(len(inputs) / secs, 3) if secs > 0 else None
        same = all(set(r) == set(o) and all((r[k] == o[k]).all() for k in r)
                   for r, o in zip(ref, outs))
        report = check_segments(args.model, paths, inputs[:args.check])
        result["outputs_equal"] = bool(same and report.equal)
        result["tensors_compared"] = report.tensors_compared
        result["mismatches"] = report.mismatches[:20]
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{len(paths)} segments, {args.count} inputs: "
              f"{result['throughput_per_s']:.1f} inferences/s pipelined")
        for i, (p, lat) in enumerate(zip(paths, stats.stage_latency)):
            print(f"  stage {i}: {1000 * lat:.3f} ms/inference  {os.path.basename(p)}")
        if args.model:
            print(f"unsplit model: {result['single_model_per_s']:.1f} inferences/s")
            verdict = "equal" if result["outputs_equal"] else "DIFFERENT"
            print(f"outputs {verdict} to the unsplit model on all {args.count} inputs; "
                  f"{result['tensors_compared']} intermediate tensors compared on "
                  f"{min(args.check, args.count)} inputs")
            for m in result["mismatches"]:
                print(f"  mismatch: {m}")
    return 0 if result["outputs_equal"] in (None, True) else 1


def register(sub) -> None:
    """Register ``partition`` and ``run-segments`` on the CLI's subparsers."""
    from ..partition import available

    p = sub.add_parser("partition", help="cut a .tflite model into Edge TPU pipeline segments")
    p.add_argument("model", help=".tflite model")
    p.add_argument("--stages", type=int, required=True, help="number of pipeline stages K")
    p.add_argument("--sram", default=str(8 << 20),
                   help="on-chip parameter SRAM per device in bytes (8MiB, 8388608; default 8 MiB)")
    p.add_argument("--method", default="auto", choices=sorted(available()),
                   help="partition method (default auto: certified optimum)")
    p.add_argument("--time-limit", type=seconds, default=60.0,
                   help="solver time limit in seconds (default 60)")
    p.add_argument("--balance", choices=("params", "latency"), default="params",
                   help="params (default): minimise (P, O, C); latency: also cut for the "
                        "slowest stage's modelled time and write that cut")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("-o", "--output", help="directory for <model>_segment_<i>_of_<K>.tflite")
    p.set_defaults(func=cmd_partition)
    r = sub.add_parser("run-segments", help="run .tflite segments as a threaded pipeline")
    r.add_argument("directory", help="directory holding <model>_segment_<i>_of_<K>.tflite")
    r.add_argument("--model", help="the unsplit .tflite model: compare outputs and every "
                                   "intermediate tensor with it")
    r.add_argument("-n", "--count", type=int, default=20, help="random inputs (default 20)")
    r.add_argument("--check", type=int, default=3,
                   help="inputs on which every intermediate tensor is compared (default 3)")
    r.add_argument("--seed", type=int, default=0, help="random input seed")
    r.add_argument("--json", action="store_true", help="one JSON object on stdout")
    r.set_defaults(func=cmd_run_segments)

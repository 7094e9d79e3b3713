"""``memsched partition`` and ``memsched run-segments`` (`memsched.cli`).

    memsched partition model.tflite --stages K [--sram BYTES] [--method auto|exact|inc-ilp|
        learned|param-balanced] [--time-limit S] [--json] [-o DIR]
    memsched run-segments DIR [--model model.tflite] [-n N] [--json]

``partition`` cuts the model's operators into K pipeline stages minimising (P, O, C)
lexicographically (`memsched.partition`) and writes ``DIR/<model>_segment_<i>_of_<K>.tflite``.
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
    from ..runtime.segments import SegmentError

    return (ModelLoadError, PartitionError, SegmentError, ValueError, OSError)


def _guard(fn):
    def run(args):
        try:
            return fn(args)
        except _errors() as e:
            msg = str(e) if not isinstance(e, OSError) else f"{e.strerror}: {e.filename}"
            print(f"memsched: error: {msg}", file=sys.stderr)
            return 2
    return run


@_guard
def cmd_partition(args) -> int:
    from ..importers.tflite_graph import TFLiteModelError, read_tflite
    from ..importers.tflite_segments import write_segments
    from ..partition import PartitionProblem, solve

    if not args.model.lower().endswith(".tflite"):
        raise TFLiteModelError(f"cannot partition {args.model!r}: expected a .tflite file")
    sram = parse_bytes(args.sram)
    tg = read_tflite(args.model)
    problem = PartitionProblem.from_graph(tg.graph, tg.op_params, tg.param_bytes)
    result = solve(problem, args.stages, sram_bytes=sram, method=args.method,
                   time_limit=args.time_limit)
    files = write_segments(tg, result.assignment, args.output) if args.output else []
    if args.json:
        out = {"model": args.model, "ops": problem.n, "sram_bytes": sram}
        out.update(result.to_json())
        out["files"] = files
        print(json.dumps(out))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"{os.path.basename(args.model)}: {problem.n} operators, "
                        f"{args.stages} stages, SRAM {sram:,} B")
    for col in ("cut", "P (peak params)", "O (off-chip)", "C (max transfer)"):
        table.add_column(col, justify="right" if col != "cut" else "left")
    b = result.baseline
    table.add_row("param-balanced (edgetpu_compiler rule)", f"{b.P:,}", f"{b.O:,}", f"{b.C:,}")
    table.add_row(result.method, f"{result.P:,}", f"{result.O:,}", f"{result.C:,}")
    lb = result.lower_bounds
    table.add_row("lower bound", f"{lb['P']:,}", f"{lb['O']:,}", f"{lb['C']:,}")
    console.print(table)
    stages = Table(title="stages")
    for col in ("stage", "ops", "params (B)", "sends (B)"):
        stages.add_column(col, justify="right")
    for j in range(args.stages):
        stages.add_row(str(j), str(result.assignment.count(j)), f"{result.m[j]:,}",
                       f"{result.c[j]:,}" if j < len(result.c) else "-")
    console.print(stages)
    status = "proven optimal" if result.optimal else "not proven optimal (time limit)"
    console.print(f"{status}; {result.seconds:.2f} s")
    for f in files:
        console.print(f"wrote {f}")
    return 0


@_guard
def cmd_run_segments(args) -> int:
    from ..runtime.segments import (check_segments, find_segments, pipeline_runner,
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

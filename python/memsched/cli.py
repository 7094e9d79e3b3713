"""Command line: ``memsched analyze|compile`` and a ``tvmc``-style ``tvmc compile``.

    memsched analyze model.onnx [--json] [--memory-model paper|tvm] [--time-limit S]
    memsched compile model.onnx --pass MemoryAwareSchedule --target llvm -o out.so
    tvmc compile --pass MemoryAwareSchedule model.onnx -o out.so

MODEL is a .onnx, .tflite or .pt2 (saved torch.export program) file,
or ``example:NAME`` for a built-in example (randwire, nas_cell, two_branch). Errors are one
line on stderr naming the problem, exit status 2.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from . import __version__


class CLIError(Exception):
    pass


def _known_errors():
    from .graph import GraphError
    from .importers.load import ModelLoadError
    from .importers.relax import UnsupportedModelError

    return (CLIError, ModelLoadError, UnsupportedModelError, GraphError)


def _progress_callback(enabled: bool):
    """A progress line on stderr for long searches (only on a terminal)."""
    if not enabled or not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console

    console = Console(stderr=True)
    status = console.status("scheduling ...")
    status.start()
    t0 = time.perf_counter()

    def update(segment, segments, states):
        status.update(f"exact search: segment {segment + 1}/{segments}, {states:,} states, "
                      f"{time.perf_counter() - t0:.1f} s")

    return update, status.stop


def cmd_analyze(args) -> int:
    from .importers.load import load_graph, parse_shapes
    from .memory import MemoryModel, Problem
    from .schedulers import BASELINES, schedule
    from .schedulers.base import available

    if args.algorithm not in available():
        raise CLIError(f"unknown algorithm {args.algorithm!r}; choose one of "
                       f"{', '.join(sorted(available()))}")
    model = MemoryModel.get(args.memory_model)
    graph = load_graph(args.model, parse_shapes(args.input_shapes))
    problem = Problem.from_graph(graph, model)
    methods = {}
    for name in BASELINES:
        s = schedule(graph, name, model)
        methods[name] = s.peak
    update, stop = _progress_callback(not args.json)
    try:
        best = schedule(graph, args.algorithm, model, time_limit=args.time_limit,
                        progress=update or False)
    finally:
        stop()
    methods[args.algorithm] = best.peak
    input_peak = problem.evaluate(range(len(graph))).peak
    result = {
        "model": args.model,
        "memory_model": model.name,
        "ops": len(graph),
        "input_order_peak_bytes": input_peak,
        "peak_bytes": best.peak,
        "lower_bound": best.lower_bound,
        "optimal": bool(best.optimal),
        "algorithm": args.algorithm,
        "seconds": round(best.seconds, 4),
        "order": [graph.ops[v].name for v in best.order],
        "methods": methods,
        "stats": best.stats,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{args.model}: {len(graph)} ops, memory model {model.name!r}")
    table.add_column("method")
    table.add_column("peak (bytes)", justify="right")
    table.add_column("vs input order", justify="right")
    for name, peak in methods.items():
        rel = f"{100.0 * (peak - input_peak) / input_peak:+.1f}%" if input_peak else "-"
        table.add_row(name, f"{peak:,}", rel)
    console = Console()
    console.print(table)
    status = "optimal (peak == lower bound)" if best.optimal else \
        f"gap {100 * best.gap:.1f}% (time limit reached)"
    console.print(f"best peak {best.peak:,} B, lower bound {best.lower_bound:,} B: {status}; "
                  f"{best.seconds:.2f} s")
    return 0


def _resolve_pass(name: str):
    """Our passes by class name, or any ``relax.transform.NAME`` (called with no arguments)."""
    import tvm
    from tvm import relax

    from . import transform as ours

    if hasattr(ours, name):
        return getattr(ours, name)()
    cls = getattr(relax.transform, name, None)
    if cls is None:
        try:
            return tvm.get_global_func(f"relax.transform.{name}")()
        except Exception:  # noqa: BLE001
            raise CLIError(f"unknown pass {name!r}: not a memsched pass and not in "
                           "relax.transform") from None
    try:
        return cls()
    except TypeError as e:
        raise CLIError(f"pass {name!r} needs arguments and cannot be named on the command "
                       f"line ({e})") from None


def cmd_compile(args) -> int:
    import tvm

    from .importers.load import load_relax, parse_shapes
    from .relax_pipeline import pipeline_passes
    from .tvm_memory import storage_sizes

    mod = load_relax(args.model, parse_shapes(args.input_shapes))
    names = list(args.passes or [])
    # Our two planning-related passes have a fixed place in the build (before / after
    # StaticPlanBlockMemory); every other named pass runs first, in the order given.
    schedule = "MemoryAwareSchedule" in names
    arena = "auto" if "PlanArena" in names else False
    others = [_resolve_pass(n) for n in names if n not in ("MemoryAwareSchedule", "PlanArena")]
    try:
        target = tvm.target.Target(args.target)
    except Exception as e:  # noqa: BLE001
        raise CLIError(f"bad --target {args.target!r}: {e}") from None
    t0 = time.perf_counter()
    opts = dict(schedule=schedule, time_limit=args.time_limit, before=others, plan_arena=arena)
    planning = pipeline_passes(stop_after_planning=True, **opts)
    rest = pipeline_passes(**opts)[len(planning):]
    # Plan once, measure the plan, then finish the build from the planned module.
    with target:
        planned = tvm.transform.Sequential(planning)(mod)
    ex = tvm.compile(planned, target=target, relax_pipeline=tvm.transform.Sequential(rest))
    ex.export_library(args.output)
    msg = f"wrote {args.output} ({time.perf_counter() - t0:.1f} s); planned storage " \
          f"{sum(storage_sizes(planned, 'main')):,} B"
    attrs = planned["main"].attrs if any(g.name_hint == "main"
                                         for g in planned.get_global_vars()) else None
    if attrs is not None and "memsched.peak_before" in attrs:
        msg += (f"; schedule peak {int(attrs['memsched.peak_before']):,} -> "
                f"{int(attrs['memsched.peak_after']):,} B (model 'tvm')")
    print(msg, file=sys.stderr)
    return 0


def _add_compile_args(p):
    p.add_argument("model", help="model file (.onnx/.tflite/.pt2) or example:NAME")
    p.add_argument("--pass", dest="passes", action="append", metavar="NAME",
                   help="pass to run (repeatable): MemoryAwareSchedule, PlanArena, "
                        "RewriteConcatConv, FuseIsolatedSubgraphs or any relax.transform.NAME")
    p.add_argument("--target", default="llvm", help="TVM target (default: llvm)")
    p.add_argument("-o", "--output", default="out.so", help="output library (default out.so)")
    p.add_argument("--input-shapes", help="static input shapes, e.g. x:1x3x224x224")
    p.add_argument("--time-limit", type=float, default=10.0,
                   help="scheduling time limit in seconds (default 10)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="memsched", description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", action="version", version=f"memsched {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    a = sub.add_parser("analyze", help="peak memory per scheduling method")
    a.add_argument("model", help="model file (.onnx/.tflite/.pt2) or example:NAME")
    a.add_argument("--json", action="store_true", help="one JSON object on stdout")
    a.add_argument("--memory-model", default="paper", choices=["paper", "tvm"],
                   help="paper: inputs/outputs counted (default); tvm: what TVM plans")
    a.add_argument("--time-limit", type=float, default=60.0,
                   help="exact search time limit in seconds (default 60)")
    a.add_argument("--algorithm", default="auto", help="scheduler (default auto)")
    a.add_argument("--input-shapes", help="static input shapes, e.g. x:1x3x224x224")
    a.set_defaults(func=cmd_analyze)
    c = sub.add_parser("compile", help="compile with the named passes")
    _add_compile_args(c)
    c.set_defaults(func=cmd_compile)
    from .cli_partition import add_partition_commands  # partition, run-segments

    add_partition_commands(sub)
    from .cli_reorder import add_reorder_command  # reorder (.tflite for TFLite / TFLM)

    add_reorder_command(sub)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except _known_errors() as e:
        print(f"memsched: error: {e}", file=sys.stderr)
        return 2


def tvmc_main(argv=None) -> int:
    """``tvmc compile --pass NAME MODEL -o out.so``: TVM >= 0.20 ships no tvmc; this accepts
    its familiar compile flags and runs `memsched compile`."""
    ap = argparse.ArgumentParser(prog="tvmc", description="tvmc-compatible compile (memsched)")
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile a model")
    _add_compile_args(c)
    c.set_defaults(func=cmd_compile)
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except _known_errors() as e:
        print(f"tvmc: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

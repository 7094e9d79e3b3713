"""``memsched analyze``: the peak of every scheduling method, for the Relax module TVM builds
(``--view relax``, the default except for .tflite files: planned as `memsched compile` plans
it) or for the file's own graph (``--view file``, without TVM for .onnx and .tflite files).
"""
from __future__ import annotations

import json
import sys

from ..errors import ModelLoadError, UnsupportedModelError

from .common import (CLIError, _add_verbose, _import_tvm, _load, _progress_callback,
                     _quiet_native_stderr, _status, seconds)
from .compile import (_parse_pass_config, _plain_tvm_planned, _plan, _resolve_pass, _target,
                      _unschedulable)


def _analyze_view(args) -> str:
    # A .tflite file runs on the TFLite / TFLite Micro interpreter with its own dtypes (int8 =
    # 1 byte per element) while TVM's frontend lowers it to float32: its default view is the
    # file's (what the interpreter allocates); --view relax gives what a TVM build plans.
    default = "file" if str(args.model).lower().endswith(".tflite") else "relax"
    view = args.view or default
    if view == "file" and (args.passes or args.pass_config):
        raise CLIError("--pass/--pass-config apply to the Relax view (what compile builds); "
                       "drop them or --view file")
    return view


def cmd_analyze(args) -> int:
    """Schedule the model and print the peak of every method. ``--view relax`` (default): the
    Relax bindings `memsched compile` schedules, under the ``tvm`` memory model, and the
    storage TVM plans with and without memsched (the numbers compile prints); ``--view file``:
    the graph of the file itself (ONNX nodes, TFLite operators), ``paper`` memory model by
    default, without importing TVM for .onnx files."""
    from ..schedulers.base import available

    if str(args.model).lower().endswith(".pte"):  # an ExecuTorch program
        from .pte import analyze_pte

        return analyze_pte(args)
    if getattr(args, "memory_map", None) is not None:
        raise CLIError("--memory-map applies to ExecuTorch programs (.pte)")
    if args.algorithm is not None and args.algorithm not in available():
        raise CLIError(f"unknown algorithm {args.algorithm!r}; choose one of "
                       f"{', '.join(sorted(available()))}")
    view = _analyze_view(args)
    if args.plot or args.report:  # bad paths or no matplotlib: fail before any work
        from ..report import check_outputs

        check_outputs(args.plot, args.report)
    try:
        analyzed = _analyze_file(args) if view == "file" else _analyze_relax(args)
    except (UnsupportedModelError, ModelLoadError) as e:
        # a .tflite file memsched cannot schedule (control flow, resource variables) may
        # still have a computed TFLite Micro arena: "will it fit?" is answered alone
        result = _arena_only(args, view, e)
        if args.json:
            print(json.dumps(result))
        else:
            print(f"{args.model}: not scheduled ({e})")
            print(_arena_line(result))
        return 0
    result, graph, model, order = analyzed
    if args.plot or args.report:
        from ..report import write_outputs

        if graph is None:
            raise CLIError(f"cannot plot {args.model!r}: its main function has several "
                           "dataflow blocks; use --view file")
        for line in write_outputs(graph, model, order, result, args.plot, args.report):
            print(line, file=sys.stderr)
    if args.json:
        print(json.dumps(result))
        return 0
    _print_analysis(result)
    return 0


def _analyze_file(args):
    """The file view: the model's own graph (`load_graph`) scheduled under ``--memory-model``
    (default ``paper``)."""
    from ..importers.load import load_graph
    from ..memory import MemoryModel, Problem
    from ..schedulers import BASELINES, schedule

    model = MemoryModel.get(args.memory_model or "paper")
    algorithm = args.algorithm or "auto"
    if not str(args.model).lower().endswith(".pt2"):
        from .. import native

        native.hide_torch_on_load()  # the C++ search kernel for 0.16 s instead of ~1.2 s
    graph = _load(load_graph, args)
    problem = Problem.from_graph(graph, model)
    methods = {}
    for name in BASELINES:
        s = schedule(graph, name, model)
        methods[name] = s.peak
    update, stop = _progress_callback(not args.json or bool(args.plot or args.report))
    try:
        best = schedule(graph, algorithm, model, time_limit=args.time_limit,
                        progress=update or False)
    finally:
        stop()
    methods[algorithm] = best.peak
    result = {
        "model": args.model,
        "view": "file",
        "memory_model": model.name,
        "ops": len(graph),
        "input_order_peak_bytes": problem.evaluate(range(len(graph))).peak,
        "peak_bytes": best.peak,
        "lower_bound": best.lower_bound,
        "optimal": bool(best.optimal),
        "algorithm": algorithm,
        "seconds": round(best.seconds, 4),
        "order": [graph.ops[v].name for v in best.order],
        "methods": methods,
        "stats": best.stats,
    }
    if str(args.model).lower().endswith(".tflite"):
        result.update(_tflite_arena(args))
    return result, graph, model, best.order


def _arena_only(args, view: str, error: Exception) -> dict:
    """The TFLite Micro arena of a .tflite file the file view cannot schedule; ``error``
    again unless the arena is computed (other files, plots and reports, malformed files,
    unpriced operators keep the error)."""
    if view != "file" or not str(args.model).lower().endswith(".tflite") or \
            args.plot or args.report or getattr(args, "input_shapes", None):
        raise error
    try:
        from ..tflite.format.read import CONTROL_FLOW, op_names, read_tflite

        tg = read_tflite(args.model)
        names, codes = op_names(), tg.model.operatorCodes or []
        kinds = {names.get(max(int(codes[op.opcodeIndex].builtinCode),
                               int(codes[op.opcodeIndex].deprecatedBuiltinCode)))
                 for op in tg.subgraph.operators or []}
        if not (kinds & set(CONTROL_FLOW) or
                any(int(t.type) == 13 for t in tg.subgraph.tensors or [])):  # RESOURCE
            raise error
        arena = _tflite_arena(args)
    except (ValueError, OSError, IndexError):
        raise error from None
    if arena.get("arena_bytes") is None:
        raise error
    return {"model": args.model, "view": "file", "scheduled": False,
            "not_scheduled": str(error), **arena}


def _tflite_arena(args) -> dict:
    """TFLite Micro's minimal arena for the file on ``--target`` (`memsched.tflite.memory.arena`:
    computed from the file); ``arena_bytes`` None with ``arena_unpriced`` (why) when an
    operator is not priced."""
    from ..tflite.memory.arena import UnpricedModelError, arena
    from .common import device_target

    target = device_target(args)
    cpu = {}
    if target == "cortex-m":  # one Invoke()'s instructions, predicted (no figure for host)
        from ..tflite.memory.instructions import model_instructions

        mi = model_instructions(args.model)
        cpu = {"cpu_instructions": mi.total, "cpu_instructions_unknown": mi.unknown}
    try:
        r = arena(args.model, target)
    except UnpricedModelError as e:
        return {"target": target, "arena_bytes": None, "arena_unpriced": str(e), **cpu}
    return {"target": target, "arena_bytes": r.arena_bytes, "arena_head_bytes": r.head_bytes,
            "arena_tail_bytes": r.tail_bytes, "arena_scratch_bytes": r.scratch_bytes,
            "arena_transient_bytes": r.transient_bytes, "arena_plan_bytes": r.plan_bytes,
            "arena_kernels": r.kernels, **cpu}


def _analyze_relax(args):
    """The Relax view: the module `memsched compile` builds, planned the way compile plans it
    (`_plan`, same passes and options), plus the baselines on the same blocks and the storage
    plain ``tvm.compile`` plans."""
    import time as _time

    _import_tvm(args.model)
    from ..importers.load import load_relax
    from ..importers.relax import UnsupportedModelError, block_graph, dataflow_blocks
    from ..memory import MemoryModel
    from ..schedulers import BASELINES, schedule
    from ..tvm_memory import storage_sizes

    t0 = _time.perf_counter()
    names = list(args.passes or [])
    if "PartitionPipeline" in names:
        raise CLIError("analyze does not take --pass PartitionPipeline (use memsched partition)")
    others = [_resolve_pass(n) for n in names if n not in ("MemoryAwareSchedule", "PlanArena")]
    target = _target(args.target or "llvm")
    config = _parse_pass_config(args.pass_config)
    mod = _load(load_relax, args)
    why = _unschedulable(mod, args.model)
    if why:
        raise CLIError(f"cannot analyze {args.model!r} as TVM builds it: {why} (--view file "
                       "analyzes the file's own graph)")
    opts = dict(schedule=True, algorithm=args.algorithm, time_limit=args.time_limit,
                memory_model=args.memory_model or "tvm", before=others, plan_arena="auto")
    limit = "" if args.time_limit is None else f" (time limit {args.time_limit:g} s)"
    with _status(not args.json, f"scheduling and planning{limit} ..."), \
            _quiet_native_stderr(getattr(args, "verbose", False)):
        stages = _plan(mod, opts, target, config)
        plain = _plain_tvm_planned(mod, stages, opts, target, config)
    pre, scheduled, planned = stages["pre"], stages["scheduled"], stages["planned"]
    if not any(g.name_hint == "main" for g in scheduled.get_global_vars()):
        raise CLIError(f"cannot analyze {args.model!r}: the module has no 'main' function")
    main = scheduled["main"]
    attrs = main.attrs
    if attrs is None or "memsched.peak_after" not in attrs:
        raise CLIError(f"cannot analyze {args.model!r}: 'main' has no dataflow block to "
                       "schedule")
    if "memsched.skipped" in attrs:
        raise CLIError(f"cannot analyze {args.model!r}: MemoryAwareSchedule could not model "
                       f"{attrs['memsched.skipped']}")
    model = MemoryModel.get(str(attrs["memsched.memory_model"]))
    graphs = []
    for i, blk in dataflow_blocks(pre["main"]):
        try:
            graphs.append(block_graph(blk, name=f"main.block{i}", mod=pre))
        except UnsupportedModelError as e:  # the pass would have skipped it (checked above)
            raise CLIError(f"cannot analyze {args.model!r}: {e}") from None
    methods = {}
    for name in BASELINES:
        methods[name] = max((schedule(g, name, model).peak for g in graphs), default=0)
    algorithm = str(attrs["memsched.algorithm"])
    methods[algorithm] = int(attrs["memsched.peak_after"])
    order_names = [b.var.name for _, blk in dataflow_blocks(main) for b in blk.bindings]
    graph = order = None
    if len(graphs) == 1:  # op ids of the scheduled order, for --plot/--report
        graph = graphs[0]
        ids = {op.name: v for v, op in enumerate(graph.ops)}
        if len(ids) == len(graph) and all(n in ids for n in order_names):
            order = [ids[n] for n in order_names]
            graph.check_order(order)
        else:
            graph = None
    peak, lower = int(attrs["memsched.peak_after"]), int(attrs["memsched.lower_bound"])
    result = {
        "model": args.model,
        "view": "relax",
        "memory_model": model.name,
        "ops": sum(len(g) for g in graphs),
        "input_order_peak_bytes": int(attrs["memsched.peak_before"]),
        "peak_bytes": peak,
        "lower_bound": lower,
        "optimal": bool(int(attrs["memsched.optimal"])),
        "algorithm": algorithm,
        "seconds": round(_timings().seconds("MemoryAwareSchedule", "main") or 0.0, 4),
        "order": order_names,
        "methods": methods,
        "planned_bytes": sum(storage_sizes(planned, "main")),
        "tvm_planned_bytes": plain,
        "passes": ["MemoryAwareSchedule", "PlanArena"] + [n for n in names if n not in (
            "MemoryAwareSchedule", "PlanArena")],
        "stats": {"blocks": len(graphs), "blocks_reordered":
                  int(attrs["memsched.blocks_reordered"]),
                  "total_seconds": round(_time.perf_counter() - t0, 4),
                  "time_limit": args.time_limit},
    }
    return result, graph, model, order


def _print_analysis(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    class _Console(Console):
        def on_broken_pipe(self):  # rich exits with status 1; `run` handles it like print
            self.quiet = True
            raise BrokenPipeError

    relax_view = result["view"] == "relax"
    what = "Relax bindings TVM builds" if relax_view else "the file's graph"
    table = Table(title=f"{result['model']}: {result['ops']} ops ({what}), memory model "
                        f"{result['memory_model']!r}")
    table.add_column("method")
    table.add_column("peak (bytes)", justify="right")
    table.add_column("vs input order", justify="right")
    input_peak = result["input_order_peak_bytes"]
    for name, peak in result["methods"].items():
        rel = f"{100.0 * (peak - input_peak) / input_peak:+.1f}%" if input_peak else "-"
        label = "input (TVM's binding order)" if relax_view and name == "input" else name
        table.add_row(label, f"{peak:,}", rel)
    console = _Console()
    console.print(table)
    peak, lower = result["peak_bytes"], result["lower_bound"]
    status = "optimal (peak == lower bound)" if result["optimal"] else \
        f"gap {100 * (peak - lower) / peak if peak else 0:.1f}% (time limit reached)"
    console.print(f"best peak {peak:,} B, lower bound {lower:,} B: {status}; "
                  f"{result['seconds']:.2f} s")
    if relax_view:
        extra = "".join(f" --pass {p}" for p in result["passes"])
        console.print(f"TVM planned storage: {result['tvm_planned_bytes']:,} B with plain "
                      f"tvm.compile -> {result['planned_bytes']:,} B with `memsched compile "
                      f"{result['model']}{extra} --time-limit {result['stats']['time_limit']:g}`",
                      soft_wrap=True)
    else:
        console.print("(file view: TVM's build schedules its own Relax bindings; drop "
                      "--view file for the numbers `memsched compile` prints)", soft_wrap=True)
    if "target" in result and "arena_bytes" in result:
        console.print(_arena_line(result), soft_wrap=True, markup=False)


def _arena_line(result: dict) -> str:
    """The text line of `_tflite_arena`'s fields (with the instructions per Invoke())."""
    return _arena_text(result) + _cpu_text(result)


def _cpu_text(result: dict) -> str:
    if "cpu_instructions" not in result:
        return ""
    if result["cpu_instructions"] is None:
        return ("; instructions per Invoke(): not computed (no cost model for "
                f"{', '.join(result['cpu_instructions_unknown'])})")
    return (f"; {result['cpu_instructions']:,} instructions per Invoke() on a Cortex-M55 "
            "(CMSIS-NN MVE, predicted)")


def _arena_text(result: dict) -> str:
    target = result["target"]
    if result["arena_bytes"] is None:
        return f"TFLite Micro arena on {target}: not computed ({result['arena_unpriced']})"
    kernels = "CMSIS-NN" if result["arena_kernels"] == "cmsis-nn" else "reference kernels"
    line = (f"TFLite Micro arena on {target} ({kernels}): {result['arena_bytes']:,} B = planned "
            f"{result['arena_head_bytes']:,} + persistent {result['arena_tail_bytes']:,}")
    if result["arena_transient_bytes"]:
        line += f" + {result['arena_transient_bytes']:,} needed only while allocating"
    if result["arena_bytes"] != result["arena_head_bytes"] + result["arena_tail_bytes"]:
        line += " (rounded up to 16 B)"
    if result["arena_scratch_bytes"]:
        line += (f"; the kernels' scratch buffers add {result['arena_scratch_bytes']:,} B to the "
                 "planned part")
        plan = result["arena_plan_bytes"]
        if plan is not None and result["arena_head_bytes"] > plan:
            line += f" (above the offline plan's {plan:,} B)"
    return line



def register(sub) -> None:
    a = sub.add_parser("analyze", help="peak memory per scheduling method")
    a.add_argument("model", help="model file (.onnx/.tflite/.pt2/.pte) or example:NAME")
    a.add_argument("--json", action="store_true", help="one JSON object on stdout")
    a.add_argument("--view", choices=["relax", "file"], default=None,
                   help="relax (default except .tflite): the Relax bindings `memsched compile` "
                        "schedules and the storage TVM plans (the numbers compile prints); "
                        "file (default for .tflite: the interpreter's own dtypes): the file's "
                        "own graph (ONNX nodes, TFLite operators), without TVM")
    a.add_argument("--memory-model", default=None, choices=["paper", "tvm"],
                   help="tvm: what TVM plans (default of the relax view); paper: inputs and "
                        "outputs counted (default of the file view)")
    a.add_argument("--time-limit", type=seconds, default=60.0,
                   help="exact search time limit in seconds (default 60)")
    a.add_argument("--algorithm", default=None, help="scheduler (default auto)")
    a.add_argument("--input-shapes", help="static input shapes, e.g. x:1x3x224x224")
    a.add_argument("--pass", dest="passes", action="append", metavar="NAME",
                   help="relax view: pass run before scheduling, as in compile (repeatable), "
                        "e.g. RewriteConcatConv; MemoryAwareSchedule and PlanArena always run")
    a.add_argument("--pass-config", action="append", metavar="KEY=VALUE",
                   help="relax view: PassContext option (repeatable), as in compile")
    a.add_argument("--target", default=None,
                   help="relax view: TVM target (default: llvm); .pte / .tflite files: the "
                        "device whose RAM is reported, cortex-m (default: a 32-bit Cortex-M, "
                        "CMSIS-NN kernels) or host (this machine's 64-bit runtime)")
    a.add_argument("--memory-map", metavar="NAME:SIZE:MEM_ID[,...]",
                   help=".pte files: the memory banks, fastest first: names each planned "
                        "buffer and takes the first bank as the fast one for the traffic share")
    a.add_argument("--plot", metavar="OUT.png|OUT.svg",
                   help="plot live memory over time (input order, TVM's, ours; needs matplotlib)")
    a.add_argument("--report", metavar="OUT.html",
                   help="one self-contained HTML page: methods table, plot, per-op schedule")
    _add_verbose(a)
    a.set_defaults(func=cmd_analyze)


def _timings():
    """The passes' seconds (`memsched.transform.timings`), imported with TVM only."""
    from ..transform import timings

    return timings

"""Command line: ``memsched analyze|compile`` and a ``tvmc``-style ``tvmc compile``.

    memsched analyze model.onnx [--json] [--view relax|file] [--pass NAME] [--time-limit S]
    memsched compile model.onnx --pass MemoryAwareSchedule --pass PlanArena [--json] -o out.so
    tvmc compile --pass MemoryAwareSchedule --pass PlanArena model.onnx -o out.so

``analyze`` (``--view relax``, the default except for .tflite files) and ``compile`` share
the planning code (`_plan`): for the same file and options they print the same peak and
planned bytes. ``--view file`` schedules the file's own graph without TVM.

MODEL is a .onnx, .tflite or .pt2 (saved torch.export program) file,
or ``example:NAME`` for a built-in example (randwire, nas_cell, two_branch).

What the command line guarantees (see `main`): bad input of any kind (file, arguments,
options) is one line on stderr naming the problem, exit status 2; an unexpected failure is one
line naming the model, exit status 1 (``--verbose`` or ``MEMSCHED_DEBUG=1`` prints the
traceback); Ctrl-C prints ``memsched: interrupted``, exit status 130; a closed stdout
(``| head``) ends quietly, exit status 141; ``compile`` checks ``-o`` before any work and
writes it atomically (temporary file in the same directory, then rename), so a failed or
interrupted run leaves no partial file.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time

from . import __version__
from .errors import CLIError


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (argparse prints the usage block first)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def seconds(text: str) -> float:
    """argparse type of ``--time-limit``: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, not {text!r}")
    return value


def _known_errors():
    from .errors import GraphError, ModelLoadError, UnsupportedModelError

    return (CLIError, ModelLoadError, UnsupportedModelError, GraphError)


@contextlib.contextmanager
def _quiet_native_stderr(verbose: bool):
    """Hold back what native code (TVM's C++ logging) writes to file descriptor 2 while a model
    is imported, so an error stays one line; ``--verbose`` replays it."""
    import tempfile

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if verbose:
                tmp.seek(0)
                sys.stderr.write(tmp.read().decode("utf-8", "replace"))


def _load(fn, args):
    with _quiet_native_stderr(getattr(args, "verbose", False)):
        return fn(args.model, _shapes(args))


def _shapes(args):
    from .importers.load import parse_shapes

    return parse_shapes(args.input_shapes)


@contextlib.contextmanager
def _status(enabled: bool, text: str):
    """A spinner line on the terminal's stderr while TVM works (only on a terminal). It writes
    to its own copy of file descriptor 2, so `_quiet_native_stderr` (which holds back fd 2
    while TVM runs) does not swallow it."""
    if not enabled or not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    try:
        sys.stderr.flush()
        stream = os.fdopen(os.dup(2), "w")
    except (OSError, ValueError):
        yield
        return
    status = Console(file=stream, force_terminal=True).status(text)
    status.start()
    try:
        yield
    finally:
        status.stop()
        stream.close()


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


def _import_tvm(model: str | None) -> None:
    """Import TVM for a model that is not a ``.pt2`` without importing torch.

    tvm_ffi imports torch whenever torch is importable (``try: import torch``, a workaround for
    a symbol clash seen only on Windows), which costs 3-4 s of the ~6 s of ``import tvm`` here,
    although only the ``.pt2`` frontend needs torch. ``sys.modules["torch"] = None`` is the
    import system's documented way to make ``import torch`` raise ImportError; it is set for
    the duration of ``import tvm`` only (tvm_ffi then skips its optional torch interop), so torch
    stays importable afterwards. Nothing changes when TVM or torch is already loaded, for
    ``.pt2`` models, or with ``MEMSCHED_TVM_TORCH=1``."""
    if "tvm" in sys.modules or "torch" in sys.modules or os.environ.get("MEMSCHED_TVM_TORCH") \
            or (model or "").lower().endswith(".pt2"):
        return
    sys.modules["torch"] = None
    try:
        import tvm  # noqa: F401
    finally:
        if "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]


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
    from .schedulers.base import available

    if args.algorithm is not None and args.algorithm not in available():
        raise CLIError(f"unknown algorithm {args.algorithm!r}; choose one of "
                       f"{', '.join(sorted(available()))}")
    view = _analyze_view(args)
    if args.plot or args.report:  # bad paths or no matplotlib: fail before any work
        from .report import check_outputs

        check_outputs(args.plot, args.report)
    analyzed = _analyze_file(args) if view == "file" else _analyze_relax(args)
    result, graph, model, order = analyzed
    if args.plot or args.report:
        from .report import write_outputs

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
    from .importers.load import load_graph
    from .memory import MemoryModel, Problem
    from .schedulers import BASELINES, schedule

    model = MemoryModel.get(args.memory_model or "paper")
    algorithm = args.algorithm or "auto"
    if not str(args.model).lower().endswith(".pt2"):
        from . import native

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
    return result, graph, model, best.order


def _analyze_relax(args):
    """The Relax view: the module `memsched compile` builds, planned the way compile plans it
    (`_plan`, same passes and options), plus the baselines on the same blocks and the storage
    plain ``tvm.compile`` plans."""
    import time as _time

    _import_tvm(args.model)
    from .importers.load import load_relax
    from .importers.relax import UnsupportedModelError, block_graph, dataflow_blocks
    from .memory import MemoryModel, Problem
    from .schedulers import BASELINES, schedule
    from .tvm_memory import storage_sizes

    t0 = _time.perf_counter()
    names = list(args.passes or [])
    if "PartitionPipeline" in names:
        raise CLIError("analyze does not take --pass PartitionPipeline (use memsched partition)")
    others = [_resolve_pass(n) for n in names if n not in ("MemoryAwareSchedule", "PlanArena")]
    target = _target(args.target)
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
        "seconds": round(float(attrs["memsched.seconds"]), 4),
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


def _resolve_pass(name: str):
    """Our passes by class name, or any ``relax.transform.NAME`` (called with no arguments)."""
    import tvm
    from tvm import relax

    from . import transform as ours

    if not name.isidentifier() or name.startswith("_"):
        raise CLIError(f"unknown pass {name!r}: not a pass name")
    cls = getattr(ours, name, None) if name in PASSES else getattr(relax.transform, name, None)
    if cls is None:
        try:
            cls = tvm.get_global_func(f"relax.transform.{name}")
        except Exception:  # noqa: BLE001
            raise CLIError(f"unknown pass {name!r}: not a memsched pass and not in "
                           "relax.transform") from None
    if not callable(cls):
        raise CLIError(f"unknown pass {name!r}: relax.transform.{name} is not a pass")
    try:
        made = cls()
    except Exception as e:  # noqa: BLE001 - TypeError for required arguments, or anything
        first = (str(e).strip().splitlines() or [""])[0]
        raise CLIError(f"pass {name!r} needs arguments and cannot be named on the command "
                       f"line ({first[:200]})") from None
    if not isinstance(made, tvm.transform.Pass):
        raise CLIError(f"unknown pass {name!r}: relax.transform.{name} is not a pass")
    return made


PASSES = ("MemoryAwareSchedule", "PlanArena", "RewriteConcatConv", "FuseIsolatedSubgraphs")


class _Output:
    """The ``-o`` file, claimed before any work: the directory is checked and a temporary file
    created next to the target (so an unwritable place fails at once, not after the build);
    `commit` exports into it and renames it over the target, so readers never see a partial
    library; leaving the block without a commit (error, Ctrl-C) removes it."""

    def __init__(self, path: str):
        self.path = path
        if not path or path.endswith(os.sep):
            raise CLIError(f"bad -o {path!r}: not a file name")
        if os.path.isdir(path):
            raise CLIError(f"cannot write {path!r}: it is a directory")
        out_dir = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(out_dir):
            raise CLIError(f"cannot write {path!r}: directory {out_dir!r} does not exist")
        if os.path.exists(path) and not os.access(path, os.W_OK):
            raise CLIError(f"cannot write {path!r}: permission denied")
        import tempfile

        try:
            fd, self.tmp = tempfile.mkstemp(prefix=".memsched-",
                                            suffix=os.path.splitext(path)[1] or ".so",
                                            dir=out_dir)
            os.close(fd)
        except OSError as e:
            raise CLIError(f"cannot write {path!r}: {e.strerror or e}") from None

    def __enter__(self):
        return self

    def commit(self, ex) -> None:
        from .fileio import target_mode

        ex.export_library(self.tmp)
        os.chmod(self.tmp, target_mode(self.path, self.path.endswith((".so", ".dylib", ".dll"))))
        os.replace(self.tmp, self.path)
        self.tmp = None

    def __exit__(self, *exc):
        if self.tmp is not None:
            with contextlib.suppress(OSError):
                os.remove(self.tmp)
        return False


def _parse_pass_config(items) -> dict:
    """``--pass-config KEY=VALUE`` -> PassContext config, checked against TVM's registry."""
    import tvm

    from . import transform as _ours  # noqa: F401 - registers the memsched.* keys

    known = tvm.transform.PassContext.list_configs()
    config = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise CLIError(f"bad --pass-config {item!r}; expected KEY=VALUE")
        if key not in known:
            raise CLIError(f"unknown --pass-config key {key!r}")
        kind = str(dict(known[key]).get("type", ""))
        try:
            if kind == "bool":
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                config[key] = value.lower() in ("true", "1")
            elif kind in ("int", "IntImm", "int64_t", "int32_t"):
                config[key] = int(value)
            elif kind in ("float", "double", "FloatImm"):
                config[key] = float(value)
                if not math.isfinite(config[key]):
                    raise ValueError
            elif kind in ("str", "String", "ffi.String"):
                config[key] = value
            else:
                raise CLIError(f"--pass-config {key!r} has type {kind!r}, which cannot be set "
                               "from the command line")
        except ValueError:
            raise CLIError(f"bad --pass-config value {value!r} for {key!r} ({kind})") from None
    return config


def _shape_hint(name: str, shape) -> str:
    """The ``--input-shapes`` entry for one input: static dims kept, a symbolic batch (dim 0)
    as 1; other symbolic dims keep their names (the user must choose them)."""
    from tvm import relax

    if not isinstance(shape, relax.ShapeExpr):
        return f"{name}:1x3x224x224"
    dims = []
    for k, d in enumerate(shape.values):
        if hasattr(d, "value"):
            dims.append(str(int(d.value)))
        else:
            dims.append("1" if k == 0 else str(d).upper())
    return f"{name}:{'x'.join(dims)}"


def _unschedulable(mod, model: str = "") -> str | None:
    """Why the memsched passes cannot handle this module (dynamic shapes, control flow); for
    dynamic inputs, the exact fix."""
    from tvm import relax

    from .importers.relax import has_control_flow

    for gv, func in mod.functions.items():
        if not isinstance(func, relax.Function):
            continue
        if has_control_flow(func):
            return f"control flow: function {gv.name_hint!r} contains an If"
        dynamic = []
        for p in func.params:
            ty = p.ty
            shape = getattr(ty, "shape", None) if isinstance(ty, relax.TensorType) else None
            if isinstance(ty, relax.TensorType) and (
                    not isinstance(shape, relax.ShapeExpr) or
                    not all(hasattr(d, "value") for d in shape.values)):
                dynamic.append((p.name, shape))
        if dynamic:
            name, shape = dynamic[0]
            what = (f"input {name!r} of {gv.name_hint!r} has shape {shape}"
                    if shape is not None else f"input {name!r} of {gv.name_hint!r} has "
                    "unknown rank")
            if model.lower().endswith(".pt2"):
                fix = ("re-export the program with static shapes (torch.export.export "
                       "without dynamic_shapes)")
            else:
                entries = ",".join(_shape_hint(n, s) for n, s in dynamic)
                fix = f"give static shapes: --input-shapes {entries}"
                if any(s is None or sum(not hasattr(d, "value") for d in s.values[1:])
                       for _, s in dynamic):
                    fix += " (upper-case entries: the sizes you run)"
            return f"dynamic shapes: {what}; {fix}"
    return None


def _target(text: str):
    import tvm

    try:
        return tvm.target.Target(text)
    except Exception as e:  # noqa: BLE001
        first = (str(e).strip().splitlines() or [""])[0]
        raise CLIError(f"bad --target {text!r}: {first[:200]}") from None


def _pass_context(config: dict):
    import tvm

    return tvm.transform.PassContext(config=config) if config else contextlib.nullcontext()


def _plan(mod, opts: dict, target, config: dict) -> dict:
    """Compile's memory planning, `pipeline_passes(stop_after_planning=True, **opts)`, run in
    three stages so that analyze and compile share it: ``pre`` (the module MemoryAwareSchedule
    sees: named passes, FoldConstant, LegalizeOps, RewriteDataflowReshape), ``scheduled``
    (after MemoryAwareSchedule; ``pre`` itself without it) and ``planned`` (after
    StaticPlanBlockMemory and PlanArena when asked); ``post`` holds the planning passes."""
    import tvm

    from .relax_pipeline import pipeline_passes

    passes = pipeline_passes(stop_after_planning=True, **opts)
    cut = [p.info.name for p in passes].index("ToNonDataflow")
    pre = [p for p in passes[:cut] if p.info.name != "MemoryAwareSchedule"]
    mas = [p for p in passes[:cut] if p.info.name == "MemoryAwareSchedule"]
    with target, _pass_context(config):
        m_pre = tvm.transform.Sequential(pre)(mod)
        m_sched = tvm.transform.Sequential(mas)(m_pre) if mas else m_pre
        m_planned = tvm.transform.Sequential(passes[cut:])(m_sched)
    return {"pre": m_pre, "scheduled": m_sched, "planned": m_planned, "post": passes[cut:],
            "count": len(passes)}


def _plain_tvm_planned(mod, stages: dict, opts: dict, target, config: dict) -> int:
    """Bytes plain ``tvm.compile`` plans for ``mod``: TVM's binding order and its token
    planner, none of memsched's passes (other named passes, e.g. FoldConstant, kept)."""
    import tvm

    from .tvm_memory import storage_sizes

    before = list(opts.get("before") or [])
    plain = [p for p in before if p.info.name not in PASSES]
    if len(plain) == len(before):  # no memsched pass before scheduling: reuse its input
        post = [p for p in stages["post"] if p.info.name != "PlanArena"]
        with target, _pass_context(config):
            planned = tvm.transform.Sequential(post)(stages["pre"])
    else:
        planned = _plan(mod, dict(opts, schedule=False, plan_arena=False, before=plain),
                        target, config)["planned"]
    return sum(storage_sizes(planned, "main"))


def cmd_compile(args) -> int:
    """Build the model with the named passes. Everything that can be checked without the model
    (passes, target, ``--pass-config``, ``-o``) is checked first. With MemoryAwareSchedule or
    PlanArena named, a model memsched cannot model (dynamic shapes, control flow, a block the
    pass had to skip) is refused, exit status 2, nothing written; without them, compile is a
    plain TVM build and accepts what TVM accepts. ``--json`` prints one object on stdout
    (the same keys as ``analyze --json`` for the same numbers)."""
    _import_tvm(args.model)
    names = list(args.passes or [])
    # Our two planning-related passes have a fixed place in the build (before / after
    # StaticPlanBlockMemory); every other named pass runs first, in the order given.
    schedule = "MemoryAwareSchedule" in names
    arena = "auto" if "PlanArena" in names else False
    others = [_resolve_pass(n) for n in names
              if n not in ("MemoryAwareSchedule", "PlanArena", "PartitionPipeline")]
    target = _target(args.target)
    config = _parse_pass_config(getattr(args, "pass_config", None))
    # TVM's C++ log lines (fd 2) are held back while building: errors stay one line
    with _Output(args.output) as out, _status(not getattr(args, "json", False),
                                               f"compiling {args.model} ..."), \
            _quiet_native_stderr(getattr(args, "verbose", False)):
        msg, result = _compile(args, out, names, schedule, arena, others, target, config)
    print(msg, file=sys.stderr)
    if getattr(args, "json", False):
        print(json.dumps(result))
    return 0


def _compile(args, out, names, schedule, arena, others, target, config):
    import tvm

    from .importers.load import load_relax
    from .relax_pipeline import pipeline_passes
    from .tvm_memory import storage_sizes

    t_start = time.perf_counter()
    mod = load_relax(args.model, _shapes(args))
    cut = None
    if "PartitionPipeline" in names:  # before the other passes, options from --stages/--sram
        from .cli_pipeline import partition_for_compile

        mod, cut = partition_for_compile(mod, args)
    if schedule or arena:
        why = _unschedulable(mod, args.model)
        if why:
            raise CLIError(f"cannot schedule {args.model!r}: {why}; nothing written (without "
                           "--pass MemoryAwareSchedule/PlanArena it builds unscheduled)")
    t0 = time.perf_counter()
    opts = dict(schedule=schedule, time_limit=args.time_limit, before=others, plan_arena=arena)
    # Plan once (the stages analyze shares), measure the plan, then finish the build from the
    # planned module.
    stages = _plan(mod, opts, target, config)
    planned = stages["planned"]
    rest = pipeline_passes(**opts)[stages["count"]:]
    if schedule:
        skipped = [f"{gv.name_hint}: {f.attrs['memsched.skipped']}"
                   for gv, f in planned.functions.items()
                   if getattr(f, "attrs", None) is not None and "memsched.skipped" in f.attrs]
        if skipped:
            raise CLIError(f"cannot schedule {args.model!r}: MemoryAwareSchedule could not "
                           f"model {'; '.join(skipped)}; nothing written")
    with _pass_context(config):
        try:
            ex = tvm.compile(planned, target=target,
                             relax_pipeline=tvm.transform.Sequential(rest))
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - TVM cannot build this model: say so, one line
            raise CLIError(f"TVM cannot build {args.model!r}: {type(e).__name__}: "
                           f"{_one_line(e)}") from None
    plain = _plain_tvm_planned(mod, stages, opts, target, config) \
        if getattr(args, "json", False) else None
    out.commit(ex)
    planned_bytes = sum(storage_sizes(planned, "main"))
    msg = f"wrote {args.output} ({time.perf_counter() - t0:.1f} s); planned storage " \
          f"{planned_bytes:,} B"
    attrs = planned["main"].attrs if any(g.name_hint == "main"
                                         for g in planned.get_global_vars()) else None
    sched = attrs is not None and "memsched.peak_before" in attrs
    if sched:
        msg += (f"; schedule peak {int(attrs['memsched.peak_before']):,} -> "
                f"{int(attrs['memsched.peak_after']):,} B (model "
                f"{str(attrs['memsched.memory_model'])!r})")
    result = {
        "model": args.model,
        "output": args.output,
        "target": str(args.target),
        "passes": names,
        "memory_model": str(attrs["memsched.memory_model"]) if sched else None,
        "input_order_peak_bytes": int(attrs["memsched.peak_before"]) if sched else None,
        "peak_bytes": int(attrs["memsched.peak_after"]) if sched else None,
        "lower_bound": int(attrs["memsched.lower_bound"]) if sched else None,
        "optimal": bool(int(attrs["memsched.optimal"])) if sched else None,
        "planned_bytes": planned_bytes,
        "tvm_planned_bytes": plain,
        "schedule_seconds": round(float(attrs["memsched.seconds"]), 4) if sched else None,
        "seconds": round(time.perf_counter() - t_start, 4),
    }
    if cut:
        msg += cut(planned)
    return msg, result


def _add_compile_args(p):
    p.add_argument("model", help="model file (.onnx/.tflite/.pt2) or example:NAME")
    p.add_argument("--pass", dest="passes", action="append", metavar="NAME",
                   help="pass to run (repeatable): MemoryAwareSchedule, PlanArena, "
                        "RewriteConcatConv, FuseIsolatedSubgraphs or any relax.transform.NAME")
    p.add_argument("--target", default="llvm", help="TVM target (default: llvm)")
    p.add_argument("-o", "--output", default="out.so", help="output library (default out.so)")
    p.add_argument("--input-shapes", help="static input shapes, e.g. x:1x3x224x224")
    p.add_argument("--time-limit", type=seconds, default=10.0,
                   help="scheduling time limit in seconds (default 10)")
    p.add_argument("--pass-config", action="append", metavar="KEY=VALUE",
                   help="PassContext option (repeatable), e.g. memsched.algorithm=exact")
    p.add_argument("--json", action="store_true",
                   help="one JSON object on stdout: peaks before/after, lower bound, optimal, "
                        "planned bytes of plain TVM and of this build, seconds")
    from .cli_pipeline import add_partition_pass_args  # --stages/--sram of PartitionPipeline

    add_partition_pass_args(p)
    _add_verbose(p)


def _add_verbose(p):
    p.add_argument("-v", "--verbose", action="store_true",
                   help="on errors, print the traceback and TVM's log (also MEMSCHED_DEBUG=1)")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="memsched", description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", action="version", version=f"memsched {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    a = sub.add_parser("analyze", help="peak memory per scheduling method")
    a.add_argument("model", help="model file (.onnx/.tflite/.pt2) or example:NAME")
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
    a.add_argument("--target", default="llvm", help="relax view: TVM target (default: llvm)")
    a.add_argument("--plot", metavar="OUT.png|OUT.svg",
                   help="plot live memory over time (input order, TVM's, ours; needs matplotlib)")
    a.add_argument("--report", metavar="OUT.html",
                   help="one self-contained HTML page: methods table, plot, per-op schedule")
    _add_verbose(a)
    a.set_defaults(func=cmd_analyze)
    c = sub.add_parser("compile", help="compile with the named passes")
    _add_compile_args(c)
    c.set_defaults(func=cmd_compile)
    from .cli_partition import add_partition_commands  # partition, run-segments

    add_partition_commands(sub)
    from .cli_reorder import add_reorder_command  # reorder (.tflite for TFLite / TFLM)

    add_reorder_command(sub)
    from .cli_pipeline import add_pipeline_command  # run-pipeline (TVM RPC)

    add_pipeline_command(sub)
    from .cli_split import add_split_commands  # split, profile-devices (GenEFlow, TVM RPC)

    add_split_commands(sub)
    return ap


def _one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else type(e).__name__
    return text[:500] + (" ..." if len(lines) > 1 or len(text) > 500 else "")


def _stdout_closed() -> None:
    """After a broken pipe, point stdout at /dev/null so the exit flush cannot fail again."""
    with contextlib.suppress(Exception):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


@contextlib.contextmanager
def _noting_sigint(seen: list):
    """Record Ctrl-C (and still raise KeyboardInterrupt): TVM turns a KeyboardInterrupt raised
    inside a Python callback it runs (a pass, a legalization) into a bare RuntimeError."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def handler(signum, frame):
        seen.append(True)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupted(prog: str, argv, verbose: bool) -> int:
    import traceback

    if verbose:
        traceback.print_exc()
    print(f"{prog}: interrupted", file=sys.stderr)
    if argv is None:  # the program itself (not a call from Python): leave now, without
        # interpreter teardown, which can abort on a search thread still inside native code
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(130)
    return 130


def run(prog: str, parser: argparse.ArgumentParser, argv=None) -> int:
    """Parse ``argv`` and run the command under the guarantees of the module docstring."""
    import traceback
    import warnings

    try:
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        return _interrupted(prog, argv, False)
    verbose = bool(getattr(args, "verbose", False) or os.environ.get("MEMSCHED_DEBUG"))
    sigint: list = []
    try:
        with warnings.catch_warnings(), _noting_sigint(sigint):
            if not verbose:
                warnings.simplefilter("ignore")
            return args.func(args)
    except KeyboardInterrupt:
        return _interrupted(prog, argv, verbose)
    except BrokenPipeError:
        _stdout_closed()
        return 141
    except (*_known_errors(), OSError, MemoryError, RecursionError) as e:
        if sigint:
            return _interrupted(prog, argv, verbose)
        if verbose:
            traceback.print_exc()
        if isinstance(e, OSError) and e.strerror:
            msg = f"{e.strerror}: {e.filename!r}" if e.filename else e.strerror
        elif isinstance(e, MemoryError):
            msg = f"{getattr(args, 'model', '')}: out of memory"
        elif isinstance(e, RecursionError):
            msg = f"{getattr(args, 'model', '')}: nested too deeply"
        else:
            msg = _one_line(e)
        print(f"{prog}: error: {msg}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - last resort: one line, never a traceback
        if sigint:
            return _interrupted(prog, argv, verbose)
        if verbose:
            traceback.print_exc()
        where = getattr(args, "model", None)
        print(f"{prog}: internal error{f' on {where!r}' if where else ''}: "
              f"{type(e).__name__}: {_one_line(e)} (--verbose or MEMSCHED_DEBUG=1 shows the "
              "traceback)", file=sys.stderr)
        return 1


def main(argv=None) -> int:
    try:
        parser = build_parser()  # imports the subcommands' modules: Ctrl-C can land here
    except KeyboardInterrupt:
        return _interrupted("memsched", argv, False)
    return run("memsched", parser, argv)


def tvmc_main(argv=None) -> int:
    """``tvmc compile --pass NAME MODEL -o out.so``: TVM >= 0.20 ships no tvmc; this accepts
    its familiar compile flags and runs `memsched compile`."""
    ap = _Parser(prog="tvmc", description="tvmc-compatible compile (memsched)")
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile a model")
    _add_compile_args(c)
    c.set_defaults(func=cmd_compile)
    return run("tvmc", ap, argv)


if __name__ == "__main__":
    sys.exit(main())

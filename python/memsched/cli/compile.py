"""``memsched compile`` (and ``tvmc compile``): build the model with the named passes, and the
planning stages `memsched analyze` shares with it (`_plan`): for the same file and options both
print the same peak and planned bytes. ``-o`` is checked before any work and written
atomically (`_Output`).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time

from .common import (CLIError, _add_verbose, _import_tvm, _one_line, _quiet_native_stderr,
                     _shapes, _status, seconds)
from .pipeline import add_partition_pass_args, partition_for_compile


def _resolve_pass(name: str, options: dict | None = None):
    """Our passes by class name (``options``: keyword arguments for our pass of that name), or
    any ``relax.transform.NAME`` (called with no arguments)."""
    import tvm
    from tvm import relax

    from .. import transform as ours

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
        made = cls(**((options or {}).get(name, {}) if name in PASSES else {}))
    except Exception as e:  # noqa: BLE001 - TypeError for required arguments, or anything
        first = (str(e).strip().splitlines() or [""])[0]
        raise CLIError(f"pass {name!r} needs arguments and cannot be named on the command "
                       f"line ({first[:200]})") from None
    if not isinstance(made, tvm.transform.Pass):
        raise CLIError(f"unknown pass {name!r}: relax.transform.{name} is not a pass")
    return made


PASSES = ("MemoryAwareSchedule", "PlanArena", "RewriteConcatConv", "FuseIsolatedSubgraphs",
          "TilePatches")


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
        from ..fileio import target_mode

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

    from .. import transform as _ours  # noqa: F401 - registers the memsched.* keys

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

    from ..importers.relax import has_control_flow

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

    from ..relax_pipeline import pipeline_passes

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

    from ..tvm_memory import storage_sizes

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
    if getattr(args, "float_reductions", False) and "TilePatches" not in names:
        raise CLIError("--float-reductions is an option of --pass TilePatches")
    pass_options = {"TilePatches": {"exact_reductions": False}} \
        if getattr(args, "float_reductions", False) else {}
    others = [_resolve_pass(n, pass_options) for n in names
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

    from ..importers.load import load_relax
    from ..relax_pipeline import pipeline_passes
    from ..tvm_memory import storage_sizes

    t_start = time.perf_counter()
    mod = load_relax(args.model, _shapes(args))
    cut = None
    if "PartitionPipeline" in names:  # before the other passes, options from --stages/--sram
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
        "schedule_seconds": round(_timings().seconds("MemoryAwareSchedule", "main") or 0.0, 4)
        if sched else None,
        "seconds": round(time.perf_counter() - t_start, 4),
    }
    if attrs is not None and "memsched.patches_grid" in attrs:  # TilePatches' choice
        result["patches"] = {"grid": str(attrs["memsched.patches_grid"]),
                             "split": str(attrs["memsched.patches_split"]),
                             "mac_overhead": float(attrs["memsched.patches_mac_overhead"]),
                             "se_patches": str(attrs.get("memsched.patches_se", "")) or None}
        se = result["patches"]["se_patches"]
        msg += (f"; patches {result['patches']['grid']} at {result['patches']['split']} "
                f"(+{100 * result['patches']['mac_overhead']:.1f} % MACs"
                f"{f', SE: {se}' if se else ''})")
    elif attrs is not None and "memsched.patches_skipped" in attrs:
        result["patches"] = {"skipped": str(attrs["memsched.patches_skipped"])}
    if "patches" in result and "memsched.patches_prefix_end" in attrs:
        # why the regions stop (e.g. a float mean refused: not bit-exact through patches)
        result["patches"]["prefix_end"] = str(attrs["memsched.patches_prefix_end"])
    if cut:
        msg += cut(planned)
    return msg, result


def _add_compile_args(p):
    p.add_argument("model", help="model file (.onnx/.tflite/.pt2) or example:NAME")
    p.add_argument("--pass", dest="passes", action="append", metavar="NAME",
                   help="pass to run (repeatable): MemoryAwareSchedule, PlanArena, "
                        "RewriteConcatConv, FuseIsolatedSubgraphs, TilePatches or any "
                        "relax.transform.NAME")
    p.add_argument("--target", default="llvm", help="TVM target (default: llvm)")
    p.add_argument("-o", "--output", default="out.so", help="output library (default out.so)")
    p.add_argument("--input-shapes", help="static input shapes, e.g. x:1x3x224x224")
    p.add_argument("--time-limit", type=seconds, default=10.0,
                   help="scheduling time limit in seconds (default 10)")
    p.add_argument("--pass-config", action="append", metavar="KEY=VALUE",
                   help="PassContext option (repeatable), e.g. memsched.algorithm=exact")
    p.add_argument("--float-reductions", action="store_true",
                   help="--pass TilePatches: let patch regions run through float means / "
                        "sums (partial sums then equal the whole up to rounding, not bit-equal)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object on stdout: peaks before/after, lower bound, optimal, "
                        "planned bytes of plain TVM and of this build, seconds")
    add_partition_pass_args(p)  # --stages/--sram of PartitionPipeline
    _add_verbose(p)



def register(sub) -> None:
    c = sub.add_parser("compile", help="compile with the named passes")
    _add_compile_args(c)
    c.set_defaults(func=cmd_compile)


def _timings():
    """The passes' seconds (`memsched.transform.timings`), imported with TVM only."""
    from ..transform import timings

    return timings

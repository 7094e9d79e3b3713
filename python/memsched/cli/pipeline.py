"""``memsched run-pipeline`` and the ``--stages`` options of ``memsched compile --pass
PartitionPipeline`` (`memsched.cli`).

    memsched run-pipeline MODEL --stages K [--servers host:port,...] [-n N] [--json]
        [--sram BYTES] [--method auto|exact|inc-ilp|learned|param-balanced] [--time-limit S]
    memsched compile MODEL --pass PartitionPipeline --stages K [--sram BYTES] -o out.so

``run-pipeline`` cuts the model into K stages (`PartitionPipeline`), builds each stage on its
own and the unsplit model, serves stage j on server j (K local ``tvm.rpc`` servers with
``TVM_NUM_THREADS=1``, started and always stopped here, unless ``--servers`` names running
ones: ``host:port`` or ``KEY@tracker_host:port``), streams N random inputs through them with
the host relaying tensors, and prints throughput, per-stage latency, the throughput of the
unsplit model on one server, and whether every output is bit-equal to the unsplit build's.
Exit status 1 when outputs differ; bad input is one line on stderr, exit status 2.
"""
from __future__ import annotations

import json
import sys
import time

from .common import CLIError, _add_verbose, parse_bytes, seconds


def add_partition_pass_args(p) -> None:
    """Options of the PartitionPipeline pass on ``memsched compile`` / ``tvmc compile``."""
    p.add_argument("--stages", type=int, default=2,
                   help="PartitionPipeline: number of pipeline stages (default 2)")
    p.add_argument("--sram", default="8MiB",
                   help="PartitionPipeline: parameter SRAM per device (default 8MiB)")
    p.add_argument("--partition-method", default="auto",
                   help="PartitionPipeline: cut solver (default auto, certified optimum)")


def _partition(mod, stages: int, sram: str, method: str, time_limit):
    """Run PartitionPipeline directly (not through TVM's pass runner, which turns every
    Python error into a bare RuntimeError), so bad input stays a one-line error."""
    from ..partition import PartitionError
    from ..transform.partition_pipeline import PartitionPipeline, pipeline_report

    try:
        sram_bytes = parse_bytes(sram)
        part = PartitionPipeline(stages, sram_bytes=sram_bytes, method=method,
                                 time_limit=time_limit or None)
        new = part.transform_module(mod, None)
    except (PartitionError, ValueError) as e:
        raise CLIError(str(e)) from None
    return new, pipeline_report(new)


def cut_summary(report: dict) -> str:
    proven = "proven optimal" if report.get("optimal") else "not proven optimal"
    b = report.get("baseline", {})
    return (f"{report['stages']} stages, P={report['P']:,} O={report['O']:,} "
            f"C={report['C']:,} B ({proven}, {report['method']}); param-balanced "
            f"P={b.get('P', 0):,} O={b.get('O', 0):,} C={b.get('C', 0):,} B")


def partition_for_compile(mod, args):
    """``memsched compile --pass PartitionPipeline``: the partitioned module, and a function
    of the planned module that summarises the cut and each stage's planned storage."""
    from ..tvm_memory import storage_sizes

    new, report = _partition(mod, args.stages, args.sram, args.partition_method,
                             getattr(args, "time_limit", None))

    def summary(planned) -> str:
        per = [sum(storage_sizes(planned, f"main_stage{j}")) for j in range(report["stages"])]
        return (f"; cut: {cut_summary(report)}; functions main_stage0..{len(per) - 1}, "
                f"planned storage per stage {', '.join(f'{b:,}' for b in per)} B")

    return new, summary


def random_inputs(func, n: int, seed: int = 0) -> list:
    """``n`` random inputs for the data parameters of a Relax function."""
    import numpy as np
    from tvm import relax

    from ..importers.relax import UnsupportedModelError

    rng = np.random.default_rng(seed)
    attrs = func.attrs
    params = list(func.params)
    if attrs is not None and "num_input" in attrs:
        params = params[:int(attrs["num_input"])]
    specs = []
    for p in params:
        ty = p.ty
        if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
            raise UnsupportedModelError(f"input {p.name!r} is not a tensor of static shape")
        try:
            shape = [int(d) for d in ty.shape.values]
        except (TypeError, ValueError):
            raise UnsupportedModelError(f"input {p.name!r} has a symbolic shape "
                                        "(give --input-shapes)") from None
        specs.append((shape, np.dtype(str(ty.dtype))))
    out = []
    for _ in range(n):
        xs = []
        for shape, dt in specs:
            if dt.kind == "f":
                xs.append(rng.standard_normal(shape).astype(dt))
            elif dt.kind == "b":
                xs.append(rng.integers(0, 2, shape).astype(dt))
            else:
                xs.append(rng.integers(0, 10, shape).astype(dt))
        out.append(xs)
    return out


def build_stages(mod, target="llvm", log=None):
    """The stages of a partitioned module as `Stage` objects, each built on its own
    (`stage_modules`: a device loads only its own weights)."""
    import tvm

    from ..runtime.rpc_pipeline import Stage
    from ..transform.partition_pipeline import stage_functions, stage_modules, stage_params

    names = stage_functions(mod)
    params = stage_params(mod)
    stages = []
    for j, (sub, name) in enumerate(zip(stage_modules(mod), names)):
        t0 = time.perf_counter()
        ex = tvm.compile(sub, target=target)
        if log:
            log(f"built stage {j} ({time.perf_counter() - t0:.1f} s)")
        stages.append(Stage(ex, name, params[j], name=name))
    return stages


def cmd_run_pipeline(args) -> int:
    import tvm

    from ..importers.load import load_relax, parse_shapes
    from ..runtime.rpc_pipeline import PipelineError, Stage, run_pipeline
    from ..runtime.rpc_servers import RPCServerError, ServerPool, parse_servers

    def log(msg):
        if not args.json:
            print(msg, file=sys.stderr, flush=True)

    if args.stages < 1:
        raise CLIError(f"--stages must be >= 1, got {args.stages}")
    if args.n < 1:
        raise CLIError(f"-n must be >= 1, got {args.n}")
    try:
        remote = parse_servers(args.servers)
    except RPCServerError as e:
        raise CLIError(str(e)) from None
    if remote and len(remote) < args.stages:
        raise CLIError(f"--servers names {len(remote)} server(s) for {args.stages} stages")
    try:
        target = tvm.target.Target(args.target)
    except Exception as e:  # noqa: BLE001
        raise CLIError(f"bad --target {args.target!r}: "
                       f"{(str(e).strip().splitlines() or [''])[0][:200]}") from None
    mod = load_relax(args.model, parse_shapes(args.input_shapes))
    inputs = random_inputs(mod["main"], args.n, args.seed)
    try:
        # local servers start (a few seconds) while the model is cut and built
        with ServerPool(local=0 if remote else args.stages,
                        servers=remote[:args.stages] if remote else None) as pool:
            new, report = _partition(mod, args.stages, args.sram, args.method,
                                     args.time_limit)
            log(f"cut: {cut_summary(report)}")
            stages = build_stages(new, target, log)
            t0 = time.perf_counter()
            full = tvm.compile(mod, target=target)
            log(f"built the unsplit model ({time.perf_counter() - t0:.1f} s)")
            log(f"servers: {', '.join(str(e) for e in pool.endpoints)}")
            res = run_pipeline(stages, pool, inputs, reference=Stage(full, "main"))
    except (RPCServerError, PipelineError) as e:
        raise CLIError(str(e)) from None
    res.extra["cut"] = {k: report[k] for k in ("P", "O", "C", "m", "c", "lower_bounds",
                                               "optimal", "method", "baseline")}
    if args.json:
        print(json.dumps(res.to_json()))
    else:
        _print(args, res, report)
    return 0 if res.outputs_equal else 1


def _print(args, res, report) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{args.model}: {res.stages} stages, {res.n} inputs")
    for col in ("stage", "server", "params (B)", "boundary out (B)", "latency ms",
                "compute ms", "transfer ms"):
        t.add_column(col, justify="right" if col not in ("server",) else "left")
    for j, st in enumerate(res.stage_times):
        t.add_row(str(j), res.servers[j], f"{report['m'][j]:,}",
                  f"{report['c'][j]:,}" if j < len(report["c"]) else "-",
                  f"{1e3 * st.latency:.2f}", f"{1e3 * st.mean('compute'):.2f}",
                  f"{1e3 * (st.mean('upload') + st.mean('download')):.2f}")
    c = Console()
    c.print(t)
    steady = f" ({res.steady_per_s:.2f}/s once full)" if res.steady_per_s else ""
    c.print(f"pipelined: {res.throughput_per_s:.2f} inputs/s{steady}; one VM (unsplit, one "
            f"server): {res.single_vm_per_s:.2f} inputs/s; speedup {res.speedup:.2f}x")
    eq = "bit-equal" if res.outputs_equal else f"DIFFERENT (max |diff| {res.max_abs_diff:g})"
    c.print(f"outputs vs the unsplit build: {eq} on all {res.n} inputs")


def register(sub) -> None:
    p = sub.add_parser("run-pipeline", help="stream inputs through pipeline stages on TVM "
                                            "RPC servers")
    p.add_argument("model", help="model file (.onnx/.tflite/.pt2) or example:NAME")
    p.add_argument("--stages", type=int, required=True, help="number of pipeline stages K")
    p.add_argument("--servers", help="running servers, comma-separated host:port or "
                                     "KEY@tracker_host:port (default: K local servers)")
    p.add_argument("-n", type=int, default=20, help="inputs to stream (default 20)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--sram", default="8MiB", help="parameter SRAM per device (default 8MiB)")
    p.add_argument("--method", default="auto", help="cut solver (default auto)")
    p.add_argument("--time-limit", type=seconds, default=0,
                   help="cut solver time limit in seconds (default: none)")
    p.add_argument("--target", default="llvm", help="TVM target (default llvm)")
    p.add_argument("--input-shapes", help="static input shapes, e.g. x:1x3x224x224")
    p.add_argument("--seed", type=int, default=0, help="random input seed (default 0)")
    _add_verbose(p)
    p.set_defaults(func=cmd_run_pipeline)

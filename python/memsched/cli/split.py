"""``memsched split`` and ``memsched profile-devices`` (`memsched.cli`).

    memsched split MODEL --devices N [--device-memory BYTES ...] [--profile FILE]
        [--method ga|greedy|uniform|single] [--seed S] [--generations G] [--time-limit S]
        [--json] [--run-rpc [--servers host:port,...]] [--input-shapes x:1x3x224x224]
    memsched profile-devices [host:port | KEY@tracker:port ...] [--local N]
        [--device-memory BYTES ...] [-o profile.json] [--json]

``split`` splits every operator of the model over N devices (GenEFlow, `memsched.split`): the
single-device, uniform, greedy and GA splits under the devices' memory limits, their predicted
latency and per-device peak memory. Without ``--run-rpc`` the cost model comes from
``--profile`` (written by ``profile-devices``) and operator FLOPs; with ``--run-rpc`` it is
calibrated on the devices themselves (link, speeds and every operator kernel measured over RPC;
``calibration`` in the report says how repeatable those timings were, and the text output warns
when a busy machine made them unreliable), unless ``--profile`` is given, which then stays the
cost model; and the GA's split is rewritten (`SplitAcrossDevices`), uploaded and run on N local
RPC servers (one process each, ``TVM_NUM_THREADS=1``, always stopped) or on ``--servers``: measured
latency, bytes moved and whether the outputs equal the unsplit model's.

``--json`` prints ``{"devices", "latency_s": {"single", "uniform", "greedy", "ga"}, "memory_ok",
"per_device_peak_bytes", "device_memory_bytes", "rpc": {"measured_s", "predicted_s",
"outputs_equal", ...}}`` (``single`` is null when the model does not fit one device; ``rpc``
only with ``--run-rpc``). Errors (bad input, memory limits no split meets) are one line on stderr,
exit status 2; outputs that differ from the unsplit model's exit 1.

Determinism: the same model, options, seed and cost model give the same split. A calibration
(``--run-rpc`` without ``--profile``) is measured anew each run, so its split can change from
run to run; ``profile-devices -o FILE`` once and ``--profile FILE`` keep it fixed.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

from .common import _add_verbose, _load, parse_bytes, seconds


def _errors():
    from ..errors import ModelLoadError
    from ..runtime.rpc_servers import RPCServerError
    from ..runtime.rpc_split import SplitRunError
    from ..split.problem import SplitError

    return (SplitError, RPCServerError, SplitRunError, ModelLoadError)


def _guard(fn):
    def run(args):
        try:
            return fn(args)
        except _errors() as e:
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
            print(f"memsched: error: {lines[0] if lines else type(e).__name__}", file=sys.stderr)
            return 2
    return run


def _memories(values, n: int) -> list:
    from ..split.problem import SplitError

    if not values:
        return [None] * n
    try:
        mem = [parse_bytes(v) for v in values]
    except ValueError as e:
        raise SplitError(f"bad --device-memory: {e}") from None
    if len(mem) == 1:
        return mem * n
    if len(mem) != n:
        raise SplitError(f"--device-memory: give one size for all devices or {n} sizes, "
                         f"not {len(mem)}")
    return mem


def _progress(enabled: bool):
    if not enabled or not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console

    status = Console(stderr=True).status("searching ...")
    status.start()
    t0 = time.perf_counter()

    def update(gen, best, feasible):
        status.update(f"GA generation {gen}: best {best * 1e3:.2f} ms"
                      f"{'' if feasible else ' (infeasible)'}, {time.perf_counter() - t0:.0f} s")

    return update, status.stop


def _log(args, msg: str) -> None:
    if not args.json and sys.stderr.isatty():
        print(msg, file=sys.stderr)


@_guard
def cmd_split(args) -> int:
    from ..importers.load import load_relax
    from ..split import CostModel, Device, Link, OpTimes, compare, load_profile
    from ..transform.split_relax import from_relax
    from ..split.problem import SplitError
    from ..split.solve import require_feasible

    n = args.devices
    if n < 1:
        raise SplitError(f"--devices must be >= 1, got {n}")
    memory = _memories(args.device_memory, n)
    mod = _load(load_relax, args)
    prob = from_relax(mod, time_limit=args.schedule_time_limit)
    link = Link(topology="host", bandwidth=50e6, latency=1e-4, call_overhead=1e-4)
    speeds = [1.0] * n
    ref_gflops = 1.0
    copy_bw = None
    if args.profile:
        pdevs, link, data = load_profile(args.profile)
        ref_gflops = float(data.get("reference_gflops", 1.0))
        copy_bw = data.get("copy_bandwidth")
        speeds = [pdevs[k % len(pdevs)].speed for k in range(n)]
        if not args.device_memory:
            memory = [pdevs[k].memory_bytes if k < len(pdevs) else None for k in range(n)]
    times = OpTimes.from_flops(prob)
    speeds = [s * ref_gflops for s in speeds]
    pool = None
    report_rpc = None
    links = None
    try:
        if args.run_rpc:
            from ..runtime.rpc_servers import ServerPool
            from ..runtime.split_profile import (measure_op_times, profile_devices,
                                                 with_link_spread)

            servers = args.servers
            pool = ServerPool(local=0 if servers else n, servers=servers).start()
            if len(pool) < n:
                raise SplitError(f"--run-rpc needs {n} servers, --servers gives {len(pool)}")
            sessions = pool.sessions(n)
            if not args.profile:  # with a saved profile the cost model stays that profile's
                _log(args, "calibrating: link, device speeds, operator kernels ...")
                devs, link, extra = profile_devices(sessions)
                speeds = [d.speed for d in devs]
                copy_bw = extra["copy_bandwidth"]
                times = measure_op_times(mod, prob, sessions[0])
                times.calibration = with_link_spread(times.calibration, extra["link_spread"])
                links = extra["links"]
        cost = CostModel([Device(memory[k], speeds[k]) for k in range(n)], link, times,
                         copy_bandwidth=copy_bw)
        update, stop = _progress(not args.json)
        try:
            res = compare(prob, cost, seed=args.seed, n_gen=args.generations,
                          time_limit=args.time_limit, progress=update)
        finally:
            stop()
        chosen = require_feasible(res[args.method], cost)  # nothing illegal runs or prints
        if links is not None:  # calibrated here: how far link noise moves this prediction
            from ..runtime.split_profile import prediction_spread, with_prediction_spread

            times.calibration = with_prediction_spread(
                times.calibration, prediction_spread(chosen, cost, links))
        if args.run_rpc:
            report_rpc = _run_rpc(mod, prob, chosen, cost, sessions, args)
    finally:
        if pool is not None:
            pool.close()
    ev = chosen.evaluation.row(0)
    out = {"model": args.model, "operators": prob.n, "devices": n, "method": args.method,
           "latency_s": {m: (r.latency if r.feasible else None) for m, r in res.items()},
           "memory_ok": ev["memory_ok"], "per_device_peak_bytes": ev["per_device_peak_bytes"],
           "device_memory_bytes": memory, "comm_bytes": ev["comm_bytes"],
           "stages": ev["stages"], "ga_seconds": round(res["ga"].seconds, 3),
           "cost_model": "measured over RPC" if args.run_rpc else
           ("profile + FLOPs" if args.profile else "FLOPs (1 GFLOP/s devices, default link)")}
    if getattr(times, "calibration", None):
        out["calibration"] = times.calibration
    if report_rpc is not None:
        out["rpc"] = report_rpc
    code = 1 if report_rpc is not None and not report_rpc["outputs_equal"] else 0
    if args.json:
        print(json.dumps(out))
        return code
    _print(out, res, args)
    return code


def _run_rpc(mod, prob, result, cost, sessions, args) -> dict:
    import tvm
    from tvm import relax

    from ..runtime.rpc_split import run_split
    from ..transform.split_across_devices import split_module

    new, _ = split_module(mod, cost.devices, cost.link, problem=prob, result=result)
    rng = np.random.default_rng(args.seed)
    inputs = []
    for p in mod["main"].params:
        shape = [int(d.value) for d in p.ty.shape.values]
        dt = str(p.ty.dtype)
        inputs.append(rng.standard_normal(shape).astype(dt) if "float" in dt
                      else np.zeros(shape, dt))
    ref = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](
        *[tvm.runtime.tensor(a) for a in inputs])
    ref_flat = _flat_outputs(ref)
    rep = run_split(new, inputs, sessions, repeat=args.repeat, warmup=1)
    equal = len(ref_flat) == len(rep["outputs"]) and all(
        a.shape == b.shape and np.allclose(a, b, rtol=1e-4, atol=1e-5)
        for a, b in zip(rep["outputs"], ref_flat))
    diff = max((float(np.abs(a - b).max()) for a, b in zip(rep["outputs"], ref_flat)
                if a.shape == b.shape), default=None)
    return {"measured_s": rep["measured_s"], "predicted_s": result.latency,
            "error": (rep["measured_s"] - result.latency) / result.latency,
            "outputs_equal": bool(equal), "max_abs_diff": diff,
            "bytes_moved": rep["bytes_up"] + rep["bytes_down"], "messages": rep["messages"],
            "calls": rep["calls"], "runs_s": rep["runs_s"]}


def _flat_outputs(v) -> list:
    if hasattr(v, "numpy"):
        return [v.numpy()]
    return [x for item in v for x in _flat_outputs(item)]


def _print(out, res, args) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    mem = out["device_memory_bytes"]
    lim = ", ".join("unlimited" if m is None else f"{m:,}" for m in mem)
    t = Table(title=f"{args.model}: {out['operators']} operators on {out['devices']} devices "
                    f"(memory {lim}); cost model: {out['cost_model']}")
    for col in ("method", "latency ms", "fits", "peak per device (bytes)", "moved bytes",
                "stages", "search s"):
        t.add_column(col, justify="left" if col == "method" else "right")
    for m, r in res.items():
        row = r.evaluation.row(0)
        t.add_row(m + (" *" if m == args.method else ""), f"{r.latency * 1e3:.3f}",
                  "yes" if r.feasible else "no",
                  ", ".join(f"{v:,}" for v in row["per_device_peak_bytes"]),
                  f"{row['comm_bytes']:,}", str(row["stages"]), f"{r.seconds:.1f}")
    console.print(t)
    if not out["memory_ok"]:
        console.print(f"[bold]{args.method}'s split does not fit the devices' memory[/bold]")
    cal = out.get("calibration")
    if cal and cal.get("kernels"):
        verdict = ("repeatable" if cal["trusted"] else
                   "NOT repeatable: the machine is busy, predictions may miss by far more "
                   "than 20 %")
        link = "" if cal.get("prediction_spread") is None else \
            (f"; the prediction moves by {cal['prediction_spread']:.0%} between two link "
             "calibrations")
        console.print(f"calibration: repeats of one kernel differ by {cal['spread_weighted']:.0%} "
                      f"(weighted by kernel time; median {cal['spread_median']:.0%}, "
                      f"{cal['kernels']} kernels){link}: {verdict}")
    if "rpc" in out:
        r = out["rpc"]
        console.print(f"RPC run on {out['devices']} devices: measured {r['measured_s'] * 1e3:.2f} "
                      f"ms, predicted {r['predicted_s'] * 1e3:.2f} ms ({r['error'] * 100:+.1f}%), "
                      f"{r['bytes_moved']:,} bytes moved, outputs "
                      f"{'equal the unsplit model' if r['outputs_equal'] else 'DIFFER'}")


@_guard
def cmd_profile_devices(args) -> int:
    from ..runtime.rpc_servers import ServerPool
    from ..runtime.split_profile import profile_devices
    from ..split import save_profile
    from ..split.problem import SplitError

    if not args.servers and not args.local:
        raise SplitError("give host:port servers (or KEY@tracker:port) or --local N")
    with ServerPool(local=args.local or 0, servers=args.servers or None) as pool:
        sessions = pool.sessions()
        memory = _memories(args.device_memory, len(sessions))
        devs, link, extra = profile_devices(sessions, memory,
                                            [str(e) for e in pool.endpoints])
    gflops = 2.0 * 64 * 64 * 64 * 64 * 9 / extra["reference_conv_s"] / 1e9
    extra = {"reference_gflops": gflops, "copy_bandwidth": extra["copy_bandwidth"],
             "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    if args.output:
        save_profile(args.output, devs, link, extra)
    out = {"devices": [d.__dict__ for d in devs], "link": link.__dict__, **extra}
    if args.json or not args.output:
        print(json.dumps(out, indent=None if args.json else 1))
    else:
        print(f"wrote {args.output}: {len(devs)} devices, link latency "
              f"{link.latency * 1e3:.3f} ms, {link.bandwidth / 1e6:.1f} MB/s up, "
              f"{link.bandwidth_down / 1e6:.1f} MB/s down, device 0 {gflops:.2f} GFLOP/s")
    return 0


def register(sub) -> None:
    """Register ``split`` and ``profile-devices`` on the CLI's subparsers."""
    p = sub.add_parser("split", help="split every operator across N devices (GenEFlow GA)")
    p.add_argument("model", help="model file (.onnx/.tflite/.pt2) or example:NAME")
    p.add_argument("--devices", type=int, required=True, help="number of devices N")
    p.add_argument("--device-memory", nargs="+", metavar="BYTES",
                   help="memory per device (one for all, or N values; 8MiB, 8388608)")
    p.add_argument("--profile", help="device profile JSON from memsched profile-devices")
    p.add_argument("--method", default="ga", choices=["ga", "greedy", "uniform", "single"],
                   help="split reported as the answer and run with --run-rpc (default ga)")
    p.add_argument("--seed", type=int, default=0, help="GA seed (default 0)")
    p.add_argument("--generations", type=int, default=200, help="GA generations (default 200)")
    p.add_argument("--time-limit", type=seconds, default=None,
                   help="GA time limit in seconds (default: none; deterministic)")
    p.add_argument("--schedule-time-limit", type=seconds, default=10.0,
                   help="time limit of the operator-order search (default 10)")
    p.add_argument("--run-rpc", action="store_true",
                   help="calibrate on and run over TVM RPC (N local servers unless --servers)")
    p.add_argument("--servers", help="host:port or KEY@tracker:port list for --run-rpc")
    p.add_argument("--repeat", type=int, default=5, help="--run-rpc timed runs (default 5)")
    p.add_argument("--input-shapes", help="static input shapes, e.g. x:1x3x224x224")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    _add_verbose(p)
    p.set_defaults(func=cmd_split)
    q = sub.add_parser("profile-devices", help="measure RPC devices and link for memsched split")
    q.add_argument("servers", nargs="*", help="host:port or KEY@tracker:port of RPC servers")
    q.add_argument("--local", type=int, default=0, help="start N local servers to profile")
    q.add_argument("--device-memory", nargs="+", metavar="BYTES",
                   help="memory per device to record (one for all, or one per device)")
    q.add_argument("-o", "--output", help="write the profile JSON here")
    q.add_argument("--json", action="store_true", help="one JSON object on stdout")
    _add_verbose(q)
    q.set_defaults(func=cmd_profile_devices)

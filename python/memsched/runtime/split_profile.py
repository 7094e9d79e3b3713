"""Calibrate the split cost model by measuring, not guessing (``memsched profile-devices``).

Three measurements, all over the real TVM RPC transport:

* **link** (`measure_link`): per-message latency (a 4-byte upload and download), upload and
  download bandwidth (1 and 4 MiB tensors; the slope between the sizes), the cost of one stage
  call as the executor makes it (a worker thread calling a small two-argument function) and of
  taking one result out of a tuple on the device; and the rate a device assembles regions at;
* **device speed** (`measure_speeds`): one reference convolution timed on device 0 alone, then
  on every device at the same time (so contention between servers on one machine shows);
  speed = time alone on device 0 / time on the device under concurrency;
* **operator times** (`measure_op_times`): every operator of the model built as its own kernel
  (the same code the rewrite emits for a slice) and timed on device 0 with ``time_evaluator``
  at full size; for a sample of operators of every class and split dimension also at 1/4, 1/2
  and 3/4 of the full length, which gives the per-class fixed cost (intercept) and the
  linearity (R^2) the paper assumes. Operators with the same signature are built once.

`save_profile` / `load_profile` (`memsched.split.cost`) store devices and link in a small JSON
file; operator times are per model (`OpTimes.to_json`).
"""
from __future__ import annotations

import dataclasses
import time
from typing import Sequence

import numpy as np

from ..split.cost import Device, Link, OpTimes
from ..split.encoding import needed
from ..split.problem import SplitProblem
from ..transform.split_relax import relax_block


# A calibration is trusted when the repeats of its kernels agree (their spread, (max - min) /
# median, weighted by kernel time: long kernels dominate a prediction) and the split's
# predicted latency moves by at most this fraction between two independent link calibrations
# (`prediction_spread`). A heuristic, measured in docs/multi-device.md.
TRUSTED_SPREAD = 0.25


def spread(times) -> float:
    """(max - min) / median of repeated timings of one thing (0 for fewer than two)."""
    ts = np.asarray(list(times), dtype=float)
    if ts.size < 2 or not np.median(ts) > 0:
        return 0.0
    return float((ts.max() - ts.min()) / np.median(ts))


def calibration_summary(spreads, weights=None, link_spread: float | None = None) -> dict:
    """How repeatable a calibration was: the spread of repeated timings over every kernel
    (median, 90th percentile, and weighted by ``weights``, the kernels' times), the link's
    run-to-run spread, and whether predictions built on it can be trusted (`TRUSTED_SPREAD`)."""
    sp = np.asarray(list(spreads), dtype=float)
    out = {"kernels": int(sp.size), "spread_median": None, "spread_p90": None,
           "spread_weighted": None, "link_spread": None if link_spread is None
           else round(float(link_spread), 4), "trusted": None}
    if sp.size:
        w = np.ones_like(sp) if weights is None else np.asarray(list(weights), dtype=float)
        weighted = float((sp * w).sum() / w.sum()) if w.sum() > 0 else float(np.median(sp))
        out.update(spread_median=round(float(np.median(sp)), 4),
                   spread_p90=round(float(np.percentile(sp, 90)), 4),
                   spread_max=round(float(sp.max()), 4), spread_weighted=round(weighted, 4))
    if out["spread_weighted"] is not None:
        out["trusted"] = bool(out["spread_weighted"] <= TRUSTED_SPREAD)
    return out


def prediction_spread(result, cost, links) -> float:
    """How far the predicted latency of ``result``'s split moves between independent link
    calibrations (``links``): (max - min) / min over them. Sub-millisecond link figures (message
    latency, tuple access) scatter several-fold between calibrations of an idle machine; what
    matters is how much of that reaches this split's prediction."""
    from ..split import evaluate

    lat = [float(evaluate(result.encoding, dataclasses.replace(cost, link=link),
                          result.X[None]).latency[0]) for link in links]
    return (max(lat) - min(lat)) / max(min(lat), 1e-12)


def with_prediction_spread(summary: dict, spread_: float) -> dict:
    """``summary`` with the prediction's sensitivity to the link calibration added
    (`prediction_spread`) and the verdict re-taken: trusted when the time-weighted kernel spread
    and the prediction spread are both within `TRUSTED_SPREAD`."""
    out = dict(summary, prediction_spread=round(float(spread_), 4))
    figures = [v for v in (out.get("spread_weighted"), out["prediction_spread"]) if v is not None]
    out["trusted"] = bool(max(figures) <= TRUSTED_SPREAD) if figures else None
    return out


def with_link_spread(summary: dict, link_spread: float) -> dict:
    """``summary`` (`calibration_summary` of the kernels) with the link's spread added and the
    verdict re-taken."""
    return dict(summary, link_spread=round(float(link_spread), 4))


def _median(fn, reps: int = 7) -> float:
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def _trivial_module():
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1,), "float32"))
    with bb.function("nop", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.add(x, x))
        bb.emit_func_output(y)
    p = relax.Var("p", relax.TensorType((1, 16, 16, 16), "float32"))
    q = relax.Var("q", relax.TensorType((1, 16, 16, 16), "float32"))
    with bb.function("pair", [p, q]):  # a stage call: a few tensors in, one out
        with bb.dataflow():
            y = bb.emit_output(relax.op.add(p, q))
        bb.emit_func_output(y)
    with bb.function("tup", [p, q]):  # a stage call with two results
        with bb.dataflow():
            y = bb.emit_output(relax.Tuple([bb.emit(relax.op.add(p, q)),
                                            bb.emit(relax.op.subtract(p, q))]))
        bb.emit_func_output(y)
    a = relax.Var("a", relax.TensorType((1, 64, 64, 64), "float32"))
    b = relax.Var("b", relax.TensorType((1, 64, 64, 64), "float32"))
    with bb.function("cat", [a, b]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.concat([a, b], axis=2))
        bb.emit_func_output(y)
    w = relax.const(np.random.default_rng(0).standard_normal((64, 64, 3, 3)).astype("float32"))
    with bb.function("conv", [a]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d(a, w, padding=1))
        bb.emit_func_output(y)
    return bb.get()


def _load(session, lib, name: str):
    import os
    import tempfile

    from tvm import relax

    import uuid

    # a unique remote name: the server's dlopen would return an earlier library of the same
    # path, and overwriting a loaded library's file crashes the server
    name = f"{uuid.uuid4().hex[:12]}_{name}"
    with tempfile.TemporaryDirectory(prefix="memsched_prof_") as d:
        path = os.path.join(d, name)
        lib.export_library(path)
        session.upload(path, target=name)
    return relax.VirtualMachine(session.load_module(name), session.cpu())


def measure_link(session, lib=None, reps: int = 7) -> Link:
    """`Link` (topology ``host``) measured on one RPC session."""
    import tvm

    lib = lib or tvm.compile(_trivial_module(), target="llvm")
    vm = _load(session, lib, "memsched_prof_link.so")
    dev = session.cpu()
    small = np.ones(1, dtype="float32")
    # sub-millisecond figures: many repetitions (7 gave 0.065 ms one run and 0.318 ms the
    # next for the same call on this machine; the split executor makes hundreds of them)
    many = max(reps, 41)
    up_small = _median(lambda: tvm.runtime.tensor(small, device=dev), many)
    r_small = tvm.runtime.tensor(small, device=dev)
    down_small = _median(lambda: r_small.numpy(), many)
    sizes = (1 << 20, 4 << 20)
    up, down = [], []
    for nb in sizes:
        arr = np.ones(nb // 4, dtype="float32")
        up.append(_median(lambda: tvm.runtime.tensor(arr, device=dev), max(3, reps // 2)))
        rt = tvm.runtime.tensor(arr, device=dev)
        down.append(_median(lambda: rt.numpy(), max(3, reps // 2)))
    bw_up = (sizes[1] - sizes[0]) / max(up[1] - up[0], 1e-9)
    bw_down = (sizes[1] - sizes[0]) / max(down[1] - down[0], 1e-9)
    # a stage call as the executor makes it: handed to a worker thread, two tensor arguments
    from concurrent.futures import ThreadPoolExecutor

    p = tvm.runtime.tensor(np.ones((1, 16, 16, 16), "float32"), device=dev)
    pair, tup = vm["pair"], vm["tup"]
    getitem = session.get_function("vm.builtin.tuple_getitem")
    with ThreadPoolExecutor(max_workers=1) as ex:
        call = _median(lambda: ex.submit(pair, p, p).result(), many)
    r = tup(p, p)
    item = _median(lambda: getitem(r, 0), many)
    return Link(bandwidth=float(bw_up), bandwidth_down=float(bw_down),
                latency=float((up_small + down_small) / 2), broadcast=False, topology="host",
                call_overhead=float(call), item_overhead=float(item))


def measure_speeds(sessions: Sequence, lib=None, reps: int = 5) -> tuple[list[float], float]:
    """(speed of every device while all compute at once, relative to device 0 computing alone;
    seconds of the reference convolution on device 0 alone). Operator kernels are timed on
    device 0 alone, so this is the factor that turns them into times on each device during a
    split run; servers sharing one machine slow each other down, separate boards do not."""
    import threading

    import tvm

    lib = lib or tvm.compile(_trivial_module(), target="llvm")
    times = [0.0] * len(sessions)
    # load one after another (exporting a library is not thread-safe), time all at once
    evals = []
    for k, s in enumerate(sessions):
        vm = _load(s, lib, f"memsched_prof_speed{k}.so")
        x = tvm.runtime.tensor(np.ones((1, 64, 64, 64), "float32"), device=s.cpu())
        evals.append((vm.time_evaluator("conv", s.cpu(), number=3, repeat=reps), x))

    def one(k):
        ev, x = evals[k]
        times[k] = float(ev(x).median)

    one(0)
    alone = times[0]  # the reference: device 0 by itself, as operator kernels are timed
    th = [threading.Thread(target=one, args=(k,)) for k in range(len(sessions))]
    for t in th:
        t.start()
    for t in th:
        t.join()
    return [alone / t for t in times], alone


def measure_copy_bandwidth(session, lib=None) -> float:
    """Bytes/s a device assembles (concatenates) regions at: what stage functions pay to
    put received pieces and their own slice together."""
    import tvm

    lib = lib or tvm.compile(_trivial_module(), target="llvm")
    vm = _load(session, lib, "memsched_prof_copy.so")
    dev = session.cpu()
    a = tvm.runtime.tensor(np.ones((1, 64, 64, 64), "float32"), device=dev)
    ev = vm.time_evaluator("cat", dev, number=5, repeat=5)
    return 2 * a.numpy().nbytes / float(ev(a, a).median)


# ---------------------------------------------------------------------------- operator times
def _signature(problem: SplitProblem, op, value, dim: str, s: int) -> tuple:
    regions = []
    for r in op.inputs:
        ten = problem.tensors[r.tensor]
        reg = tuple(int(v) for v in needed(r, ten, dim, 0, s))
        regions.append((tuple(ten.shape), reg, r))
    consts = []
    for a in value.args:
        if hasattr(a, "value") and hasattr(a.value, "shape"):
            consts.append(tuple(a.value.shape))
    return (op.kind, op.cls, dim, s, tuple(regions), tuple(problem.tensors[op.output].shape),
            str(value.attrs), tuple(consts))


def _kernel_function(bb, name, problem, op, value, dim, s):
    """A Relax function computing output slice [0, s) of ``op`` along ``dim`` from exactly
    the input regions it reads (what a device's stage function does for that op)."""
    from tvm import relax

    from ..transform.split_across_devices import _emit_task, _region_shape

    params, shapes, ins = [], [], []
    for k, r in enumerate(op.inputs):
        ten = problem.tensors[r.tensor]
        reg = tuple(int(v) for v in needed(r, ten, dim, 0, s))
        if reg[1] <= reg[0] or reg[3] <= reg[2]:
            ins.append(None)  # this slice reads nothing of that input (a concat's other part)
            continue
        shp = _region_shape(ten, reg)
        shapes.append((shp, ten.dtype))
        params.append(relax.Var(f"in{k}", relax.TensorType(shp, ten.dtype)))
        ins.append(params[-1])
    with bb.function(name, params):
        with bb.dataflow():
            y = _emit_task(bb, op, value, dim, 0, s, ins,
                           len(problem.tensors[op.output].shape))
            y = bb.emit_output(y)
        bb.emit_func_output(y)
    return shapes


def measure_op_times(mod, problem: SplitProblem, session, func_name: str = "main",
                     sample_per_class: int = 2, number: int = 3, repeat: int = 3,
                     progress=None) -> OpTimes:
    """Time every operator's kernel on ``session`` (see the module docstring)."""
    import tvm
    from tvm import relax

    _, block = relax_block(mod, func_name)
    bindings = list(block.bindings)
    bb = relax.BlockBuilder()
    funcs: dict = {}  # signature -> (name, input shapes)
    want: list = []  # (op index, dim, s, signature)

    def add(i, dim, s):
        op = problem.ops[i]
        value = bindings[op.source].value
        sig = _signature(problem, op, value, dim, s)
        if sig not in funcs:
            name = f"k{len(funcs)}"
            funcs[sig] = (name, _kernel_function(bb, name, problem, op, value,
                                                 "whole" if dim == "whole" else dim, s))
        want.append((i, dim, s, sig))

    for i, op in enumerate(problem.ops):
        dims = list(op.dims) or ["whole"]
        add(i, dims[0], int(op.dims[dims[0]]) if op.dims else 1)
    # linearity sample: per (class, dim), the ops with the most FLOPs, at 1/4, 1/2, 3/4
    sample: dict = {}
    for i, op in enumerate(problem.ops):
        for d, L in op.dims.items():
            if int(L) >= 4:
                sample.setdefault((op.cls, d), []).append(i)
    for (cls, d), ops in sample.items():
        ops.sort(key=lambda i: -problem.ops[i].flops)
        for i in ops[:sample_per_class]:
            L = int(problem.ops[i].dims[d])
            for frac in (0.25, 0.5, 0.75):
                add(i, d, max(1, int(round(L * frac))))
    if progress:
        progress(f"building {len(funcs)} kernels")
    lib = tvm.compile(bb.get(), target="llvm")
    vm = _load(session, lib, "memsched_prof_ops.so")
    dev = session.cpu()
    rng = np.random.default_rng(0)
    measured: dict = {}
    spreads: list = []
    weights: list = []
    for q, (sig, (name, shapes)) in enumerate(funcs.items()):
        args = [tvm.runtime.tensor(rng.standard_normal(s).astype(dt), device=dev)
                for s, dt in shapes]
        ev = vm.time_evaluator(name, dev, number=number, repeat=repeat)
        r = ev(*args)
        measured[sig] = float(r.median)
        spreads.append(spread(r.results))
        weights.append(float(r.median))
        if progress and q % 25 == 0:
            progress(f"timed {q + 1}/{len(funcs)} kernels")
    full = {}
    points: dict = {}
    for i, dim, s, sig in want:
        t = measured[sig]
        op = problem.ops[i]
        L = int(op.dims[dim]) if dim in op.dims else 1
        if s == L:
            full[i] = t
        points.setdefault((op.cls, dim), {}).setdefault(i, []).append((s / L, t))
    # per (class, dim): fit t = f + m * s/L over the sampled ops (the full point included)
    intercept: dict = {}
    linearity: dict = {}
    for (cls, dim), per_op in points.items():
        fr, r2 = [], []
        for i, pts in per_op.items():
            pts = sorted(set(pts + [(1.0, full[i])]))
            if len(pts) < 3:
                continue
            x = np.array([p[0] for p in pts])
            y = np.array([p[1] for p in pts])
            m, f = np.polyfit(x, y, 1)
            pred = f + m * x
            ss = float(((y - y.mean()) ** 2).sum())
            r2.append(1.0 - float(((y - pred) ** 2).sum()) / ss if ss > 0 else 1.0)
            fr.append(max(0.0, min(f, float(y.min()))) / max(full[i], 1e-12))
        if fr:
            intercept[(cls, dim)] = float(np.median(fr))
            linearity[f"{cls}/{dim}"] = {"ops": len(fr), "r2_min": round(min(r2), 4),
                                          "r2_median": round(float(np.median(r2)), 4),
                                          "fixed_fraction": round(float(np.median(fr)), 4)}
    fixed, slope = {}, {}
    for dim in ("cout", "fmh", "whole"):
        f = np.zeros(problem.n)
        m = np.zeros(problem.n)
        for i, op in enumerate(problem.ops):
            t = full[i]
            if dim == "whole":
                f[i], m[i] = 0.0, t
                continue
            if dim not in op.dims:
                continue
            L = int(op.dims[dim])
            frac = intercept.get((op.cls, dim), 0.0)
            f[i] = t * frac
            m[i] = t * (1.0 - frac) / L
        fixed[dim], slope[dim] = f, m
    times = OpTimes(fixed, slope, "measured", linearity)
    times.kernels = len(funcs)
    times.calibration = calibration_summary(spreads, weights)
    return times


def profile_devices(sessions: Sequence, memory_bytes: Sequence | None = None,
                    addresses: Sequence[str] = ()) -> tuple[list[Device], Link, dict]:
    """Devices (measured speeds) and link (measured on device 0's session)."""
    import tvm

    lib = tvm.compile(_trivial_module(), target="llvm")
    # twice, independently: how far two calibrations of the same link disagree is the figure
    # that says whether the machine is quiet enough to predict from (`calibration_summary`)
    a, b = measure_link(sessions[0], lib), measure_link(sessions[0], lib)
    fields = ("latency", "bandwidth", "bandwidth_down", "call_overhead", "item_overhead")
    link_spread = max(abs(getattr(a, f) - getattr(b, f)) / max(min(getattr(a, f), getattr(b, f)),
                                                              1e-12) for f in fields)
    link = dataclasses.replace(a, **{f: (getattr(a, f) + getattr(b, f)) / 2 for f in fields})
    speeds, ref = measure_speeds(sessions, lib)
    copy_bw = measure_copy_bandwidth(sessions[0], lib)
    mem = list(memory_bytes or [None] * len(sessions))
    devices = [Device(mem[k] if k < len(mem) else None, float(speeds[k]), f"dev{k}",
                      addresses[k] if k < len(addresses) else "")
               for k in range(len(sessions))]
    return devices, link, {"reference_conv_s": ref, "copy_bandwidth": copy_bw,
                           "link_spread": link_spread, "links": (a, b)}

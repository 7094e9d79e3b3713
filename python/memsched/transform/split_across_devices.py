"""`SplitAcrossDevices`: split every operator of a Relax model over several devices (GenEFlow).

The pass reads ``main`` (one dataflow block, static shapes) as a `memsched.split.SplitProblem`
in MemoryAwareSchedule's order, searches a split (`memsched.split.solve`: GA by default) under
the devices' memory limits, and rewrites the module into:

* ``d{k}_s{m}``: what device ``k`` computes in stage ``m``: its slices of the stage's operators
  (convolution weights sliced along cout, input rows with their halo along fmh, batch-norm and
  bias constants sliced along cout), taking the pieces it receives and the slices it kept from
  earlier stages, returning the slices needed later;
* ``d{k}_c{q}``: small functions that cut a sub-region (a halo) out of a slice for sending;
* ``main``: the same signature as before; it calls the device functions stage by stage and does
  the host's part in between (cut pieces out of what it fetched, concatenate the outputs), so
  the rewritten module runs on one machine and computes what the unsplit model computes.

`split_program` returns the JSON-able description of the same schedule for the RPC executor
(`memsched.runtime.rpc_split`), and `device_module(mod, k)` the functions device ``k`` runs.

Results are attached to ``main``: ``memsched.split_latency_s`` (predicted),
``memsched.split_method``, ``memsched.split_devices``, ``memsched.split_peak_bytes`` (per device,
comma-separated), ``memsched.split_memory_ok`` and ``memsched.split_program`` (JSON).
"""
from __future__ import annotations

import json

import numpy as np
import tvm
from tvm import relax

from ..split.plan import Plan, area, build_plan
from ..split.problem import SplitError
from .split_relax import from_relax, relax_block

# ---------------------------------------------------------------------------- region helpers


def _full(ten) -> tuple:
    return (0, ten.channels, 0, ten.rows)


def _slice(bb, x, region, base, rank):
    """``x`` holds ``base`` of a tensor; the sub-region ``region`` of it (x itself if equal)."""
    if tuple(region) == tuple(base):
        return x
    axes, begin, end = [], [], []
    if (region[0], region[1]) != (base[0], base[1]):
        axes.append(1)
        begin.append(region[0] - base[0])
        end.append(region[1] - base[0])
    if rank >= 3 and (region[2], region[3]) != (base[2], base[3]):
        axes.append(2)
        begin.append(region[2] - base[2])
        end.append(region[3] - base[2])
    if not axes:
        return x
    return bb.emit(relax.op.strided_slice(x, axes, begin, end))


def _stack(bb, values, axis):
    if len(values) == 1:
        return values[0]
    return bb.emit(relax.op.concat(values, axis=1 if axis == "c" else 2))


def _np(const) -> np.ndarray:
    return const.value.numpy()


def _out_dtype(attrs):
    dt = attrs.out_dtype
    return None if dt is None or str(dt) in ("", "void") else str(dt)


def _dims(x) -> list[int]:
    return [int(d.value) for d in x.ty.shape.values]


# ---------------------------------------------------------------------------- op slices
def _emit_task(bb, op, value, dim, a, b, ins, rank):
    """Emit device-side computation of op slice ``[a, b)`` along ``dim`` from the assembled
    input regions ``ins`` (one per op input, None when a region is empty)."""
    attrs = value.attrs
    cls = op.cls
    if cls == "whole" or dim == "whole":
        return bb.emit(relax.Call(value.op, _map_args(value.args, op.arg_reqs, ins), attrs,
                                  value.ty_args))
    if cls == "conv":
        x = ins[0]
        w = _np(value.args[1])
        r = op.inputs[0]
        pad = [int(p) for p in attrs.padding]
        groups = int(attrs.groups)
        lo = hi = None
        if dim == "cout":
            if groups > 1:
                og = r.cout_group
                lo, hi = (a // og) * og, -(-b // og) * og
                w, groups = w[lo:hi], (hi - lo) // og
            else:
                w = w[a:b]
        else:
            s, ext = int(attrs.strides[0]), r.extent
            h0 = max(a * s - pad[0], 0)
            top = h0 - (a * s - pad[0])
            hi_row = (b - 1) * s - pad[0] + ext
            h_in = _dims(x)[2] + h0  # region rows [h0, h0 + rows)
            pad = [top, pad[1], max(hi_row - h_in, 0), pad[3]]
        y = bb.emit(relax.op.nn.conv2d(
            x, relax.const(w), strides=[int(v) for v in attrs.strides], padding=pad,
            dilation=[int(v) for v in attrs.dilation], groups=groups,
            data_layout=attrs.data_layout, kernel_layout=attrs.kernel_layout,
            out_layout=attrs.out_layout, out_dtype=_out_dtype(attrs)))
        if lo is not None and (lo, hi) != (a, b):
            y = bb.emit(relax.op.strided_slice(y, [1], [a - lo], [b - lo]))
        return y
    if cls == "pool":
        x = ins[0]
        pad = [int(p) for p in attrs.padding]
        if dim == "fmh":
            r = op.inputs[0]
            s = int(attrs.strides[0])
            h0 = max(a * s - pad[0], 0)
            top = h0 - (a * s - pad[0])
            hi_row = (b - 1) * s - pad[0] + r.extent
            pad = [top, pad[1], max(hi_row - (_dims(x)[2] + h0), 0), pad[3]]
        fn = relax.op.nn.max_pool2d if op.kind.endswith("max_pool2d") else relax.op.nn.avg_pool2d
        kw = dict(pool_size=[int(v) for v in attrs.pool_size],
                  strides=[int(v) for v in attrs.strides], padding=pad,
                  dilation=[int(v) for v in attrs.dilation], ceil_mode=bool(attrs.ceil_mode),
                  layout=attrs.layout, out_layout=attrs.out_layout)
        if fn is relax.op.nn.avg_pool2d or hasattr(attrs, "count_include_pad"):
            kw["count_include_pad"] = bool(attrs.count_include_pad)
        return bb.emit(fn(x, **kw))
    if cls == "bn":
        args = [ins[0]] + [relax.const(_np(c)[a:b]) if dim == "cout" else c
                           for c in value.args[1:]]
        t = bb.emit(relax.Call(value.op, args, attrs))
        return bb.emit(relax.TupleGetItem(t, 0))
    if cls == "eltwise":
        args = []
        for arg, rk in zip(value.args, op.arg_reqs):
            if rk is not None:
                args.append(ins[rk])
            elif isinstance(arg, tvm.ir.expr.Constant):
                args.append(_slice_const(arg, dim, a, b, rank))
            else:
                args.append(arg)
        return bb.emit(relax.Call(value.op, args, attrs, value.ty_args))
    if cls == "concat":
        vals = [ins[k] for k in op.arg_reqs[0] if ins[k] is not None]
        return _stack(bb, vals, "c")
    if cls == "mean":
        return bb.emit(relax.Call(value.op, [ins[0]], attrs))
    if cls == "dense":
        w = _np(value.args[1])[:, a:b]
        return bb.emit(relax.Call(value.op, [ins[0], relax.const(w)], attrs))
    raise SplitError(f"cannot rewrite op {op.name!r} of class {cls}")


def _slice_const(c, dim, a, b, rank):
    arr = _np(c)
    axis = (1 if dim == "cout" else 2) - (rank - arr.ndim)
    if axis < 0 or arr.shape[axis] == 1:
        return c
    idx = [slice(None)] * arr.ndim
    idx[axis] = slice(a, b)
    return relax.const(np.ascontiguousarray(arr[tuple(idx)]))


def _map_args(args, arg_reqs, ins):
    out = []
    for arg, rk in zip(args, arg_reqs):
        if isinstance(rk, list):  # a tuple: its tensors replaced, other fields kept
            fields = list(arg.fields) if isinstance(arg, relax.Tuple) else [None] * len(rk)
            out.append(relax.Tuple([ins[k] if k is not None else f
                                    for f, k in zip(fields, rk)]))
        elif rk is not None:
            out.append(ins[rk])
        else:
            if isinstance(arg, tvm.ir.Var):
                raise SplitError("a whole operator reads a non-tensor variable; cannot rewrite")
            out.append(arg)
    return out


# ---------------------------------------------------------------------------- the rewrite
def rewrite(mod: tvm.IRModule, plan: Plan, func_name: str = "main"):
    """(rewritten module, program dict) for ``plan`` of ``mod[func_name]``."""
    func, block = relax_block(mod, func_name)
    prob = plan.problem
    n = plan.enc.n
    bindings = list(block.bindings)
    ten = prob.tensors
    rank = {t: len(x.shape) for t, x in enumerate(ten)}
    bb = relax.BlockBuilder()
    program = {"devices": n, "stages": [], "outputs": [],
               "inputs": [p.name for p in func.params],
               "tensors": {str(t): {"shape": list(x.shape), "dtype": x.dtype, "name": x.name}
                           for t, x in enumerate(ten)}}
    n_cut = [0] * n
    for m, st in enumerate(plan.stages):
        sprog = {"transfers": [], "calls": []}
        piece_keys = {}  # (op, req, owner, dest) -> key
        for q, tr in enumerate(st.transfers):
            cut_fn = None
            if tr.cut:
                cut_fn = f"d{tr.owner}_c{n_cut[tr.owner]}"
                n_cut[tr.owner] += 1
                base = plan.held[(tr.tensor, tr.owner)]
                t = ten[tr.tensor]
                x = relax.Var("x", relax.TensorType(_region_shape(t, base), t.dtype))
                with bb.function(cut_fn, [x]):
                    with bb.dataflow():
                        y = bb.emit_output(_slice(bb, x, tr.hull, base, rank[tr.tensor]))
                    bb.emit_func_output(y)
            pieces = []
            for dest, region in tr.pieces:
                key = f"s{m}t{q}d{dest}"
                piece_keys[(tr.op, tr.req, tr.owner, dest)] = key
                pieces.append({"dest": dest, "region": list(region), "key": key})
            sprog["transfers"].append({"tensor": tr.tensor, "owner": tr.owner,
                                       "hull": list(tr.hull), "cut_fn": cut_fn,
                                       "pieces": pieces})
        for k, tasks in sorted(st.tasks.items()):
            name = f"d{k}_s{m}"
            params, args_desc, local = [], [], {}
            for tr in st.transfers:
                for dest, region in tr.pieces:
                    if dest == k:
                        t = ten[tr.tensor]
                        v = relax.Var(f"p_{t.name}", relax.TensorType(_region_shape(t, region),
                                                                      t.dtype))
                        params.append(v)
                        local[("piece", tr.op, tr.req, tr.owner)] = v
                        args_desc.append({"piece": piece_keys[(tr.op, tr.req, tr.owner, k)]})
            for t_id in st.reads[k]:
                t = ten[t_id]
                v = relax.Var(f"h_{t.name}", relax.TensorType(
                    _region_shape(t, plan.held[(t_id, k)]), t.dtype))
                params.append(v)
                local[("held", t_id)] = v
                args_desc.append({"held": t_id})
            with bb.function(name, params):
                with bb.dataflow():
                    for task in tasks:
                        op = prob.ops[task.op]
                        ins = []
                        for u in task.inputs:
                            if area(u.need) == 0:
                                ins.append(None)
                                continue
                            vals = []
                            for p in u.parts:
                                if p.owner == k:
                                    vals.append(_slice(bb, local[("held", u.tensor)], p.region,
                                                       plan.held[(u.tensor, k)],
                                                       rank[u.tensor]))
                                else:
                                    vals.append(local[("piece", task.op, u.req, p.owner)])
                            ins.append(_stack(bb, vals, u.axis))
                        y = _emit_task(bb, op, bindings[op.source].value, plan.enc.dims[task.op],
                                       task.out[0], task.out[1], ins, rank[op.output])
                        local[("held", op.output)] = y
                    res_ids = st.results[k] or [prob.ops[tasks[-1].op].output]
                    outs = [local[("held", t)] for t in res_ids]
                    out = outs[0] if len(outs) == 1 else relax.Tuple(outs)
                    out = bb.emit_output(out)
                bb.emit_func_output(out)
            sprog["calls"].append({"device": k, "fn": name, "args": args_desc,
                                   "results": res_ids})
        program["stages"].append(sprog)
    for t, owners in plan.gathers.items():
        program["outputs"].append({"tensor": t, "axis": plan.gather_axis[t],
                                   "parts": [{"owner": o, "region": list(r)} for o, r in owners]})
    program["return"] = _struct_json(prob.return_struct)
    program["held"] = {f"{t}:{k}": list(r) for (t, k), r in plan.held.items()}
    # main: the stages in order, the host's work in between
    params = list(func.params)
    with bb.function(func_name, params, attrs=dict(func.attrs) if func.attrs else None):
        with bb.dataflow():
            gv_of = {gv.name_hint: gv for gv in bb.get().get_global_vars()}
            held_v: dict = {}
            for m, sprog in enumerate(program["stages"]):
                pieces = {}
                for tr in sprog["transfers"]:
                    t = ten[tr["tensor"]]
                    if tr["owner"] < 0:
                        src, base = params[tr["tensor"]], _full(t)
                    else:
                        src = held_v[(tr["tensor"], tr["owner"])]
                        base = plan.held[(tr["tensor"], tr["owner"])]
                        if tr["cut_fn"]:
                            src = bb.emit(relax.Call(gv_of[tr["cut_fn"]], [src]))
                            base = tuple(tr["hull"])
                    for pc in tr["pieces"]:
                        pieces[pc["key"]] = _slice(bb, src, tuple(pc["region"]), base,
                                                   rank[tr["tensor"]])
                for call in sprog["calls"]:
                    k = call["device"]
                    args = [pieces[a["piece"]] if "piece" in a else held_v[(a["held"], k)]
                            for a in call["args"]]
                    r = bb.emit(relax.Call(gv_of[call["fn"]], args))
                    if len(call["results"]) == 1:
                        held_v[(call["results"][0], k)] = r
                    else:
                        for q, t in enumerate(call["results"]):
                            held_v[(t, k)] = bb.emit(relax.TupleGetItem(r, q))
            outv = {}
            for o in program["outputs"]:
                vals = [held_v[(o["tensor"], p["owner"])] for p in o["parts"]]
                outv[o["tensor"]] = _stack(bb, vals, o["axis"])
            ret = _build_struct(prob.return_struct, outv, params)
            ret = bb.emit_output(ret)
        bb.emit_func_output(ret)
    new = bb.get()
    # keep the other functions of the input module
    for gv, f in mod.functions.items():
        if gv.name_hint != func_name and gv.name_hint not in {g.name_hint for g in
                                                             new.get_global_vars()}:
            new[gv.name_hint] = f
    return relax.transform.Normalize()(new), program


def _region_shape(t, region):
    shape = list(t.shape)
    if len(shape) >= 2:
        shape[1] = region[1] - region[0]
    if len(shape) >= 3:
        shape[2] = region[3] - region[2]
    return shape


def _struct_json(s):
    if isinstance(s, list):
        return [_struct_json(x) for x in s]
    return int(s)


def _build_struct(s, outv, params):
    if isinstance(s, list):
        return relax.Tuple([_build_struct(x, outv, params) for x in s])
    if s in outv:
        return outv[s]
    return params[s]  # a graph input returned as is


def device_module(mod: tvm.IRModule, device: int) -> tvm.IRModule:
    """The functions device ``device`` runs (``d{device}_*``) as a module of their own."""
    prefix = f"d{device}_"
    funcs = {gv.name_hint: f for gv, f in mod.functions.items()
             if gv.name_hint.startswith(prefix)}
    return tvm.IRModule(funcs)


def split_program(mod: tvm.IRModule, func_name: str = "main") -> dict:
    """The program (stages, transfers, calls, gathers) recorded by the pass on ``main``."""
    attrs = mod[func_name].attrs
    if attrs is None or "memsched.split_program" not in attrs:
        raise SplitError(f"{func_name!r} was not rewritten by SplitAcrossDevices")
    return json.loads(str(attrs["memsched.split_program"]))


# ---------------------------------------------------------------------------- the pass
@tvm.transform.module_pass(opt_level=0, name="SplitAcrossDevices")
class SplitAcrossDevices:
    """Split ``main`` of a Relax module across devices (module docstring).

    Parameters
    ----------
    devices : list of dict
        ``{"memory_bytes": int | None, "gflops" | "speed": float}`` per device (or `Device`).
    link : dict
        ``{"bandwidth": B/s, "latency": s, "broadcast": bool, "topology": "router" | "host",
        "call_overhead": s, "bandwidth_down": B/s}`` (`memsched.split.Link`).
    order : list of int, optional
        Execution order (op ids of the block's `OpGraph`); default MemoryAwareSchedule's.
    method : str
        ``ga`` (default), ``greedy``, ``uniform`` or ``single``.
    times : OpTimes, optional
        Measured operator times (`memsched.split.calibrate`); default: FLOPs / device gflops.
    seed, ga_options : GA seed and options (``n_gen``, ``pop_size``, ``patience``,
        ``time_limit``).
    """

    def __init__(self, devices, link=None, order=None, method: str = "ga", times=None,
                 count_weights: bool = True, seed: int = 0, func_name: str = "main",
                 **ga_options):
        from ..split.cost import Link, devices_from_specs

        self.devices = devices_from_specs(devices)
        self.link = link if isinstance(link, Link) else Link.from_dict(link or {})
        self.order = order
        self.method = method
        self.times = times
        self.count_weights = count_weights
        self.seed = seed
        self.func_name = func_name
        self.ga_options = ga_options
        self.result = None  # the SplitResult of the last run

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        new, self.result = split_module(mod, self.devices, self.link, order=self.order,
                                        method=self.method, times=self.times,
                                        count_weights=self.count_weights, seed=self.seed,
                                        func_name=self.func_name, **self.ga_options)
        return new


def split_module(mod, devices, link, order=None, method="ga", times=None, count_weights=True,
                 seed=0, func_name="main", problem=None, result=None, **ga_options):
    """Search a split of ``mod[func_name]`` and rewrite it: (new module, `SplitResult`).

    ``problem`` / ``result``: reuse an already built problem / solved split. A split that
    fits no device memory is never rewritten: `SplitError` says what it would need."""
    from ..split import CostModel, OpTimes, solve
    from ..split.solve import require_feasible

    problem = problem or from_relax(mod, order=order, func_name=func_name)
    if result is None:
        cost = CostModel(list(devices), link, times or OpTimes.from_flops(problem),
                         count_weights=count_weights)
        opts = dict(ga_options)
        if method == "ga":
            opts["seed"] = seed
        result = require_feasible(solve(problem, cost, method, **opts), cost)
    plan = build_plan(result.encoding, result.X)
    new, program = rewrite(mod, plan, func_name)
    row = result.evaluation.row(0)
    func = new[func_name].with_attrs({
        "memsched.split_latency_s": float(row["latency_s"]),
        "memsched.split_method": result.method,
        "memsched.split_devices": int(len(devices)),
        "memsched.split_peak_bytes": ",".join(str(v) for v in row["per_device_peak_bytes"]),
        "memsched.split_memory_ok": int(row["memory_ok"]),
        "memsched.split_program": json.dumps(program),
    })
    new[func_name] = func
    return new, result

"""The rewrite half of `TilePatches`: apply patch plans of `memsched.patches` to a Relax
dataflow block described by `memsched.transform.tile_patches_describe` (per patch slices,
border pads, the region's operators on the windows, reassembly by concatenation).
"""
from __future__ import annotations


import numpy as np
import tvm
from tvm import relax

from ..patches import PAD_MIN
from .tile_patches_describe import LAYOUTS, BlockModel


def _pad_value(kind: str, dtype: str, original=None):
    if kind == PAD_MIN:
        if "float" in dtype:
            return float(np.finfo(np.dtype(dtype)).min)
        return int(np.iinfo(np.dtype(dtype)).min)
    return original if original is not None else 0.0


def _with_args(value, mapping: dict):
    """``value`` (a Call) with the activation arguments at the given paths replaced."""
    args = list(value.args)
    for path, new in mapping.items():
        if len(path) == 1:
            args[path[0]] = new
        else:
            fields = list(args[path[0]].fields)
            fields[path[1]] = new
            args[path[0]] = relax.Tuple(fields)
    return tvm.ir.Call(value.op, args, value.attrs, list(getattr(value, "ty_args", None) or []))


def rewrite_block(bm: BlockModel, plans) -> list:
    """The bindings of the dataflow block with each region of ``plans`` (one `PatchPlan` or
    several, in model order) patched (see the module docstring). A region's split tensors keep
    their variables, which the next region reads like any region input."""
    plans = list(plans) if isinstance(plans, (list, tuple)) else [plans]
    out_bindings = list(bm.hoisted)
    at = 0
    for i, plan in enumerate(plans):
        out_bindings += list(bm.bindings[at:plan.region.start])
        out_bindings += _patched_bindings(bm, plan, f"r{i}" if i else "")
        at = plan.region.length
    return out_bindings + list(bm.bindings[at:])


def _patched_bindings(bm: BlockModel, plan, tag: str = "") -> list:
    """The bindings of one patched region (``tag`` starts the new variables' names, unique
    per region)."""
    sm = bm.sm
    ah, aw, ac = LAYOUTS[bm.layout]
    norm = relax.BlockBuilder()
    out_bindings = []
    final = {nid: t for t, nid in plan.result.items()}
    nvar: list = []

    def var_for(src):
        return bm.var_of[src[1]] if isinstance(src, tuple) else nvar[src]

    for nid, nd in enumerate(plan.nodes):
        ins = [var_for(s) for s in nd.inputs]
        dtype = bm.dtype_of.get(nd.tensor, "float32")
        if nd.kind == "slice":
            base = nd.base
            expr = relax.op.strided_slice(
                ins[0], [ah, aw], [nd.win.h0 - base.h0, nd.win.w0 - base.w0],
                [nd.win.h1 - base.h0, nd.win.w1 - base.w0], [1, 1], assume_inbound=True)
        elif nd.kind == "pad":
            top, bottom, left, right = nd.pads
            width = [0] * 8
            width[2 * ah], width[2 * ah + 1], width[2 * aw], width[2 * aw + 1] = \
                top, bottom, left, right
            expr = relax.op.nn.pad(ins[0], width, "constant", _pad_value(nd.pad_value, dtype))
        elif nd.kind == "concat":
            expr = relax.op.concat(ins, axis=ah if nd.axis == 1 else aw)
        elif nd.kind == "partial":  # the sum over the patch's own cells
            value = bm.bindings[nd.op].value
            keep = bool(value.attrs.keepdims) if sm.ops[nd.op].kind != "nn.adaptive_avg_pool2d" \
                else True
            expr = relax.op.sum(ins[0], axis=[ah, aw], keepdims=keep)
        elif nd.kind == "accumulate":
            expr = relax.op.add(ins[0], ins[1])
        elif nd.kind in ("reduce", "vector"):
            op = sm.ops[nd.op]
            var = bm.var_of[op.output]  # the vector keeps its variable (read as before)
            if nd.kind == "vector":
                expr = bm.bindings[nd.op].value
            elif op.divisor != 1:
                expr = norm.normalize(relax.op.divide(
                    ins[0], relax.const(op.divisor, bm.dtype_of.get(op.output, "float32"))))
            else:
                expr = ins[0]
            nvar.append(var)
            out_bindings.append(relax.VarBinding(var, expr))
            continue
        else:
            value = bm.bindings[nd.op].value
            op = sm.ops[nd.op]
            name = value.op.name if isinstance(value, tvm.ir.Call) else ""
            if op.is_pad:
                top, bottom, left, right = nd.pads
                width = [0] * 8
                width[2 * ah], width[2 * ah + 1], width[2 * aw], width[2 * aw + 1] = \
                    top, bottom, left, right
                expr = relax.op.nn.pad(ins[0], width, str(value.attrs.pad_mode),
                                       float(value.attrs.pad_value))
            elif name == "relax.nn.conv2d":
                a = value.attrs
                # margins: its own padding on the window; else none on a padded input
                pad = tuple(int(p) for p in a.padding) if nd.implicit else 0
                expr = relax.op.nn.conv2d(
                    ins[0], value.args[1], tuple(a.strides), pad, tuple(a.dilation),
                    int(a.groups), str(a.data_layout), str(a.kernel_layout),
                    None if a.out_layout is None else str(a.out_layout), a.out_dtype)
            elif name in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
                a = value.attrs
                f = relax.op.nn.max_pool2d if name == "relax.nn.max_pool2d" \
                    else relax.op.nn.avg_pool2d
                pad = tuple(int(p) for p in a.padding) if nd.implicit else 0
                expr = f(ins[0], tuple(a.pool_size), tuple(a.strides), pad, tuple(a.dilation),
                         False, bool(a.count_include_pad), str(a.layout),
                         None if a.out_layout is None else str(a.out_layout))
            elif op.kind == "alias":
                expr = ins[0]
            elif op.kind == "getitem0":
                expr = relax.TupleGetItem(ins[0], 0)
            else:
                expr = _with_args(value, dict(zip(bm.arg_paths[nd.op], ins)))
        expr = norm.normalize(expr)
        if nid in final:
            var = bm.var_of[final[nid]]  # the split tensor keeps its variable
        else:
            pre = {"partial": "part", "accumulate": "acc"}.get(nd.kind, "p")
            if nd.phase:
                pre = f"s{nd.phase}{pre}"
            var = relax.DataflowVar(
                tag + (f"{pre}{nd.patch}_{sm.tensors[nd.tensor].name}" if nd.patch >= 0
                       else f"cat_{sm.tensors[nd.tensor].name}"), expr.ty)
        nvar.append(var)
        out_bindings.append(relax.VarBinding(var, expr))
    return out_bindings

"""The description half of `TilePatches`: a Relax dataflow block as the patch problem's
`SpatialModel` plus the matching `OpGraph` under TVM's memory model (`BlockModel`). The pass
is `memsched.transform.tile_patches`; the rewrite that applies a plan,
`memsched.transform.tile_patches_rewrite`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import tvm
from tvm import relax

from ..graph import GraphBuilder
from ..memory import MemoryModel
from ..patches import (INT_RANGES, PAD_MIN, PAD_NONE, PAD_ZERO, Refused, SOp, SpatialModel,
                       STensor, classify_se)

TVM_MODEL = MemoryModel.get("tvm")

ELEMENTWISE = {
    "relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
    "relax.minimum", "relax.power", "relax.nn.relu", "relax.clip", "relax.sigmoid",
    "relax.tanh", "relax.exp", "relax.negative", "relax.abs", "relax.nn.silu",
    "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.leakyrelu", "relax.astype", "relax.sqrt",
    "relax.rsqrt", "relax.square", "relax.floor", "relax.round", "relax.hardswish",
    "relax.nn.prelu", "relax.right_shift", "relax.left_shift", "relax.bitwise_and",
    "relax.bitwise_or", "relax.bitwise_xor", "relax.quantize", "relax.dequantize",
}
WINDOW = ("relax.nn.conv2d", "relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.pad")
LAYOUTS = {"NCHW": (2, 3, 1), "NHWC": (1, 2, 3)}  # (H axis, W axis, C axis)


def _shape(ty):
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    try:
        return tuple(int(d) for d in ty.shape.values)
    except (TypeError, ValueError):
        return None


def _nbytes(ty) -> int:
    if isinstance(ty, relax.TupleType):
        return sum(_nbytes(f) for f in ty.fields)
    shape = _shape(ty)
    if shape is None:
        return 0
    n = tvm.runtime.DataType(ty.dtype).bits // 8 or 1
    for d in shape:
        n *= d
    return n


def _itemsize(ty) -> int:
    return max(tvm.runtime.DataType(ty.dtype).bits // 8, 1)


# ---------------------------------------------------------------------------- the description
@dataclass
class BlockModel:
    """A dataflow block as the patch geometry sees it: `SpatialModel` ``sm`` (op ``k`` =
    ``bindings[k]``), the matching `OpGraph` ``graph`` (op ``k`` = operator ``k``), and what the
    rewrite needs per operator (the binding, the paths of its activation arguments)."""

    sm: SpatialModel
    graph: object
    tensor_index: list[int]
    bindings: list  # op bindings (read an activation), file order
    hoisted: list  # bindings that read no activation (kept in front)
    var_of: dict  # sm tensor index -> relax Var
    arg_paths: list  # per op: argument paths ((i,) or (i, j) inside a Tuple) of activations
    layout: str
    dtype_of: dict = field(default_factory=dict)  # sm tensor index -> dtype string


def describe_block(func: relax.Function, block: relax.DataflowBlock) -> BlockModel:
    """The `BlockModel` of ``block`` (raises `Refused` when it has no window operator or mixes
    layouts)."""
    n_in = func.attrs["num_input"] if func.attrs is not None and "num_input" in func.attrs \
        else len(func.params)
    params = list(func.params)[:int(n_in)]
    layouts = set()
    for b in block.bindings:
        v = b.value
        if isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op) and v.op.name in WINDOW \
                and v.op.name != "relax.nn.pad":
            a = v.attrs
            layouts.add(str(a.data_layout) if v.op.name == "relax.nn.conv2d" else str(a.layout))
    layouts &= set(LAYOUTS)
    if not layouts:
        raise Refused("no conv2d/pool2d in NCHW or NHWC layout")
    if len(layouts) > 1:
        raise Refused(f"mixed layouts {sorted(layouts)}")
    layout = layouts.pop()
    ah, aw, ac = LAYOUTS[layout]

    tensors: dict[int, STensor] = {}
    var_of: dict[int, object] = {}
    index: dict = {}  # relax Var -> sm tensor index
    dtype_of: dict[int, str] = {}

    def tensor(var) -> int:
        if var in index:
            return index[var]
        t = len(var_of)
        shape = _shape(var.ty)
        if shape is not None and len(shape) == 4 and shape[0] == 1:
            s = (1, shape[ah], shape[aw], shape[ac])
        else:
            s = tuple(shape or ())
        item = _itemsize(var.ty) if isinstance(var.ty, relax.TensorType) else 1
        tensors[t] = STensor(t, var.name, s, item)
        if isinstance(var.ty, relax.TupleType) or shape is None:
            tensors[t] = STensor(t, var.name, (max(_nbytes(var.ty), 1),), 1)
        var_of[t] = var
        index[var] = t
        if isinstance(var.ty, relax.TensorType):
            dtype_of[t] = str(var.ty.dtype)
        return t

    acts = set(params)
    for p in params:
        tensor(p)
    ops: list[SOp] = []
    op_bindings, hoisted, paths_all, macs = [], [], [], []
    b = GraphBuilder("block")
    gt: dict[int, int] = {}
    tensor_index: list[int] = []
    for p in params:
        gt[index[p]] = b.input(p.name, _nbytes(p.ty))
        tensor_index.append(index[p])
    for bd in block.bindings:
        reads = [v for v in relax.analysis.free_vars(bd.value) if v in acts]
        if not isinstance(bd, relax.VarBinding) or not reads:
            if not isinstance(bd, relax.VarBinding):
                raise Refused("a match_cast binding")
            hoisted.append(bd)
            continue
        acts.add(bd.var)
        k = len(ops)
        if _is_bn(bd.value) and isinstance(bd.var.ty, relax.TupleType):
            # inference batch norm: (y, mean, var); only y (field 0) is a feature map
            f0 = bd.var.ty.fields[0]
            index[bd.var] = t = len(var_of)
            shape = _shape(f0)
            if shape is not None and len(shape) == 4:
                shape = (1, shape[ah], shape[aw], shape[ac])
            tensors[t] = STensor(t, bd.var.name, tuple(shape or ()), _itemsize(f0))
            var_of[t] = bd.var
            dtype_of[t] = str(f0.dtype)
        out = tensor(bd.var)
        paths = _act_paths(bd.value, acts)
        ins = tuple(tensor(_at(bd.value, p)) for p in paths)
        op = _classify(k, bd.value, ins, out, paths, tensors, layout, acts)
        ops.append(op)
        op_bindings.append(bd)
        paths_all.append(paths)
        macs.append(_macs(bd.value, tensors[out], op))
        vid = b.op(bd.var.name, op.kind, [gt[t] for t in dict.fromkeys(ins)],
                   [(bd.var.name, _nbytes(bd.var.ty))], source=("op", k))
        gt[out] = b.ops[vid].outputs[0]
        tensor_index.append(out)
    outputs = [index[bd.var] for bd in op_bindings if not isinstance(bd.var, relax.DataflowVar)]
    _squeeze_excitation(ops, op_bindings, paths_all, macs, tensors, layout, outputs)
    # a batch norm whose tuple is read other than by ``[0]`` is not spatially local
    for k, op in enumerate(ops):
        if op.kind == "nn.batch_norm" and op.cls == "eltwise" and \
                any(ops[j].kind != "getitem0" for j in range(k + 1, len(ops))
                    if op.output in ops[j].inputs):
            ops[k] = _other(k, op.inputs, op.output, "batch norm statistics are read", op.kind)
    for t in outputs:
        b.mark_output(gt[t])
    sm = SpatialModel(ops, tensors, [index[p] for p in params], outputs, macs=macs,
                      name=b.name)
    return BlockModel(sm, b.build(), tensor_index, op_bindings, hoisted, var_of, paths_all,
                      layout, dtype_of)


REDUCE = ("relax.mean", "relax.sum")
SCALE = ("relax.multiply", "relax.add", "relax.subtract", "relax.divide")


def _squeeze_excitation(ops, bindings, paths_all, macs, tensors, layout, outputs) -> None:
    """Reclassify, in place, the operators of whole squeeze-and-excitation blocks
    (`memsched.patches.classify_se`): ``mean`` / ``sum`` over H and W (and
    ``adaptive_avg_pool2d`` to 1x1) of a feature map -> ``reduce``; any operator whose
    activations are all vectors -> ``vector``; a feature map times (plus, minus, divided by) a
    vector broadcast over space -> ``scale`` (inputs reordered: the feature map first). A
    classifier head's mean keeps its own class (`memsched.patches.partial_se_blocks`)."""
    ah, aw, _ = LAYOUTS[layout]
    value_of = {b.var: b.value for b in bindings}

    def name_of(k):
        value = bindings[k].value
        return value.op.name if isinstance(value, tvm.ir.Call) and \
            isinstance(value.op, tvm.ir.Op) else ""

    def reduce_of(k, op):
        value, name = bindings[k].value, name_of(k)
        if paths_all[k] != [(0,)] or not tensors[op.inputs[0]].spatial or \
                not _global_reduce(value, name, layout):
            return None
        x = tensors[op.inputs[0]]
        h, w = x.hw
        src = _at(value, paths_all[k][0])
        dt = str(src.ty.dtype)
        # Relax's mean / sum accumulate in the input's dtype (as the rewrite's partial
        # sums do); an integer adaptive pool's rounding is not modelled: unknown
        acc = dt if name in REDUCE or "float" in dt else ""
        return SOp(k, name.replace("relax.", ""), "reduce", op.inputs, op.output,
                   macs_per_out=h * w, cout=x.channels,
                   divisor=1 if name == "relax.sum" else h * w, acc_dtype=acc,
                   acc_range=_int_range(src, value_of) if acc in INT_RANGES else None)

    def is_scale(k):
        return name_of(k) in SCALE and len(paths_all[k]) == 2

    def scale_ok(k, pos):
        name = name_of(k)
        vs = _shape(_at(bindings[k].value, paths_all[k][1 - pos]).ty) or ()
        vs = (1,) * (4 - len(vs)) + tuple(vs)
        return len(vs) == 4 and vs[ah] == 1 and vs[aw] == 1 and \
            (name not in ("relax.divide", "relax.subtract") or pos == 0)

    swapped = classify_se(ops, tensors, outputs, macs, reduce_of=reduce_of,
                          is_scale=is_scale, scale_ok=scale_ok)
    for k, pos in swapped.items():
        paths_all[k] = [paths_all[k][pos], paths_all[k][1 - pos]]


def _int_range(var, value_of: dict, depth: int = 8) -> tuple[int, int]:
    """The integer values ``var`` can hold: its dtype's range, narrowed by what computes it
    (an ``astype`` from a narrower integer type, a ``clip`` by constants), so that an int32
    sum of int8 values is known not to overflow."""
    lo, hi = INT_RANGES[str(var.ty.dtype)]
    v = value_of.get(var)
    if depth == 0 or not isinstance(v, tvm.ir.Call) or not isinstance(v.op, tvm.ir.Op):
        return lo, hi
    a = v.args[0]
    if v.op.name == "relax.astype" and isinstance(getattr(a, "ty", None), relax.TensorType) \
            and str(a.ty.dtype) in INT_RANGES:
        a_lo, a_hi = _int_range(a, value_of, depth - 1)
        return max(lo, a_lo), min(hi, a_hi)
    if v.op.name == "relax.clip":
        bounds = [getattr(getattr(b, "value", b), "value", None) for b in v.args[1:3]]
        if all(isinstance(b, int) for b in bounds):
            a_lo, a_hi = _int_range(a, value_of, depth - 1) \
                if isinstance(getattr(a, "ty", None), relax.TensorType) and \
                str(a.ty.dtype) in INT_RANGES else (lo, hi)
            return max(lo, a_lo, bounds[0]), min(hi, a_hi, bounds[1])
    return lo, hi


def _global_reduce(value, name: str, layout: str) -> bool:
    """A mean / sum over exactly the spatial axes (or an adaptive average pool to 1x1)."""
    ah, aw, _ = LAYOUTS[layout]
    if name in REDUCE:
        axis = value.attrs.axis
        if axis is None:
            return False
        return sorted(int(a) % 4 for a in axis) == sorted((ah, aw))
    if name == "relax.nn.adaptive_avg_pool2d":
        a = value.attrs
        return a.output_size is not None and [int(x) for x in a.output_size] in ([1], [1, 1]) \
            and str(a.layout) == layout and (a.out_layout is None or
                                             str(a.out_layout) == layout)
    return False


def _is_bn(value) -> bool:
    """An inference-mode batch norm (per-channel affine with constant statistics)."""
    return isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.Op) and \
        value.op.name == "relax.nn.batch_norm" and not bool(value.attrs.training)


def _act_paths(value, acts) -> list[tuple]:
    if isinstance(value, relax.Var):
        return [()] if value in acts else []
    if isinstance(value, relax.TupleGetItem):
        return [("item",)] if value.tuple_value in acts else []
    if not isinstance(value, tvm.ir.Call):
        return [(i,) for i, f in enumerate(getattr(value, "fields", [])) if f in acts] \
            if isinstance(value, relax.Tuple) else []
    out = []
    for i, a in enumerate(value.args):
        if isinstance(a, relax.Tuple):
            out += [(i, j) for j, f in enumerate(a.fields) if f in acts]
        elif a in acts:
            out.append((i,))
    return out


def _at(value, path):
    if not path:
        return value
    if path == ("item",):
        return value.tuple_value
    a = value.args[path[0]] if isinstance(value, tvm.ir.Call) else value.fields[path[0]]
    return a.fields[path[1]] if len(path) > 1 else a


def _other(k, ins, out, why, kind="other") -> SOp:
    return SOp(k, kind, "other", ins, out, reason=why)


def _classify(k, value, ins, out, paths, tensors, layout, acts) -> SOp:
    if isinstance(value, relax.Var) and value in acts and len(ins) == 1 and \
            tensors[out].spatial and tensors[ins[0]].shape == tensors[out].shape:
        return SOp(k, "alias", "eltwise", ins, out, macs_per_out=0, cout=tensors[out].channels)
    if isinstance(value, relax.TupleGetItem) and int(value.index) == 0 and len(ins) == 1 and \
            tensors[out].spatial and tensors[ins[0]].shape == tensors[out].shape:
        return SOp(k, "getitem0", "eltwise", ins, out, macs_per_out=0,
                   cout=tensors[out].channels)
    if not isinstance(value, tvm.ir.Call) or not isinstance(value.op, tvm.ir.Op):
        return _other(k, ins, out, "not an operator call")
    name = value.op.name
    kind = name.replace("relax.", "")
    o = tensors[out]
    if not o.spatial or any(not tensors[t].spatial for t in ins):
        return _other(k, ins, out, f"{kind} on a tensor that is not a 1-batch 4-D feature map",
                      kind)
    if name in ("relax.nn.conv2d", "relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
        a = value.attrs
        lay = str(a.data_layout) if name == "relax.nn.conv2d" else str(a.layout)
        out_lay = str(a.out_layout) if a.out_layout is not None else lay
        if lay != layout or out_lay != layout:
            return _other(k, ins, out, f"{kind} in layout {lay}->{out_lay}", kind)
        if paths != [(0,)]:
            return _other(k, ins, out, f"{kind} with activation weights", kind)
        st = tuple(int(s) for s in a.strides)
        dil = tuple(int(d) for d in a.dilation)
        pad = [int(p) for p in a.padding]  # top, left, bottom, right
        if name == "relax.nn.conv2d":
            w = _shape(value.args[1].ty)
            kl = str(a.kernel_layout)
            kh, kw = w[kl.index("H")], w[kl.index("W")]
            cin_g = w[kl.index("I")]
            macs = kh * kw * cin_g
            pv = PAD_ZERO
        else:
            if bool(a.ceil_mode):
                return _other(k, ins, out, f"{kind} with ceil_mode", kind)
            kh, kw = (int(s) for s in a.pool_size)
            macs = kh * kw
            if name == "relax.nn.max_pool2d":
                pv = PAD_MIN
            else:
                pv = PAD_ZERO if bool(a.count_include_pad) or not any(pad) else PAD_NONE
        H, W = tensors[ins[0]].hw
        oh = (H + pad[0] + pad[2] - (kh - 1) * dil[0] - 1) // st[0] + 1
        ow = (W + pad[1] + pad[3] - (kw - 1) * dil[1] - 1) // st[1] + 1
        if (oh, ow) != o.hw:
            return _other(k, ins, out, f"{kind} output shape does not follow its padding", kind)
        return SOp(k, kind, "window", ins, out, (kh, kw), st, dil, (pad[0], pad[1]),
                   (pad[2], pad[3]), pv, macs, o.channels)
    if name == "relax.nn.pad":
        a = value.attrs
        pw = [int(p) for p in a.pad_width]
        ah, aw, ac = LAYOUTS[layout]
        if str(a.pad_mode) != "constant" or any(p < 0 for p in pw) or \
                pw[0] or pw[1] or pw[2 * ac] or pw[2 * ac + 1] or paths != [(0,)]:
            return _other(k, ins, out, "nn.pad that pads batch or channels (or not constant)",
                          kind)
        return SOp(k, "nn.pad", "window", ins, out, (1, 1), (1, 1), (1, 1),
                   (pw[2 * ah], pw[2 * aw]), (pw[2 * ah + 1], pw[2 * aw + 1]), PAD_ZERO, 0,
                   o.channels, is_pad=True)
    if name in ELEMENTWISE or _is_bn(value):
        if _is_bn(value) and (int(value.attrs.axis) % 4 != LAYOUTS[layout][2] or
                              paths != [(0,)]):
            return _other(k, ins, out, "batch norm not over channels", kind)
        ah, aw, ac = LAYOUTS[layout]
        for t in ins:
            if tensors[t].shape != o.shape:
                return _other(k, ins, out, f"{kind} broadcasts an activation", kind)
        for i, a in enumerate(value.args):
            if (i,) in paths or _is_bn(value):  # batch norm operands are per channel
                continue
            s = _shape(a.ty) if isinstance(getattr(a, "ty", None), relax.TensorType) else ()
            if s is None:
                return _other(k, ins, out, f"{kind} with a dynamic operand", kind)
            s = (1,) * (4 - len(s)) + tuple(s)
            if len(s) != 4 or s[ah] != 1 or s[aw] != 1:
                return _other(k, ins, out, f"{kind} with an operand that varies over space",
                              kind)
        return SOp(k, kind, "eltwise", ins, out, macs_per_out=1, cout=o.channels)
    if name == "relax.concat":
        ax = int(value.attrs.axis) % 4
        if ax != LAYOUTS[layout][2] or len(paths) != len(value.args[0].fields) or \
                any(tensors[t].hw != o.hw for t in ins):
            return _other(k, ins, out, "concat not along channels", kind)
        return SOp(k, kind, "concat", ins, out, macs_per_out=0, cout=o.channels)
    return _other(k, ins, out, f"{kind} is not spatially local", kind)


def _macs(value, out: STensor, op: SOp) -> int:
    cells = 1
    for d in out.shape:
        cells *= max(int(d), 1)
    if op.cls != "other":
        return 0 if op.is_pad else cells * op.macs_per_out
    if isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.Op) and \
            value.op.name in ("relax.matmul", "relax.nn.dense", "relax.linear"):
        a = _shape(value.args[0].ty)
        return cells * (a[-1] if a else 1)
    return cells

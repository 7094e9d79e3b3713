"""`TilePatches`: patch-based execution (MCUNetV2-style) of the spatial prefix of a Relax model.

The first, high-resolution operators of a CNN hold the largest feature maps; no operator order
gets below "input and output of the worst operator live". Running the prefix patch by patch
(each patch computes its piece of the *split tensors* from a window of the model input, halos
recomputed) keeps only patch-sized tensors live until the split tensors are reassembled.

This pass is a thin adapter over `memsched.patches` (plain Python):

1. the first dataflow block of each Relax function is described as a `patches.SpatialModel`
   (one operator per binding, NCHW or NHWC feature maps seen as 1 x H x W x C): conv2d
   (groups included: depthwise), max/avg pool2d, nn.pad, element-wise unary/binary ops on
   same-shape tensors or with per-channel/scalar constants (bias, folded batch norm, clip,
   relu, residual add), concat along channels; squeeze-and-excitation blocks (a mean/sum over
   H and W -> ``reduce``, the bindings on its vector -> ``vector``, the feature map times the
   vector -> ``scale``: `_squeeze_excitation`; regions through them are searched with
   ``se=True``). Bindings that read no activation (weight reshapes) are kept in front,
   untouched;
2. the one patch search (`memsched.patches.search_regions`) chooses the regions (a sequence,
   each starting where the one before ends) and a grid per region under
   TVM's planned storage (`TVM_MEMORY`: memsched's ``tvm`` memory model, parameters and the
   returned tensor not planned, nothing kept per operator): MACs, patch-order heuristics and the
   certified scheduler on the whole patched graph for the frontier. Choice: the lowest peak
   within ``max_overhead`` extra MACs, ties to fewer patches; none when nothing beats the
   unpatched graph in its best order;
3. the region is rewritten from `patches.plan_patches`: per patch ``strided_slice`` of the
   input with its halo, ``nn.pad`` only on the true borders (zero, the dtype's lowest value
   for max pooling), the same conv/pool with ``padding=0``, element-wise ops on the windows,
   and ``concat`` of the patches (rows along W, then along H) bound to the split tensor's own
   variable, so the rest of the block is unchanged. Through an SE block: a first pass over
   the patches with ``relax.sum`` of each patch's own cells, the partial sums added, one
   ``divide`` by H*W bound to the mean's variable, the vector bindings unchanged, then the
   patches again with the scale: recomputed from the region's inputs, or read from the
   first pass's pieces kept live, whichever the search prices lower (see
   docs/patches_tvm.md).

Results are function attributes: ``memsched.patches_split`` (tensor names, comma separated),
``memsched.patches_grid`` ("RxC"), ``memsched.patches_region_ops`` (these three: the first
region), ``memsched.patches_regions`` (every region: ``first-last op:RxC@split``, ``; ``
separated),
``memsched.patches_peak_before`` / ``memsched.patches_peak_after`` (bytes, the scheduler's
peaks under the ``tvm`` model, unpatched and patched), ``memsched.patches_mac_overhead``,
``memsched.patches_macs``, ``memsched.patches_certified``, ``memsched.patches_se``
(``recompute`` / ``keep`` through SE blocks, else ""), ``memsched.patches_frontier``
(``grid@split:peak:overhead`` entries, ``RxC+keep`` for kept pieces),
``memsched.patches_seconds``; and
``memsched.patches_skipped`` (the reason) when a function is left unchanged.

Use it before MemoryAwareSchedule + PlanArena, so those allocate the patched optimum::

    ex = tvm.compile(mod, "llvm", relax_pipeline=memsched.pipeline(tile_patches=True))
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from ..graph import GraphBuilder
from ..memory import MemoryModel
from ..patches.geometry import PAD_MIN, PAD_NONE, PAD_ZERO, SOp, SpatialModel, STensor
from ..patches.region import Refused
from ..patches.search import RuntimeMemory, SearchResult
from ..patches.sequence import MAX_REGIONS, search_regions
from .common import map_relax_functions, with_blocks

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
    _squeeze_excitation(ops, op_bindings, paths_all, macs, tensors, layout)
    # a batch norm whose tuple is read other than by ``[0]`` is not spatially local
    for k, op in enumerate(ops):
        if op.kind == "nn.batch_norm" and op.cls == "eltwise" and \
                any(ops[j].kind != "getitem0" for j in range(k + 1, len(ops))
                    if op.output in ops[j].inputs):
            ops[k] = _other(k, op.inputs, op.output, "batch norm statistics are read", op.kind)
    outputs = [index[bd.var] for bd in op_bindings if not isinstance(bd.var, relax.DataflowVar)]
    for t in outputs:
        b.mark_output(gt[t])
    sm = SpatialModel(ops, tensors, [index[p] for p in params], outputs, macs=macs,
                      name=b.name)
    return BlockModel(sm, b.build(), tensor_index, op_bindings, hoisted, var_of, paths_all,
                      layout, dtype_of)


REDUCE = ("relax.mean", "relax.sum")
SCALE = ("relax.multiply", "relax.add", "relax.subtract", "relax.divide")


def _squeeze_excitation(ops, bindings, paths_all, macs, tensors, layout) -> None:
    """Reclassify, in place, the operators of squeeze-and-excitation blocks: ``mean`` / ``sum``
    over H and W (and ``adaptive_avg_pool2d`` to 1x1) of a feature map -> ``reduce``; any
    operator whose activations are all vectors (reduce results or vector outputs) ->
    ``vector``; a feature map times (plus, minus, divided by) a vector broadcast over space
    -> ``scale`` (inputs reordered: the feature map first)."""
    ah, aw, _ = LAYOUTS[layout]
    vec: set[int] = set()
    for k, op in enumerate(ops):
        value = bindings[k].value
        name = value.op.name if isinstance(value, tvm.ir.Call) and \
            isinstance(value.op, tvm.ir.Op) else ""
        o = tensors[op.output]
        cells = max(o.nbytes // max(o.itemsize, 1), 1)
        if len(op.inputs) == 1 and op.inputs[0] not in vec and paths_all[k] == [(0,)] and \
                tensors[op.inputs[0]].spatial and _global_reduce(value, name, layout):
            x = tensors[op.inputs[0]]
            h, w = x.hw
            ops[k] = SOp(k, name.replace("relax.", ""), "reduce", op.inputs, op.output,
                         macs_per_out=h * w, cout=x.channels,
                         divisor=1 if name == "relax.sum" else h * w)
            vec.add(op.output)
        elif op.inputs and all(t in vec for t in op.inputs):
            ops[k] = SOp(k, op.kind, "vector", op.inputs, op.output,
                         macs_per_out=max(1, macs[k] // cells),
                         cout=int(o.shape[-1]) if o.shape else 0)
            vec.add(op.output)
        elif name in SCALE and len(op.inputs) == 2 and len(paths_all[k]) == 2 and \
                sum(t in vec for t in op.inputs) == 1 and o.spatial:
            pos = 0 if op.inputs[1] in vec else 1
            x, v = op.inputs[pos], op.inputs[1 - pos]
            vs = _shape(_at(value, paths_all[k][1 - pos]).ty) or ()
            vs = (1,) * (4 - len(vs)) + tuple(vs)
            if tensors[x].spatial and tensors[x].shape == o.shape and len(vs) == 4 and \
                    vs[ah] == 1 and vs[aw] == 1 and (name != "relax.divide" or pos == 0) and \
                    (name != "relax.subtract" or pos == 0):
                ops[k] = SOp(k, op.kind, "scale", (x, v), op.output, macs_per_out=1,
                             cout=o.channels)
                paths_all[k] = [paths_all[k][pos], paths_all[k][1 - pos]]
        elif any(t in vec for t in op.inputs):
            ops[k] = _other(k, op.inputs, op.output,
                            "reads a squeeze-and-excitation vector and a feature map", op.kind)


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
        return SOp(k, "PAD", "window", ins, out, (1, 1), (1, 1), (1, 1),
                   (pw[2 * ah], pw[2 * aw]), (pw[2 * ah + 1], pw[2 * aw + 1]), PAD_ZERO, 0,
                   o.channels)
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
        return cells * op.macs_per_out if op.cls != "window" or op.kind != "PAD" else 0
    if isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.Op) and \
            value.op.name in ("relax.matmul", "relax.nn.dense", "relax.linear"):
        a = _shape(value.args[0].ty)
        return cells * (a[-1] if a else 1)
    return cells


# ---------------------------------------------------------------------------- search
TVM_MEMORY = RuntimeMemory("tvm", TVM_MODEL)  # planned storage: activations only


def search(bm: BlockModel, *, max_overhead: float = 0.3, grid=None, split=None,
           time_limit: float = 10.0, se_patches: str | None = None,
           max_regions: int = MAX_REGIONS) -> SearchResult:
    """The one patch search (`memsched.patches.search_regions`) under TVM's planned storage:
    ``time_limit`` for one region, half as much again for the regions after it."""
    sm = bm.sm
    # a batch norm's tuple cannot be reassembled by concat: its [0] is the split tensor
    bn = [t for t in sm.tensors if t in sm.producer and
          sm.ops[sm.producer[t]].kind == "nn.batch_norm"]
    return search_regions(sm, bm.graph, bm.tensor_index, TVM_MEMORY,
                          grids=[tuple(grid)] if grid is not None else None, split=split,
                          max_overhead=max_overhead, time_limit=time_limit, exclude_split=bn,
                          se=True, se_patches=se_patches, max_regions=max_regions)


# ---------------------------------------------------------------------------- rewrite
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
            if op.kind == "PAD":
                top, bottom, left, right = nd.pads
                width = [0] * 8
                width[2 * ah], width[2 * ah + 1], width[2 * aw], width[2 * aw + 1] = \
                    top, bottom, left, right
                expr = relax.op.nn.pad(ins[0], width, str(value.attrs.pad_mode),
                                       float(value.attrs.pad_value))
            elif name == "relax.nn.conv2d":
                a = value.attrs
                expr = relax.op.nn.conv2d(
                    ins[0], value.args[1], tuple(a.strides), 0, tuple(a.dilation),
                    int(a.groups), str(a.data_layout), str(a.kernel_layout),
                    None if a.out_layout is None else str(a.out_layout), a.out_dtype)
            elif name in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d"):
                a = value.attrs
                f = relax.op.nn.max_pool2d if name == "relax.nn.max_pool2d" \
                    else relax.op.nn.avg_pool2d
                expr = f(ins[0], tuple(a.pool_size), tuple(a.strides), 0, tuple(a.dilation),
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


# ---------------------------------------------------------------------------- the pass
@tvm.transform.module_pass(opt_level=0, name="TilePatches")
class TilePatches:
    """Rewrite the spatial prefix of each Relax function into patches (see the module doc).

    Parameters
    ----------
    max_overhead : float
        Extra MACs allowed, as a fraction of the model's MACs (default 0.3 = +30 %).
    grid : (rows, cols), optional
        Force this grid (default: searched among 1x2 ... 8x8).
    split : str, optional
        Force the region to end at the tensor (binding variable) of this name.
    time_limit : float
        Seconds of search per function (default 10).
    functions : list of str, optional
        Only these functions (default: every Relax function).
    se_patches : {"recompute", "keep"}, optional
        Through a squeeze-and-excitation block, the patches after its mean recompute their
        feature maps from the region's inputs, or read the first pass's pieces kept live
        (default: whichever the search prices lower).
    max_regions : int
        Regions in sequence, each with its own grid, under the one MAC budget (default 4; 1:
        one region). A forced grid or split asks for one region.
    """

    def __init__(self, max_overhead: float = 0.3, grid=None, split: str | None = None,
                 time_limit: float = 10.0, functions=None, se_patches: str | None = None,
                 max_regions: int = MAX_REGIONS):
        if grid is not None:
            if isinstance(grid, str):
                grid = tuple(int(x) for x in grid.lower().split("x"))
            grid = tuple(int(g) for g in grid)
            if len(grid) != 2 or min(grid) < 1:
                raise ValueError(f"bad grid {grid!r}: give (rows, cols) >= 1")
        if max_overhead < 0:
            raise ValueError("max_overhead must be >= 0")
        if se_patches not in (None, "recompute", "keep"):
            raise ValueError(f"se_patches must be 'recompute' or 'keep', not {se_patches!r}")
        if int(max_regions) < 1:
            raise ValueError("max_regions must be >= 1")
        self.max_regions = int(max_regions)
        self.se_patches = se_patches
        self.max_overhead = float(max_overhead)
        self.grid = grid
        self.split = split
        self.time_limit = float(time_limit)
        self.functions = None if functions is None else set(functions)

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        return map_relax_functions(mod, self.functions, self._function)

    def _skip(self, func, name, why):
        warnings.warn(f"TilePatches: {name}: left unchanged: {why}", stacklevel=3)
        return func.with_attrs({"memsched.patches_skipped": why})

    def _function(self, func: relax.Function, name: str):
        t0 = time.perf_counter()
        body = func.body
        if not isinstance(body, relax.SeqExpr):
            return None
        blocks = list(body.blocks)
        idx = [i for i, b in enumerate(blocks) if isinstance(b, relax.DataflowBlock)]
        if not idx:
            return self._skip(func, name, "no dataflow block")
        i = idx[0]
        try:
            bm = describe_block(func, blocks[i])
            if not bm.sm.ops:
                raise Refused("the block has no operator on the inputs")
            res = search(bm, max_overhead=self.max_overhead, grid=self.grid,
                         split=self.split, time_limit=self.time_limit,
                         se_patches=self.se_patches, max_regions=self.max_regions)
        except Refused as e:
            return self._skip(func, name, str(e))
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - an unexpected binding: leave it as it was
            return self._skip(func, name, f"cannot model the block: {type(e).__name__}: {e}")
        choice, refused = res.choice, res.refused
        attrs = {
            "memsched.patches_peak_before": int(res.reordered.peak),
            "memsched.patches_candidates": int(res.evaluated),
            "memsched.patches_prefix_end": res.prefix_end,
            "memsched.patches_frontier": "; ".join(
                f"{c.label}@{','.join(c.split)}:{c.peak}:{c.overhead:.3f}"
                for c in res.frontier[:12]),
        }
        if choice is None:
            msg = "no patch grid lowers the peak within the MAC budget" if res.evaluated else \
                "no candidate (region, grid) could be patched"
            if refused:
                msg += f" (refused: {refused[0]})"
            attrs["memsched.patches_skipped"] = msg
            attrs["memsched.patches_seconds"] = float(round(time.perf_counter() - t0, 4))
            return func.with_attrs(attrs)
        try:
            plans = res.plans_of(choice)
            blocks[i] = relax.DataflowBlock(rewrite_block(bm, plans), blocks[i].span)
            new = with_blocks(func, blocks)
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - TVM rejected the rewrite: leave it as it was
            return self._skip(func, name, f"rewrite failed: {type(e).__name__}: "
                              f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}")
        seq = choice.sequence  # the one-region attributes: the first region's
        attrs.update({
            "memsched.patches_split": ",".join(seq[0].split),
            "memsched.patches_grid": f"{seq[0].grid[0]}x{seq[0].grid[1]}",
            "memsched.patches_region_ops": int(seq[0].region_ops),
            "memsched.patches_regions": "; ".join(
                f"{r.region_start}-{r.region_ops - 1}:{r.label}@{','.join(r.split)}"
                for r in seq),
            "memsched.patches_peak_after": int(choice.peak),
            "memsched.patches_macs": int(choice.macs),
            "memsched.patches_mac_overhead": float(round(choice.overhead, 6)),
            "memsched.patches_certified": int(choice.certified),
            "memsched.patches_se": plans[0].se_mode,
            "memsched.patches_seconds": float(round(time.perf_counter() - t0, 4)),
        })
        return new.with_attrs(attrs)

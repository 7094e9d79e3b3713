"""Patch-based execution (MCUNetV2-style) of the spatial prefix of an ExecuTorch edge program.

The ExecuTorch counterpart of `memsched.transform.tile_patches` (Relax) and
`memsched.tflite.tile` (.tflite): a thin adapter over the one patch search of
`memsched.patches`.

1. **Describe.** The edge-dialect graph a pass of ``ExecutorchBackendConfig(passes=[...])``
   receives (before ``ToOutVarPass``; NCHW feature maps seen as 1 x H x W x C) becomes a
   `SpatialModel` (one operator per FX node that reads an activation) and the matching
   `OpGraph` under ExecuTorch's memory model (`EXECUTORCH_MEMORY`: activations only, the
   planned model inputs and outputs counted; weights are constants of the .pte). Spatially
   local: ``convolution`` (2-D, not transposed; grouped and depthwise included),
   ``max_pool2d_with_indices`` with its ``getitem 0`` (indices unused), ``avg_pool2d``,
   ``constant_pad_nd`` on H/W, element-wise ops on same-shape activations or with scalar /
   per-channel constants (``relu``, ``hardtanh`` = ReLU6, ``clamp``, residual ``add``, ...),
   ``cat`` along channels. Squeeze-and-excitation blocks (`_squeeze_excitation`): a
   floating-point ``mean.dim`` / ``sum.dim_IntList`` over H and W (or an adaptive average pool
   to 1x1) -> ``reduce``, the nodes on its [N, C, 1, 1] or [N, C] vector (1x1 convolution,
   ``relu``, ``hardsigmoid`` / its decomposition, ``addmm`` / ``view_copy`` of an nn.Linear,
   ...) -> ``vector``, ``mul.Tensor`` (``add`` / ``sub`` / ``div``) of the feature map by the
   vector -> ``scale``; only whole blocks (a mean whose vector reaches a classifier head or a
   model output stays ``other``). Nodes that read no activation (weight permutes) are left
   where they are and not modelled.
2. **Search.** `memsched.patches.search.search_patches` with ``RuntimeMemory("executorch",
   EXECUTORCH_MODEL)`` and ``se=True``: region (a prefix ending at its split tensors) and
   grid, the lowest
   peak within ``max_overhead`` extra MACs, only if it beats the unpatched graph in its best
   order (a forced ``grid``/``split`` is applied even when it does not).
3. **Rewrite** (on a copy of the graph module; the input module is never changed): per patch
   ``slice_copy`` of the input window with its halo (H, then W), ``constant_pad_nd`` only on
   true borders (zero; ``-inf`` / the dtype's minimum before a max pool), the same
   convolution / pool with padding 0, element-wise ops on the windows; ``cat`` of each row's
   patches along W, then of the rows along H, into the split tensor; its consumers are
   redirected to the reassembled tensor and the region's original nodes removed. Through an
   SE block: first passes over the patches with ``sum.dim_IntList`` (keepdim as the original)
   of each patch's own cells, the partial sums chained with ``add.Tensor``, one ``div.Scalar``
   by H*W for a mean (divide, not multiply by 1/(H*W): the same operation as the mean's
   kernel), copies of the vector nodes on it, then the last pass scales the patches with a
   copy of the ``mul.Tensor``: recomputed from the region's inputs, or the first pass's
   pieces kept live (``TileReport.se_patches``), whichever the search prices lower. fp32
   results may differ from the unpatched program in the last bits (the partial sums change
   the summation order).

The pass (`TilePatchesPass`) keeps a `TileReport` per method in ``report``; it never raises on
a graph it cannot patch: it returns the graph unchanged with the reason in the report.
``backend_config(tile_patches=True)`` puts it into ``passes``; the planning pass that follows
(certified order + exact packer) then allocates the patched optimum.
"""
from __future__ import annotations

import copy
import operator
import time
from dataclasses import asdict, dataclass, field

from ..graph import GraphBuilder
from ..patches.geometry import PAD_MIN, PAD_NONE, PAD_ZERO, SOp, SpatialModel, STensor
from ..patches.region import Refused, partial_se_blocks
from ..patches.search import RuntimeMemory, SearchResult, search_patches
from .errors import ExecutorchError
from .model import EXECUTORCH_MODEL

EXECUTORCH_MEMORY = RuntimeMemory("executorch", EXECUTORCH_MODEL)  # activations only

# element-wise edge ops (by their aten name): activation args keep their windows, the others
# must be scalars or constants that do not vary over H and W
ELEMENTWISE = {
    "relu.default", "hardtanh.default", "clamp.default", "clamp.Tensor", "add.Tensor",
    "add.Scalar", "sub.Tensor", "sub.Scalar", "mul.Tensor", "mul.Scalar", "div.Tensor",
    "div.Scalar", "rsub.Scalar", "sigmoid.default", "tanh.default", "hardswish.default",
    "hardsigmoid.default", "leaky_relu.default", "gelu.default", "elu.default",
    "neg.default", "abs.default", "exp.default", "sqrt.default", "rsqrt.default",
    "maximum.default", "minimum.default", "pow.Tensor_Scalar", "clone.default",
    "alias_copy.default", "where.self", "_prelu_kernel.default",
}
MACLESS = {"clone.default", "alias_copy.default"}


class TilePatchesError(ExecutorchError):
    """Bad options of the patch pass (a grid that is not ``(rows, cols)``, a negative
    overhead)."""


@dataclass
class TileReport:
    """What the patch pass did to one method. ``skipped``: why the graph was left unchanged
    (empty when it was patched). ``values_added`` / ``instructions_added``: FX nodes (each a
    value, and for operators an instruction, in the .pte; the method allocator holds one
    record per value and per instruction at load time) added by the rewrite."""

    grid: str = ""
    split: list = field(default_factory=list)
    region_ops: int = 0
    macs_before: int = 0
    macs: int = 0
    mac_overhead: float = 0.0
    peak_before: int = 0  # the scheduler's peak of the unpatched graph (this pass's model)
    peak_after: int = 0  # the same of the patched graph
    certified: bool = False
    se_patches: str = ""  # through SE blocks: "recompute" or "keep" (the evaluator's choice)
    prefix_end: str = ""
    frontier: list = field(default_factory=list)  # "grid@split:peak:overhead"
    values_added: int = 0
    instructions_added: int = 0
    # a second region after the first one's reassembly (operators [start, end) of the
    # once-patched graph), when one lowers the peak further
    second_grid: str = ""
    second_split: list = field(default_factory=list)
    second_region: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    seconds: float = 0.0
    skipped: str = ""

    @property
    def patched(self) -> bool:
        return not self.skipped

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        if self.skipped:
            return f"patches: left unchanged: {self.skipped}"
        se = f", SE: {self.se_patches}" if self.se_patches else ""
        if self.second_grid:
            se += (f"; then grid {self.second_grid} @ {','.join(self.second_split)} "
                   f"(ops {self.second_region[0]}-{self.second_region[1] - 1} of the "
                   "once-patched graph)")
        return (f"patches: grid {self.grid} @ {','.join(self.split)} ({self.region_ops} ops"
                f"{se}), "
                f"MACs {self.macs_before:,} -> {self.macs:,} (+{100 * self.mac_overhead:.1f} %),"
                f" modelled peak {self.peak_before:,} B -> {self.peak_after:,} B "
                f"({'certified' if self.certified else 'not proven'}), "
                f"+{self.values_added} values / +{self.instructions_added} instructions, "
                f"{self.seconds:.2f} s")


# ---------------------------------------------------------------------------- the description
def _aten_name(target) -> str:
    """``convolution.default`` for an edge (or aten) op overload; "" for anything else."""
    name = getattr(target, "_name", None) or getattr(target, "__name__", "")
    name = str(name)
    if "::" in name:
        name = name.split("::", 1)[1]
    if name.startswith("aten."):
        name = name[5:]
    if "." not in name:
        overload = getattr(target, "_overloadname", None)
        if overload:
            name = f"{name}.{overload}"
    return name


def _val(node):
    return node.meta.get("val") if hasattr(node, "meta") else None


def _is_tensor(v) -> bool:
    import torch

    return isinstance(v, torch.Tensor)


def _nbytes(v) -> int:
    if isinstance(v, (tuple, list)):
        return sum(_nbytes(x) for x in v)
    if not _is_tensor(v):
        return 0
    return int(v.numel()) * v.element_size()


def _is_user_input(node, described: bool = False) -> bool:
    """A placeholder that is a user input (not a lifted parameter, buffer or constant).
    ``described``: the graph's placeholders carry export's ``desc``; one without it was added
    later (``do_quant_fusion_and_const_prop``'s ``_prop_tensor_constant``s): a constant."""
    desc = node.meta.get("desc")
    if desc is not None:
        return type(desc).__name__ == "PlainAOTInput"
    if described:
        return False
    name = node.name
    return not (name.startswith(("p_", "b_", "c_", "_prop_tensor_constant")) or
                "lifted_tensor_constant" in name)


def _const_ok(v) -> bool:
    """A non-activation operand of an element-wise op that does not vary over H and W."""
    if isinstance(v, (int, float, bool)) or v is None:
        return True
    val = _val(v) if hasattr(v, "meta") else None
    if val is None or not _is_tensor(val):
        return False
    s = (1,) * max(0, 4 - val.dim()) + tuple(int(d) for d in val.shape)
    return len(s) == 4 and s[2] == 1 and s[3] == 1 and s[0] == 1


@dataclass
class EdgeModel:
    """An edge graph as the patch geometry sees it: `SpatialModel` ``sm`` (op ``k`` =
    ``nodes[k]``), the matching `OpGraph` ``graph`` and what the rewrite needs."""

    sm: SpatialModel
    graph: object
    tensor_index: list
    nodes: list  # per op: the FX node (for a max pool: the pool node)
    node_of: dict  # sm tensor index -> the FX node holding it (a max pool: its getitem 0)
    act_pos: list  # per op: positions (i,) or (i, j) of activation args
    dtype_of: dict


def describe_graph(gm) -> EdgeModel:
    """The `EdgeModel` of an edge-dialect graph module (raises `Refused` when it has no
    convolution or pooling on a 1-batch NCHW feature map)."""
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    described = any(n.meta.get("desc") is not None for n in placeholders)
    inputs = [n for n in placeholders if _is_user_input(n, described)]
    acts = set(inputs)
    tensors: dict[int, STensor] = {}
    index: dict = {}
    node_of: dict = {}
    dtype_of: dict = {}

    def tensor(node, val=None) -> int:
        if node in index:
            return index[node]
        t = len(tensors)
        val = _val(node) if val is None else val
        if _is_tensor(val):
            shape = tuple(int(d) for d in val.shape)
            item = val.element_size()
            dtype_of[t] = val.dtype
            if len(shape) == 4 and shape[0] == 1:
                shape = (1, shape[2], shape[3], shape[1])
        else:
            shape, item = (max(_nbytes(val), 1),), 1
        tensors[t] = STensor(t, node.name, shape, item)
        index[node] = t
        node_of[t] = node
        return t

    b = GraphBuilder("edge")
    gt: dict[int, int] = {}
    tensor_index: list[int] = []
    for n in inputs:
        t = tensor(n)
        gt[t] = b.input(n.name, _nbytes(_val(n)))
        tensor_index.append(t)
    ops: list[SOp] = []
    nodes, act_pos, macs = [], [], []
    covered = set()  # getitem 0 of a max pool, folded into the pool
    has_window = False
    for n in graph.nodes:
        if n.op != "call_function" or n in covered:
            continue
        pos = _act_positions(n, acts)
        if not pos:
            continue  # reads no activation (weights): left alone, not modelled
        acts.add(n)
        k = len(ops)
        name = _aten_name(n.target)
        out_node, extra = n, []
        if name == "max_pool2d_with_indices.default":
            users = list(n.users)
            g0 = [u for u in users if u.target is operator.getitem and u.args[1] == 0]
            if len(g0) == 1 and all(u.target is operator.getitem for u in users):
                out_node = g0[0]
                covered.add(out_node)
                acts.add(out_node)
                extra = [u for u in users if u is not out_node]
                covered.update(extra)
                acts.update(extra)
        out = tensor(out_node)
        ins = tuple(tensor(_arg_at(n, p)) for p in pos)
        op = _classify(k, n, name, ins, out, pos, tensors, out_node is not n and not extra)
        has_window |= op.cls == "window"
        ops.append(op)
        nodes.append(n)
        act_pos.append(pos)
        macs.append(_macs(n, name, tensors, op))
        outs = [(out_node.name, _nbytes(_val(out_node)))]
        if out_node is not n:  # the indices a max pool writes too (planned)
            vals = _val(n)
            outs.append((f"{n.name}.indices",
                         _nbytes(vals[1]) if isinstance(vals, (tuple, list)) else 0))
        vid = b.op(n.name, op.kind, [gt[t] for t in dict.fromkeys(ins)], outs, source=("op", k))
        gt[out] = b.ops[vid].outputs[0]
        tensor_index.append(out)
        if len(outs) > 1:
            it = tensor(n, val=_val(n)[1]) if isinstance(_val(n), (tuple, list)) else tensor(n)
            gt[it] = b.ops[vid].outputs[1]
            tensor_index.append(it)
        for e in extra:
            tensor(e)
    if not has_window:
        raise Refused("no 2-D convolution or pooling on a 1-batch NCHW feature map")
    outputs = []
    for n in graph.nodes:
        if n.op == "output":
            for a in _flat(n.args):
                if hasattr(a, "op") and a in index and a in acts:
                    outputs.append(index[a])
    for t in dict.fromkeys(outputs):
        if t in gt:
            b.mark_output(gt[t])
    _squeeze_excitation(ops, nodes, act_pos, macs, tensors, set(outputs))
    sm = SpatialModel(ops, tensors, [index[n] for n in inputs], list(dict.fromkeys(outputs)),
                      macs=macs, name="edge")
    return EdgeModel(sm, b.build(), tensor_index, nodes, node_of, act_pos, dtype_of)


def _flat(args):
    for a in args:
        if isinstance(a, (tuple, list)):
            yield from _flat(a)
        else:
            yield a


def _act_positions(n, acts) -> list[tuple]:
    out = []
    for i, a in enumerate(n.args):
        if isinstance(a, (tuple, list)):
            out += [(i, j) for j, f in enumerate(a) if hasattr(f, "op") and f in acts]
        elif hasattr(a, "op") and a in acts:
            out.append((i,))
    for a in n.kwargs.values():
        if hasattr(a, "op") and a in acts:
            return [("kw",)]  # an activation passed by keyword: not modelled
    return out


def _arg_at(n, p):
    if p == ("kw",):
        return next(a for a in n.kwargs.values() if hasattr(a, "op"))
    a = n.args[p[0]]
    return a[p[1]] if len(p) > 1 else a


def _other(k, ins, out, why, kind="other") -> SOp:
    return SOp(k, kind, "other", ins, out, reason=why)


def _classify(k, n, name, ins, out, pos, tensors, pool_ok) -> SOp:
    kind = name or str(n.target)
    o = tensors[out]
    if ("kw",) in pos:
        return _other(k, ins, out, f"{kind} takes an activation by keyword", kind)
    if not o.spatial or any(not tensors[t].spatial for t in ins):
        return _other(k, ins, out, f"{kind} on a tensor that is not a 1-batch 4-D feature map",
                      kind)
    args = list(n.args)
    if name == "convolution.default":
        if pos != [(0,)]:
            return _other(k, ins, out, "convolution with activation weights", kind)
        w = _val(args[1])
        stride, pad, dil, transposed = args[3], args[4], args[5], args[6]
        groups = int(args[8])
        if transposed or len(stride) != 2 or w is None or w.dim() != 4:
            return _other(k, ins, out, "convolution that is not a 2-D forward convolution",
                          kind)
        kh, kw = int(w.shape[2]), int(w.shape[3])
        st, dl, pd = tuple(map(int, stride)), tuple(map(int, dil)), tuple(map(int, pad))
        macs = kh * kw * int(w.shape[1])
        _ = groups
        return _window(k, kind, ins, out, tensors, (kh, kw), st, dl, pd, PAD_ZERO, macs)
    if name == "max_pool2d_with_indices.default":
        if not pool_ok:
            return _other(k, ins, out, "max pool whose indices are read", kind)
        ks = _pair(args[1])
        st = _pair(args[2]) if len(args) > 2 and args[2] else ks
        pd = _pair(args[3]) if len(args) > 3 else (0, 0)
        dl = _pair(args[4]) if len(args) > 4 else (1, 1)
        if len(args) > 5 and args[5]:
            return _other(k, ins, out, "max pool with ceil_mode", kind)
        return _window(k, kind, ins, out, tensors, ks, st, dl, pd, PAD_MIN, ks[0] * ks[1])
    if name == "avg_pool2d.default":
        ks = _pair(args[1])
        st = _pair(args[2]) if len(args) > 2 and args[2] else ks
        pd = _pair(args[3]) if len(args) > 3 else (0, 0)
        ceil = bool(args[4]) if len(args) > 4 else False
        include = bool(args[5]) if len(args) > 5 else True
        if ceil:
            return _other(k, ins, out, "avg pool with ceil_mode", kind)
        pv = PAD_ZERO if include or not any(pd) else PAD_NONE
        return _window(k, kind, ins, out, tensors, ks, st, (1, 1), pd, pv, ks[0] * ks[1])
    if name == "constant_pad_nd.default":
        pads = [int(p) for p in args[1]]
        value = float(args[2]) if len(args) > 2 else 0.0
        pads += [0] * (8 - len(pads))
        left, right, top, bottom = pads[:4]
        if any(pads[4:]) or min(pads) < 0 or value != 0.0:
            return _other(k, ins, out, "constant_pad_nd that pads batch or channels, crops, or "
                          "pads with a non-zero value", kind)
        return SOp(k, "PAD", "window", ins, out, (1, 1), (1, 1), (1, 1), (top, left),
                   (bottom, right), PAD_ZERO, 0, o.channels)
    if name in ELEMENTWISE:
        for t in ins:
            if tensors[t].shape != o.shape:
                return _other(k, ins, out, f"{kind} broadcasts an activation", kind)
        for i, a in enumerate(args):
            if (i,) in pos:
                continue
            if isinstance(a, (tuple, list)) or not _const_ok(a):
                return _other(k, ins, out, f"{kind} with an operand that varies over space",
                              kind)
        for a in n.kwargs.values():
            if hasattr(a, "op") and not _const_ok(a):
                return _other(k, ins, out, f"{kind} with an operand that varies over space",
                              kind)
        return SOp(k, kind, "eltwise", ins, out, macs_per_out=0 if name in MACLESS else 1,
                   cout=o.channels)
    if name == "cat.default":
        dim = int(args[1]) if len(args) > 1 else 0
        if dim % 4 != 1 or len(pos) != len(args[0]) or any(tensors[t].hw != o.hw for t in ins):
            return _other(k, ins, out, "cat not along channels", kind)
        return SOp(k, kind, "concat", ins, out, macs_per_out=0, cout=o.channels)
    return _other(k, ins, out, f"{kind} is not spatially local", kind)


REDUCE = {"mean.dim": True, "sum.dim_IntList": False, "_adaptive_avg_pool2d.default": True,
          "adaptive_avg_pool2d.default": True}  # name -> a mean (divided by H*W)
SCALE = ("mul.Tensor", "add.Tensor", "sub.Tensor", "div.Tensor")


def _global_reduce(n, name: str, x: STensor) -> bool:
    """A floating-point mean / sum over exactly H and W of a 1-batch NCHW feature map (or an
    adaptive average pool to 1x1)."""
    if name not in REDUCE or not x.spatial or x.hw == (1, 1):
        return False
    val = _val(n.args[0])
    if not _is_tensor(val) or not val.dtype.is_floating_point:
        return False
    args = list(n.args)
    if "adaptive_avg_pool2d" in name:
        return len(args) > 1 and [int(v) for v in _flat([args[1]])] in ([1], [1, 1])
    if len(args) < 2 or args[1] is None or len(args) > 3 or n.kwargs.get("dtype") is not None:
        return False
    return sorted(int(a) % 4 for a in args[1]) == [2, 3]


def _keepdim(n, name: str) -> bool:
    if "adaptive_avg_pool2d" in name:
        return True
    return bool(n.args[2]) if len(n.args) > 2 else bool(n.kwargs.get("keepdim", False))


def _squeeze_excitation(ops, nodes, act_pos, macs, tensors, model_out) -> None:
    """Reclassify, in place, the operators of squeeze-and-excitation blocks: a mean / sum over
    H and W (and an adaptive average pool to 1x1) of a feature map -> ``reduce``; an operator
    whose activations are all vectors (reduce results or vector outputs) -> ``vector``; a
    feature map times (plus, minus, divided by) a vector broadcast over space -> ``scale``
    (inputs and their positions reordered: the feature map first). Only whole blocks: a
    reduction whose vectors reach a model output or an operator other than a vector or scale
    one (a classifier head) keeps its original class, and so do its vector operators."""
    orig = {k: (op, act_pos[k]) for k, op in enumerate(ops)}
    vec: set[int] = set()
    for k, op in enumerate(ops):
        n = nodes[k]
        name = _aten_name(n.target)
        o = tensors[op.output]
        cells = max(o.nbytes // max(o.itemsize, 1), 1)
        if len(op.inputs) == 1 and op.inputs[0] not in vec and act_pos[k] == [(0,)] and \
                _global_reduce(n, name, tensors[op.inputs[0]]):
            x = tensors[op.inputs[0]]
            h, w = x.hw
            ops[k] = SOp(k, op.kind, "reduce", op.inputs, op.output, macs_per_out=h * w,
                         cout=x.channels, divisor=h * w if REDUCE[name] else 1)
            vec.add(op.output)
        elif op.inputs and all(t in vec for t in op.inputs) and ("kw",) not in act_pos[k]:
            ops[k] = SOp(k, op.kind, "vector", op.inputs, op.output,
                         macs_per_out=max(1, macs[k] // cells),
                         cout=int(o.shape[-1]) if o.shape else 0)
            vec.add(op.output)
        elif _aten_name(n.target) in SCALE and len(op.inputs) == 2 and \
                len(act_pos[k]) == 2 and sum(t in vec for t in op.inputs) == 1 and o.spatial:
            pos = 0 if op.inputs[1] in vec else 1
            x, v = op.inputs[pos], op.inputs[1 - pos]
            vs = _val(_arg_at(n, act_pos[k][1 - pos]))
            vs = tuple(int(d) for d in vs.shape) if _is_tensor(vs) else ()
            vs = (1,) * (4 - len(vs)) + vs
            if tensors[x].spatial and tensors[x].shape == o.shape and len(vs) == 4 and \
                    vs[0] == 1 and vs[2] == 1 and vs[3] == 1 and vs[1] in (1, o.channels) and \
                    (name not in ("sub.Tensor", "div.Tensor") or pos == 0) and \
                    len(n.args) == 2 and not n.kwargs:
                ops[k] = SOp(k, op.kind, "scale", (x, v), op.output, macs_per_out=1,
                             cout=o.channels)
                act_pos[k] = [act_pos[k][pos], act_pos[k][1 - pos]]
        elif any(t in vec for t in op.inputs):
            ops[k] = _other(k, op.inputs, op.output,
                            "reads a squeeze-and-excitation vector and a feature map", op.kind)
    # keep whole blocks only (a classifier head's mean keeps its own class)
    for k in partial_se_blocks(ops, model_out):
        ops[k], act_pos[k] = orig[k]


def _pair(v) -> tuple[int, int]:
    v = [int(x) for x in v] if isinstance(v, (tuple, list)) else [int(v)]
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _window(k, kind, ins, out, tensors, ks, st, dl, pd, pv, macs) -> SOp:
    H, W = tensors[ins[0]].hw
    o = tensors[out]
    oh = (H + 2 * pd[0] - (ks[0] - 1) * dl[0] - 1) // st[0] + 1
    ow = (W + 2 * pd[1] - (ks[1] - 1) * dl[1] - 1) // st[1] + 1
    if (oh, ow) != o.hw:
        return _other(k, ins, out, f"{kind} output shape does not follow its padding", kind)
    # the padding after that the output size actually uses
    after = (max((oh - 1) * st[0] + (ks[0] - 1) * dl[0] + 1 - H - pd[0], 0),
             max((ow - 1) * st[1] + (ks[1] - 1) * dl[1] + 1 - W - pd[1], 0))
    return SOp(k, kind, "window", ins, out, ks, st, dl, pd, after, pv, macs, o.channels)


def _macs(n, name, tensors, op: SOp) -> int:
    val = _val(n)
    if isinstance(val, (tuple, list)):
        val = val[0]
    cells = int(val.numel()) if _is_tensor(val) else 1
    if op.cls != "other":
        return 0 if op.kind == "PAD" else cells * op.macs_per_out
    if name in ("addmm.default", "mm.default", "bmm.default", "linear.default"):
        a = _val(n.args[1] if name == "addmm.default" else n.args[0])
        return cells * (int(a.shape[-1]) if _is_tensor(a) else 1)
    if name == "convolution.default":
        w = _val(n.args[1])
        return cells * (int(w[0].numel()) if _is_tensor(w) else 1)
    if name in ("mean.dim", "sum.dim_IntList", "amax.default"):
        a = _val(n.args[0])
        return int(a.numel()) if _is_tensor(a) else cells
    return cells


# ---------------------------------------------------------------------------- search
def search(em: EdgeModel, *, max_overhead: float = 0.3, grid=None, split=None,
           time_limit: float = 10.0, se_patches: str | None = None) -> SearchResult:
    """The one patch search under ExecuTorch's activation-only memory model."""
    return search_patches(em.sm, em.graph, em.tensor_index, EXECUTORCH_MEMORY,
                          grids=[tuple(grid)] if grid is not None else None, split=split,
                          max_overhead=max_overhead, time_limit=time_limit, se=True,
                          se_patches=se_patches)


# ---------------------------------------------------------------------------- rewrite
def _min_value(dtype):
    import torch

    if dtype.is_floating_point:
        return float("-inf")
    return int(torch.iinfo(dtype).min)


def rewrite(gm, em: EdgeModel, plan) -> tuple[int, int]:
    """Apply ``plan`` to ``gm`` in place (the module whose nodes ``em`` names): returns
    (values added, instructions added)."""
    from executorch.exir.dialects._ops import ops as exir_ops
    from torch._guards import detect_fake_mode

    aten = exir_ops.edge.aten
    sm = em.sm
    graph = gm.graph
    fake = detect_fake_mode([n.meta["val"] for n in graph.nodes if "val" in n.meta])
    before = sum(1 for n in graph.nodes if n.op == "call_function")
    values_before = len(graph.nodes)
    final = {nid: t for t, nid in plan.result.items()}
    region_nodes = _region_nodes(em, plan)
    # the patches go right after the region's last node: everything they read (region inputs,
    # weights) is defined before it, and nothing before it reads what they make
    first = max(region_nodes, key=list(graph.nodes).index).next
    made: list = []

    def call(target, args, like=None):
        with graph.inserting_before(first):
            node = graph.call_function(target, tuple(args))
        fargs = [_fake_of(a) for a in args]
        with fake:
            val = target(*fargs)
        node.meta["val"] = val
        if like is not None:
            for key in ("stack_trace", "nn_module_stack", "debug_handle", "from_node"):
                if key in like.meta:
                    node.meta[key] = like.meta[key]
        return node

    def _fake_of(a):
        if isinstance(a, (list, tuple)):
            return type(a)(_fake_of(x) for x in a)
        if hasattr(a, "op"):
            return a.meta["val"]
        return a

    def src(s):
        return em.node_of[s[1]] if isinstance(s, tuple) else made[s]

    for nid, nd in enumerate(plan.nodes):
        ins = [src(s) for s in nd.inputs]
        dtype = em.dtype_of.get(nd.tensor)
        if nd.kind == "slice":
            x, base = ins[0], nd.base
            h0, h1 = nd.win.h0 - base.h0, nd.win.h1 - base.h0
            w0, w1 = nd.win.w0 - base.w0, nd.win.w1 - base.w0
            if (h0, h1) != (0, base.height):
                x = call(aten.slice_copy.Tensor, [x, 2, h0, h1, 1])
            if (w0, w1) != (0, base.width) or x is ins[0]:
                x = call(aten.slice_copy.Tensor, [x, 3, w0, w1, 1])
            node = x
        elif nd.kind == "pad":
            top, bottom, left, right = nd.pads
            value = _min_value(dtype) if nd.pad_value == PAD_MIN else 0.0
            node = call(aten.constant_pad_nd.default, [ins[0], [left, right, top, bottom],
                                                        value])
        elif nd.kind == "concat":
            node = call(aten.cat.default, [list(ins), 3 if nd.axis == 2 else 2])
        elif nd.kind == "partial":  # the sum over the patch's own cells (ins[0]: that window)
            orig = em.nodes[nd.op]
            node = call(aten.sum.dim_IntList,
                        [ins[0], [2, 3], _keepdim(orig, _aten_name(orig.target))], orig)
        elif nd.kind == "accumulate":
            node = call(aten.add.Tensor, [ins[0], ins[1]], em.nodes[nd.op])
        elif nd.kind == "reduce":  # the sum of the partials, divided by H*W for a mean
            op = sm.ops[nd.op]
            node = ins[0] if op.divisor == 1 else \
                call(aten.div.Scalar, [ins[0], float(op.divisor)], em.nodes[nd.op])
        elif nd.kind == "vector":  # the vector operator, once, on the new vectors
            orig = em.nodes[nd.op]
            node = _copy_call(graph, first, fake, orig, _with_acts(orig, em.act_pos[nd.op],
                                                                    ins))
        else:
            orig = em.nodes[nd.op]
            op = sm.ops[nd.op]
            name = _aten_name(orig.target)
            args = list(orig.args)
            if op.kind == "PAD":
                top, bottom, left, right = nd.pads
                node = call(orig.target, [ins[0], [left, right, top, bottom]] + args[2:3],
                            orig)
            elif name == "convolution.default":
                args[0], args[4] = ins[0], [0, 0]
                node = call(orig.target, args, orig)
            elif name == "max_pool2d_with_indices.default":
                ks = list(_pair(args[1]))
                st = list(_pair(args[2])) if len(args) > 2 and args[2] else ks
                dl = list(_pair(args[4])) if len(args) > 4 else [1, 1]
                pool = call(orig.target, [ins[0], ks, st, [0, 0], dl, False], orig)
                node = call(operator.getitem, [pool, 0], em.node_of[op.output])
            elif name == "avg_pool2d.default":
                ks = list(_pair(args[1]))
                st = list(_pair(args[2])) if len(args) > 2 and args[2] else ks
                include = bool(args[5]) if len(args) > 5 else True
                div = args[6] if len(args) > 6 else None
                node = call(orig.target, [ins[0], ks, st, [0, 0], False, include, div], orig)
            elif name == "cat.default":
                node = call(orig.target, [list(ins)] + args[1:], orig)
            else:
                node = _copy_call(graph, first, fake, orig,
                                  _with_acts(orig, em.act_pos[nd.op], ins))
        made.append(node)
        if nid in final:
            old = em.node_of[final[nid]]
            old.replace_all_uses_with(node, delete_user_cb=lambda u: u not in region_nodes)
    # remove the region's original nodes (consumers now read the reassembled tensors)
    for n in reversed(list(graph.nodes)):
        if n in region_nodes and not n.users:
            graph.erase_node(n)
    left = [n for n in region_nodes if n.graph is graph and n in set(graph.nodes)]
    if left:
        raise Refused(f"region node {left[0].name} is still read after the rewrite")
    graph.lint()
    gm.recompile()
    after = sum(1 for n in graph.nodes if n.op == "call_function")
    return len(graph.nodes) - values_before, after - before


def _with_acts(orig, act_pos, ins) -> list:
    """``orig``'s args with its activation args (at ``act_pos``) replaced by ``ins``."""
    args = list(orig.args)
    for p, x in zip(act_pos, ins):
        if len(p) == 1:
            args[p[0]] = x
        else:
            lst = list(args[p[0]])
            lst[p[1]] = x
            args[p[0]] = lst
    return args


def _copy_call(graph, first, fake, orig, args):
    """A copy of call ``orig`` (its target and kwargs, its metadata) on ``args``, inserted
    before ``first``."""
    def fake_of(a):
        if isinstance(a, (list, tuple)):
            return type(a)(fake_of(x) for x in a)
        return a.meta["val"] if hasattr(a, "op") else a

    kw = dict(orig.kwargs)
    with graph.inserting_before(first):
        node = graph.call_function(orig.target, tuple(args), kw)
    with fake:
        node.meta["val"] = orig.target(*[fake_of(a) for a in args],
                                       **{k: fake_of(v) for k, v in kw.items()})
    for key in ("stack_trace", "nn_module_stack", "debug_handle", "from_node"):
        if key in orig.meta:
            node.meta[key] = orig.meta[key]
    return node


def _region_nodes(em: EdgeModel, plan) -> set:
    out = set()
    for k in plan.region.ops:
        n = em.nodes[k]
        out.add(n)
        out.update(u for u in n.users if u.target is operator.getitem)
    return out


def tile_graph_module(gm, *, max_overhead: float = 0.3, grid=None, split=None,
                      time_limit: float = 10.0, se_patches: str | None = None,
                      second_region: bool = True):
    """(the patched copy of ``gm`` or None, `TileReport`); ``gm`` itself is never changed.
    ``second_region`` (when neither ``grid`` nor ``split`` is forced): then a second region,
    starting right after the first one's reassembly, searched on the once-patched graph with
    what is left of the MAC budget (`_second_region`)."""
    t0 = time.perf_counter()
    rep = TileReport()
    try:
        em = describe_graph(gm)
        res = search(em, max_overhead=max_overhead, grid=grid, split=split,
                     time_limit=time_limit, se_patches=se_patches)
    except Refused as e:
        rep.skipped, rep.seconds = str(e), time.perf_counter() - t0
        return None, rep
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - a node we do not know: leave the graph alone
        rep.skipped = f"cannot model the graph: {type(e).__name__}: {e}"
        rep.seconds = time.perf_counter() - t0
        return None, rep
    rep.peak_before = int(res.reordered.peak)
    rep.macs_before = int(res.original.macs)
    rep.prefix_end = res.prefix_end
    rep.frontier = [f"{c.label}@{','.join(c.split)}:{c.peak}:{c.overhead:.3f}"
                    for c in res.frontier[:12]]
    c = res.choice
    if c is None:
        rep.skipped = "no patch grid lowers the peak within the MAC budget" if res.evaluated \
            else "no candidate (region, grid) could be patched"
        if res.refused:
            rep.skipped += f" (refused: {res.refused[0]})"
        rep.seconds = time.perf_counter() - t0
        return None, rep
    plan = res.plan_of(c)
    try:
        # rewrite a copy: the caller's module stays as it was, whatever happens below
        new, nmap, (values, instructions) = _rewritten_copy(gm, em, plan)
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - the rewrite failed: the original stays
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        rep.skipped = f"rewrite failed: {type(e).__name__}: {first}"
        rep.seconds = time.perf_counter() - t0
        return None, rep
    rep.grid = f"{c.grid[0]}x{c.grid[1]}"
    rep.split = list(c.split)
    rep.se_patches = plan.se_mode
    rep.region_ops = int(c.region_ops)
    rep.macs = int(c.macs)
    rep.mac_overhead = float(c.overhead)
    rep.peak_after = int(c.peak)
    rep.certified = bool(c.certified)
    rep.values_added, rep.instructions_added = values, instructions
    if second_region and grid is None and split is None:
        new = _two_regions(gm, em, res, new, nmap, rep, max_overhead, time_limit, se_patches)
    rep.seconds = time.perf_counter() - t0
    return new, rep


SECOND_REGION_TRIES = 4  # first-region choices (the search's, then finer grids) tried


def _two_regions(gm, em: EdgeModel, res: SearchResult, new, nmap, rep: TileReport,
                 max_overhead: float, time_limit: float, se_patches):
    """A second patch region after the first one's reassembly (each region with its own
    grid: e.g. the stem's stage in many patches, then the next stage in a few), as
    `memsched.tflite.tile` does for .tflite files. First regions tried: the search's choice,
    then its region with finer grids within the MAC budget (alone they were no better: the
    operators after the region bound the peak, which a second region lowers), by the peak
    of their patched part. For each, the once-patched graph is searched again under the
    same memory model, regions starting right after the first one, within the MAC budget
    left; the lowest total is kept if it beats one region. Returns the graph module to use
    and fills ``rep``; ``time_limit`` bounds the whole of it."""
    deadline = time.perf_counter() + time_limit
    first0 = res.choice
    best = None  # (total, graph module, first candidate, first plan, second candidate, counts)
    for first, plan1 in _first_choices(em, res, max_overhead, time_limit / 8):
        left = deadline - time.perf_counter()
        if left < 0.5:
            break
        try:
            if first is first0:
                g1, m1, counts1 = new, nmap, (rep.values_added, rep.instructions_added)
            else:
                g1, m1, counts1 = _rewritten_copy(gm, em, plan1)
            post = {m1[n] for n in em.nodes[plan1.region.length:]}
            out = _second_region(g1, post, first, res.original.macs, max_overhead,
                                 min(left, time_limit / 2), se_patches)
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - keep what we have
            rep.notes.append(f"second region after {first.label}: {type(e).__name__}: {e}")
            continue
        if out is None:
            continue
        g2, c2, counts2 = out
        if c2.total < first0.total and (best is None or c2.total < best[0]):
            best = (c2.total, g2, first, plan1, c2,
                    (counts1[0] + counts2[0], counts1[1] + counts2[1]))
    if best is None:
        rep.notes.append(f"second region: none lowers the peak below {first0.total:,} B")
        return new
    _, g2, first, plan1, c2, (values, instructions) = best
    rep.grid = f"{first.grid[0]}x{first.grid[1]}"
    rep.split = list(first.split)
    rep.se_patches = plan1.se_mode
    rep.region_ops = int(first.region_ops)
    rep.second_grid = f"{c2.grid[0]}x{c2.grid[1]}"
    rep.second_split = list(c2.split)
    rep.second_region = [int(c2.region_start), int(c2.region_ops)]
    rep.macs = int(c2.macs)
    rep.mac_overhead = float(c2.overhead)
    rep.peak_after = int(c2.peak)
    rep.certified = bool(c2.certified)
    rep.values_added, rep.instructions_added = values, instructions
    return g2


def _first_choices(em: EdgeModel, res: SearchResult, max_overhead: float, time_limit: float):
    """(candidate, plan) first regions for `_two_regions`: the search's choice, then its
    region with more patches within the MAC budget, lowest patched-part peak first (the
    rest of the model not counted: a second region will lower it)."""
    from ..memory import Problem
    from ..patches.region import grid_macs, plan_patches
    from ..patches.search import DEFAULT_GRIDS, Candidate, heuristic_peak, patched_graph

    c0 = res.choice
    plan0 = res.plan_of(c0)
    yield c0, plan0
    sm, r, keep = em.sm, plan0.region, plan0.keep
    t_end = time.perf_counter() + time_limit
    region_macs = sum(sm.op_macs(sm.ops[k]) if sm.ops[k].cls != "other" else sm.macs[k]
                      for k in r.ops)
    scored = []
    for g in DEFAULT_GRIDS:
        if time.perf_counter() > t_end:
            break
        if g[0] * g[1] <= c0.patches or g[0] > r.hw[0] or g[1] > r.hw[1]:
            continue
        try:
            macs = res.original.macs - region_macs + grid_macs(sm, r, g, keep)
            over = macs / res.original.macs - 1 if res.original.macs else 0.0
            if over > max_overhead:
                continue
            plan = plan_patches(sm, r, g, keep)
        except Refused:
            continue
        pg = patched_graph(sm, em.graph, em.tensor_index, plan, prefix_only=True)
        peak = heuristic_peak(pg, plan, Problem.from_graph(pg, EXECUTORCH_MODEL),
                              baselines=False)
        scored.append((peak, g[0] * g[1], Candidate(
            list(c0.split), list(c0.split_index), c0.region_ops, g, peak, 0, macs, over, 0,
            c0.region_start, keep=keep, note="first of two regions"), plan))
    scored.sort(key=lambda x: (x[0], x[1]))
    for _, _, c, plan in scored[:SECOND_REGION_TRIES - 1]:
        yield c, plan


def _second_region(gm, post: set, first, macs0: int, max_overhead: float, time_limit: float,
                   se_patches):
    """The second search on the once-patched graph module ``gm`` (``post``: its nodes of the
    operators after the first region): regions starting at the first of those operators,
    within the MAC budget left. Returns (the twice-patched copy, the second candidate,
    (values, instructions) added) or None."""
    em = describe_graph(gm)
    # the search runs the operators before a region in file order: put the once-patched
    # graph in the scheduler's order first (the first region's patches, as the search priced
    # them), or its file order's peak would hide what a second region saves
    _in_scheduled_order(gm, em, time_limit / 4)
    em = describe_graph(gm)
    start = next((k for k, n in enumerate(em.nodes) if n in post), None)
    if start is None:
        return None
    # the budget left, in the once-patched graph's own MAC count (its slices, pads and
    # concatenations count as the search counts them there): what the second region adds to
    # the first's MACs stays within max_overhead of the original
    sm = em.sm
    macs1 = sum(sm.op_macs(op) if op.cls != "other" else sm.macs[k]
                for k, op in enumerate(sm.ops))
    budget = ((1 + max_overhead) * macs0 - first.macs) / macs1 if macs1 else 0.0
    res = search_patches(em.sm, em.graph, em.tensor_index, EXECUTORCH_MEMORY,
                         max_overhead=max(budget, 0.0), time_limit=time_limit, se=True,
                         se_patches=se_patches, starts=[start])
    c = res.choice
    if c is None:
        return None
    c.macs = first.macs + c.macs - macs1  # in the original graph's count
    c.overhead = c.macs / macs0 - 1 if macs0 else 0.0
    new, _, counts = _rewritten_copy(gm, em, res.plan_of(c))
    return new, c, counts


def _in_scheduled_order(gm, em: EdgeModel, time_limit: float) -> None:
    """Move ``gm``'s nodes (in place) into the order of memsched's scheduler on ``em``'s op
    graph: a topological order of all FX nodes by the rank of their operator in the
    schedule, nodes that are no operator of ``em`` (placeholders, getitems, constants)
    right after their last input."""
    import heapq

    from ..schedulers import schedule
    from .reorder import apply_node_order

    s = schedule(em.graph, "auto", EXECUTORCH_MODEL, time_limit=max(time_limit, 0.1))
    nodes = list(gm.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    rank = {em.nodes[v]: r for r, v in enumerate(s.order)}
    preds = {n: [a for a in n.all_input_nodes] for n in nodes}
    succs: dict = {n: [] for n in nodes}
    for n in nodes:
        for a in preds[n]:
            succs[a].append(n)
    key: dict = {}
    waiting = {n: len(preds[n]) for n in nodes}
    heap = []
    for n in nodes:
        if not preds[n]:
            key[n] = rank.get(n, -1)
            heapq.heappush(heap, (key[n], index[n], n))
    order = []
    while heap:
        _, _, n = heapq.heappop(heap)
        order.append(n)
        for c in succs[n]:
            waiting[c] -= 1
            if waiting[c] == 0:
                key[c] = len(nodes) if c.op == "output" else \
                    rank.get(c, max(key[a] for a in preds[c]))
                heapq.heappush(heap, (key[c], index[c], c))
    apply_node_order(gm, order)


def _rewritten_copy(gm, em: EdgeModel, plan):
    """(a copy of ``gm`` rewritten by ``plan``, the map old node -> new node, (values,
    instructions) added); ``gm`` itself is not changed."""
    new, nmap = _copy_module(gm)
    em2 = EdgeModel(em.sm, em.graph, em.tensor_index, [nmap[n] for n in em.nodes],
                    {t: nmap[n] for t, n in em.node_of.items()}, em.act_pos, em.dtype_of)
    return new, nmap, rewrite(new, em2, plan)


def _copy_module(gm):
    """A new GraphModule over a copy of ``gm``'s graph (node metadata shallow-copied, fake
    tensors shared; attributes and submodules shared, not changed by the rewrite), and the
    map old node -> new node."""
    import torch.fx

    g = torch.fx.Graph(owning_module=None, tracer_cls=gm.graph._tracer_cls)
    nmap: dict = {}
    out = g.graph_copy(gm.graph, nmap)
    g.output(out)
    old_out = next(n for n in gm.graph.nodes if n.op == "output")
    new_out = next(n for n in g.nodes if n.op == "output")
    new_out.meta = copy.copy(old_out.meta)
    nmap[old_out] = new_out
    g._codegen = copy.deepcopy(gm.graph._codegen)
    new = torch.fx.GraphModule(gm, g, gm.__class__.__name__)
    new.meta = copy.copy(getattr(gm, "meta", {}))
    return new, nmap


def _grid(grid):
    if grid is None:
        return None
    if isinstance(grid, str):
        try:
            grid = tuple(int(x) for x in grid.lower().split("x"))
        except ValueError:
            raise TilePatchesError(f"bad grid {grid!r}: give 'RxC' or (rows, cols)") from None
    grid = tuple(int(g) for g in grid)
    if len(grid) != 2 or min(grid) < 1:
        raise TilePatchesError(f"bad grid {grid!r}: give (rows, cols) >= 1")
    return grid


class TilePatchesPass:
    """An edge-dialect pass for ``ExecutorchBackendConfig(passes=[...])``: the spatial prefix
    patch by patch (see the module docstring). ``report``: one `TileReport` per method, in the
    order the methods were lowered. The graph module it is given is never changed: a patched
    copy is returned, or the same module when nothing is patched."""

    def __init__(self, max_overhead: float = 0.3, grid=None, split: str | None = None,
                 time_limit: float = 10.0, se_patches: str | None = None,
                 second_region: bool = True):
        if max_overhead < 0:
            raise TilePatchesError("max_overhead must be >= 0")
        if se_patches not in (None, "recompute", "keep"):
            raise TilePatchesError(f"se_patches must be 'recompute' or 'keep', not "
                                   f"{se_patches!r}")
        self.se_patches = se_patches
        self.second_region = bool(second_region)
        self.max_overhead = float(max_overhead)
        self.grid = _grid(grid)
        self.split = split
        self.time_limit = float(time_limit)
        self.report: list[TileReport] = []

    def __call__(self, graph_module):
        from torch.fx.passes.infra.pass_base import PassResult

        new, rep = tile_graph_module(graph_module, max_overhead=self.max_overhead,
                                     grid=self.grid, split=self.split,
                                     time_limit=self.time_limit, se_patches=self.se_patches,
                                     second_region=self.second_region)
        self.report.append(rep)
        if new is None:
            return PassResult(graph_module, False)
        return PassResult(new, True)


__all__ = ["EXECUTORCH_MEMORY", "EdgeModel", "TilePatchesError", "TilePatchesPass",
           "TileReport", "describe_graph", "tile_graph_module"]

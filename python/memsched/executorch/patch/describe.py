"""The description half of the ExecuTorch patch adapter: an edge-dialect graph module (what a
pass of ``ExecutorchBackendConfig(passes=[...])`` receives, before ``ToOutVarPass``; NCHW
feature maps seen as 1 x H x W x C) as the patch problem's `SpatialModel` plus the matching
`OpGraph` under ExecuTorch's memory model. `memsched.executorch.patch.tile` has the full story;
the rewrite that applies a plan is `memsched.executorch.patch.rewrite`.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

from ...graph import GraphBuilder
from ...patches import (PAD_MIN, PAD_NONE, PAD_ZERO, Refused, RuntimeMemory, SOp,
                        SpatialModel, STensor, classify_se)
from . import cortex_m as _cm
from ..memory.inplace import input_it_may_overwrite
from ..memory.model import EXECUTORCH_MODEL
from .records import Prices, check_target, default_target, node_call

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
    "alias_copy.default", "where.self", "_prelu_kernel.default", "silu.default",
    "mish.default", "softplus.default", "erf.default", "log_sigmoid_forward.default",
}
MACLESS = {"clone.default", "alias_copy.default", "_clone_dim_order.default",
           "_to_dim_order_copy.default"}
# copies that may also change the dim order: element-wise only when they keep it contiguous
DIM_ORDER_COPIES = {"_clone_dim_order.default", "_to_dim_order_copy.default"}
# ops whose result is a tuple, element 0 the activation (read through ``getitem 0``), the rest
# (a max pool's indices, batch norm's saved statistics: empty in inference) unread
TUPLE_FIRST = {"max_pool2d_with_indices.default",
               "_native_batch_norm_legit_no_training.default"}
# batch norm in inference form: per-channel affine, its weight, bias, running mean and
# variance 1-D constants of C (or None); what torch.nn.BatchNorm2d exports as in eval mode
BATCH_NORM = "_native_batch_norm_legit_no_training.default"

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
    # per op index: the method allocator's records of its call (`records.node_call_bytes`)
    # at ``target``'s ABI
    op_bytes: dict = field(default_factory=dict)
    # feature maps stored channels-last (the Cortex-M flow, fp32 exported channels-last):
    # the rewrite cuts and reassembles on their NHWC form (`patch.layout`)
    channels_last: bool = False
    # the ABI the method allocator's records are priced at (`ram.ABIS`: "cortex-m", "host")
    target: str = "host"
    planned_inputs: bool = True  # the user inputs are in the planned arena
    shared: bool = False  # op_bytes priced with the program's equal values shared
    # per op index: the bytes of its call's output tensor values (part of op_bytes)
    op_out_bytes: dict = field(default_factory=dict)


def put_acts(args: list, act_pos, ins) -> list:
    """``args`` (a call's arguments, a list) with its activation arguments, at ``act_pos``
    (`EdgeModel.act_pos`: (i,) or (i, j) inside a list argument), replaced by ``ins``."""
    args = list(args)
    for p, x in zip(act_pos, ins):
        if len(p) == 1:
            args[p[0]] = x
        else:
            lst = list(args[p[0]])
            lst[p[1]] = x
            args[p[0]] = lst
    return args


def describe_graph(gm, planned_inputs: bool = True, target: str | None = None,
                   shared: bool = False) -> EdgeModel:
    """The `EdgeModel` of an edge-dialect graph module (raises `Refused` when it has no
    convolution or pooling on a 1-batch NCHW feature map). ``planned_inputs``: the user
    inputs are in the planned arena (``MemoryPlanningPass(alloc_graph_input=True)``, the
    default); False: the caller owns their buffers, they count 0 bytes. ``target``: the ABI
    its calls' method-allocator records are priced at (`records.Prices`); None:
    `records.default_target` (``cortex-m`` for a graph with ``cortex_m::`` operators, else
    ``host``); ``shared``: the written program's equal values will be shared
    (`memsched.executorch.plan.share`), so a call's scalars and scalar lists are priced once."""
    graph = gm.graph
    target = check_target(target) or default_target(graph.nodes)
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
        gt[t] = b.input(n.name, _nbytes(_val(n)) if planned_inputs else 0)
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
        if name in TUPLE_FIRST:
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
        if out_node is not n:  # the tuple's other elements are written too (planned)
            vals = _val(n)
            outs.append((f"{n.name}.rest",
                         _nbytes(vals[1:]) if isinstance(vals, (tuple, list)) else 0))
        x = input_it_may_overwrite(n)  # the quantize over its float input
        vid = b.op(n.name, op.kind, [gt[t] for t in dict.fromkeys(ins)], outs, source=("op", k),
                   workspace=op.workspace,
                   inplace=[gt[t] for t in ins if x is not None and node_of.get(t) is x])
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
    cl = _channels_last(acts)
    sm = SpatialModel(ops, tensors, [index[n] for n in inputs], list(dict.fromkeys(outputs)),
                      macs=macs, name="edge")
    # each call's records (`records.node_call`), and the part its output tensors are
    calls = [node_call(n) for n in nodes]
    prices, plain = Prices(target, shared), Prices(target)
    op_bytes = {k: prices.call(*c) if c else 0 for k, c in enumerate(calls)}
    out_bytes = {k: plain.values([("Tensor", r) for r in c[1]]) if c else 0
                 for k, c in enumerate(calls)}
    return EdgeModel(sm, b.build(), tensor_index, nodes, node_of, act_pos, dtype_of, op_bytes,
                     cl, target, planned_inputs, shared, out_bytes)


def _channels_last(acts) -> bool:
    """Whether the feature maps are stored channels-last (the Cortex-M flow): the rewrite
    then cuts, pads and reassembles them on their NHWC form (`patch.layout`)."""
    for n in acts:
        v = _val(n)
        if _is_tensor(v) and v.dim() == 4 and not v.is_contiguous():
            return True
    return False


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


def _classify(k, n, name, ins, out, pos, tensors, first_only) -> SOp:
    kind = name or str(n.target)
    o = tensors[out]
    if ("kw",) in pos:
        return _other(k, ins, out, f"{kind} takes an activation by keyword", kind)
    if not o.spatial or any(not tensors[t].spatial for t in ins):
        return _other(k, ins, out, f"{kind} on a tensor that is not a 1-batch 4-D feature map",
                      kind)
    if _cm.is_cortex_m(n.target):  # the Cortex-M int8 kernels: their own table
        return _cm.classify(k, n, ins, out, pos, tensors)
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
        if not first_only:
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
        return SOp(k, "constant_pad_nd", "window", ins, out, (1, 1), (1, 1), (1, 1),
                   (top, left), (bottom, right), PAD_ZERO, 0, o.channels, is_pad=True)
    if name == BATCH_NORM:
        if not first_only or pos != [(0,)]:
            return _other(k, ins, out, "batch norm whose statistics are read", kind)
        for a in args[1:5]:
            v = _val(a) if hasattr(a, "meta") else a
            if v is not None and not (_is_tensor(v) and tuple(v.shape) == (o.channels,)):
                return _other(k, ins, out, "batch norm with parameters that are not per "
                              "channel", kind)
        return SOp(k, kind, "eltwise", ins, out, macs_per_out=1, cout=o.channels)
    if name in DIM_ORDER_COPIES:  # a dropout in eval mode is one of these
        order = n.kwargs.get("dim_order")
        if order is not None and list(order) != list(range(len(order))) or \
                n.kwargs.get("dtype") not in (None, _val(n.args[0]).dtype) or pos != [(0,)]:
            return _other(k, ins, out, f"{kind} that changes the dim order or dtype", kind)
        return SOp(k, kind, "eltwise", ins, out, macs_per_out=0, cout=o.channels)
    if name in ELEMENTWISE:
        for t in ins:
            # an activation may broadcast over channels (N, 1, H, W), never over space
            s = tensors[t].shape
            if s != o.shape and not (s[:3] == o.shape[:3] and s[3] == 1):
                return _other(k, ins, out, f"{kind} broadcasts an activation over space",
                              kind)
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
    """Reclassify, in place, the operators of whole squeeze-and-excitation blocks
    (`memsched.patches.classify_se`): a floating-point mean / sum over H and W (and an
    adaptive average pool to 1x1) of a feature map -> ``reduce``; an operator whose
    activations are all vectors -> ``vector``; a feature map times (plus, minus, divided by) a
    vector broadcast over space -> ``scale`` (its inputs and their positions reordered: the
    feature map first)."""

    def reduce_of(k, op):
        n = nodes[k]
        name = _aten_name(n.target)
        if act_pos[k] != [(0,)] or not _global_reduce(n, name, tensors[op.inputs[0]]):
            return None
        x = tensors[op.inputs[0]]
        h, w = x.hw
        # only floating-point reductions are described (`_global_reduce`): a float sum,
        # which the patch search refuses unless float partial sums are accepted
        return SOp(k, op.kind, "reduce", op.inputs, op.output, macs_per_out=h * w,
                   cout=x.channels, divisor=h * w if REDUCE[name] else 1,
                   acc_dtype=str(_val(n.args[0]).dtype).replace("torch.", ""))

    def is_scale(k):
        return _aten_name(nodes[k].target) in SCALE and len(act_pos[k]) == 2

    def scale_ok(k, pos):
        n = nodes[k]
        o = tensors[ops[k].output]
        vs = _val(_arg_at(n, act_pos[k][1 - pos]))
        vs = tuple(int(d) for d in vs.shape) if _is_tensor(vs) else ()
        vs = (1,) * (4 - len(vs)) + vs
        return len(vs) == 4 and vs[0] == 1 and vs[2] == 1 and vs[3] == 1 and \
            vs[1] in (1, o.channels) and \
            (_aten_name(n.target) not in ("sub.Tensor", "div.Tensor") or pos == 0) and \
            len(n.args) == 2 and not n.kwargs

    swapped = classify_se(ops, tensors, model_out, macs, reduce_of=reduce_of,
                          is_scale=is_scale, scale_ok=scale_ok,
                          may_be_vector=lambda k: ("kw",) not in act_pos[k])
    for k, pos in swapped.items():
        act_pos[k] = [act_pos[k][pos], act_pos[k][1 - pos]]


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
        return 0 if op.is_pad else cells * op.macs_per_out
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

"""`RewriteConcatConv`: identity graph rewriting of ``concat -> conv2d`` (SERENITY §3.3).

A ``relax.concat`` of several branches followed by a ``relax.nn.conv2d`` keeps every branch and
the concatenated copy alive while the convolution runs. Two rewrites compute the same values
without the concat:

* **channel-wise partitioning** (``groups == 1``): ``conv(concat(x_1..x_n), W)`` =
  ``sum_i conv(x_i, W[:, off_i:off_i+c_i])`` -- the weight is sliced on its input-channel axis
  (``kernel_layout.index("I")``) and the partial convolutions are added; each partial conv can
  run as soon as its branch is ready, so the branches need not all be alive at once.
* **kernel-wise partitioning** (depthwise ``groups == C``, channel multiplier ``m >= 1``, and
  any grouped conv whose branch boundaries fall on group boundaries):
  ``conv(concat(x_i), W)`` = ``concat(conv(x_i, W[o_i:o_i+c_i*m], groups=c_i))`` -- the weight is
  sliced on its output-channel axis (``kernel_layout.index("O")``).

Channel-wise ops between the concat and the conv commute with the concat and are moved onto
the branches (`UNARY`, `BINARY` with a per-channel operand, batch norm, spatial strided_slice):
``conv(relu(concat(x_i)))`` (ReLU-Conv of NAS cells) and ``conv(relu(bn(concat(x_i))))``
(DenseNet) are sites too. A kernel-wise rewrite leaves a concat of the per-branch outputs; a
conv reading it (the pointwise conv after a depthwise one) is rewritten in the same step, since
TVM's concat copies its inputs and the depthwise split alone would only move the peak.

A grouped conv whose branch boundaries cut through a group is left alone. NCHW, NHWC and any
other permutation of N/C/H/W (O/I/H/W for the kernel) are handled; strides, padding, dilation,
layouts and ``out_dtype`` are copied. Constant weights are sliced in numpy; any other weight
(a function parameter, a computed value) through ``R.strided_slice``. Only the convolution is
replaced: the rewritten value is bound to the conv's own variable, so the bias add, activation
and every other user downstream are untouched. The concat (and a tuple bound to a variable for
it) is removed only when no other binding or return value uses it; otherwise it stays for them.

**Memory-aware by default.** Each dataflow block is imported as an `OpGraph` and scheduled
exactly (`memsched.schedule`, memory model ``"tvm"`` by default, anytime under ``time_limit``
seconds per search; ``budget`` caps the whole choice). A set of sites is kept only if it
lowers the block's optimal peak. The set is grown from the peak: only concats whose tensors are
live at a step at the current peak can lower it; they are tried together (repeated cells peak
at several steps at once) and then one at a time, an improvement is kept minus the concats it
does not need, and the next round looks at the new peak, until nothing improves or the peak
reaches a floor no rewrite can pass (the largest footprint of an op the rewrites leave alone).
``force=True`` rewrites every matched site. A function's peak is the maximum over its blocks,
so it never rises.

Candidate sets are *screened* first (milliseconds): an upper bound from the best baseline
order and from the order of the set it is compared with (new ops as early as possible), and
the search-free lower bounds (`memsched.schedulers.bounds`). The exact search runs only where
the screen leaves the comparison open (the combined trial of a round, a set the screen can
neither accept nor reject) and once on the chosen set, whose order and peak are reported.
DenseNet-121: 12.0 s -> 1.8 s by default, the same site and the same certified peak.

Results are function attributes (bytes for peaks), set on every function with at least one
matched site: ``memsched.rewrite_sites`` (convolutions rewritten, follow-ups included),
``memsched.rewrite_candidates`` (convolutions matched), ``memsched.rewrite_peak_before`` /
``memsched.rewrite_peak_after`` (optimal peak without / with the chosen rewrites; both under
``memsched.rewrite_memory_model``),
``memsched.rewrite_optimal`` (1 when every search was certified optimal), and
``memsched.rewrite_unmatched`` (why a concat -> conv2d pair was not matched) when there is one.

Functions that cannot be modelled (dynamic shapes, impure bindings inside a dataflow block) are
left exactly as they were, with a warning naming the reason. Rewriting changes the float
summation order (relative differences around 1e-6), nothing else.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from ..importers.relax import UnsupportedModelError, block_graph, written_buffers
from ..memory import MemoryModel, Problem
from ..schedulers import schedule
from .common import (check_scheduler_options, map_relax_functions, scheduler_options,
                     with_blocks)

from tvm.ir.prim.expr import IntImm as _IntImm  # noqa: E402  (tvm.tir is gone in 0.27)

_CONST = type(relax.const(0.0))  # tvm.ir.GenericConst in 0.27 (relax.Constant is gone)

CONV2D = "relax.nn.conv2d"
CONCAT = "relax.concat"
# Channel-wise ops that commute with a channel concat, f(concat(x_i)) = concat(f_i(x_i)), and so
# may stand between the concat and the conv (ReLU-Conv of NAS cells, BN-ReLU-Conv of DenseNet);
# the rewrite moves them onto the branches:
# * elementwise ops of one tensor (the other arguments are scalars / attributes),
UNARY = frozenset({
    "relax.nn.relu", "relax.nn.relu6", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.nn.silu",
    "relax.nn.leakyrelu", "relax.sigmoid", "relax.tanh", "relax.clip", "relax.negative",
    "relax.exp", "relax.abs", "relax.astype", "relax.sqrt", "relax.rsqrt", "relax.square"})
# * binary elementwise ops whose other operand is per-channel (1 on every other axis; sliced),
BINARY = frozenset({"relax.add", "relax.subtract", "relax.multiply", "relax.divide",
                    "relax.maximum", "relax.minimum"})
# * batch norm on the channel axis (its parameters are sliced) read through TupleGetItem 0,
BATCH_NORM = "relax.nn.batch_norm"
# * strided_slice on axes other than the channel axis.
SLICE = "relax.strided_slice"


# ----------------------------------------------------------------------------- matching
@dataclass
class Step:
    """One channel-wise op between the concat and the conv: ``var = value``."""

    var: object
    value: object
    kind: str  # "map" (same call per branch), "binary", "batch_norm", "item" (TupleGetItem 0)
    data_arg: int = 0  # binary: which argument is the data path
    slice_axis: int | None = None  # binary: axis of the other operand to slice per branch

    @property
    def label(self) -> str:
        return "item0" if self.kind == "item" else _op_name(self.value).split(".")[-1]


@dataclass
class Site:
    """One ``conv2d(concat(fields))`` found in a dataflow block."""

    conv_index: int  # binding index of the conv in the block
    conv_var: object
    concat_var: object
    fields: list  # the concat's input expressions, in concat order
    channels: list[int]  # channel count of each field
    kind: str  # "channel" (partial convs summed) or "kernel" (per-branch convs concatenated)
    tuple_var: object = None  # a var bound to the tuple the concat reads, if any
    chain: list = field(default_factory=list)  # Steps of channel-wise ops concat -> conv
    order: list[int] = field(default_factory=list)  # field indices in summation order

    @property
    def name(self) -> str:
        return self.conv_var.name


def _op_name(value) -> str | None:
    if isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.Op):
        return value.op.name
    return None


def _static_shape(ty) -> list[int] | None:
    """The static shape of a tensor type, or None (unknown rank or a symbolic dimension)."""
    if not isinstance(ty, relax.TensorType):
        return None
    shape = ty.shape
    if shape is None or not isinstance(shape, relax.ShapeExpr):
        return None
    out = []
    for d in shape.values:
        if not isinstance(d, _IntImm):
            return None
        out.append(int(d.value))
    return out


def _dim(ty, axis: int) -> int | None:
    """One static dimension of a tensor type (other dims may be symbolic), or None."""
    if not isinstance(ty, relax.TensorType):
        return None
    shape = ty.shape
    if shape is None or not isinstance(shape, relax.ShapeExpr) or axis >= len(shape.values):
        return None
    d = shape.values[axis]
    return int(d.value) if isinstance(d, _IntImm) else None


def _is_layout(layout: str, letters: str) -> bool:
    return len(layout) == len(letters) and sorted(layout) == sorted(letters)


def _ints(expr) -> list[int] | None:
    """Integers of a tuple / shape argument (strided_slice axes), or None."""
    vals = getattr(expr, "fields", None) or getattr(expr, "values", None) or []
    out = []
    for v in vals:
        if not isinstance(v, _IntImm):
            v = getattr(v, "value", None)  # PrimValue
        if not isinstance(v, _IntImm):
            return None
        out.append(int(v.value))
    return out


def _is_tensor(expr) -> bool:
    return isinstance(getattr(expr, "ty", None), relax.TensorType)


def _rank(expr) -> int:
    return int(expr.ty.ndim) if _is_tensor(expr) else -1


def _per_channel(expr, c_axis: int, rank: int = 4) -> tuple[bool, int | None]:
    """(ok, axis to slice) for the operand of a binary op next to a rank-``rank`` tensor: ok
    when the operand is 1 on every axis but the channel axis (so it acts channel by channel)."""
    shape = _static_shape(expr.ty) if _is_tensor(expr) else None
    if shape is None or len(shape) > rank:
        return False, None
    lead = rank - len(shape)
    cut = None
    for j, d in enumerate(shape):
        if j + lead == c_axis:
            if d != 1:
                cut = j
        elif d != 1:
            return False, None
    return True, cut


def _walk_chain(data, defs: dict, c_axis: int) -> tuple[list[Step], object]:
    """Channel-wise ops above a conv's data: (steps from the concat side, the expr above)."""
    chain: list[Step] = []
    while isinstance(data, tvm.ir.Var) and data in defs:
        v = defs[data]
        op = _op_name(v)
        if op in UNARY and not any(_is_tensor(a) for a in v.args[1:]):
            step, nxt = Step(data, v, "map"), v.args[0]
        elif op == SLICE and (_ints(v.args[1]) is not None) and c_axis not in [
                a % 4 for a in _ints(v.args[1])]:
            step, nxt = Step(data, v, "map"), v.args[0]
        elif op in BINARY and len(v.args) == 2:
            for k in sorted((0, 1), key=lambda k: v.args[k] not in defs):
                ok, cut = _per_channel(v.args[1 - k], c_axis)
                if ok and _rank(v.args[k]) == 4:
                    break
            else:
                break
            step, nxt = Step(data, v, "binary", k, cut), v.args[k]
        elif isinstance(v, relax.TupleGetItem) and v.index == 0 \
                and isinstance(v.tuple_value, tvm.ir.Var) \
                and _op_name(defs.get(v.tuple_value)) == BATCH_NORM:
            bn = defs[v.tuple_value]
            if int(bn.attrs.axis) % 4 != c_axis or any(_per_channel(a, 0, 1) != (True, 0)
                                                       for a in bn.args[1:5]):
                break
            chain.insert(0, Step(data, v, "item"))
            step, nxt = Step(v.tuple_value, bn, "batch_norm"), bn.args[0]
        else:
            break
        chain.insert(0, step)
        data = nxt
    return chain, data


def _match(block, index: int, defs: dict, unary: bool = True) -> tuple[Site | None, str | None]:
    """(site, None) when binding ``index`` is conv2d(concat(...)) (with channel-wise ops in
    between when ``unary``, see `UNARY`); (None, reason) when it is that pattern but cannot be
    rewritten; (None, None) when it is not."""
    binding = block.bindings[index]
    value = binding.value
    if not isinstance(binding, relax.VarBinding) or _op_name(value) != CONV2D:
        return None, None
    data, weight = value.args[0], value.args[1]
    attrs = value.attrs
    dl = str(attrs.data_layout)
    chain = []
    if unary and _is_layout(dl, "NCHW"):
        chain, data = _walk_chain(data, defs, dl.index("C"))
    if not isinstance(data, tvm.ir.Var) or data not in defs:
        return None, None
    concat = defs[data]
    if _op_name(concat) != CONCAT:
        return None, None
    via = "".join(f"{s.label}(" for s in reversed(chain))
    where = f"{binding.var.name} = conv2d({via}{data.name} = concat{')' * len(chain)})"
    tup, tuple_var = concat.args[0], None
    if isinstance(tup, tvm.ir.Var):
        tuple_var = tup
        tup = defs.get(tup)
    if not isinstance(tup, relax.Tuple):
        return None, f"{where}: the concatenated tuple is not built in this block"
    fields = list(tup.fields)
    if len(fields) < 2:
        return None, f"{where}: concat of fewer than two tensors"
    kl = str(attrs.kernel_layout)
    ol = str(attrs.out_layout) if attrs.out_layout else dl
    if not (_is_layout(dl, "NCHW") and _is_layout(ol, "NCHW") and _is_layout(kl, "OIHW")):
        return None, f"{where}: unsupported layouts {dl}/{kl}/{ol}"
    c_axis = dl.index("C")
    axis = concat.attrs.axis
    if axis is None:
        return None, f"{where}: concat without an axis"
    axis = int(axis)
    if axis < 0:
        axis += 4
    if axis != c_axis:
        return None, f"{where}: concat axis {axis} is not the channel axis {c_axis}"
    channels = [_dim(f.ty, c_axis) for f in fields]
    if any(c is None for c in channels):
        return None, f"{where}: dynamic shape: a concatenated tensor has a symbolic channel count"
    wshape = _static_shape(weight.ty)
    if wshape is None:
        return None, f"{where}: dynamic shape: weight shape is not static"
    groups = int(attrs.groups)
    total = sum(channels)
    cin_g = wshape[kl.index("I")]
    if groups < 1 or cin_g * groups != total or wshape[kl.index("O")] % groups:
        return None, f"{where}: weight shape {wshape} does not fit {total} input channels " \
                     f"and groups={groups}"
    if groups == 1:
        kind = "channel"
    else:
        offs = np.cumsum([0] + channels)[:-1]
        if any(int(o) % cin_g or c % cin_g for o, c in zip(offs, channels)):
            return None, f"{where}: grouped conv (groups={groups}) whose branches cut " \
                         "through a group"
        kind = "kernel"
    return Site(index, binding.var, data, fields, channels, kind, tuple_var, chain,
                list(range(len(fields)))), None


def find_sites(block, unary: bool = True) -> tuple[list[Site], list[str]]:
    """Matched sites of a dataflow block and the reasons of unmatched concat -> conv2d pairs."""
    defs = {b.var: b.value for b in block.bindings if isinstance(b, relax.VarBinding)}
    roots, written = written_buffers(block)
    sites, reasons = [], []
    for i in range(len(block.bindings)):
        site, why = _match(block, i, defs, unary)
        if site is not None and written and _overwritten(site, roots, written):
            # the rewrite reads the concat's inputs at the conv, later than the concat did:
            # an in-place write to one of them in between would change what it reads
            site, why = None, f"{site.name}: an input of the concat is written in place " \
                              "(call_tir_inplace); not rewritten"
        if site is not None:
            sites.append(site)
        elif why is not None:
            reasons.append(why)
    return sites, reasons


def _overwritten(site: Site, roots: dict, written: set) -> bool:
    """Whether an in-place call writes a buffer the site's rewrite would read or drop."""
    touched = [f for f in site.fields if isinstance(f, tvm.ir.Var)] + [site.concat_var] + \
        [s.var for s in site.chain] + ([site.tuple_var] if site.tuple_var is not None else [])
    return any(roots.get(v, frozenset((v,))) & written for v in touched)


# ----------------------------------------------------------------------------- rewriting
def _slice_weight(weight, axis: int, begin: int, end: int, name: str, out: list):
    """The weight sliced on ``axis``: a new constant, or a strided_slice binding."""
    if isinstance(weight, _CONST):
        arr = weight.value.numpy()
        idx = [slice(None)] * arr.ndim
        idx[axis] = slice(begin, end)
        return relax.const(np.ascontiguousarray(arr[tuple(idx)]), str(arr.dtype))
    return _bind(relax.op.strided_slice(weight, axes=[axis], begin=[begin], end=[end]),
                 name, out)


def _bind(expr, name: str, out: list, var=None):
    """Append ``var = expr`` (a new DataflowVar unless given) to ``out``; return the var."""
    expr = relax.BlockBuilder().normalize(expr)
    if var is None:
        var = relax.DataflowVar(name, expr.ty)
    out.append(relax.VarBinding(var, expr))
    return var


def _conv(data, weight, attrs, groups: int):
    return relax.op.nn.conv2d(
        data, weight, strides=[int(s) for s in attrs.strides],
        padding=[int(p) for p in attrs.padding], dilation=[int(d) for d in attrs.dilation],
        groups=groups, data_layout=str(attrs.data_layout),
        kernel_layout=str(attrs.kernel_layout),
        out_layout=str(attrs.out_layout) if attrs.out_layout else None,
        out_dtype=attrs.out_dtype if attrs.out_dtype else None)


def _slice_any(expr, axis: int, begin: int, end: int, name: str, out: list):
    """A per-channel operand sliced on ``axis`` (numpy for constants)."""
    if isinstance(expr, _CONST):
        return _slice_weight(expr, axis, begin, end, name, out)
    return _bind(relax.op.strided_slice(expr, axes=[axis], begin=[begin], end=[end]), name,
                 out)


def _branch_step(step: Step, x, begin: int, end: int, name: str, out: list):
    """``step`` applied to one branch ``x`` holding channels ``begin:end`` of the concat."""
    v = step.value
    if step.kind == "item":
        return _bind(relax.TupleGetItem(x, 0), name, out)
    if step.kind == "map":
        return _bind(relax.Call(v.op, [x] + list(v.args[1:]), v.attrs), name, out)
    if step.kind == "binary":
        other = v.args[1 - step.data_arg]
        if step.slice_axis is not None:
            other = _slice_any(other, step.slice_axis, begin, end, f"{name}_arg", out)
        args = [x, other] if step.data_arg == 0 else [other, x]
        return _bind(relax.Call(v.op, args, v.attrs), name, out)
    params = [_slice_any(a, 0, begin, end, f"{name}_p{j}", out) for j, a in enumerate(v.args[1:5])]
    return _bind(relax.Call(v.op, [x] + params + list(v.args[5:]), v.attrs), name, out)


def rewrite_site(block, site: Site, memo: dict | None = None) -> list:
    """The bindings replacing the conv binding of ``site`` (the last binds the conv's var).
    ``memo`` shares the branches of channel-wise ops between sites reading the same ones."""
    call = block.bindings[site.conv_index].value
    attrs, weight = call.attrs, call.args[1]
    kl = str(attrs.kernel_layout)
    offs = [int(o) for o in np.cumsum([0] + site.channels)]
    name = site.name
    out: list = []
    memo = {} if memo is None else memo

    def branch(f):  # field f with the chain of channel-wise ops applied (emitted on first use)
        x = site.fields[f]
        for step in site.chain:
            key = (step.var, f)
            if key not in memo:
                memo[key] = _branch_step(step, x, offs[f], offs[f + 1],
                                         f"{step.var.name}_b{f}", out)
            x = memo[key]
        return x
    if site.kind == "channel":
        i_axis = kl.index("I")
        acc = None
        for k, f in enumerate(site.order):
            w = _slice_weight(weight, i_axis, offs[f], offs[f + 1], f"{name}_w{f}", out)
            part = _bind(_conv(branch(f), w, attrs, 1), f"{name}_part{f}", out)
            if acc is None:
                acc = part
                continue
            last = k == len(site.order) - 1
            acc = _bind(relax.op.add(acc, part), f"{name}_sum{k}", out,
                        site.conv_var if last else None)
        return out
    groups = int(attrs.groups)
    o_axis = kl.index("O")
    wshape = _static_shape(weight.ty)
    cin_g, cout_g = wshape[kl.index("I")], wshape[o_axis] // groups
    parts = []
    for f, c in enumerate(site.channels):
        g0, g1 = offs[f] // cin_g, offs[f + 1] // cin_g
        w = _slice_weight(weight, o_axis, g0 * cout_g, g1 * cout_g, f"{name}_w{f}", out)
        parts.append(_bind(_conv(branch(f), w, attrs, g1 - g0), f"{name}_part{f}", out))
    ol = str(attrs.out_layout) if attrs.out_layout else str(attrs.data_layout)
    _bind(relax.op.concat(parts, axis=ol.index("C")), name, out, site.conv_var)
    return out


def _outside_uses(func, block_pos: int) -> set:
    """Vars of block ``block_pos`` used outside it (other blocks, the return value)."""
    used = set()
    for i, blk in enumerate(func.body.blocks):
        if i == block_pos:
            continue
        for b in blk.bindings:
            used.update(relax.analysis.free_vars(b.value))
    used.update(relax.analysis.free_vars(func.body.body))
    return used


def apply_sites(block, sites: list[Site], outside: set):
    """``block`` with ``sites`` rewritten; concats (and their tuple vars) left without users
    are removed."""
    by_index = {s.conv_index: s for s in sites}
    bindings = []
    memo: dict = {}
    for i, b in enumerate(block.bindings):
        if i in by_index:
            bindings += rewrite_site(block, by_index[i], memo)
        else:
            bindings.append(b)
    candidates = {s.concat_var for s in sites} \
        | {s.tuple_var for s in sites if s.tuple_var is not None} \
        | {step.var for s in sites for step in s.chain}
    while True:  # drop dead unary ops, concats and the tuples only they read
        used = set(outside)
        for b in bindings:
            used.update(relax.analysis.free_vars(b.value))
        dead = {v for v in candidates if v not in used}
        if not dead:
            break
        bindings = [b for b in bindings if b.var not in dead]
        candidates -= dead
    return relax.DataflowBlock(bindings, block.span)


def _floor(block, sites, model) -> int:
    """A peak no choice of ``sites`` can go below: the largest footprint of an op the rewrites
    leave as it is (its inputs and outputs keep their sizes)."""
    index = {b.var: k for k, b in enumerate(block.bindings)}
    users: dict = {}
    for k, b in enumerate(block.bindings):
        for v in relax.analysis.free_vars(b.value):
            users.setdefault(v, []).append(k)
    touched = set()
    for s in sites:
        touched.add(s.conv_index)
        for v in [s.concat_var, s.tuple_var] + [st.var for st in s.chain]:
            if v is not None and v in index:
                touched.add(index[v])
        if s.kind == "kernel":  # follow-ups: channel-wise ops and convs reading the conv
            todo = [s.conv_var]
            while todo:
                for k in users.get(todo.pop(), []):
                    if k not in touched:
                        touched.add(k)
                        if _op_name(block.bindings[k].value) != CONV2D:
                            todo.append(block.bindings[k].var)
    graph = block_graph(block)
    p = Problem.from_graph(graph, model)
    return max((p.static_bound(v) for v in range(p.n) if graph.ops[v].source not in touched),
               default=0)


# ----------------------------------------------------------------------------- the pass
@dataclass
class _Eval:
    peak: int  # the peak of ``order``: an upper bound on the block's optimum
    optimal: bool
    order: list[int] | None = None  # binding indices in schedule order
    hot: set = field(default_factory=set)  # vars live (or computed) at a step at the peak
    lower: int = 0  # a proven lower bound on the block's optimum
    exact: bool = True  # from the configured scheduler (False: cheap screen, see _screen)


def _hot_vars(block, graph, problem, order) -> set:
    """Vars of ``block`` whose value is live, or computed, at a step whose footprint is the
    peak of ``order`` (op ids of ``graph``)."""
    prof = problem.evaluate(order)
    steps = [k for k, f in enumerate(prof.steps) if f == prof.peak]
    if not steps:
        return set()
    pos = {v: k for k, v in enumerate(order)}
    n = len(order)
    hot = set()
    for v, op in enumerate(graph.ops):
        lo = hi = pos[v]
        for t in op.outputs:
            ten = graph.tensors[t]
            hi = max([hi] + [pos[c] for c in ten.consumers] + ([n] if ten.is_output else []))
        if any(lo <= k <= hi for k in steps):
            hot.add(block.bindings[op.source].var)
    return hot


def _follow(block, graph, hint) -> list[int]:
    """A topological order of ``graph`` (ops of ``block``) that keeps the ops whose vars are in
    ``hint`` in hint order and runs every other op (what a rewrite added) right after its
    last predecessor."""
    import heapq

    pos = {v: k for k, v in enumerate(hint)}
    prio = []
    for op in graph.ops:
        k = pos.get(block.bindings[op.source].var)
        prio.append(k if k is not None else max([prio[u] for u in op.preds], default=-1) + 0.5)
    indeg = [len(set(op.preds)) for op in graph.ops]
    succs: list[list[int]] = [[] for _ in graph.ops]
    for v, op in enumerate(graph.ops):
        for u in set(op.preds):
            succs[u].append(v)
    ready = [(prio[v], v) for v in range(len(graph.ops)) if not indeg[v]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, v = heapq.heappop(ready)
        order.append(v)
        for w in succs[v]:
            indeg[w] -= 1
            if not indeg[w]:
                heapq.heappush(ready, (prio[w], w))
    return order


@tvm.transform.module_pass(opt_level=0, name="RewriteConcatConv")
class RewriteConcatConv:
    """Partition ``conv2d`` after ``concat`` (SERENITY identity graph rewriting), where it lowers
    the optimal peak memory.

    Parameters
    ----------
    force : bool
        Rewrite every matched site, whether or not it lowers the peak (default False).
    memory_model : str or MemoryModel
        Memory model of the peak comparison: ``"tvm"`` (default) or ``"paper"``.
    time_limit : float or None
        Seconds for each exact search (anytime: on timeout the best order found is used, and
        ``memsched.rewrite_optimal`` is 0). None means no limit.
    algorithm : str
        Scheduler for the comparison (default ``"auto"``, the exact search).
    conv, depthwise : bool
        Enable channel-wise (groups == 1) / kernel-wise (grouped, depthwise) partitioning.
    elementwise : bool
        Also match elementwise ops of one tensor between the concat and the conv
        (``conv(relu(concat(x_i)))``, the ReLU-Conv-BN of NAS cells); they are moved onto the
        branches (default True).
    budget : float or None
        Seconds for choosing the sites of one block (default None: no limit). The choice
        costs up to ``2 * concats + 1`` searches; when the budget is spent the best set found
        so far is kept.
    functions : list of str, optional
        Only these functions (default: every Relax function).
    """

    def __init__(self, force: bool = False, memory_model: str | MemoryModel | None = None,
                 time_limit: float | None = -1.0, algorithm: str | None = None,
                 conv: bool = True, depthwise: bool = True, elementwise: bool = True,
                 budget: float | None = None, functions=None):
        self.force = bool(force)
        self.memory_model = memory_model
        self.time_limit = time_limit
        self.algorithm = algorithm
        self.conv = conv
        self.depthwise = depthwise
        self.elementwise = elementwise
        self.budget = budget
        self.functions = None if functions is None else set(functions)
        check_scheduler_options(algorithm, memory_model)

    def _options(self, ctx):
        return scheduler_options(ctx, self.algorithm, self.time_limit, self.memory_model, 2.0)

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        self._algorithm, self._time_limit, self._model = self._options(ctx)
        self._mod = mod
        return map_relax_functions(mod, self.functions, self._rewrite_function)

    # -- evaluation
    def _evaluate(self, block, name) -> _Eval:
        graph = block_graph(block, name=name, mod=getattr(self, "_mod", None))
        s = schedule(graph, self._algorithm, self._model, time_limit=self._time_limit)
        hot = _hot_vars(block, graph, Problem.from_graph(graph, self._model), s.order)
        return _Eval(s.peak, bool(s.optimal), [graph.ops[v].source for v in s.order], hot,
                     s.lower_bound)

    def _screen(self, block, name, hint=None) -> _Eval:
        """The cheap evaluation: an upper bound from the best baseline order and from ``hint``
        (vars of the unrewritten block in its best order: that order with the rewrite's new
        ops run as early as possible, `_follow`), and the search-free lower bounds (trivial,
        ancestry); milliseconds where a search costs up to ``time_limit``."""
        from ..schedulers.bounds import ancestry_bound
        from ..schedulers.heuristics import best_heuristic

        graph = block_graph(block, name=name, mod=getattr(self, "_mod", None))
        p = Problem.from_graph(graph, self._model)
        order, peak, _ = best_heuristic(p)
        if hint:
            o = _follow(block, graph, hint)
            pk = p.evaluate(o).peak
            if pk < peak:
                order, peak = o, pk
        lower = min(peak, ancestry_bound(p))
        return _Eval(peak, lower >= peak, [graph.ops[v].source for v in order],
                     _hot_vars(block, graph, p, order), lower, exact=lower >= peak)

    def _enabled(self, site: Site) -> bool:
        return self.conv if site.kind == "channel" else self.depthwise

    def _rewrite_function(self, func, name):
        body = func.body
        if not isinstance(body, relax.SeqExpr):
            return None
        blocks = list(body.blocks)
        found = []  # (block position, sites)
        unmatched = []
        for i, blk in enumerate(blocks):
            if not isinstance(blk, relax.DataflowBlock):
                continue
            sites, why = find_sites(blk, self.elementwise)
            unmatched += why
            sites = [s for s in sites if self._enabled(s)]
            if sites:
                found.append((i, sites))
        candidates = sum(len(s) for _, s in found)
        dynamic = [w for w in unmatched if "dynamic shape" in w]
        if dynamic:
            warnings.warn(f"RewriteConcatConv: {name}: not rewritten: " + "; ".join(dynamic),
                          stacklevel=3)
        if not candidates:
            return None
        before = after = 0
        optimal = True
        measured = True
        rewritten = 0
        t0 = time.perf_counter()
        # Peaks of the blocks with no candidate site count for the function's peak too.
        for i, blk in enumerate(blocks):
            if not isinstance(blk, relax.DataflowBlock) or i in dict(found):
                continue
            try:
                e = self._evaluate(blk, f"{name}.block{i}")
            except UnsupportedModelError:
                continue  # not ours to judge; the sites' blocks decide
            before, after = max(before, e.peak), max(after, e.peak)
            optimal = optimal and e.optimal
        for i, sites in found:
            blk = blocks[i]
            outside = _outside_uses(func, i)
            try:
                base = self._evaluate(blk, f"{name}.block{i}")
            except UnsupportedModelError as e:
                if not self.force:
                    warnings.warn(f"RewriteConcatConv: {name}: left function unchanged: block "
                                  f"{i} cannot be modelled ({e}); use force=True to rewrite "
                                  "without a memory check", stacklevel=3)
                    return None
                measured = False
                blocks[i], n = self._apply(blk, sites, outside)
                rewritten += n
                continue
            # sum the branches in the order the best schedule makes them (inputs first)
            at = {blk.bindings[src].var: k for k, src in enumerate(base.order)}
            for s in sites:
                s.order = sorted(range(len(s.fields)), key=lambda f, s=s: at.get(s.fields[f], -1))
            new, n, ev = self._choose(blk, sites, outside, base, f"{name}.block{i}")
            before = max(before, base.peak)
            after = max(after, ev.peak)
            optimal = optimal and base.optimal and ev.optimal
            if n:
                blocks[i] = new
                rewritten += n
        attrs = {
            "memsched.rewrite_sites": int(rewritten),
            "memsched.rewrite_candidates": int(candidates),
            "memsched.rewrite_memory_model": self._model.name,
            "memsched.rewrite_seconds": float(round(time.perf_counter() - t0, 6)),
        }
        if measured:
            attrs.update({"memsched.rewrite_peak_before": int(before),
                          "memsched.rewrite_peak_after": int(after),
                          "memsched.rewrite_optimal": int(optimal)})
        if unmatched:
            attrs["memsched.rewrite_unmatched"] = "; ".join(unmatched)
        if rewritten:
            func = with_blocks(func, blocks)
        return func.with_attrs(attrs)

    def _apply(self, block, sites, outside):
        """(block with ``sites`` rewritten, number of convs rewritten). A kernel-wise rewrite
        turns the conv into a concat of per-branch convs; convs reading that concat (the
        pointwise conv after a depthwise one) are rewritten with it, transitively: without them
        the new concat only moves the memory peak (TVM's concat copies its inputs)."""
        new = apply_sites(block, sites, outside)
        count = len(sites)
        produced = {s.conv_var for s in sites if s.kind == "kernel"}
        while produced:
            more, _ = find_sites(new, self.elementwise)
            more = [s for s in more if s.concat_var in produced and self._enabled(s)]
            if not more:
                break
            new = apply_sites(new, more, outside)
            count += len(more)
            produced = {s.conv_var for s in more if s.kind == "kernel"}
        return new, count

    def _choose(self, block, sites, outside, base: _Eval, name):
        """(new block, convs rewritten, its evaluation); (block, 0, base) when no subset of the
        sites lowers the peak.

        Peak-directed: only concats whose tensors (branches, concat, ops up to the conv) are
        live at a step at the current peak can lower it. Each round tries all of those together
        (repeated cells peak at several steps at once), then one at a time; an improvement is
        kept, minus the concats it does not need, and the next round looks at the new peak.
        The search stops when nothing improves, at a proven floor, or when the budget is spent.
        """
        units: dict = {}  # concat var -> its sites: a concat disappears only with all of them
        for s in sites:
            units.setdefault(s.concat_var, []).append(s)
        units = list(units.values())
        touch = []
        for u in units:
            vs = {u[0].concat_var, u[0].tuple_var} | {f for f in u[0].fields
                                                       if isinstance(f, tvm.ir.Var)}
            for s in u:
                vs |= {s.conv_var} | {st.var for st in s.chain}
            touch.append(vs - {None})
        cache: dict = {frozenset(): (block, 0, base)}  # keep -> (block, convs, evaluation)

        def ev(keep: frozenset, exact: bool = False, near: frozenset | None = None) -> _Eval:
            """Screened (`_screen`, following the order of the evaluated set ``near``) unless
            ``exact`` or the screen proved it; an exact evaluation replaces the screen."""
            if keep not in cache:
                chosen = [s for u in sorted(keep) for s in units[u]]
                new, n = self._apply(block, chosen, outside)
                nb, _, ne = cache[near if near in cache else frozenset()]
                hint = [nb.bindings[k].var for k in ne.order] if ne.order else None
                cache[keep] = (new, n, self._screen(new, name, hint))
            new, n, e = cache[keep]
            if exact and not e.exact:
                cache[keep] = (new, n, self._evaluate(new, name))
            return cache[keep][2]

        def below(keep: frozenset, near: frozenset, strict: bool = True,
                  exact: bool = True) -> bool:
            """Whether ``keep``'s best order goes below the peak of ``near`` (or to it,
            ``strict`` False). The exact scheduler runs only when the cheap bounds leave it
            open (and ``exact``)."""
            threshold = ev(near).peak
            e = ev(keep, near=near)
            if e.peak < threshold or (not strict and e.peak == threshold):
                return True
            if e.lower > threshold or (strict and e.lower == threshold) or e.exact or \
                    not exact:
                return False
            e = ev(keep, exact=True)
            return e.peak < threshold or (not strict and e.peak == threshold)

        if self.force:
            every = frozenset(range(len(units)))
            ev(every, exact=True)
            return cache[every]
        end = None if self.budget is None else time.perf_counter() + self.budget
        floor = _floor(block, sites, self._model)

        def spent():
            return end is not None and time.perf_counter() > end

        cur = frozenset()
        while not spent() and ev(cur).peak > floor:
            peak, hot = ev(cur).peak, ev(cur).hot
            crit = [u for u in range(len(units)) if u not in cur and touch[u] & hot]
            trials = [cur | frozenset(crit)]
            if len(crit) > 1:
                trials += [cur | {u} for u in crit]
            better = None
            for k, trial in enumerate(trials):
                if spent():
                    break
                # the exact search for the combined trial only; single sites are screened
                if below(trial, cur, exact=k == 0):
                    better = trial
                    break
            if better is None:
                break
            for u in sorted(better - cur):  # drop what the improvement does not need
                if spent():
                    break
                fewer = better - {u}
                if fewer != cur and below(fewer, better, strict=False):
                    better = fewer
            cur = better
        # the chosen set once with the configured scheduler (the order and peak reported)
        if cur and not spent():
            ev(cur, exact=True)
        if ev(cur).peak >= base.peak:
            return block, 0, base
        return cache[cur]

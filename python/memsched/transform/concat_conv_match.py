"""Matching for `RewriteConcatConv`: the ``concat -> conv2d`` sites of a dataflow block
(`find_sites`).

A site is a convolution reading a channel concat, directly or through channel-wise ops that
commute with the concat (`UNARY`, `BINARY` with a per-channel operand, batch norm, spatial
strided_slice), with the partitioning that removes the concat (channel-wise for ``groups == 1``,
kernel-wise for depthwise and group-aligned grouped convolutions). The rules are in
`memsched.transform.rewrite_concat_conv`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax
from tvm.ir.prim.expr import IntImm as _IntImm  # tvm.tir is gone in 0.27

from ..importers.relax import written_buffers

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

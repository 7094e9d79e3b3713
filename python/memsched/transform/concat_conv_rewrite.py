"""The identity rewrite of matched ``concat -> conv2d`` sites (`apply_sites`), for
`RewriteConcatConv`: weights sliced (in numpy when constant, else through ``R.strided_slice``),
partial convolutions added (channel-wise) or concatenated (kernel-wise), channel-wise ops moved
onto the branches, and the rewritten value bound to the conv's own variable; the concat is
removed only when nothing else uses it.
"""
from __future__ import annotations

import numpy as np
from tvm import relax

from .concat_conv_match import _CONST, Site, Step, _static_shape


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

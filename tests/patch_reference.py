"""A numpy reference for the patch geometry: run a region whole and patched, compare.

Integer arithmetic (int64) on HWC arrays (batch 1 dropped), so equality is exact. Weights per
operator: ``CONV_2D`` ``[cout, kh, kw, cin]``, ``DEPTHWISE_CONV_2D`` ``[1, kh, kw, cout]``
(depth multiplier ``cout / cin``); pools need none; ``AVERAGE_POOL_2D`` is the floor of the mean
of the real cells (TFLite averages over the cells inside the tensor); element-wise ops add
their inputs (an integer stand-in for any same-shape element-wise op); concat stacks channels.
Not a model of int8 requantization: it checks that every output cell of a patch sees exactly
the input cells, padding values and taps the whole operator does.

Squeeze-and-excitation (classes ``reduce`` / ``vector`` / ``scale``): a reduction sums over
H and W and divides by ``SOp.divisor`` (integers: floor division, floats: true division);
vector ops ``FC`` (weights ``[cout, cin]``), ``RELU``, ``HSIG`` (``clip(x + 3, 0, 6)``, divided
by 6 for floats); ``scale`` multiplies the feature map by the vector. The patched run adds the
per-patch partial sums and divides once. Float inputs work too (compare within a tolerance:
the sums are added in another order).
"""
from __future__ import annotations

import numpy as np

from memsched.patches.geometry import PAD_MIN, SOp, SpatialModel
from memsched.patches.plans import PatchPlan

MIN_VALUE = -(1 << 40)


def _pad_value(kind: str) -> int:
    return MIN_VALUE if kind == PAD_MIN else 0


def window_op(op: SOp, x: np.ndarray, weights, out_hw: tuple[int, int],
              pads=(0, 0, 0, 0)) -> np.ndarray:
    """Apply window op ``op`` to HWC ``x`` padded by ``pads`` (top, bottom, left, right),
    VALID, giving ``out_hw`` cells."""
    if op.is_pad:
        return np.pad(x, ((pads[0], pads[1]), (pads[2], pads[3]), (0, 0)))
    valid = np.pad(np.ones(x.shape[:2], np.int64), ((pads[0], pads[1]), (pads[2], pads[3])))
    if any(pads):
        x = np.pad(x, ((pads[0], pads[1]), (pads[2], pads[3]), (0, 0)),
                   constant_values=_pad_value(op.pad_value))
    oh, ow = out_hw
    (kh, kw), (sh, sw), (dh, dw) = op.kernel, op.stride, op.dilation
    acc = None
    count = np.zeros((oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            slab = x[i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw]
            if op.kind == "CONV_2D":
                term = slab @ weights[:, i, j, :].T
            elif op.kind == "DEPTHWISE_CONV_2D":
                mult = weights.shape[3] // x.shape[2]
                term = np.repeat(slab, mult, axis=2) * weights[0, i, j, :]
            elif op.kind == "MAX_POOL_2D":
                acc = slab.copy() if acc is None else np.maximum(acc, slab)
                continue
            else:  # AVERAGE_POOL_2D
                term = slab
                count += valid[i * dh: i * dh + (oh - 1) * sh + 1: sh,
                               j * dw: j * dw + (ow - 1) * sw + 1: sw]
            acc = term if acc is None else acc + term
    if op.kind == "AVERAGE_POOL_2D":
        acc = acc // np.maximum(count, 1)[:, :, None]
    return acc


def finish_reduce(op: SOp, total: np.ndarray) -> np.ndarray:
    """A reduction's result from its sum over space."""
    if op.divisor == 1:
        return total
    if np.issubdtype(total.dtype, np.integer):
        return total // op.divisor
    return total / op.divisor


def vector_op(op: SOp, args: list, weights) -> np.ndarray:
    x = args[0]
    if op.kind == "FC":
        return x @ weights.T
    if op.kind == "RELU":
        return np.maximum(x, 0)
    if op.kind == "HSIG":
        y = np.clip(x + 3, 0, 6)
        return y if np.issubdtype(y.dtype, np.integer) else y / 6
    out = x.copy()
    for a in args[1:]:
        out = out + a
    return out


def run_op(sm: SpatialModel, op: SOp, args: list, weights, pads=(0, 0, 0, 0), out_hw=None):
    if op.cls == "reduce":
        return finish_reduce(op, args[0].sum(axis=(0, 1), keepdims=True))
    if op.cls == "vector":
        return vector_op(op, args, weights)
    if op.cls == "scale":
        return args[0] * args[1]
    if op.cls == "window":
        return window_op(op, args[0], weights, out_hw, pads)
    if op.cls == "concat":
        return np.concatenate(args, axis=2)
    out = args[0].copy()
    for a in args[1:]:
        out = out + a
    return out


def run_whole(sm: SpatialModel, length: int, weights: dict, inputs: dict) -> dict:
    """Tensor values after running the first ``length`` ops whole (implicit padding)."""
    vals = dict(inputs)
    for op in sm.ops[:length]:
        args = [vals[t] for t in op.inputs]
        pads = (op.pad[0], op.pad_after[0], op.pad[1], op.pad_after[1])
        vals[op.output] = run_op(sm, op, args, weights.get(op.index), pads,
                                 sm.tensors[op.output].hw)
    return vals


def run_plan(sm: SpatialModel, plan: PatchPlan, weights: dict, inputs: dict) -> dict:
    """Split tensor values computed patch by patch (explicit pads, VALID ops, concats)."""
    vals: list = []

    def get(ref):
        if isinstance(ref, tuple):
            return inputs[ref[1]]
        return vals[ref]

    for nd in plan.nodes:
        args = [get(r) for r in nd.inputs]
        if nd.kind == "slice":
            b = nd.base
            v = args[0][nd.win.h0 - b.h0: nd.win.h1 - b.h0, nd.win.w0 - b.w0: nd.win.w1 - b.w0]
        elif nd.kind == "pad":
            p = nd.pads
            v = np.pad(args[0], ((p[0], p[1]), (p[2], p[3]), (0, 0)),
                       constant_values=_pad_value(nd.pad_value))
        elif nd.kind == "concat":
            v = np.concatenate(args, axis=nd.axis - 1)
        elif nd.kind in ("partial", "accumulate", "reduce", "vector"):
            op = sm.ops[nd.op]
            if nd.kind == "partial":
                assert args[0].shape[:2] == (nd.win.height, nd.win.width), (nd, args[0].shape)
                v = args[0].sum(axis=(0, 1), keepdims=True)
            elif nd.kind == "accumulate":
                v = args[0] + args[1]
            elif nd.kind == "reduce":
                v = finish_reduce(op, args[0])
            else:
                v = vector_op(op, args, weights.get(op.index))
            vals.append(v)
            continue
        else:
            op = sm.ops[nd.op]
            v = run_op(sm, op, args, weights.get(op.index), nd.pads,
                       (nd.win.height, nd.win.width))
        assert v.shape[:2] == (nd.win.height, nd.win.width), (nd, v.shape)
        vals.append(v)
    return {t: get(k) for t, k in plan.result.items()}


def random_weights(sm: SpatialModel, rng: np.random.Generator, length: int | None = None) -> dict:
    out = {}
    for op in sm.ops[:length]:
        if op.kind == "CONV_2D":
            cin = sm.tensors[op.inputs[0]].channels
            out[op.index] = rng.integers(-3, 4, (op.cout, op.kernel[0], op.kernel[1], cin))
        elif op.kind == "DEPTHWISE_CONV_2D":
            out[op.index] = rng.integers(-3, 4, (1, op.kernel[0], op.kernel[1], op.cout))
        elif op.kind == "FC":
            cin = sm.tensors[op.inputs[0]].channels
            out[op.index] = rng.integers(-3, 4, (op.cout, cin))
    return out


def stack_model(specs, h: int, w: int, c: int, residual: bool = False,
                concat: bool = False, se_acc: str = "int64") -> SpatialModel:
    """A chain of window ops on a ``1 x h x w x c`` input: ``specs`` items
    ``(kind, kernel, stride, dilation, padding)`` (kernel, stride, dilation: an int or an
    (h, w) pair) with kind one of CONV_2D, DEPTHWISE_CONV_2D,
    MAX_POOL_2D, AVERAGE_POOL_2D, PAD (kernel = the padding amount), or SE (a
    squeeze-and-excitation block: MEAN over space, FC to ``kernel`` channels, RELU, FC back,
    HSIG, scale of the block's input) and padding ``SAME`` / ``VALID`` / ``TORCH`` (torch's
    symmetric ``(k-1)*d//2``). ``residual``: an ADD
    of the last two same-shape tensors at the end (a DAG). ``se_acc``: the accumulator the
    SE blocks' MEAN declares (`SOp.acc_dtype`; integers: of int32 values, as the reference's
    int64 arithmetic sums them).
    Raises ValueError when a spec leaves no output cell."""
    from memsched.patches.geometry import (PAD_NONE, PAD_ZERO, STensor, same_padding, valid_size)

    tensors = {0: STensor(0, "x", (1, h, w, c), 1)}
    ops = []
    cur = 0
    for kind, k, s, d, padding in specs:
        (kh, kw), (sh, sw), (dh, dw) = (_pair(k), _pair(s), _pair(d))
        H, W = tensors[cur].hw
        cin = tensors[cur].channels
        if kind == "SE":
            cur = _se_block(ops, tensors, cur, max(int(k), 1), se_acc)
            continue
        if kind == "PAD":
            oh, ow, pb, pa = H + 2 * k, W + 2 * k, k, k
            op = dict(kernel=(1, 1), stride=(1, 1), dilation=(1, 1), pad=(pb, pb),
                      pad_after=(pa, pa), pad_value=PAD_ZERO, macs_per_out=0, is_pad=True)
            cout = cin
        else:
            if padding == "SAME":
                oh, pb, pa = same_padding(H, kh, sh, dh)
                ow, pbw, paw = same_padding(W, kw, sw, dw)
            elif padding == "TORCH":  # symmetric (k-1)*d/2, the padding after that is used
                oh, pb, pa = _torch_padding(H, kh, sh, dh)
                ow, pbw, paw = _torch_padding(W, kw, sw, dw)
            else:
                oh, ow = valid_size(H, kh, sh, dh), valid_size(W, kw, sw, dw)
                pb = pa = pbw = paw = 0
            cout = cin + 1 if kind == "CONV_2D" else cin
            pv = {"MAX_POOL_2D": PAD_MIN, "AVERAGE_POOL_2D": PAD_NONE}.get(kind, PAD_ZERO)
            op = dict(kernel=(kh, kw), stride=(sh, sw), dilation=(dh, dw), pad=(pb, pbw),
                      pad_after=(pa, paw), pad_value=pv,
                      macs_per_out=kh * kw * (cin if kind == "CONV_2D" else 1))
        if oh < 1 or ow < 1:
            raise ValueError("no output cell left")
        t = len(tensors)
        tensors[t] = STensor(t, f"t{t}", (1, oh, ow, cout), 1)
        ops.append(SOp(len(ops), kind, "window", (cur,), t, cout=cout, **op))
        cur = t
    if residual:
        same = [t for t in tensors if t != cur and tensors[t].shape == tensors[cur].shape]
        if same:
            t = len(tensors)
            tensors[t] = STensor(t, f"t{t}", tensors[cur].shape, 1)
            ops.append(SOp(len(ops), "ADD", "eltwise", (same[-1], cur), t,
                           cout=tensors[cur].channels))
            cur = t
    if concat:
        same = [t for t in tensors if t != cur and tensors[t].hw == tensors[cur].hw]
        if same:
            t = len(tensors)
            c = tensors[same[0]].channels + tensors[cur].channels
            tensors[t] = STensor(t, f"t{t}", (1, *tensors[cur].hw, c), 1)
            ops.append(SOp(len(ops), "CONCATENATION", "concat", (same[0], cur), t, cout=c,
                           macs_per_out=0))
            cur = t
    return SpatialModel(ops, tensors, [0], [cur], name="stack")


def _se_block(ops: list, tensors: dict, x: int, mid: int, acc: str = "int64") -> int:
    """Append a squeeze-and-excitation block on tensor ``x``; return the scaled tensor."""
    from memsched.patches.geometry import STensor

    (H, W), c = tensors[x].hw, tensors[x].channels

    def new(shape) -> int:
        t = len(tensors)
        tensors[t] = STensor(t, f"t{t}", shape, 1)
        return t

    m = new((1, 1, 1, c))
    ops.append(SOp(len(ops), "MEAN", "reduce", (x,), m, cout=c, divisor=H * W,
                   macs_per_out=H * W, acc_dtype=acc,
                   acc_range=(-(1 << 31), (1 << 31) - 1) if "int" in acc else None))
    cur = m
    for kind, cout in (("FC", mid), ("RELU", mid), ("FC", c), ("HSIG", c)):
        t = new((1, 1, 1, cout))
        ops.append(SOp(len(ops), kind, "vector", (cur,), t, cout=cout,
                       macs_per_out=tensors[cur].channels if kind == "FC" else 1))
        cur = t
    y = new(tensors[x].shape)
    ops.append(SOp(len(ops), "MUL", "scale", (x, cur), y, cout=c))
    return y


def _torch_padding(size: int, k: int, s: int, d: int) -> tuple[int, int, int]:
    """torch's ``padding=(k-1)*d//2``: (output size, padding before, padding after used)."""
    p = (k - 1) * d // 2
    eff = (k - 1) * d + 1
    out = (size + 2 * p - eff) // s + 1
    return out, p, max((out - 1) * s + eff - size - p, 0)


def _pair(x) -> tuple[int, int]:
    return (int(x), int(x)) if isinstance(x, int) else (int(x[0]), int(x[1]))

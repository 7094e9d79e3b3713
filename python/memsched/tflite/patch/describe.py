"""A .tflite model (subgraph 0) described for the patch search: `spatial_model` -> `SpatialModel`.

Every operator with its activation inputs, output, class (``window`` / ``eltwise`` /
``concat`` / ``other``), kernel, stride, dilation, leading padding (TFLite's SAME rule), the
value implicit padding stands for, and MACs per output element.
"""
from __future__ import annotations

import numpy as np

from ...patches import (PAD_MIN, PAD_NONE, PAD_ZERO, SOp, SpatialModel, STensor, same_padding,
                        valid_size)
from ..format.read import DTYPE_BYTES, NUMPY_DTYPES, TFLiteGraph, op_macs, op_names


def spatial_model(tg: TFLiteGraph) -> SpatialModel:
    """The spatial description of subgraph 0 of a `TFLiteGraph` (`read_tflite`)."""
    sg = tg.subgraph
    names = op_names()
    codes = tg.model.operatorCodes or []
    tensors: dict[int, STensor] = {}

    def ten(t: int) -> STensor:
        if t not in tensors:
            x = sg.tensors[t]
            nm = x.name.decode("utf-8", "replace") if isinstance(x.name, bytes) \
                else str(x.name or f"tensor_{t}")
            tensors[t] = STensor(t, nm, tuple(int(d) for d in (x.shape if x.shape is not None
                                                               else [])),
                                 DTYPE_BYTES.get(int(x.type), 4), int(x.type))
        return tensors[t]

    def const(t: int):
        x = sg.tensors[t]
        raw = tg.buffer_bytes(int(x.buffer))
        if not raw.size:
            return None
        arr = np.frombuffer(raw.tobytes(), dtype=NUMPY_DTYPES.get(int(x.type), np.int32))
        return arr.reshape([int(d) for d in x.shape]) if x.shape is not None else arr

    act = set(int(t) for t in (sg.inputs if sg.inputs is not None else []))
    for op in sg.operators or []:
        for t in (op.outputs if op.outputs is not None else []):
            if t >= 0:
                act.add(int(t))
    ops = []
    for v, op in enumerate(sg.operators or []):
        code = codes[op.opcodeIndex]
        kind = names.get(max(int(code.builtinCode), int(code.deprecatedBuiltinCode)), "?")
        ins = [int(t) for t in (op.inputs if op.inputs is not None else []) if t >= 0]
        outs = [int(t) for t in (op.outputs if op.outputs is not None else []) if t >= 0]
        a_ins = tuple(t for t in ins if t in act)
        for t in list(a_ins) + outs:
            ten(t)
        ops.append(_classify(v, kind, op, ins, a_ins, outs, sg, ten, const))
    # a copied operator keeps its SAME / VALID padding on a window (patches with margins)
    return SpatialModel(ops, tensors, [int(t) for t in sg.inputs], [int(t) for t in sg.outputs],
                        macs=op_macs(tg), name=tg.name)


def _classify(v, kind, op, ins, a_ins, outs, sg, ten, const) -> SOp:
    def other(reason):
        return SOp(v, kind, "other", a_ins, outs[0] if outs else -1, reason=reason)

    if len(outs) != 1:
        return other(f"{kind} has {len(outs)} outputs")
    o = ten(outs[0])
    if kind in ("MEAN", "SUM") and a_ins and ten(a_ins[0]).spatial:
        # a squeeze-and-excitation block's global pooling: the patch search could carry it
        # (patches.search with se=True, as TVM's TilePatches and ExecuTorch do), but a .tflite
        # file must stay bit-equal and TFLite Micro's builtin kernels cannot combine per-patch
        # partial sums exactly
        return other(f"{kind} over the feature map (global pooling, e.g. of a squeeze-and-"
                     "excitation block): TFLite Micro's builtin MEAN/SUM requantize (int8) or "
                     "round (float) their result, so per-patch partial sums cannot be combined "
                     "bit-exactly; the region ends before it")
    if not o.spatial or not a_ins or any(not ten(t).spatial for t in a_ins):
        return other(f"{kind} on a tensor that is not a 1xHxWxC feature map")
    opts = op.builtinOptions
    H, W = ten(a_ins[0]).hw
    if kind in ("CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "AVERAGE_POOL_2D"):
        if a_ins[0] != ins[0] or len(a_ins) != 1:
            return other(f"{kind} with activation weights")
        if kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            w = [int(d) for d in sg.tensors[ins[1]].shape]
            kh, kw = w[1], w[2]
            dil = (int(opts.dilationHFactor or 1), int(opts.dilationWFactor or 1))
            macs = kh * kw * (w[3] if kind == "CONV_2D" else 1)
            if kind == "CONV_2D" and ten(a_ins[0]).channels != w[3]:
                return other("grouped CONV_2D")
        else:
            kh, kw = int(opts.filterHeight), int(opts.filterWidth)
            dil = (1, 1)
            macs = kh * kw
        st = (int(opts.strideH or 1), int(opts.strideW or 1))
        same = int(opts.padding) == 0  # Padding.SAME
        if same:
            oh, ph, pha = same_padding(H, kh, st[0], dil[0])
            ow, pw, pwa = same_padding(W, kw, st[1], dil[1])
        else:
            oh, ow = valid_size(H, kh, st[0], dil[0]), valid_size(W, kw, st[1], dil[1])
            ph = pha = pw = pwa = 0
        if (oh, ow) != o.hw:
            return other(f"{kind} output shape does not follow its padding rule")
        pv = PAD_ZERO if kind in ("CONV_2D", "DEPTHWISE_CONV_2D") else (
            PAD_MIN if kind == "MAX_POOL_2D" else PAD_NONE)
        return SOp(v, kind, "window", a_ins, outs[0], (kh, kw), st, dil, (ph, pw), (pha, pwa),
                   pv, macs, o.channels)
    if kind in ("PAD", "PADV2"):
        if len(ins) < 2 or ins[0] != a_ins[0] or len(a_ins) != 1:
            return other(f"{kind} with activation paddings")
        pads = const(ins[1])
        if pads is None or pads.shape != (4, 2) or pads[0].any() or pads[3].any():
            return other(f"{kind} that pads batch or channels")
        return SOp(v, kind, "window", a_ins, outs[0], (1, 1), (1, 1), (1, 1),
                   (int(pads[1, 0]), int(pads[2, 0])), (int(pads[1, 1]), int(pads[2, 1])),
                   PAD_ZERO, 0, o.channels, is_pad=True)
    if kind in ELEMENTWISE:
        if any(ten(t).shape != o.shape for t in a_ins) or \
                any(t not in a_ins and not _small_const(sg, t, o.channels) for t in ins):
            return other(f"{kind} broadcasts")
        return SOp(v, kind, "eltwise", a_ins, outs[0], macs_per_out=1, cout=o.channels)
    if kind == "CONCATENATION":
        axis = int(opts.axis)
        if axis not in (3, -1) or len(a_ins) != len(ins) or \
                any(ten(t).hw != o.hw for t in a_ins):
            return other("CONCATENATION not along channels")
        return SOp(v, kind, "concat", a_ins, outs[0], macs_per_out=0, cout=o.channels)
    return other(f"{kind} is not spatially local")


ELEMENTWISE = {"ADD", "SUB", "MUL", "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LOGISTIC",
               "TANH", "HARD_SWISH", "LEAKY_RELU", "QUANTIZE", "DEQUANTIZE", "PRELU", "ABS",
               "NEG", "SQUARED_DIFFERENCE", "MAXIMUM", "MINIMUM", "ELU", "GELU"}


def _small_const(sg, t: int, channels: int) -> bool:
    """A constant broadcast over space (a scalar or per-channel vector): element-wise safe."""
    shape = [int(d) for d in (sg.tensors[t].shape if sg.tensors[t].shape is not None else [])]
    n = 1
    for d in shape:
        n *= d
    return n in (1, channels) and (not shape or shape[-1] in (1, channels))

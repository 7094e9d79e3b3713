"""MixNet-like ONNX models (the structure of timm's ``mixnet_s`` exported to ONNX): mixed
depthwise convolutions (Split -> depthwise Conv with kernels 3/5/7/... -> Concat), grouped
pointwise convolutions (Split -> 1x1 Conv per group -> Concat), ReLU or Swish (x * Sigmoid(x)),
squeeze-excite (GlobalAveragePool -> 1x1 Conv -> act -> 1x1 Conv -> Sigmoid -> Mul), residual
Adds and a classifier head (GlobalAveragePool -> Flatten -> Gemm). Batch norm is folded into
the convolutions, as in exported deploy models.

`mixnet_like_onnx()` is a small two-block model for tests; `MIXNET_S` (with ``size=224``) is
mixnet_s's own block list (timm's ``arch_def``)."""
from __future__ import annotations

import numpy as np

# (repeats, dw kernels, stride, expansion, out channels, se ratio, exp groups, pwl groups, swish)
MIXNET_S = [
    (1, (3,), 1, 1, 16, 0, 1, 1, False),  # ds block
    (1, (3,), 2, 6, 24, 0, 2, 2, False),
    (1, (3,), 1, 3, 24, 0, 2, 2, False),
    (1, (3, 5, 7), 2, 6, 40, 0.5, 1, 1, True),
    (3, (3, 5), 1, 6, 40, 0.5, 2, 2, True),
    (1, (3, 5, 7), 2, 6, 80, 0.25, 1, 2, True),
    (2, (3, 5), 1, 6, 80, 0.25, 1, 2, True),
    (1, (3, 5, 7), 1, 6, 120, 0.5, 2, 2, True),
    (2, (3, 5, 7, 9), 1, 3, 120, 0.5, 2, 2, True),
    (1, (3, 5, 7, 9, 11), 2, 6, 200, 0.5, 1, 1, True),
    (2, (3, 5, 7, 9), 1, 6, 200, 0.5, 1, 2, True),
]

SMALL = [
    (1, (3,), 1, 1, 16, 0, 1, 1, False),
    (1, (3, 5, 7), 1, 3, 16, 0.25, 2, 1, False),
    (1, (3, 5), 2, 3, 24, 0.5, 2, 2, True),
]


def _split_channels(c: int, parts: int) -> list[int]:
    out = [c // parts] * parts
    out[0] += c - sum(out)
    return out


def mixnet_like_onnx(blocks=None, size: int = 28, stem: int = 16, head: int = 64,
                     classes: int = 10, seed: int = 0):
    from onnx import TensorProto, helper, numpy_helper

    blocks = SMALL if blocks is None else blocks
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    count = [0]

    def name(prefix):
        count[0] += 1
        return f"{prefix}{count[0]}"

    def const(shape, scale=0.2):
        n = name("w")
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), n))
        return n

    def node(op, ins, n_out=1, **attrs):
        outs = [name(op.lower()) for _ in range(n_out)]
        nodes.append(helper.make_node(op, ins, outs, name=name(op), **attrs))
        return outs if n_out > 1 else outs[0]

    def conv(x, cin, cout, k=1, groups=1, stride=1):
        return node("Conv", [x, const((cout, cin // groups, k, k)), const((cout,))],
                    pads=[k // 2] * 4, group=groups, strides=[stride, stride])

    def act(x, swish):
        if swish:
            return node("Mul", [x, node("Sigmoid", [x])])
        return node("Relu", [x])

    def split(x, parts):
        if len(parts) == 1:
            return [x]
        s = name("split")
        inits.append(numpy_helper.from_array(np.array(parts, dtype=np.int64), s))
        return node("Split", [x, s], n_out=len(parts), axis=1)

    def concat(xs):
        return xs[0] if len(xs) == 1 else node("Concat", xs, axis=1)

    def mixed_dw(x, c, kernels, stride):
        parts = _split_channels(c, len(kernels))
        return concat([conv(p, n, n, k, groups=n, stride=stride)
                       for p, n, k in zip(split(x, parts), parts, kernels)])

    def grouped_pw(x, cin, cout, groups):
        ins, outs = _split_channels(cin, groups), _split_channels(cout, groups)
        return concat([conv(p, i, o) for p, i, o in zip(split(x, ins), ins, outs)])

    h = act(conv("x", 3, stem, 3, stride=2 if size >= 112 else 1), False)
    c, hw = stem, size // 2 if size >= 112 else size
    for reps, kernels, stride, exp, cout, se, eg, pg, swish in blocks:
        for r in range(reps):
            s0 = stride if r == 0 else 1
            e = c * exp
            t = h if exp == 1 else act(grouped_pw(h, c, e, eg), swish)
            t = act(mixed_dw(t, e, kernels, s0), swish)
            if se:
                red = max(1, int(c * se))
                s = node("GlobalAveragePool", [t])
                s = act(conv(s, e, red), swish)
                s = node("Sigmoid", [conv(s, red, e)])
                t = node("Mul", [t, s])
            t = grouped_pw(t, e, cout, pg)
            h = node("Add", [h, t]) if s0 == 1 and cout == c else t
            c = cout
            hw //= s0
    h = act(conv(h, c, head), False)
    h = node("Flatten", [node("GlobalAveragePool", [h])], axis=1)
    y = node("Gemm", [h, const((classes, head)), const((classes,))], transB=1)
    graph = helper.make_graph(
        nodes, "mixnet_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="memsched.tests")
    model.ir_version = 8
    return model

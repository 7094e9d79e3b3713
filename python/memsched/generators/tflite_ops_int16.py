"""Small 16x8 and int4-weight TFLite models for `memsched.tflite.memory.arena`'s prices of the
kernels TFLite Micro runs with CMSIS-NN on the Cortex-M (`tests/test_tflite_arena_int16.py`):
16x8 (int16 activations with zero point 0, int8 weights, int64 biases for convolutions and
fully connected layers, as TFLite's 16x8 quantization writes them) CONV_2D,
DEPTHWISE_CONV_2D, ADD, MUL, AVERAGE_POOL_2D, MAX_POOL_2D, FULLY_CONNECTED, SOFTMAX
(`cnn_model`), TRANSPOSE_CONV, BATCH_MATMUL (int16 operands), LSTM (`lstm_model`) and the
elementwise, reduction and shape kernels of a 16x8 model (`misc_model`); int8
activations with int4 weights (`int4_model`)."""
from __future__ import annotations

import numpy as np

from .tflite_synth import _Net, _quantize

# int16 activations span about 256x int8's resolution at the same range
_INT16_SCALE = 1.0 / 256


class _Net16(_Net):
    """`_Net` with int16 activations (zero point 0: TFLM's 16x8 kernels require it) and
    int64 biases; weights stay int8 (per channel for convolutions, per tensor for fully
    connected layers, which CMSIS-NN's int16 kernel requires)."""

    def __init__(self, name: str, seed: int):
        super().__init__(name, True, seed)

    def act(self, name, shape, scale=0.05, zp=0, like=None):
        if like is not None:
            scale = self.scale[like][0]
        else:
            scale = scale * _INT16_SCALE
        t = self.b.tensor(name, shape, self.s.TensorType.INT16, scale=scale, zero_point=0)
        self.scale[t] = (scale, 0)
        return t

    def bias(self, name, x, wscale, n):
        bf = self.rng.normal(0, 0.1, n).astype(np.float32)
        bscale = (self.scale[x][0] * np.broadcast_to(wscale, (n,))).astype(np.float32)
        return self.b.tensor(name, [n], self.s.TensorType.INT64,
                             self.b.buffer(np.round(bf / bscale).astype(np.int64)),
                             scale=bscale, zero_point=0)


def cnn_model(seed: int = 0, size: int = 8, channels: int = 8, stride: int = 1,
              k: int = 3) -> bytes:
    """input -> CONV_2D kxk -> DEPTHWISE_CONV_2D 3x3 (``stride``) -> ADD (a 1x1 conv of the
    same input branch) -> MUL -> AVERAGE_POOL_2D 2x2 -> MAX_POOL_2D 2x2 -> CONV_2D 1x1 ->
    RESHAPE -> FULLY_CONNECTED -> SOFTMAX, all int16."""
    net = _Net16(f"int16_cnn_{size}_{channels}", seed)
    s = net.s
    x = net.act("x", [1, size, size, 3], 0.04)
    net.b.inputs = [x]
    a, shape = net.conv(x, [1, size, size, 3], channels, k=k)
    d, dshape = net.conv(a, shape, channels, depthwise=True, stride=stride)
    e, _ = net.conv(a, shape, channels, k=1, stride=stride)
    m = net.add(d, e, dshape)
    prod = net.act(f"mul{net.n}", dshape, 0.3)
    mo = s.MulOptionsT()
    net.b.op("MUL", [m, d], [prod], s.BuiltinOptions.MulOptions, mo)

    def pool(kind, t, shp):
        o = s.Pool2DOptionsT()
        o.padding, o.strideW, o.strideH = s.Padding.VALID, 2, 2
        o.filterWidth = o.filterHeight = 2
        out = [1, shp[1] // 2, shp[2] // 2, shp[3]]
        y = net.act(f"{kind.lower()}{net.n}", out, like=t)
        net.n += 1
        net.b.op(kind, [t], [y], s.BuiltinOptions.Pool2DOptions, o)
        return y, out

    p, pshape = pool("AVERAGE_POOL_2D", prod, dshape)
    p, pshape = pool("MAX_POOL_2D", p, pshape)
    c, cshape = net.conv(p, pshape, 12, k=1)
    flat = cshape[1] * cshape[2] * cshape[3]
    r, _ = net.reshape(c, [1, flat])
    f = net.fc(r, flat, 10)
    y = net.b.tensor("softmax", [1, 10], s.TensorType.INT16, scale=1.0 / 32768, zero_point=0)
    so = s.SoftmaxOptionsT()
    so.beta = 1.0
    net.b.op("SOFTMAX", [f], [y], s.BuiltinOptions.SoftmaxOptions, so)
    net.b.outputs = [y]
    return net.b.finish()


def transpose_conv_model(seed: int = 0, size: int = 6, channels: int = 8,
                         int16_bias: bool = False) -> bytes:
    """input -> CONV_2D 3x3 -> TRANSPOSE_CONV 3x3/2 (16x8: int8 filter, int64 bias, or int16
    with ``int16_bias``) -> CONV_2D 1x1, all int16."""
    net = _Net16(f"int16_tconv_{size}_{channels}", seed)
    s, T = net.s, net.s.TensorType
    x = net.act("x", [1, size, size, 3], 0.04)
    net.b.inputs = [x]
    a, shape = net.conv(x, [1, size, size, 3], channels)
    co = max(channels // 2, 4)
    oshape = [1, 2 * size, 2 * size, co]
    wf = net.rng.normal(0, 1 / np.sqrt(9 * channels), size=(co, 3, 3, channels))
    w, wscale = net.weight("tconv/w", wf.astype(np.float32), 0)
    if int16_bias:
        bscale = (net.scale[a][0] * wscale).astype(np.float32)
        bias = net.b.tensor("tconv/b", [co], T.INT16, net.b.buffer(
            np.round(net.rng.normal(0, 0.01, co) / bscale).clip(-32767, 32767)
            .astype(np.int16)), scale=bscale, zero_point=0)
    else:
        bias = net.bias("tconv/b", a, wscale, co)
    y = net.act("tconv", oshape, 0.08)
    o = s.TransposeConvOptionsT()
    o.padding, o.strideW, o.strideH = s.Padding.SAME, 2, 2
    net.b.op("TRANSPOSE_CONV", [net.const_i32("tconv/shape", oshape), w, a, bias], [y],
             s.BuiltinOptions.TransposeConvOptions, o)
    out, _ = net.conv(y, oshape, 4, k=1, relu=False)
    net.b.outputs = [out]
    return net.b.finish()


def batch_matmul_model(seed: int = 0, size: int = 4, channels: int = 8) -> bytes:
    """Attention-like, all int16 (TFLM's BATCH_MATMUL takes int16 operands of one type):
    two convolutions -> RESHAPE to (1, H*W, C) -> BATCH_MATMUL by a constant (C, 16), q by k
    (adj_y) and k's (1, C, H*W) view by the constant (adj_x) -> RESHAPE -> ADD -> conv1x1."""
    net = _Net16(f"int16_bmm_{size}_{channels}", seed)
    s, T = net.s, net.s.TensorType
    x = net.act("x", [1, size, size, 3], 0.04)
    net.b.inputs = [x]
    a, _ = net.conv(x, [1, size, size, 3], channels)
    k_, _ = net.conv(x, [1, size, size, 3], channels, k=1)
    hw = size * size
    q, _ = net.reshape(a, [1, hw, channels])
    k, _ = net.reshape(k_, [1, hw, channels])
    kt, _ = net.reshape(k_, [1, channels, hw])
    wf = net.rng.normal(0, 1 / np.sqrt(channels), size=(channels, 16))
    wsc = max(float(np.abs(wf).max()), 1e-3) / 32767
    w = net.b.tensor("bmm/w", [channels, 16], T.INT16,
                     net.b.buffer(np.round(wf / wsc).astype(np.int16)), scale=wsc,
                     zero_point=0)
    net.scale[w] = (wsc, 0)

    def bmm(lhs, rhs, out, adj_x=False, adj_y=False):
        o = s.BatchMatMulOptionsT()
        o.adjX, o.adjY = adj_x, adj_y
        y = net.act(f"bmm{net.n}", out, 0.2)
        net.n += 1
        net.b.op("BATCH_MATMUL", [lhs, rhs], [y], s.BuiltinOptions.BatchMatMulOptions, o)
        return y

    p1 = bmm(q, w, [1, hw, 16])
    p2 = bmm(q, k, [1, hw, hw], adj_y=True)
    p3 = bmm(kt, w, [1, hw, 16], adj_x=True)
    r1, _ = net.reshape(p1, [1, size, size, 16])
    r3, _ = net.reshape(p3, [1, size, size, 16])
    r2, _ = net.reshape(p2, [1, size, size, hw])
    c2, cshape = net.conv(r2, [1, size, size, hw], 16, k=1)
    m = net.add(net.add(r1, c2, cshape), r3, cshape)
    out, _ = net.conv(m, cshape, 4, k=1, relu=False)
    net.b.outputs = [out]
    return net.b.finish()


def lstm_model(seed: int = 0, size: int = 4, channels: int = 8, units: int = 8) -> bytes:
    """input -> CONV_2D 3x3 -> RESHAPE to a sequence (1, H*W, C) ->
    UNIDIRECTIONAL_SEQUENCE_LSTM 16x8 (int16 input, hidden state and output, int8 weights,
    int64 biases, int16 cell state; 4 gates, no peephole, projection or layer norm) ->
    RESHAPE -> CONV_2D 1x1."""
    net = _Net16(f"int16_lstm_{size}_{channels}_{units}", seed)
    s, T, b = net.s, net.s.TensorType, net.b
    x0 = net.act("x", [1, size, size, 3], 0.04)
    b.inputs = [x0]
    a, _ = net.conv(x0, [1, size, size, 3], channels)
    steps = size * size
    x, _ = net.reshape(a, [1, steps, channels])
    ins = [x]
    sx = net.scale[x][0]
    h_scale = 1 / 32768
    for i, n_in in enumerate([channels] * 4 + [units] * 4):  # input, then recurrent weights
        wf = net.rng.normal(0, 1 / np.sqrt(n_in), size=(units, n_in)).astype(np.float32)
        wq, wsc = _quantize(wf, None)
        ins.append(b.tensor(f"lstm/w{i}", [units, n_in], T.INT8, b.buffer(wq), scale=wsc,
                            zero_point=0))
    ins += [-1, -1, -1]  # no peephole
    for i in range(4):
        bf = net.rng.normal(0, 0.1, units).astype(np.float32)
        bscale = np.float32(sx * b.tensors[ins[1 + i]].quantization.scale[0])
        ins.append(b.tensor(f"lstm/b{i}", [units], T.INT64,
                            b.buffer(np.round(bf / bscale).astype(np.int64)), scale=bscale,
                            zero_point=0))
    ins += [-1, -1]  # no projection
    h = b.tensor("lstm/h", [1, units], T.INT16, scale=h_scale, zero_point=0)
    c = b.tensor("lstm/c", [1, units], T.INT16, scale=2.0 ** -11, zero_point=0)
    b.tensors[h].isVariable = b.tensors[c].isVariable = True
    ins += [h, c, -1, -1, -1, -1]  # no layer norm
    y = b.tensor("lstm/out", [1, steps, units], T.INT16, scale=h_scale, zero_point=0)
    net.scale[y] = (h_scale, 0)
    o = s.UnidirectionalSequenceLSTMOptionsT()
    o.fusedActivationFunction = s.ActivationFunctionType.TANH
    o.timeMajor = False
    b.op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [y],
         s.BuiltinOptions.UnidirectionalSequenceLSTMOptions, o)
    r, rshape = net.reshape(y, [1, size, size, units])
    out, _ = net.conv(r, rshape, 4, k=1, relu=False)
    b.outputs = [out]
    return b.finish()


class _Net4(_Net):
    """`_Net` (int8 activations) with int4 weights: symmetric, in [-7, 7], packed two to a
    byte (the low nibble first) as TFLite stores kTfLiteInt4 tensors."""

    def __init__(self, name: str, seed: int):
        super().__init__(name, True, seed)

    def weight(self, name, wf, axis):
        q8, sc = _quantize(wf, axis)
        sc = sc * 127 / 7
        shape = [1] * wf.ndim
        if axis is not None:
            shape[axis] = len(sc)
        q = np.clip(np.round(wf / sc.reshape(shape)), -7, 7).astype(np.int8).ravel()
        if len(q) % 2:
            q = np.append(q, np.int8(0))
        packed = ((q[0::2] & 0x0F) | ((q[1::2] & 0x0F) << 4)).astype(np.uint8)
        return self.b.tensor(name, list(wf.shape), self.s.TensorType.INT4,
                             self.b.buffer(packed), scale=sc, zero_point=0,
                             axis=axis or 0), sc


def int4_model(seed: int = 0, size: int = 8, channels: int = 8, stride: int = 1) -> bytes:
    """int8 activations, int4 weights: input -> CONV_2D 3x3 -> DEPTHWISE_CONV_2D 3x3
    (``stride``) -> CONV_2D 1x1 -> RESHAPE -> FULLY_CONNECTED (per-tensor, as CMSIS-NN's
    int4 kernel requires)."""
    net = _Net4(f"int4_{size}_{channels}", seed)
    x = net.act("x", [1, size, size, 3], 0.04, 0)
    net.b.inputs = [x]
    a, shape = net.conv(x, [1, size, size, 3], channels)
    d, dshape = net.conv(a, shape, channels, depthwise=True, stride=stride)
    c, cshape = net.conv(d, dshape, 6, k=1)
    flat = cshape[1] * cshape[2] * cshape[3]
    r, _ = net.reshape(c, [1, flat])
    net.b.outputs = [net.fc(r, flat, 10)]
    return net.b.finish()


def misc_model(seed: int = 0, size: int = 8, channels: int = 8) -> bytes:
    """The other kernels a 16x8 model meets, all int16: input -> CONV_2D 3x3 -> LOGISTIC and
    TANH (output scale 2^-15) -> CONCATENATION -> PAD -> STRIDED_SLICE -> SUB (the conv) ->
    LEAKY_RELU -> MEAN over H and W -> QUANTIZE to int8."""
    net = _Net16(f"int16_misc_{size}_{channels}", seed)
    s, T, b = net.s, net.s.TensorType, net.b
    x = net.act("x", [1, size, size, 3], 0.04)
    b.inputs = [x]
    a, shape = net.conv(x, [1, size, size, 3], channels, relu=False)

    def unary(kind, options=None, opts=None, out_scale=None):
        if out_scale is None:
            y = net.act(f"{kind.lower()}{net.n}", shape, like=a)
        else:
            y = b.tensor(f"{kind.lower()}{net.n}", shape, T.INT16, scale=out_scale,
                         zero_point=0)
            net.scale[y] = (out_scale, 0)
        net.n += 1
        b.op(kind, [a], [y], options or 0, opts)
        return y

    lg = unary("LOGISTIC", out_scale=1.0 / 32768)
    th = unary("TANH", out_scale=1.0 / 32768)
    cshape = shape[:3] + [2 * channels]
    cat = b.tensor("cat", cshape, T.INT16, scale=1.0 / 32768, zero_point=0)
    net.scale[cat] = (1.0 / 32768, 0)
    co = s.ConcatenationOptionsT()
    co.axis = 3
    b.op("CONCATENATION", [lg, th], [cat], s.BuiltinOptions.ConcatenationOptions, co)
    p, pshape = net.pad(cat, cshape, 1)
    sl, slshape = net.strided_slice(p, pshape, [0, 1, 1, 0], [1, size + 1, size + 1, channels])
    d = net.act("sub", slshape, 0.2)
    so = s.SubOptionsT()
    b.op("SUB", [sl, a], [d], s.BuiltinOptions.SubOptions, so)
    lr = net.act("leaky", slshape, like=d)
    lo = s.LeakyReluOptionsT()
    lo.alpha = 0.1
    b.op("LEAKY_RELU", [d], [lr], s.BuiltinOptions.LeakyReluOptions, lo)
    m = net.act("mean", [1, 1, 1, channels], like=d)
    mo = s.ReducerOptionsT()
    mo.keepDims = True
    b.op("MEAN", [lr, net.const_i32("mean/axis", [1, 2])], [m],
         s.BuiltinOptions.ReducerOptions, mo)
    y = b.tensor("y", [1, 1, 1, channels], T.INT8, scale=0.05, zero_point=3)
    b.op("QUANTIZE", [m], [y], s.BuiltinOptions.QuantizeOptions, s.QuantizeOptionsT())
    b.outputs = [y]
    return b.finish()

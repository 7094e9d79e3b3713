"""Small int8 / float32 TFLite models around the data-movement and matrix operators TFLite
Micro's arena prices (`memsched.tflite.memory.arena`): TRANSPOSE, RESIZE_NEAREST_NEIGHBOR, SPLIT
(_V), UNPACK, PACK, GATHER, BATCH_MATMUL, SVDF and LSTM, each mixed with convolutions
(`op_models`: one file per operator), built with `tflite_synth`'s network builder."""
from __future__ import annotations

import numpy as np

from .tflite_synth import _Net, _quantize


def _op_net(name: str, quantized: bool, seed: int, size: int = 8, channels: int = 8):
    net = _Net(f"{name}_{'int8' if quantized else 'f32'}", quantized, seed)
    x = net.act("x", [1, size, size, 3], 0.04, 0)
    net.b.inputs = [x]
    a, shape = net.conv(x, [1, size, size, 3], channels)
    return net, x, a, shape


def _op_finish(net: _Net, t: int, shape) -> bytes:
    y, _ = net.conv(t, shape, 4, k=1, relu=False)
    net.b.outputs = [y]
    return net.b.finish()


def _data_op(net: _Net, kind: str, inputs, out_shapes, options_type=0, options=None,
             like=None) -> list[int]:
    """One operator whose outputs keep the quantization of ``like`` (data movement)."""
    outs = [net.act(f"{kind.lower()}{net.n}_{i}", list(s), like=like)
            for i, s in enumerate(out_shapes)]
    net.n += 1
    net.b.op(kind, inputs, outs, options_type, options)
    return outs


def transpose_model(quantized: bool = True, seed: int = 0, size: int = 8,
                    channels: int = 16) -> bytes:
    """conv3x3 -> TRANSPOSE (swap H and W) -> depthwise -> TRANSPOSE to NCHW -> TRANSPOSE back
    to NHWC -> conv1x1: layout changes as TinyEngine-style and converted PyTorch models have."""
    net, _, a, shape = _op_net("transpose", quantized, seed, size, channels)
    s = net.s

    def transpose(t, shp, perm):
        out = [shp[p] for p in perm]
        return _data_op(net, "TRANSPOSE", [t, net.const_i32(f"perm{net.n}", perm)], [out],
                        s.BuiltinOptions.TransposeOptions, s.TransposeOptionsT(), like=t)[0], out

    t, shape = transpose(a, shape, [0, 2, 1, 3])
    d, shape = net.conv(t, shape, channels, depthwise=True)
    t, tshape = transpose(d, shape, [0, 3, 1, 2])
    t, shape = transpose(t, tshape, [0, 2, 3, 1])
    return _op_finish(net, t, shape)


def resize_model(quantized: bool = True, seed: int = 0, size: int = 8,
                 channels: int = 8) -> bytes:
    """A detection-neck-like upsampling: conv3x3 -> conv3x3/2 -> RESIZE_NEAREST_NEIGHBOR (x2)
    -> ADD (the full-resolution branch) -> RESIZE_NEAREST_NEIGHBOR (x2, half-pixel centers) ->
    conv1x1."""
    net, _, a, shape = _op_net("resize", quantized, seed, size, channels)
    s = net.s
    low, lshape = net.conv(a, shape, channels, stride=2)

    def resize(t, shp, hw, half=False):
        o = s.ResizeNearestNeighborOptionsT()
        o.halfPixelCenters = half
        out = [shp[0], hw[0], hw[1], shp[3]]
        return _data_op(net, "RESIZE_NEAREST_NEIGHBOR", [t, net.const_i32(f"size{net.n}", hw)],
                        [out], s.BuiltinOptions.ResizeNearestNeighborOptions, o, like=t)[0], out

    up, _ = resize(low, lshape, [size, size])
    m = net.add(up, a, shape)
    up2, shape = resize(m, shape, [2 * size, 2 * size], half=True)
    return _op_finish(net, up2, shape)


def split_model(quantized: bool = True, seed: int = 0, size: int = 8, channels: int = 8,
                kind: str = "SPLIT") -> bytes:
    """conv3x3 -> SPLIT (two halves of the channels) or SPLIT_V (3 and 5 channels) -> a conv on
    each part -> CONCATENATION -> conv1x1."""
    net, _, a, shape = _op_net(kind.lower(), quantized, seed, size, channels)
    s = net.s
    axis = net.b.tensor(f"split{net.n}/axis", [], s.TensorType.INT32,
                        net.b.buffer(np.array(3, np.int32)))
    if kind == "SPLIT":
        o = s.SplitOptionsT()
        o.numSplits = 2
        sizes = [channels // 2, channels - channels // 2]
        parts = _data_op(net, "SPLIT", [axis, a], [shape[:3] + [c] for c in sizes],
                         s.BuiltinOptions.SplitOptions, o, like=a)
    else:
        o = s.SplitVOptionsT()
        o.numSplits = 2
        sizes = [3, channels - 3]
        parts = _data_op(net, "SPLIT_V", [a, net.const_i32(f"split{net.n}/sizes", sizes), axis],
                         [shape[:3] + [c] for c in sizes], s.BuiltinOptions.SplitVOptions, o,
                         like=a)
    convs = [net.conv(p, shape[:3] + [c], 4, k=3 - 2 * i)[0] for i, (p, c) in
             enumerate(zip(parts, sizes))]
    cat = net.act(f"cat{net.n}", shape[:3] + [8], 0.05, 0)
    co = s.ConcatenationOptionsT()
    co.axis = 3
    if net.q:  # CONCATENATION keeps one scale: requantize the parts to it
        for c in convs:
            net.b.tensors[c].quantization = net.b.tensors[cat].quantization
    net.b.op("CONCATENATION", convs, [cat], s.BuiltinOptions.ConcatenationOptions, co)
    return _op_finish(net, cat, shape[:3] + [8])


def unpack_model(quantized: bool = True, seed: int = 0, size: int = 8,
                 channels: int = 8) -> bytes:
    """conv3x3 -> UNPACK along the rows (``size`` outputs, half of them unused) -> ADD of row
    pairs -> CONCATENATION -> RESHAPE -> conv1x1."""
    net, _, a, shape = _op_net("unpack", quantized, seed, size, channels)
    s = net.s
    o = s.UnpackOptionsT()
    o.num, o.axis = size, 1
    rows = _data_op(net, "UNPACK", [a], [[1, size, channels]] * size,
                    s.BuiltinOptions.UnpackOptions, o, like=a)
    sums = [net.add(rows[i], rows[i + 1], [1, size, channels]) for i in range(0, size // 2, 2)]
    cat = net.act(f"cat{net.n}", [1, size, channels * len(sums)], 0.12, -5)
    co = s.ConcatenationOptionsT()
    co.axis = 2
    net.b.op("CONCATENATION", sums, [cat], s.BuiltinOptions.ConcatenationOptions, co)
    r, rshape = net.reshape(cat, [1, len(sums), size, channels])
    return _op_finish(net, r, rshape)


def pack_op_model(quantized: bool = True, seed: int = 0, size: int = 8,
               channels: int = 8) -> bytes:
    """Two convolutions of the input -> PACK along a new last axis -> RESHAPE (interleaved
    channels) -> conv1x1."""
    net, x, a, shape = _op_net("pack", quantized, seed, size, channels)
    s = net.s
    b, _ = net.conv(x, [1, size, size, 3], channels, k=1)
    if net.q:
        net.b.tensors[b].quantization = net.b.tensors[a].quantization
    o = s.PackOptionsT()
    o.valuesCount, o.axis = 2, 4
    p = _data_op(net, "PACK", [a, b], [shape + [2]], s.BuiltinOptions.PackOptions, o,
                 like=a)[0]
    r, rshape = net.reshape(p, shape[:3] + [2 * channels])
    return _op_finish(net, r, rshape)


def gather_model(quantized: bool = True, seed: int = 0, size: int = 8,
                 channels: int = 8) -> bytes:
    """conv3x3 -> GATHER of 6 channels (repeats) -> conv3x3 -> GATHER of every other row ->
    conv1x1."""
    net, _, a, shape = _op_net("gather", quantized, seed, size, channels)
    s = net.s

    def gather(t, shp, axis, idx):
        o = s.GatherOptionsT()
        o.axis = axis
        out = list(shp)
        out[axis] = len(idx)
        return _data_op(net, "GATHER", [t, net.const_i32(f"idx{net.n}", idx)], [out],
                        s.BuiltinOptions.GatherOptions, o, like=t)[0], out

    g, gshape = gather(a, shape, 3, [channels - 1, 0, 3, 3, 5, 1])
    c, cshape = net.conv(g, gshape, channels)
    g2, gshape = gather(c, cshape, 1, list(range(0, size, 2)))
    return _op_finish(net, g2, gshape)


def batch_matmul_model(quantized: bool = True, seed: int = 0, size: int = 8,
                       channels: int = 8) -> bytes:
    """Attention-like: two convolutions -> RESHAPE to (1, H*W, C) -> BATCH_MATMUL by a constant
    (C, 16) (its transposed copy kept), BATCH_MATMUL q by k (adj_y) and, adj_x, of k's
    (1, C, H*W) view by the constant -> RESHAPE -> conv1x1 each, ADD -> conv1x1."""
    net, x, a, shape = _op_net("batch_matmul", quantized, seed, size, channels)
    s = net.s
    T = s.TensorType
    k_, _ = net.conv(x, [1, size, size, 3], channels, k=1)
    hw = size * size
    q, _ = net.reshape(a, [1, hw, channels])
    k, _ = net.reshape(k_, [1, hw, channels])
    kt, _ = net.reshape(k_, [1, channels, hw])
    wf = net.rng.normal(0, 1 / np.sqrt(channels), size=(channels, 16)).astype(np.float32)
    if net.q:
        wq, wsc = _quantize(wf, None)
        w = net.b.tensor("bmm/w", [channels, 16], T.INT8, net.b.buffer(wq), scale=wsc,
                         zero_point=0)
    else:
        w = net.b.tensor("bmm/w", [channels, 16], T.FLOAT32, net.b.buffer(wf))

    def bmm(lhs, rhs, out, adj_x=False, adj_y=False):
        o = s.BatchMatMulOptionsT()
        o.adjX, o.adjY = adj_x, adj_y
        y = net.act(f"bmm{net.n}", out, 0.2, 1)
        net.n += 1
        net.b.op("BATCH_MATMUL", [lhs, rhs], [y], s.BuiltinOptions.BatchMatMulOptions, o)
        return y

    p1 = bmm(q, w, [1, hw, 16])
    p2 = bmm(q, k, [1, hw, hw], adj_y=True)
    p3 = bmm(kt, w, [1, hw, 16], adj_x=True)
    r1, _ = net.reshape(p1, [1, size, size, 16])
    r2, _ = net.reshape(p2, [1, size, size, hw])
    r3, _ = net.reshape(p3, [1, size, size, 16])
    c2, cshape = net.conv(r2, [1, size, size, hw], 16, k=1)
    m = net.add(net.add(r1, c2, cshape), r3, cshape)
    return _op_finish(net, m, cshape)


def svdf_model(quantized: bool = True, seed: int = 0, size: int = 4, channels: int = 8,
               layers=((2, 8, 10), (1, 8, 4)), int8_state: bool = False) -> bytes:
    """A keyword-spotting-like stack: conv3x3 -> RESHAPE to (1, features) -> SVDF layers
    ((rank, units, memory) each; int8 with an int16 state and int16 time weights, as the
    converter writes them, or with ``int8_state`` int8 ones; or float32) ->
    FULLY_CONNECTED."""
    net, _, a, shape = _op_net("svdf", quantized, seed, size, channels)
    s = net.s
    T = s.TensorType
    b = net.b
    feats = size * size * channels
    x, _ = net.reshape(a, [1, feats])
    for i, (rank, units, memory) in enumerate(layers):
        filters = rank * units
        wf = net.rng.normal(0, 1 / np.sqrt(feats), size=(filters, feats)).astype(np.float32)
        wt_f = net.rng.normal(0, 0.3, size=(filters, memory)).astype(np.float32)
        bf = net.rng.normal(0, 0.1, units).astype(np.float32)
        if net.q:
            wq, wsc = _quantize(wf, None)
            w = b.tensor(f"svdf{i}/wf", [filters, feats], T.INT8, b.buffer(wq), scale=wsc,
                         zero_point=0)
            tt, nt, top = (T.INT8, np.int8, 127) if int8_state else (T.INT16, np.int16, 32767)
            st = float(np.abs(wt_f).max()) / top
            w_t = b.tensor(f"svdf{i}/wt", [filters, memory], tt,
                           b.buffer(np.round(wt_f / st).astype(nt)), scale=st,
                           zero_point=0)
            sa = 0.2 if int8_state else 0.002
            state = b.tensor(f"svdf{i}/state", [1, memory * filters], tt, scale=sa,
                             zero_point=0)
            bscale = np.float32(sa) * np.float32(st)
            bias = b.tensor(f"svdf{i}/b", [units], T.INT32,
                            b.buffer(np.round(bf / bscale).astype(np.int32)), scale=bscale,
                            zero_point=0)
        else:
            w = b.tensor(f"svdf{i}/wf", [filters, feats], T.FLOAT32, b.buffer(wf))
            w_t = b.tensor(f"svdf{i}/wt", [filters, memory], T.FLOAT32, b.buffer(wt_f))
            state = b.tensor(f"svdf{i}/state", [1, memory * filters], T.FLOAT32)
            bias = b.tensor(f"svdf{i}/b", [units], T.FLOAT32, b.buffer(bf))
        b.tensors[state].isVariable = True
        y = net.act(f"svdf{i}", [1, units], 0.08, -3)
        o = s.SVDFOptionsT()
        o.rank = rank
        o.fusedActivationFunction = s.ActivationFunctionType.RELU
        b.op("SVDF", [x, w, w_t, bias, state], [y], s.BuiltinOptions.SVDFOptions, o)
        x, feats = y, units
    b.outputs = [net.fc(x, feats, 4)]
    return b.finish()


def lstm_model(quantized: bool = True, seed: int = 0, size: int = 4, channels: int = 8,
               units: int = 8) -> bytes:
    """conv3x3 -> RESHAPE to a sequence (1, H*W, C) -> UNIDIRECTIONAL_SEQUENCE_LSTM (the
    standard one TFLite Micro runs: 4 gates, no peephole, projection or layer norm; float32,
    or int8 with an int16 cell state) -> RESHAPE -> conv1x1."""
    net, _, a, shape = _op_net("lstm", quantized, seed, size, channels)
    s = net.s
    T = s.TensorType
    b = net.b
    steps = size * size
    x, _ = net.reshape(a, [1, steps, channels])
    ins = [x]
    sx = net.scale[x][0] if net.q else None
    h_scale = 1 / 128
    for i, n_in in enumerate([channels] * 4 + [units] * 4):  # input, then recurrent weights
        wf = net.rng.normal(0, 1 / np.sqrt(n_in), size=(units, n_in)).astype(np.float32)
        if net.q:
            wq, wsc = _quantize(wf, None)
            ins.append(b.tensor(f"lstm/w{i}", [units, n_in], T.INT8, b.buffer(wq), scale=wsc,
                                zero_point=0))
        else:
            ins.append(b.tensor(f"lstm/w{i}", [units, n_in], T.FLOAT32, b.buffer(wf)))
    ins += [-1, -1, -1]  # no peephole
    for i in range(4):
        bf = net.rng.normal(0, 0.1, units).astype(np.float32)
        if net.q:
            bscale = np.float32(sx * b.tensors[ins[1 + i]].quantization.scale[0])
            ins.append(b.tensor(f"lstm/b{i}", [units], T.INT32,
                                b.buffer(np.round(bf / bscale).astype(np.int32)),
                                scale=bscale, zero_point=0))
        else:
            ins.append(b.tensor(f"lstm/b{i}", [units], T.FLOAT32, b.buffer(bf)))
    ins += [-1, -1]  # no projection
    if net.q:
        h = b.tensor("lstm/h", [1, units], T.INT8, scale=h_scale, zero_point=0)
        c = b.tensor("lstm/c", [1, units], T.INT16, scale=2.0 ** -11, zero_point=0)
    else:
        h = b.tensor("lstm/h", [1, units], T.FLOAT32)
        c = b.tensor("lstm/c", [1, units], T.FLOAT32)
    b.tensors[h].isVariable = b.tensors[c].isVariable = True
    ins += [h, c, -1, -1, -1, -1]  # no layer norm
    y = net.act("lstm/out", [1, steps, units], h_scale, 0)
    o = s.UnidirectionalSequenceLSTMOptionsT()
    o.fusedActivationFunction = s.ActivationFunctionType.TANH
    o.timeMajor = False
    b.op("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, [y],
         s.BuiltinOptions.UnidirectionalSequenceLSTMOptions, o)
    r, rshape = net.reshape(y, [1, size, size, units])
    return _op_finish(net, r, rshape)


def op_models(quantized: bool = True) -> dict[str, bytes]:
    """One small model per operator above (its name -> the file's bytes)."""
    return {"TRANSPOSE": transpose_model(quantized),
            "RESIZE_NEAREST_NEIGHBOR": resize_model(quantized),
            "SPLIT": split_model(quantized), "SPLIT_V": split_model(quantized, kind="SPLIT_V"),
            "UNPACK": unpack_model(quantized), "PACK": pack_op_model(quantized),
            "GATHER": gather_model(quantized), "BATCH_MATMUL": batch_matmul_model(quantized),
            "SVDF": svdf_model(quantized),
            "UNIDIRECTIONAL_SEQUENCE_LSTM": lstm_model(quantized)}

"""Small int8 / float32 TFLite models around the elementwise, comparison, logical and shape
operators TFLite Micro's arena prices (`memsched.tflite.memory.kernels_elementwise`), one file
per operator, each between convolutions (`elementwise_models`). Float-only kernels (SIN, LOG,
FLOOR_DIV ...) run in the int8 files between a DEQUANTIZE and a QUANTIZE, as a converter
leaves them in a quantized model (DIV too: TFLM's int8 DIV asserts on a zero numerator)."""
from __future__ import annotations

import numpy as np

from .tflite_ops import _op_net

FLOAT_ONLY = ("SIN", "COS", "LOG", "SQRT", "SQUARE", "EXP", "CEIL", "ROUND", "NEG", "FLOOR",
              "FLOOR_DIV", "FLOOR_MOD")
UNARY = ("ABS", "RSQRT", "ELU", "L2_NORMALIZATION", "LOG_SOFTMAX", "ZEROS_LIKE",
         "SIN", "COS", "LOG", "SQRT", "SQUARE", "EXP", "CEIL", "ROUND", "NEG", "FLOOR")
BINARY = ("MAXIMUM", "MINIMUM", "DIV", "SQUARED_DIFFERENCE", "PRELU", "FLOOR_DIV", "FLOOR_MOD")
COMPARISONS = ("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL")
OTHERS = ("LOGICAL_AND", "LOGICAL_OR", "LOGICAL_NOT", "SELECT_V2", "CAST", "SHAPE", "ARG_MAX",
          "ARG_MIN", "ADD_N", "CUMSUM", "SLICE", "FILL", "BROADCAST_TO", "RESIZE_BILINEAR",
          "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND",
          "MIRROR_PAD", "TRANSPOSE_CONV", "L2_POOL_2D", "REVERSE_V2", "GATHER_ND",
          "EMBEDDING_LOOKUP", "BROADCAST_ARGS", "REDUCE_ALL")
OPERATORS = UNARY + BINARY + COMPARISONS + OTHERS


class _Ops:
    def __init__(self, net):
        self.net, self.b, self.s = net, net.b, net.s
        self.T = net.s.TensorType

    def tensor(self, shape, dtype=None, like=None, scale=0.05, zp=0, name="t"):
        """An activation: the net's type (int8 with ``like``'s or the given quantization)
        unless ``dtype`` is given."""
        net = self.net
        net.n += 1
        name = f"{name}{net.n}"
        if dtype is None:
            return net.act(name, list(shape), scale, zp, like=like)
        return self.b.tensor(name, list(shape), dtype)

    def op(self, kind, ins, outs, options=None, **fields):
        s = self.s
        o = None
        if options is not None:
            o = getattr(s, options + "T")()
            for k, v in fields.items():
                setattr(o, k, v)
        self.b.op(kind, ins, outs, getattr(s.BuiltinOptions, options) if options else 0, o)
        return outs[0]

    def const(self, values, dtype=np.int32, shape=None, scale=None, zp=0):
        arr = np.asarray(values, dtype)
        shape = list(arr.shape) if shape is None else shape
        t = {np.int32: self.T.INT32, np.float32: self.T.FLOAT32, np.int8: self.T.INT8}[dtype]
        self.net.n += 1
        return self.b.tensor(f"c{self.net.n}", shape, t, self.b.buffer(arr), scale=scale,
                             zero_point=None if scale is None else zp)

    def to_float(self, t, shape):
        if not self.net.q:
            return t
        f = self.tensor(shape, self.T.FLOAT32)
        return self.op("DEQUANTIZE", [t], [f])

    def to_net(self, t, shape, scale=0.05, zp=0):
        if not self.net.q:
            return t
        q = self.tensor(shape, scale=scale, zp=zp)
        return self.op("QUANTIZE", [t], [q])

    def same_quant(self, t, like):
        if self.net.q:
            self.b.tensors[t].quantization = self.b.tensors[like].quantization
            self.net.scale[t] = self.net.scale[like]


def elementwise_model(kind: str, quantized: bool = True, seed: int = 0, size: int = 8,
                      channels: int = 8) -> bytes:
    """conv3x3 (and a conv1x1 of the input as a second operand) -> ``kind`` (with the few
    operators it needs around it) -> conv1x1."""
    net, x, a, shape = _op_net(kind.lower(), quantized, seed, size, channels)
    g = _Ops(net)
    T, q = g.T, quantized
    b2, _ = net.conv(x, [1, size, size, 3], channels, k=1)
    g.same_quant(b2, a)
    extra = []
    s, c = size, channels
    if kind in UNARY:
        t = g.to_float(a, shape) if kind in FLOAT_ONLY else a
        dtype = T.FLOAT32 if kind in FLOAT_ONLY else None
        scale, zp = (16 / 256, 127) if kind == "LOG_SOFTMAX" else \
            (1 / 128, 0) if kind == "L2_NORMALIZATION" else (0.05, -3)
        y = g.tensor(shape, dtype, scale=scale, zp=zp)
        opts = {"L2_NORMALIZATION": "L2NormOptions"}.get(kind)
        g.op(kind, [t], [y], opts)
        out, oshape = (g.to_net(y, shape) if kind in FLOAT_ONLY else y), shape
    elif kind in BINARY:
        # int8 DIV asserts in gemmlowp on a zero numerator (TFLM's reference kernel): float
        fl = kind in FLOAT_ONLY or kind == "DIV"
        t, u = (g.to_float(a, shape), g.to_float(b2, shape)) if fl else (a, b2)
        dtype = T.FLOAT32 if fl else None
        if kind in ("DIV", "FLOOR_DIV", "FLOOR_MOD"):  # a divisor without zeros
            vals = net.rng.integers(1, 4, shape).astype(np.float32)
            u = g.const(vals, np.float32) if fl or not q else \
                g.const((vals / 0.05).astype(np.int8), np.int8, scale=0.05, zp=0)
        elif kind == "PRELU":
            alpha = net.rng.uniform(0.05, 0.3, (1, 1, c)).astype(np.float32)
            u = g.const(alpha, np.float32) if not q else \
                g.const(np.round(alpha / 0.0025).astype(np.int8), np.int8, scale=0.0025, zp=0)
        y = g.tensor(shape, dtype, like=a if kind in ("MAXIMUM", "MINIMUM") else None,
                     scale=0.1, zp=-5)
        g.op(kind, [t, u], [y], "DivOptions" if kind == "DIV" else None)
        out, oshape = (g.to_net(y, shape) if fl else y), shape
    elif kind in COMPARISONS or kind in ("LOGICAL_AND", "LOGICAL_OR", "LOGICAL_NOT",
                                         "SELECT_V2"):
        def compare(k, u, v):
            return g.op(k, [u, v], [g.tensor(shape, T.BOOL)])
        if kind in COMPARISONS:
            cond = compare(kind, a, b2)
        elif kind == "SELECT_V2":
            cond = compare("LESS_EQUAL", a, b2)
        elif kind == "LOGICAL_NOT":
            cond = g.op(kind, [compare("GREATER", a, b2)], [g.tensor(shape, T.BOOL)])
        else:
            cond = g.op(kind, [compare("GREATER", a, b2), compare("LESS", b2, a)],
                        [g.tensor(shape, T.BOOL)])
        out = g.op("SELECT_V2", [cond, a, b2], [g.tensor(shape, like=a)])
        oshape = shape
    elif kind == "CAST":
        i32 = g.op("CAST", [a], [g.tensor(shape, T.INT32)], "CastOptions",
                   inDataType=T.INT8 if q else T.FLOAT32, outDataType=T.INT32)
        out = g.op("CAST", [i32], [g.tensor(shape, like=a)], "CastOptions",
                   inDataType=T.INT32, outDataType=T.INT8 if q else T.FLOAT32)
        oshape = shape
    elif kind == "SHAPE":
        extra.append(g.op("SHAPE", [a], [g.tensor([4], T.INT32)], "ShapeOptions",
                          outType=T.INT32))
        out, oshape = a, shape
    elif kind in ("ARG_MAX", "ARG_MIN"):
        opts = "ArgMaxOptions" if kind == "ARG_MAX" else "ArgMinOptions"
        extra.append(g.op(kind, [a, g.const([3])], [g.tensor(shape[:3], T.INT32)], opts,
                          outputType=T.INT32))
        out, oshape = a, shape
    elif kind == "ADD_N":
        b3, _ = net.conv(x, [1, size, size, 3], channels, k=1)
        g.same_quant(b3, a)
        out = g.op("ADD_N", [a, b2, b3], [g.tensor(shape, scale=0.15, zp=-10)])
        oshape = shape
    elif kind == "CUMSUM":
        out = g.op("CUMSUM", [a, g.const(np.int32(1), shape=[])],
                   [g.tensor(shape, scale=0.4, zp=-20)], "CumsumOptions")
        oshape = shape
    elif kind == "SLICE":
        oshape = [1, s - 2, s - 2, c]
        out = g.op("SLICE", [a, g.const([0, 1, 1, 0]), g.const(oshape)],
                   [g.tensor(oshape, like=a)])
    elif kind == "FILL":
        value = g.const(np.int8(3), np.int8, shape=[], scale=net.scale[a][0],
                        zp=net.scale[a][1]) if q else g.const(np.float32(0.25), np.float32,
                                                              shape=[])
        f = g.op("FILL", [g.const(shape), value], [g.tensor(shape, like=a)])
        out, oshape = net.add(a, f, shape), shape
    elif kind == "BROADCAST_TO":
        row = g.op("SLICE", [a, g.const([0, 0, 0, 0]), g.const([1, 1, s, c])],
                   [g.tensor([1, 1, s, c], like=a)])
        f = g.op("BROADCAST_TO", [row, g.const(shape)], [g.tensor(shape, like=a)])
        out, oshape = net.add(b2, f, shape), shape
    elif kind == "RESIZE_BILINEAR":
        oshape = [1, 2 * s, 2 * s, c]
        out = g.op("RESIZE_BILINEAR", [a, g.const([2 * s, 2 * s])], [g.tensor(oshape, like=a)],
                   "ResizeBilinearOptions", halfPixelCenters=True)
    elif kind == "DEPTH_TO_SPACE":
        oshape = [1, 2 * s, 2 * s, c // 4]
        out = g.op(kind, [a], [g.tensor(oshape, like=a)], "DepthToSpaceOptions", blockSize=2)
    elif kind == "SPACE_TO_DEPTH":
        oshape = [1, s // 2, s // 2, 4 * c]
        out = g.op(kind, [a], [g.tensor(oshape, like=a)], "SpaceToDepthOptions", blockSize=2)
    elif kind in ("SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND"):
        bshape = [4, s // 2, s // 2, c]
        sb = g.op("SPACE_TO_BATCH_ND", [a, g.const([2, 2]), g.const([[0, 0], [0, 0]])],
                  [g.tensor(bshape, like=a)], "SpaceToBatchNDOptions")
        # (a convolution of the batch-4 tensor in between never returns on the board)
        out = g.op("BATCH_TO_SPACE_ND", [sb, g.const([2, 2]), g.const([[0, 0], [0, 0]])],
                   [g.tensor(shape, like=a)], "BatchToSpaceNDOptions")
        oshape = shape
    elif kind == "MIRROR_PAD":
        pshape = [1, s + 2, s + 2, c]
        p = g.op(kind, [a, g.const([[0, 0], [1, 1], [1, 1], [0, 0]])], [g.tensor(pshape, like=a)],
                 "MirrorPadOptions", mode=net.s.MirrorPadMode.REFLECT)
        out, oshape = net.conv(p, pshape, c, padding="VALID")
    elif kind == "TRANSPOSE_CONV":
        co = max(c // 2, 4)
        oshape = [1, 2 * s, 2 * s, co]
        wf = net.rng.normal(0, 1 / np.sqrt(9 * c), size=(co, 3, 3, c)).astype(np.float32)
        w, wscale = net.weight(f"tconv{net.n}/w", wf, 0)
        bias = net.bias(f"tconv{net.n}/b", a, wscale, co)
        out = g.op(kind, [g.const(oshape), w, a, bias], [g.tensor(oshape, scale=0.08, zp=2)],
                   "TransposeConvOptions", padding=net.s.Padding.SAME, strideW=2, strideH=2)
    elif kind == "L2_POOL_2D":
        oshape = [1, s // 2, s // 2, c]
        y = g.op(kind, [g.to_float(a, shape)], [g.tensor(oshape, T.FLOAT32)], "Pool2DOptions",
                 padding=net.s.Padding.VALID, strideW=2, strideH=2, filterWidth=2,
                 filterHeight=2)
        out = g.to_net(y, oshape)
    elif kind == "REVERSE_V2":
        out, oshape = g.op(kind, [a, g.const([1])], [g.tensor(shape, like=a)]), shape
    elif kind == "GATHER_ND":
        rows = [[[0, s - 1 - r] for r in range(s)]]  # (1, s, 2): the rows upside down
        out, oshape = g.op(kind, [a, g.const(rows)], [g.tensor(shape, like=a)]), shape
    elif kind == "EMBEDDING_LOOKUP":
        table, _ = net.reshape(a, [s * s, c])
        rows = g.op(kind, [g.const(list(range(s * s - 1, -1, -1))), table],
                    [g.tensor([s * s, c], like=a)])
        out, oshape = net.reshape(rows, shape)
    elif kind == "BROADCAST_ARGS":
        dims = g.op("SHAPE", [a], [g.tensor([4], T.INT32)], "ShapeOptions", outType=T.INT32)
        extra.append(g.op(kind, [dims, g.const([1, 1, 1, c])], [g.tensor([4], T.INT32)]))
        out, oshape = a, shape
    elif kind == "REDUCE_ALL":
        cond = g.op("GREATER", [a, b2], [g.tensor(shape, T.BOOL)])
        extra.append(g.op(kind, [cond, g.const([3])], [g.tensor(shape[:3] + [1], T.BOOL)],
                          "ReducerOptions", keepDims=True))
        out, oshape = a, shape
    else:
        raise ValueError(f"no generator for {kind}")
    data_shape = oshape if len(oshape) == 4 else shape
    y, _ = net.conv(out, data_shape, 4, k=1, relu=False)
    net.b.outputs = [y] + extra
    return net.b.finish()


def elementwise_models(quantized: bool = True) -> dict[str, bytes]:
    """One small model per operator of `OPERATORS` (its name -> the file's bytes)."""
    return {k: elementwise_model(k, quantized) for k in OPERATORS}

"""Small .tflite models built with the flatbuffer object API (no tensorflow needed).

For tests and examples of the partition / segment tools: branches, a skip from the model input,
a residual ADD, a CONCATENATION, depthwise and pointwise convolutions, a bias buffer shared by two
convolutions (as the converter stores identical constants once), in float32 or int8 (per-channel
quantized weights, int32 biases, as the TFLite converter emits them).
"""
from __future__ import annotations

import numpy as np

from .tflite_graph import schema
from .tflite_segments import pack_model


class TFLiteBuilder:
    """Tensors, buffers and operators of one subgraph; `finish` packs the model."""

    def __init__(self, name: str = "synth"):
        self.s = schema()
        self.name = name
        self.tensors, self.ops, self.codes = [], [], {}
        self.buffers = [self.s.BufferT()]
        self.inputs, self.outputs = [], []

    def buffer(self, array: np.ndarray) -> int:
        self.buffers.append(self.s.BufferT(data=np.frombuffer(
            np.ascontiguousarray(array).tobytes(), dtype=np.uint8)))
        return len(self.buffers) - 1

    def tensor(self, name: str, shape, dtype: int, buffer: int = 0, scale=None,
               zero_point=None, axis: int = 0) -> int:
        q = None
        if scale is not None:
            sc = np.atleast_1d(np.asarray(scale, dtype=np.float32))
            zp = np.atleast_1d(np.asarray(0 if zero_point is None else zero_point,
                                          dtype=np.int64))
            if len(zp) == 1 and len(sc) > 1:
                zp = np.repeat(zp, len(sc))
            q = self.s.QuantizationParametersT(scale=list(map(float, sc)),
                                               zeroPoint=list(map(int, zp)),
                                               quantizedDimension=axis)
        self.tensors.append(self.s.TensorT(shape=list(shape), type=dtype, buffer=buffer,
                                           name=name, quantization=q))
        return len(self.tensors) - 1

    def op(self, opname: str, inputs, outputs, options_type: int = 0, options=None) -> int:
        code = getattr(self.s.BuiltinOperator, opname)
        if code not in self.codes:
            self.codes[code] = len(self.codes)
        self.ops.append(self.s.OperatorT(opcodeIndex=self.codes[code], inputs=list(inputs),
                                         outputs=list(outputs),
                                         builtinOptionsType=options_type,
                                         builtinOptions=options))
        return len(self.ops) - 1

    def finish(self) -> bytes:
        s = self.s
        codes = [None] * len(self.codes)
        for code, i in self.codes.items():
            codes[i] = s.OperatorCodeT(deprecatedBuiltinCode=min(code, 127), builtinCode=code,
                                       version=1)
        sub = s.SubGraphT(tensors=self.tensors, inputs=self.inputs, outputs=self.outputs,
                          operators=self.ops, name="main")
        model = s.ModelT(version=3, operatorCodes=codes, subgraphs=[sub],
                         description=f"memsched synthetic model {self.name}",
                         buffers=self.buffers)
        return pack_model(model)


def residual_concat_model(quantized: bool = False, seed: int = 0, size: int = 8,
                          channels: int = 8) -> bytes:
    """input -> conv3x3 -> depthwise3x3 -> conv1x1 -> ADD(conv3x3 out) -> CONCAT(conv1x1 of the
    input) -> conv1x1 -> output; the ADD result is a second model output.

    ``quantized``: int8 activations and weights (per-channel), int32 biases; else float32.
    """
    rng = np.random.default_rng(seed)
    b = TFLiteBuilder("residual_concat_int8" if quantized else "residual_concat")
    s = b.s
    T = s.TensorType
    act = T.INT8 if quantized else T.FLOAT32
    h = w = size
    c = channels
    relu = s.ActivationFunctionType.RELU
    # activation quantization: (scale, zero point) per tensor
    aq = {"x": (0.05, 0), "a": (0.08, -128), "d": (0.06, -128), "p": (0.1, 3), "sum": (0.12, -20),
          "k": (0.12, -20), "cat": (0.12, -20), "y": (0.2, 5)}

    def act_tensor(name, shape):
        if quantized:
            sc, zp = aq[name]
            return b.tensor(name, shape, act, scale=sc, zero_point=zp)
        return b.tensor(name, shape, act)

    shared_bias = {}

    def conv(name, x_name, x, cin, cout, kh, depthwise=False, fused=relu, share_bias=False):
        shape = [1, kh, kh, cout] if depthwise else [cout, kh, kh, cin]
        wf = rng.normal(0, 0.3, size=shape).astype(np.float32)
        if quantized:
            axis = 3 if depthwise else 0
            red = tuple(i for i in range(4) if i != axis)
            wscale = np.maximum(np.abs(wf).max(axis=red), 1e-3) / 127.0
            bshape = [1] * 4
            bshape[axis] = cout
            wq = np.clip(np.round(wf / wscale.reshape(bshape)), -127, 127).astype(np.int8)
            wt = b.tensor(f"{name}/w", shape, T.INT8, b.buffer(wq), scale=wscale, zero_point=0,
                          axis=axis)
            bscale = aq[x_name][0] * wscale
            if share_bias:
                key = ("q", cout)
                if key not in shared_bias:
                    shared_bias[key] = b.buffer(np.zeros(cout, np.int32))
                bbuf = shared_bias[key]
                bias = np.zeros(cout, np.int32)
            else:
                bias = np.round(rng.normal(0, 0.2, cout) / bscale).astype(np.int32)
                bbuf = b.buffer(bias)
            bt = b.tensor(f"{name}/b", [cout], T.INT32, bbuf, scale=bscale, zero_point=0)
        else:
            wt = b.tensor(f"{name}/w", shape, T.FLOAT32, b.buffer(wf))
            if share_bias:
                key = ("f", cout)
                if key not in shared_bias:
                    shared_bias[key] = b.buffer(np.zeros(cout, np.float32))
                bbuf = shared_bias[key]
            else:
                bbuf = b.buffer(rng.normal(0, 0.2, cout).astype(np.float32))
            bt = b.tensor(f"{name}/b", [cout], T.FLOAT32, bbuf)
        out = act_tensor(name, [1, h, w, cout])
        if depthwise:
            opts = s.DepthwiseConv2DOptionsT()
            opts.padding, opts.strideW, opts.strideH = s.Padding.SAME, 1, 1
            opts.depthMultiplier, opts.fusedActivationFunction = 1, fused
            opts.dilationWFactor = opts.dilationHFactor = 1
            b.op("DEPTHWISE_CONV_2D", [x, wt, bt], [out],
                 s.BuiltinOptions.DepthwiseConv2DOptions, opts)
        else:
            opts = s.Conv2DOptionsT()
            opts.padding, opts.strideW, opts.strideH = s.Padding.SAME, 1, 1
            opts.fusedActivationFunction = fused
            opts.dilationWFactor = opts.dilationHFactor = 1
            b.op("CONV_2D", [x, wt, bt], [out], s.BuiltinOptions.Conv2DOptions, opts)
        return out

    x = act_tensor("x", [1, h, w, 3])
    b.inputs = [x]
    a = conv("a", "x", x, 3, c, 3, share_bias=True)
    d = conv("d", "a", a, c, c, 3, depthwise=True)
    p = conv("p", "d", d, c, c, 1, fused=s.ActivationFunctionType.NONE)
    ssum = act_tensor("sum", [1, h, w, c])
    add = s.AddOptionsT()
    add.fusedActivationFunction = relu
    b.op("ADD", [a, p], [ssum], s.BuiltinOptions.AddOptions, add)
    kx = conv("k", "x", x, 3, c, 1, share_bias=True)  # skip branch from the model input
    cat = act_tensor("cat", [1, h, w, 2 * c])
    co = s.ConcatenationOptionsT()
    co.axis = 3
    b.op("CONCATENATION", [ssum, kx], [cat], s.BuiltinOptions.ConcatenationOptions, co)
    y = conv("y", "cat", cat, 2 * c, c, 1, fused=s.ActivationFunctionType.NONE)
    b.outputs = [y, ssum]
    return b.finish()

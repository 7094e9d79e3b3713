"""Small .tflite models built with the flatbuffer object API (no tensorflow needed).

For tests and examples of the partition / segment tools: branches, a skip from the model input,
a residual ADD, a CONCATENATION, depthwise and pointwise convolutions, a bias buffer shared by two
convolutions (as the converter stores identical constants once), in float32 or int8 (per-channel
quantized weights, int32 biases, as the TFLite converter emits them).
"""
from __future__ import annotations

import numpy as np

from ..tflite.format.read import schema
from ..tflite.format.write import pack_model


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
            if isinstance(code, tuple):  # ("custom", name)
                codes[i] = s.OperatorCodeT(deprecatedBuiltinCode=s.BuiltinOperator.CUSTOM,
                                           builtinCode=s.BuiltinOperator.CUSTOM,
                                           customCode=code[1], version=1)
                continue
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


def _quantize(wf: np.ndarray, axis: int | None):
    """Symmetric int8 weights: per-channel along ``axis`` (None: per-tensor)."""
    if axis is None:
        scale = np.array([max(float(np.abs(wf).max()), 1e-3) / 127.0], np.float32)
        return np.clip(np.round(wf / scale[0]), -127, 127).astype(np.int8), scale
    red = tuple(i for i in range(wf.ndim) if i != axis)
    scale = (np.maximum(np.abs(wf).max(axis=red), 1e-3) / 127.0).astype(np.float32)
    shape = [1] * wf.ndim
    shape[axis] = len(scale)
    return np.clip(np.round(wf / scale.reshape(shape)), -127, 127).astype(np.int8), scale


class _Net:
    """Helpers shared by the models below: int8 (per-channel weights, int32 biases) or float32
    activations; float32 weights optionally stored as float16 behind a DEQUANTIZE op."""

    def __init__(self, name: str, quantized: bool, seed: int, fp16_weights: bool = False):
        self.b = TFLiteBuilder(name)
        self.s = self.b.s
        self.q = quantized
        self.fp16 = fp16_weights
        self.rng = np.random.default_rng(seed)
        self.scale = {}  # activation tensor -> (scale, zero point)
        self.n = 0

    def act(self, name, shape, scale=0.05, zp=0, like=None):
        T = self.s.TensorType
        if not self.q:
            return self.b.tensor(name, shape, T.FLOAT32)
        if like is not None:
            scale, zp = self.scale[like]
        t = self.b.tensor(name, shape, T.INT8, scale=scale, zero_point=zp)
        self.scale[t] = (scale, zp)
        return t

    def const_i32(self, name, values):
        arr = np.asarray(values, np.int32)
        return self.b.tensor(name, list(arr.shape), self.s.TensorType.INT32, self.b.buffer(arr))

    def weight(self, name, wf, axis):
        """(weight tensor, per-channel scales or None) for float ``wf``."""
        T = self.s.TensorType
        b = self.b
        if self.q:
            wq, sc = _quantize(wf, axis)
            return b.tensor(name, list(wf.shape), T.INT8, b.buffer(wq), scale=sc, zero_point=0,
                            axis=axis or 0), sc
        if self.fp16:
            w16 = b.tensor(name + "/f16", list(wf.shape), T.FLOAT16,
                           b.buffer(wf.astype(np.float16)))
            w = b.tensor(name, list(wf.shape), T.FLOAT32)
            b.op("DEQUANTIZE", [w16], [w], self.s.BuiltinOptions.DequantizeOptions,
                 self.s.DequantizeOptionsT())
            return w, None
        return b.tensor(name, list(wf.shape), T.FLOAT32, b.buffer(wf)), None

    def bias(self, name, x, wscale, n):
        T = self.s.TensorType
        bf = self.rng.normal(0, 0.1, n).astype(np.float32)
        if self.q:
            bscale = (self.scale[x][0] * np.broadcast_to(wscale, (n,))).astype(np.float32)
            return self.b.tensor(name, [n], T.INT32,
                                 self.b.buffer(np.round(bf / bscale).astype(np.int32)),
                                 scale=bscale, zero_point=0)
        return self.b.tensor(name, [n], T.FLOAT32, self.b.buffer(bf))

    def conv(self, x, shape, cout, k=3, stride=1, depthwise=False, relu=True, padding="SAME",
             name=None):
        s = self.s
        self.n += 1
        name = name or f"conv{self.n}"
        _, h, w, cin = shape
        if depthwise:
            cout = cin
        wshape = [1, k, k, cout] if depthwise else [cout, k, k, cin]
        wf = self.rng.normal(0, 1.0 / np.sqrt(k * k * (1 if depthwise else cin)),
                             size=wshape).astype(np.float32)
        wt, wscale = self.weight(name + "/w", wf, 3 if depthwise else 0)
        bt = self.bias(name + "/b", x, wscale, cout)
        if padding == "SAME":
            oh, ow = -(-h // stride), -(-w // stride)
        else:
            oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
        out = self.act(name, [1, oh, ow, cout], 0.05 + 0.01 * (self.n % 5), -10 + self.n % 7)
        fused = s.ActivationFunctionType.RELU if relu else s.ActivationFunctionType.NONE
        pad = s.Padding.SAME if padding == "SAME" else s.Padding.VALID
        if depthwise:
            o = s.DepthwiseConv2DOptionsT()
            o.padding, o.strideW, o.strideH = pad, stride, stride
            o.depthMultiplier, o.fusedActivationFunction = 1, fused
            o.dilationWFactor = o.dilationHFactor = 1
            self.b.op("DEPTHWISE_CONV_2D", [x, wt, bt], [out],
                      s.BuiltinOptions.DepthwiseConv2DOptions, o)
        else:
            o = s.Conv2DOptionsT()
            o.padding, o.strideW, o.strideH = pad, stride, stride
            o.fusedActivationFunction = fused
            o.dilationWFactor = o.dilationHFactor = 1
            self.b.op("CONV_2D", [x, wt, bt], [out], s.BuiltinOptions.Conv2DOptions, o)
        return out, [1, oh, ow, cout]

    def pad(self, x, shape, p):
        s = self.s
        out_shape = [shape[0], shape[1] + 2 * p, shape[2] + 2 * p, shape[3]]
        out = self.act(f"pad{self.n}", out_shape, like=x)
        pads = self.const_i32(f"pad{self.n}/p", [[0, 0], [p, p], [p, p], [0, 0]])
        self.b.op("PAD", [x, pads], [out], s.BuiltinOptions.PadOptions, s.PadOptionsT())
        return out, out_shape

    def strided_slice(self, x, shape, begin, end):
        s = self.s
        out_shape = [e - b for b, e in zip(begin, end)]
        out = self.act(f"slice{self.n}", out_shape, like=x)
        o = s.StridedSliceOptionsT()
        self.b.op("STRIDED_SLICE", [x, self.const_i32(f"slice{self.n}/b", begin),
                                    self.const_i32(f"slice{self.n}/e", end),
                                    self.const_i32(f"slice{self.n}/s", [1] * len(begin))],
                  [out], s.BuiltinOptions.StridedSliceOptions, o)
        return out, out_shape

    def reshape(self, x, new_shape, op="RESHAPE"):
        s = self.s
        out = self.act(f"{op.lower()}{self.n}", new_shape, like=x)
        if op == "RESHAPE":
            o = s.ReshapeOptionsT()
            o.newShape = list(new_shape)
            self.b.op("RESHAPE", [x, self.const_i32(f"reshape{self.n}/s", new_shape)], [out],
                      s.BuiltinOptions.ReshapeOptions, o)
        elif op == "EXPAND_DIMS":
            axis = self.b.tensor(f"expand{self.n}/axis", [], s.TensorType.INT32,
                                 self.b.buffer(np.array(0, np.int32)))
            self.b.op("EXPAND_DIMS", [x, axis], [out], s.BuiltinOptions.ExpandDimsOptions,
                      s.ExpandDimsOptionsT())
        else:  # SQUEEZE of axis 0
            o = s.SqueezeOptionsT()
            o.squeezeDims = [0]
            self.b.op("SQUEEZE", [x], [out], s.BuiltinOptions.SqueezeOptions, o)
        return out, list(new_shape)

    def add(self, a, c, shape):
        s = self.s
        out = self.act(f"add{self.n}", shape, 0.12, -5)
        o = s.AddOptionsT()
        o.fusedActivationFunction = s.ActivationFunctionType.NONE
        self.b.op("ADD", [a, c], [out], s.BuiltinOptions.AddOptions, o)
        return out

    def fc(self, x, n_in, n_out):
        s = self.s
        self.n += 1
        wf = self.rng.normal(0, 1.0 / np.sqrt(n_in), size=(n_out, n_in)).astype(np.float32)
        wt, wscale = self.weight(f"fc{self.n}/w", wf, None)
        bt = self.bias(f"fc{self.n}/b", x, wscale, n_out)
        out = self.act(f"fc{self.n}", [1, n_out], 0.1, 3)
        o = s.FullyConnectedOptionsT()
        o.fusedActivationFunction = s.ActivationFunctionType.NONE
        self.b.op("FULLY_CONNECTED", [x, wt, bt], [out],
                  s.BuiltinOptions.FullyConnectedOptions, o)
        return out


def pad_slice_model(quantized: bool = True, fp16_weights: bool = False, seed: int = 0,
                    size: int = 8, channels: int = 8) -> bytes:
    """input -> PAD -> conv3x3 VALID -> depthwise -> STRIDED_SLICE (channels) -> ADD (skip: a
    1x1 conv of the input, then PRELU in float models) -> RESHAPE -> SQUEEZE -> EXPAND_DIMS ->
    FULLY_CONNECTED: the ops TVM's TFLite frontend mishandles in int8 models (PAD,
    STRIDED_SLICE) and the interpreter's in-place views.
    ``fp16_weights``: float32 model whose weights are float16 behind DEQUANTIZE ops."""
    name = "pad_slice_int8" if quantized else ("pad_slice_fp16w" if fp16_weights
                                               else "pad_slice")
    net = _Net(name, quantized, seed, fp16_weights)
    c = channels
    x = net.act("x", [1, size, size, 4], 0.04, 0)
    net.b.inputs = [x]
    p, ps = net.pad(x, [1, size, size, 4], 1)
    a, shape = net.conv(p, ps, 2 * c, k=3, padding="VALID")
    d, shape = net.conv(a, shape, 2 * c, depthwise=True)
    sl, sshape = net.strided_slice(d, shape, [0, 0, 0, 0], [1, size, size, c])
    k, _ = net.conv(x, [1, size, size, 4], c, k=1, relu=False)
    if not quantized:  # PReLU with a (float16 -> DEQUANTIZE) alpha, as in MediaPipe models
        alpha, _ = net.weight("prelu/alpha", net.rng.uniform(0.05, 0.3, (1, 1, c)).astype(
            np.float32), None)
        kp = net.act("prelu", sshape)
        net.b.op("PRELU", [k, alpha], [kp])
        k = kp
    sm = net.add(sl, k, sshape)
    flat = size * size * c
    r, _ = net.reshape(sm, [1, flat])
    q, _ = net.reshape(r, [flat], op="SQUEEZE")
    e, _ = net.reshape(q, [1, flat], op="EXPAND_DIMS")
    y = net.fc(e, flat, 10)
    net.b.outputs = [y]
    return net.b.finish()


def mobilenet_like(quantized: bool = True, blocks: int = 13, width: int = 32,
                   size: int = 96, classes: int = 10, seed: int = 0) -> bytes:
    """A MobileNet-v1-like stack (depthwise + pointwise blocks, stride 2 every few blocks, a
    residual ADD where shapes allow, global pooling by RESHAPE + FC): about 1 MB in int8 with
    the defaults; for import-time measurements."""
    net = _Net(f"mobilenet_like_{'int8' if quantized else 'f32'}", quantized, seed)
    x = net.act("input", [1, size, size, 3], 0.02, 0)
    net.b.inputs = [x]
    t, shape = net.conv(x, [1, size, size, 3], width, k=3, stride=2)
    c = width
    for i in range(blocks):
        stride = 2 if i in (1, 3, 5, 11) else 1
        d, dshape = net.conv(t, shape, c, depthwise=True, stride=stride)
        cout = min(c * 2, 512) if stride == 2 else c
        pt, pshape = net.conv(d, dshape, cout, k=1)
        if pshape == shape:
            pt = net.add(pt, t, pshape)
        t, shape, c = pt, pshape, cout
    flat = shape[1] * shape[2] * shape[3]
    r, _ = net.reshape(t, [1, flat])
    y = net.fc(r, flat, classes)
    net.b.outputs = [y]
    return net.b.finish()


def custom_op_model() -> bytes:
    """conv -> a custom operator ("MyCustomOp") -> conv: analysable, not compilable."""
    net = _Net("custom_op", False, 0)
    x = net.act("x", [1, 8, 8, 3])
    net.b.inputs = [x]
    a, shape = net.conv(x, [1, 8, 8, 3], 8)
    c = net.act("custom_out", shape)
    b = net.b
    code = ("custom", "MyCustomOp")
    if code not in b.codes:
        b.codes[code] = len(b.codes)
    b.ops.append(b.s.OperatorT(opcodeIndex=b.codes[code], inputs=[a], outputs=[c],
                               customOptions=[]))
    y, _ = net.conv(c, shape, 4)
    b.outputs = [y]
    return b.finish()


def se_model(quantized: bool = True, size: int = 16, width: int = 8, seed: int = 0) -> bytes:
    """A MobileNetV3-like stem with a squeeze-and-excitation block, as Keras converts it:
    conv3x3 -> depthwise3x3 -> MEAN over H, W (keepDims) -> conv1x1 + ReLU -> conv1x1 ->
    LOGISTIC -> MUL of the depthwise output by that vector -> conv1x1 (stride 2 before it: a
    conv3x3/2) -> MEAN -> FULLY_CONNECTED. The SE MEAN of an int8 model is a float32 sum on
    dequantized values once TVM's TFLite frontend imports it."""
    net = _Net("se_int8" if quantized else "se_f32", quantized, seed)
    s_ = net.s
    x = net.act("input", [1, size, size, 3], 0.02, 0)
    net.b.inputs = [x]
    t, shape = net.conv(x, [1, size, size, 3], width, k=3)
    d, shape = net.conv(t, shape, width, depthwise=True)

    def reduce_mean(src, out_shape, name, keep):
        m = net.act(name, out_shape, 0.03, -2)
        o = s_.ReducerOptionsT()
        o.keepDims = keep
        net.b.op("MEAN", [src, net.const_i32(f"{name}/axes", [1, 2])], [m],
                 s_.BuiltinOptions.ReducerOptions, o)
        return m

    m = reduce_mean(d, [1, 1, 1, width], "se/mean", True)
    v, vs = net.conv(m, [1, 1, 1, width], max(width // 4, 1), k=1)
    v, vs = net.conv(v, vs, width, k=1, relu=False)
    g = net.act("se/gate", vs, 1.0 / 256, -128)  # TFLite's fixed int8 LOGISTIC output scale
    net.b.op("LOGISTIC", [v], [g])
    y = net.act("se/scaled", shape, 0.04, -3)
    o = s_.MulOptionsT()
    o.fusedActivationFunction = s_.ActivationFunctionType.NONE
    net.b.op("MUL", [d, g], [y], s_.BuiltinOptions.MulOptions, o)
    p, shape = net.conv(y, shape, 2 * width, k=3, stride=2)
    h = reduce_mean(p, [1, 2 * width], "head/mean", False)
    net.b.outputs = [net.fc(h, 2 * width, 4)]
    return net.b.finish()

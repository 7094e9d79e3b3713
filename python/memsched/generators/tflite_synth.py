"""Small .tflite models built with the flatbuffer object API (no tensorflow needed).

For tests and examples of the partition / segment tools: branches, a skip from the model input,
a residual ADD, a CONCATENATION, depthwise and pointwise convolutions, a bias buffer shared by two
convolutions (as the converter stores identical constants once), in float32 or int8 (per-channel
quantized weights, int32 biases, as the TFLite converter emits them).
"""
from __future__ import annotations

import numpy as np

from ..tflite.read import schema
from ..tflite.write import pack_model


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


# ---------------------------------------------------------------------------------------------
# small models around the data-movement and matrix operators TFLite Micro's arena prices
# (`memsched.tflite.tflm_arena`): each mixes them with convolutions, int8 or float32


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
               layers=((2, 8, 10), (1, 8, 4))) -> bytes:
    """A keyword-spotting-like stack: conv3x3 -> RESHAPE to (1, features) -> SVDF layers
    ((rank, units, memory) each; int8 with an int16 state and int16 time weights, as the
    converter writes them, or float32) -> FULLY_CONNECTED."""
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
            st = float(np.abs(wt_f).max()) / 32767
            w_t = b.tensor(f"svdf{i}/wt", [filters, memory], T.INT16,
                           b.buffer(np.round(wt_f / st).astype(np.int16)), scale=st,
                           zero_point=0)
            sa = 0.002
            state = b.tensor(f"svdf{i}/state", [1, memory * filters], T.INT16, scale=sa,
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

"""Small int8 / float32 TFLite models around the detection post-processing, slice-update,
circular-buffer, resource-variable and control-flow (CALL_ONCE, IF, WHILE: several subgraphs)
operators TFLite Micro's arena prices
(`memsched.tflite.memory.kernels_misc`), each between convolutions (`misc_models`), and a
Vela-style Ethos-U file it does not (`ethosu_model`)."""
from __future__ import annotations

import numpy as np

from .tflite_ops import _data_op, _op_finish, _op_net
from .tflite_synth import _Net

OPERATORS = ("DETECTION_POSTPROCESS", "DYNAMIC_UPDATE_SLICE", "CIRCULAR_BUFFER",
             "RESOURCE_VARIABLES", "CALL_ONCE", "CALL_ONCE_VARIABLES", "IF", "IF_ELSE", "WHILE")


def _custom(net: _Net, name: str, ins, outs, options: bytes = b"") -> None:
    b = net.b
    code = ("custom", name)
    if code not in b.codes:
        b.codes[code] = len(b.codes)
    b.ops.append(b.s.OperatorT(opcodeIndex=b.codes[code], inputs=list(ins), outputs=list(outs),
                               customOptions=list(options) if options else None))


def detection_model(quantized: bool = True, seed: int = 0, size: int = 8, channels: int = 8,
                    anchors: int = 2, classes: int = 3, max_detections: int = 5) -> bytes:
    """An SSD head: conv3x3 -> conv1x1 box and class predictors -> RESHAPE to [1, boxes, 4]
    and [1, boxes, classes + 1] (int8: DEQUANTIZE, the kernel takes float32) ->
    ``TFLite_Detection_PostProcess`` with constant float anchors; its four outputs are the
    model's."""
    from flatbuffers import flexbuffers

    net, _, a, shape = _op_net("detection", quantized, seed, size, channels)
    T = net.s.TensorType
    boxes = size * size * anchors
    heads = []
    for what, per in (("box", 4), ("cls", classes + 1)):
        c, cshape = net.conv(a, shape, anchors * per, k=1, relu=False)
        r, _ = net.reshape(c, [1, boxes, per])
        if quantized:
            f = net.b.tensor(f"{what}_f", [1, boxes, per], T.FLOAT32)
            net.b.op("DEQUANTIZE", [r], [f])
            r = f
        heads.append(r)
    rng = net.rng
    centers = rng.uniform(0.1, 0.9, (boxes, 2))
    sizes = rng.uniform(0.05, 0.3, (boxes, 2))
    anc = net.b.tensor("anchors", [boxes, 4], T.FLOAT32,
                       net.b.buffer(np.concatenate([centers, sizes], 1).astype(np.float32)))
    outs = [net.b.tensor("det_boxes", [1, max_detections, 4], T.FLOAT32),
            net.b.tensor("det_classes", [1, max_detections], T.FLOAT32),
            net.b.tensor("det_scores", [1, max_detections], T.FLOAT32),
            net.b.tensor("num_detections", [1], T.FLOAT32)]
    opts = flexbuffers.Dumps({
        "max_detections": max_detections, "max_classes_per_detection": 1,
        "detections_per_class": 100, "use_regular_nms": False, "nms_score_threshold": 0.3,
        "nms_iou_threshold": 0.6, "num_classes": classes, "y_scale": 10.0, "x_scale": 10.0,
        "h_scale": 5.0, "w_scale": 5.0})
    _custom(net, "TFLite_Detection_PostProcess", heads + [anc], outs, opts)
    net.b.outputs = outs
    return net.b.finish()


def update_slice_model(quantized: bool = True, seed: int = 0, size: int = 8,
                       channels: int = 8) -> bytes:
    """conv3x3 -> DYNAMIC_UPDATE_SLICE (a 2x2 patch of a second conv at constant indices) ->
    conv1x1."""
    net, x, a, shape = _op_net("update_slice", quantized, seed, size, channels)
    p, pshape = net.conv(x, [1, size, size, 3], channels, k=2, stride=size // 2,
                         padding="VALID")
    if quantized:  # the same quantization as the operand
        net.b.tensors[p].quantization = net.b.tensors[a].quantization
        net.scale[p] = net.scale[a]
    out = _data_op(net, "DYNAMIC_UPDATE_SLICE", [a, p, net.const_i32("at", [0, 1, 3, 0])],
                   [shape], like=a)[0]
    return _op_finish(net, out, shape)


def circular_buffer_model(quantized: bool = True, seed: int = 0, width: int = 8,
                          channels: int = 8, frames: int = 5) -> bytes:
    """A streaming model (int8 only): one frame [1, 1, width, 3] -> conv -> CIRCULAR_BUFFER
    (the last ``frames`` frames; TFLite Micro runs it every call when ``frames`` is 5, 13 or
    25) -> conv over the frames."""
    if not quantized:
        raise ValueError("TFLite Micro's CIRCULAR_BUFFER takes int8 only")
    net = _Net(f"circular_buffer_int8_{seed}", True, seed)
    x = net.act("x", [1, 1, width, 3], 0.04, 0)
    net.b.inputs = [x]
    a, shape = net.conv(x, [1, 1, width, 3], channels, k=1)
    out_shape = [1, frames, width, channels]
    cb = net.act("frames", out_shape, like=a)
    _custom(net, "CIRCULAR_BUFFER", [a], [cb])
    return _op_finish(net, cb, out_shape)


def resource_variable_model(quantized: bool = True, seed: int = 0, size: int = 8,
                            channels: int = 8, variables: int = 2) -> bytes:
    """conv3x3 -> for each of ``variables`` states: VAR_HANDLE -> READ_VARIABLE -> ADD (the
    conv's output) -> ASSIGN_VARIABLE (the sum back) -> conv1x1 of the last sum."""
    net, _, a, shape = _op_net("resource_variables", quantized, seed, size, channels)
    s, T = net.s, net.s.TensorType
    t = a
    for i in range(variables):
        h = net.b.tensor(f"handle{i}", [], T.RESOURCE)
        o = s.VarHandleOptionsT()
        o.sharedName = f"state{i}"
        net.b.op("VAR_HANDLE", [], [h], s.BuiltinOptions.VarHandleOptions, o)
        r = net.act(f"read{i}", shape, like=a)
        net.b.op("READ_VARIABLE", [h], [r], s.BuiltinOptions.ReadVariableOptions,
                 s.ReadVariableOptionsT())
        y = net.act(f"sum{i}", shape, like=a)
        net.b.op("ADD", [t, r], [y], s.BuiltinOptions.AddOptions, s.AddOptionsT())
        net.b.op("ASSIGN_VARIABLE", [h, y], [], s.BuiltinOptions.AssignVariableOptions,
                 s.AssignVariableOptionsT())
        t = y
    return _op_finish(net, t, shape)


def ethosu_model(seed: int = 0, size: int = 8, channels: int = 8) -> bytes:
    """conv3x3 -> the custom operator ``ethos-u`` as Vela writes it for an Ethos-U NPU
    (inputs: the command stream and the weights, constant uint8, two scratch areas and the
    feature map; the NPU's output) -> conv1x1. Stock TFLite Micro registers no kernel for it
    (the tests check that the file is rejected)."""
    net, _, a, shape = _op_net("ethosu", True, seed, size, channels)
    T = net.s.TensorType
    cms = net.b.tensor("command_stream", [32], T.UINT8,
                       net.b.buffer(net.rng.integers(0, 255, 32).astype(np.uint8)))
    flash = net.b.tensor("flash", [64], T.UINT8,
                         net.b.buffer(net.rng.integers(0, 255, 64).astype(np.uint8)))
    scratch = net.b.tensor("scratch", [256], T.UINT8)
    fast = net.b.tensor("scratch_fast", [0], T.UINT8)
    y = net.act("npu_out", shape, like=a)
    _custom(net, "ethos-u", [cms, flash, scratch, fast, a], [y])
    return _op_finish(net, y, shape)


def misc_models(quantized: bool = True) -> dict[str, bytes]:
    """One file per operator (group) of `OPERATORS` (CIRCULAR_BUFFER in int8 only)."""
    out = {"DETECTION_POSTPROCESS": detection_model(quantized),
           "DYNAMIC_UPDATE_SLICE": update_slice_model(quantized),
           "RESOURCE_VARIABLES": resource_variable_model(quantized),
           "CALL_ONCE": call_once_model(quantized),
           "CALL_ONCE_VARIABLES": call_once_model(quantized, variables=True),
           "IF": if_model(quantized), "IF_ELSE": if_model(quantized, cond=False),
           "WHILE": while_model(quantized)}
    if quantized:
        out["CIRCULAR_BUFFER"] = circular_buffer_model()
    return out


# ---------------------------------------------------------------------------------------------
# several subgraphs: CALL_ONCE, IF, WHILE


class _Sub:
    """A further subgraph sharing the main builder's buffers and operator codes."""

    def __init__(self, net: _Net, name: str):
        self.net, self.name, self.s = net, name, net.s
        self.tensors, self.ops, self.inputs, self.outputs = [], [], [], []

    def tensor(self, name, shape, dtype, buffer=0, like=None):
        quant = None
        if like is not None:
            quant = self.net.b.tensors[like].quantization
        self.tensors.append(self.s.TensorT(shape=list(shape), type=dtype, buffer=buffer,
                                           name=f"{self.name}/{name}", quantization=quant))
        return len(self.tensors) - 1

    def op(self, kind, ins, outs, options_type=0, options=None):
        b = self.net.b
        code = getattr(self.s.BuiltinOperator, kind)
        if code not in b.codes:
            b.codes[code] = len(b.codes)
        self.ops.append(self.s.OperatorT(opcodeIndex=b.codes[code], inputs=list(ins),
                                         outputs=list(outs), builtinOptionsType=options_type,
                                         builtinOptions=options))

    def graph(self):
        return self.s.SubGraphT(tensors=self.tensors, inputs=self.inputs,
                                outputs=self.outputs, operators=self.ops, name=self.name)


def _finish(net: _Net, subs) -> bytes:
    """The main builder's model with ``subs`` appended as subgraphs 1, 2, ..."""
    from ..tflite.format.read import read_tflite
    from ..tflite.format.write import pack_model

    model = read_tflite(net.b.finish()).model
    model.subgraphs += [sub.graph() for sub in subs]
    return pack_model(model)


def call_once_model(quantized: bool = True, seed: int = 0, size: int = 8, channels: int = 8,
                    variables: bool = False) -> bytes:
    """CALL_ONCE (subgraph 1) -> conv3x3 -> conv1x1. Subgraph 1 runs two float32 RELUs on a
    constant (two planned tensors inside the CALL_ONCE's scope) or, with ``variables``,
    initializes a resource variable (VAR_HANDLE, ASSIGN_VARIABLE of a constant) that the main
    graph reads, adds to the conv's output and assigns back (the TensorFlow pattern)."""
    net = _Net(f"call_once_{'int8' if quantized else 'f32'}", quantized, seed)
    s, T = net.s, net.s.TensorType
    o = s.CallOnceOptionsT()
    o.initSubgraphIndex = 1
    net.b.op("CALL_ONCE", [], [], s.BuiltinOptions.CallOnceOptions, o)
    x = net.act("x", [1, size, size, 3], 0.04, 0)
    net.b.inputs = [x]
    a, shape = net.conv(x, [1, size, size, 3], channels)
    init = _Sub(net, "init")
    if variables:
        h = net.b.tensor("handle", [], T.RESOURCE)
        vo = s.VarHandleOptionsT()
        vo.sharedName = "state"
        net.b.op("VAR_HANDLE", [], [h], s.BuiltinOptions.VarHandleOptions, vo)
        r = net.act("read", shape, like=a)
        net.b.op("READ_VARIABLE", [h], [r], s.BuiltinOptions.ReadVariableOptions,
                 s.ReadVariableOptionsT())
        y = net.act("sum", shape, like=a)
        net.b.op("ADD", [a, r], [y], s.BuiltinOptions.AddOptions, s.AddOptionsT())
        net.b.op("ASSIGN_VARIABLE", [h, y], [], s.BuiltinOptions.AssignVariableOptions,
                 s.AssignVariableOptionsT())
        ih = init.tensor("handle", [], T.RESOURCE)
        init.op("VAR_HANDLE", [], [ih], s.BuiltinOptions.VarHandleOptions, vo)
        dtype = T.INT8 if quantized else T.FLOAT32
        zeros = np.zeros(shape, np.int8 if quantized else np.float32)
        c = init.tensor("zeros", shape, dtype, net.b.buffer(zeros), like=a if quantized else None)
        init.op("ASSIGN_VARIABLE", [ih, c], [], s.BuiltinOptions.AssignVariableOptions,
                s.AssignVariableOptionsT())
        a = y
    else:
        c = init.tensor("c", [1, size, size, 4], T.FLOAT32,
                        net.b.buffer(net.rng.normal(0, 1, [1, size, size, 4])
                                     .astype(np.float32)))
        u = init.tensor("u", [1, size, size, 4], T.FLOAT32)
        w = init.tensor("w", [1, size, size, 4], T.FLOAT32)
        init.op("RELU", [c], [u])
        init.op("RELU", [u], [w])
    y, _ = net.conv(a, shape, 4, k=1, relu=False)
    net.b.outputs = [y]
    return _finish(net, [init])


def if_model(quantized: bool = True, seed: int = 0, size: int = 8, channels: int = 8,
             cond: bool = True) -> bytes:
    """conv3x3 -> IF (a constant condition; then: RELU -> RELU6, else: RELU6) -> conv1x1."""
    net, _, a, shape = _op_net("if", quantized, seed, size, channels)
    s, T = net.s, net.s.TensorType
    dtype = T.INT8 if quantized else T.FLOAT32
    like = a if quantized else None
    c = net.b.tensor("cond", [1], T.BOOL, net.b.buffer(np.array([cond], np.bool_)))
    y = net.act("if_out", shape, like=a)
    o = s.IfOptionsT()
    o.thenSubgraphIndex, o.elseSubgraphIndex = 1, 2
    net.b.op("IF", [c, a], [y], s.BuiltinOptions.IfOptions, o)
    subs = []
    for name, kinds in (("then", ("RELU", "RELU6")), ("else", ("RELU6",))):
        g = _Sub(net, name)
        t = g.tensor("in", shape, dtype, like=like)
        g.inputs = [t]
        for k in kinds:
            u = g.tensor(k.lower(), shape, dtype, like=like)
            g.op(k, [t], [u])
            t = u
        g.outputs = [t]
        subs.append(g)
    y2, _ = net.conv(y, shape, 4, k=1, relu=False)
    net.b.outputs = [y2]
    return _finish(net, subs)


def while_model(quantized: bool = True, seed: int = 0, size: int = 8, channels: int = 8,
                steps: int = 3) -> bytes:
    """conv3x3 -> WHILE (a float32 counter below ``steps``; body: counter + 1, RELU of the
    activation) -> conv1x1."""
    net, _, a, shape = _op_net("while", quantized, seed, size, channels)
    s, T = net.s, net.s.TensorType
    dtype = T.INT8 if quantized else T.FLOAT32
    like = a if quantized else None
    i0 = net.b.tensor("i0", [1], T.FLOAT32, net.b.buffer(np.zeros(1, np.float32)))
    i_out = net.b.tensor("i_out", [1], T.FLOAT32)
    y = net.act("while_out", shape, like=a)
    o = s.WhileOptionsT()
    o.condSubgraphIndex, o.bodySubgraphIndex = 1, 2
    net.b.op("WHILE", [i0, a], [i_out, y], s.BuiltinOptions.WhileOptions, o)
    cond = _Sub(net, "cond")
    ci, cx = cond.tensor("i", [1], T.FLOAT32), cond.tensor("x", shape, dtype, like=like)
    lim = cond.tensor("limit", [1], T.FLOAT32,
                      net.b.buffer(np.array([steps], np.float32)))
    cb = cond.tensor("less", [1], T.BOOL)
    cond.op("LESS", [ci, lim], [cb])
    cond.inputs, cond.outputs = [ci, cx], [cb]
    body = _Sub(net, "body")
    bi, bx = body.tensor("i", [1], T.FLOAT32), body.tensor("x", shape, dtype, like=like)
    one = body.tensor("one", [1], T.FLOAT32, net.b.buffer(np.ones(1, np.float32)))
    bi2, bx2 = body.tensor("i2", [1], T.FLOAT32), body.tensor("x2", shape, dtype, like=like)
    body.op("ADD", [bi, one], [bi2], s.BuiltinOptions.AddOptions, s.AddOptionsT())
    body.op("RELU", [bx], [bx2])
    body.inputs, body.outputs = [bi, bx], [bi2, bx2]
    y2, _ = net.conv(y, shape, 4, k=1, relu=False)
    net.b.outputs = [y2]
    return _finish(net, [cond, body])

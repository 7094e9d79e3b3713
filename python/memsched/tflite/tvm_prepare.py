"""Rewriting a .tflite model where TVM's TFLite frontend would fail, before `load_relax` hands it
over (compile only; analysis reads the file itself, `read.analysis_graph`).

Every rewrite computes exactly what the TFLite interpreter computes:

* ``DEQUANTIZE`` of a constant (float16 weights, int8 weights with per-tensor or per-channel
  scales) becomes a float32 constant -- the interpreter dequantizes these once when it prepares
  the model (TVM 0.27's frontend crashes with a TypeError on some float16 ones);
* ``SQUEEZE`` and ``EXPAND_DIMS`` become ``RESHAPE`` to the output's static shape (TVM's
  ``EXPAND_DIMS`` converter crashes; neither is supported quantized);
* quantized data-movement ops that TVM does not support quantized (``PAD``, ``PADV2``,
  ``MIRROR_PAD``, ``STRIDED_SLICE``, ``SLICE``, ``TRANSPOSE``, ...) run in float between a
  ``DEQUANTIZE`` and a ``QUANTIZE`` with the same scale and zero point: they only move values
  (PAD's fill is the zero point, which dequantizes to 0.0 and quantizes back to the zero
  point), so the round trip is exact. Ops whose tensors do not share one scale/zero point are
  left alone (TVM then names them).

Custom operators and builtins TVM's frontend does not convert are refused in one line naming
them and the file. Only subgraph 0 (the main graph) is rewritten; an unchanged model is handed
over byte for byte.
"""
from __future__ import annotations

import numpy as np

from ..errors import ModelLoadError
from .format.read import NUMPY_DTYPES, TFLiteGraph, read_tflite, schema

# data-movement ops: exact in float between DEQUANTIZE and QUANTIZE with one scale/zero point
FLOAT_WRAP_OPS = {"PAD", "PADV2", "MIRROR_PAD", "STRIDED_SLICE", "SLICE", "TRANSPOSE", "SPLIT",
                  "SPLIT_V", "UNPACK", "PACK", "GATHER", "TILE", "BATCH_TO_SPACE_ND",
                  "SPACE_TO_BATCH_ND", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "BROADCAST_TO",
                  "REVERSE_V2", "RESIZE_NEAREST_NEIGHBOR"}
TO_RESHAPE = {"SQUEEZE", "EXPAND_DIMS"}


def _fail(path: str, problem: str):
    raise ModelLoadError(f"cannot compile model {path!r}: {problem}")


def _qparams(tensor):
    """(scales, zero points, axis) of a quantized tensor, else None."""
    q = tensor.quantization
    if q is None or q.scale is None or len(q.scale) == 0:
        return None
    zp = q.zeroPoint if q.zeroPoint is not None and len(q.zeroPoint) else [0]
    return (np.asarray(q.scale, np.float32), np.asarray(zp, np.int64),
            int(q.quantizedDimension or 0))


class _Editor:
    def __init__(self, tg: TFLiteGraph):
        self.s = schema()
        self.tg = tg
        self.model = tg.model
        self.sg = tg.subgraph
        self.codes = {}
        for i, c in enumerate(self.model.operatorCodes or []):
            b = max(int(c.builtinCode), int(c.deprecatedBuiltinCode))
            if b != self.s.BuiltinOperator.CUSTOM:
                self.codes.setdefault(b, i)

    def code(self, name: str) -> int:
        b = getattr(self.s.BuiltinOperator, name)
        if b not in self.codes:
            self.model.operatorCodes.append(self.s.OperatorCodeT(
                deprecatedBuiltinCode=min(b, 127), builtinCode=b, version=1))
            self.codes[b] = len(self.model.operatorCodes) - 1
        return self.codes[b]

    def buffer(self, arr: np.ndarray | None) -> int:
        buf = self.s.BufferT()
        if arr is not None:
            buf.data = np.frombuffer(np.ascontiguousarray(arr).tobytes(), dtype=np.uint8)
        self.model.buffers.append(buf)
        return len(self.model.buffers) - 1

    def tensor(self, name, shape, dtype, arr=None) -> int:
        t = self.s.TensorT(shape=[int(d) for d in shape], type=dtype, name=name,
                           buffer=self.buffer(arr))
        self.sg.tensors.append(t)
        return len(self.sg.tensors) - 1

    def const_value(self, t: int) -> np.ndarray | None:
        """The data of constant tensor ``t`` as its dtype, or None when not a constant."""
        tensor = self.sg.tensors[t]
        raw = self.tg.buffer_bytes(int(tensor.buffer))
        dt = NUMPY_DTYPES.get(int(tensor.type))
        if not len(raw) or dt is None:
            return None
        shape = [int(d) for d in (tensor.shape if tensor.shape is not None else [])]
        arr = np.frombuffer(raw.tobytes(), dtype=dt)
        return arr.reshape(shape) if arr.size == int(np.prod(shape)) else None

    def dequantized(self, t: int) -> np.ndarray | None:
        """Float32 value of constant ``t`` (float16 widened; int8/uint8/int16/int32 with their
        scales, per channel along the quantized dimension)."""
        arr = self.const_value(t)
        if arr is None:
            return None
        if arr.dtype == np.float16:
            return arr.astype(np.float32)
        q = _qparams(self.sg.tensors[t])
        if q is None or not np.issubdtype(arr.dtype, np.integer):
            return arr.astype(np.float32) if arr.dtype == np.float32 else None
        scale, zp, axis = q
        if len(scale) > 1:
            shape = [1] * arr.ndim
            shape[axis] = len(scale)
            scale, zp = scale.reshape(shape), zp.reshape(shape)
        return ((arr.astype(np.int64) - zp).astype(np.float32) * scale).astype(np.float32)


def _fold_dequantize(ed: _Editor, op) -> bool:
    ins = [int(t) for t in op.inputs if t >= 0]
    outs = [int(t) for t in op.outputs if t >= 0]
    if len(ins) != 1 or len(outs) != 1:
        return False
    val = ed.dequantized(ins[0])
    if val is None:
        return False
    out = ed.sg.tensors[outs[0]]
    out.buffer = ed.buffer(val.reshape([int(d) for d in out.shape]))
    out.type = ed.s.TensorType.FLOAT32
    out.quantization = None
    return True  # the op is dropped: its output is now a constant


def _to_reshape(ed: _Editor, op) -> None:
    outs = [int(t) for t in op.outputs if t >= 0]
    shape = [int(d) for d in ed.sg.tensors[outs[0]].shape]
    st = ed.tensor(f"memsched/shape_{outs[0]}", [len(shape)], ed.s.TensorType.INT32,
                   np.asarray(shape, np.int32))
    op.opcodeIndex = ed.code("RESHAPE")
    op.inputs = [int(op.inputs[0]), st]
    opts = ed.s.ReshapeOptionsT()
    opts.newShape = shape
    op.builtinOptionsType = ed.s.BuiltinOptions.ReshapeOptions
    op.builtinOptions = opts


def _same_params(ed: _Editor, ts: list[int]) -> bool:
    qs = [_qparams(ed.sg.tensors[t]) for t in ts]
    if any(q is None for q in qs) or not qs:
        return False
    s0, z0, _ = qs[0]
    return all(len(s) == 1 and len(s0) == 1 and s[0] == s0[0] and z[0] == z0[0]
               for s, z, _ in qs)


def _wrap_float(ed: _Editor, op, before: list, after: list) -> bool:
    """Run ``op`` in float between DEQUANTIZE / QUANTIZE ops (see the module docstring)."""
    s = ed.s
    tensors = ed.sg.tensors
    ins = [int(t) for t in op.inputs]
    outs = [int(t) for t in op.outputs]
    act_in = [t for t in ins if t >= 0 and _qparams(tensors[t]) is not None]
    act_out = [t for t in outs if t >= 0 and _qparams(tensors[t]) is not None]
    if not act_out or not _same_params(ed, act_in + act_out):
        return False
    new_in = []
    for t in ins:
        if t < 0 or t not in act_in:
            new_in.append(t)
            continue
        val = ed.dequantized(t)
        name = f"{tensors[t].name or t}/memsched_float"
        if val is not None:  # a quantized constant (PADV2's fill value)
            new_in.append(ed.tensor(name, tensors[t].shape, s.TensorType.FLOAT32, val))
            continue
        f = ed.tensor(name, tensors[t].shape, s.TensorType.FLOAT32)
        before.append(s.OperatorT(opcodeIndex=ed.code("DEQUANTIZE"), inputs=[t], outputs=[f],
                                  builtinOptionsType=s.BuiltinOptions.DequantizeOptions,
                                  builtinOptions=s.DequantizeOptionsT()))
        new_in.append(f)
    new_out = []
    for t in outs:
        if t < 0 or t not in act_out:
            new_out.append(t)
            continue
        f = ed.tensor(f"{tensors[t].name or t}/memsched_float", tensors[t].shape,
                      s.TensorType.FLOAT32)
        after.append(s.OperatorT(opcodeIndex=ed.code("QUANTIZE"), inputs=[f], outputs=[t],
                                 builtinOptionsType=s.BuiltinOptions.QuantizeOptions,
                                 builtinOptions=s.QuantizeOptionsT()))
        new_out.append(f)
    op.inputs, op.outputs = new_in, new_out
    return True


def prepare_for_tvm(path: str, data: bytes, supported_quantized=frozenset(),
                    supported_ops=None) -> bytes:
    """The .tflite ``data`` rewritten for TVM's frontend (see the module docstring).
    ``supported_quantized``: op names the frontend converts quantized; ``supported_ops``: every
    op name it converts (None: not checked)."""
    from .segments import pack_model

    tg = read_tflite(data, label=path)
    ed = _Editor(tg)
    kinds = [op.kind for op in tg.graph.ops]
    custom = sorted({k for k, op in zip(kinds, tg.subgraph.operators or [])
                     if _is_custom(ed, op)})
    if custom:
        _fail(path, f"custom operator{'s' if len(custom) > 1 else ''} {', '.join(custom)} "
                    "cannot be built by TVM's TFLite frontend (`memsched analyze --view file` "
                    "still analyzes the file)")
    if supported_ops is not None:
        missing = sorted({k for k in kinds if k not in supported_ops and k not in TO_RESHAPE})
        if missing:
            _fail(path, f"TVM's TFLite frontend does not convert operator"
                        f"{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    changed = False
    new_ops = []
    for v, op in enumerate(tg.subgraph.operators or []):
        kind = kinds[v]
        if kind == "DEQUANTIZE" and _fold_dequantize(ed, op):
            changed = True
            continue
        if kind in TO_RESHAPE:
            _to_reshape(ed, op)
            kind = "RESHAPE"
            changed = True
        quantized = any(t >= 0 and _qparams(tg.subgraph.tensors[t]) is not None
                        for t in list(op.inputs) + list(op.outputs))
        if quantized and kind in FLOAT_WRAP_OPS and kind not in supported_quantized:
            before, after = [], []
            if _wrap_float(ed, op, before, after):
                new_ops += before + [op] + after
                changed = True
                continue
        new_ops.append(op)
    if not changed:
        return data
    tg.subgraph.operators = new_ops
    try:
        return pack_model(tg.model)
    except Exception as e:  # noqa: BLE001 - flatbuffers raises anything on odd models
        _fail(path, f"rewriting the model for TVM failed ({type(e).__name__}: {e})")


def _is_custom(ed: _Editor, op) -> bool:
    c = ed.model.operatorCodes[op.opcodeIndex]
    return max(int(c.builtinCode), int(c.deprecatedBuiltinCode)) == ed.s.BuiltinOperator.CUSTOM

"""Read a .tflite flatbuffer directly into an `OpGraph` plus its parameter buffers.

TVM's TFLite frontend cannot import most int8 models (quantized PAD, ...), and partitioning only
needs the dataflow, so the file is read with the flatbuffer schema object API shipped with
LiteRT (``ai_edge_litert.schema_py_generated``; the ``tflite`` package's schema as a fallback).

* ops: the operators of subgraph 0 (the main graph) in file order, which the interpreter runs in
  order, so it is a topological order; op ``v`` is operator ``v`` of the file;
* activations: the subgraph's inputs and every operator output, ``elements x dtype size`` bytes;
* parameters: tensors no operator produces that are not subgraph inputs (weights, biases,
  constant shapes). Tensors sharing one buffer (the converter stores identical constants once)
  are one parameter buffer, ``param_bytes`` its data length.

Model files are untrusted: every problem is a `TFLiteModelError` (a `ValueError`) naming the file.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..graph import GraphBuilder, GraphError, OpGraph
from .load import ModelLoadError

# bytes per element (INT4/UINT4/INT2 are packed: handled in tensor_nbytes)
DTYPE_BYTES = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 5: 1, 6: 1, 7: 2, 8: 8, 9: 1, 10: 8, 11: 16,
               12: 8, 13: 0, 14: 0, 15: 4, 16: 2, 18: 2, 21: 1, 22: 1}
SUB_BYTE_BITS = {17: 4, 19: 2, 20: 4}
NUMPY_DTYPES = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64,
                6: np.bool_, 7: np.int16, 9: np.int8, 10: np.float64, 12: np.uint64,
                15: np.uint32, 16: np.uint16}


class TFLiteModelError(ModelLoadError):
    """A .tflite file that cannot be read or partitioned; the message names file and problem."""


def schema():
    """The flatbuffer schema module (object API) of LiteRT, or of the ``tflite`` package."""
    try:
        from ai_edge_litert import schema_py_generated as s
    except ImportError:  # pragma: no cover - depends on what is installed
        try:
            from tflite import schema_py_generated as s  # type: ignore
        except ImportError:
            raise TFLiteModelError("reading .tflite files needs the 'ai-edge-litert' package "
                                   "(pip install 'tvm-memsched[tflite]')") from None
    return s


def op_names() -> dict[int, str]:
    s = schema()
    return {v: k for k, v in vars(s.BuiltinOperator).items() if not k.startswith("_")}


def tensor_elements(tensor) -> int:
    shape = [] if tensor.shape is None else [int(d) for d in tensor.shape]
    elems = 1
    for d in shape:
        elems *= max(d, 1)
    return elems


def tensor_nbytes(tensor) -> int:
    elems = tensor_elements(tensor)
    if tensor.type in SUB_BYTE_BITS:
        return -(-elems * SUB_BYTE_BITS[tensor.type] // 8)
    return elems * DTYPE_BYTES.get(int(tensor.type), 4)


@dataclass
class TFLiteGraph:
    """A .tflite model as memsched sees it.

    ``graph``: the `OpGraph` (op ``v`` = operator ``v`` of subgraph 0, ``Op.source = v``);
    ``op_params[v]``: parameter ids op ``v`` reads; ``param_bytes[i]``: bytes of parameter ``i``;
    ``param_buffer[i]``: its buffer index in the file; ``tensor_index[t]``: the file's tensor
    index of `OpGraph` tensor ``t``; ``model``: the unpacked ``ModelT`` (the writer's input);
    ``data``: the file's bytes (buffers stored by offset live there).
    """

    name: str
    model: object
    graph: OpGraph
    op_params: list[tuple[int, ...]]
    param_bytes: list[int]
    param_buffer: list[int]
    tensor_index: list[int]
    data: bytes = field(repr=False, default=b"")

    @property
    def subgraph(self):
        return self.model.subgraphs[0]

    def buffer_bytes(self, index: int) -> np.ndarray:
        """The bytes of buffer ``index`` (inline data or an offset into the file)."""
        buf = self.model.buffers[index]
        if buf.data is not None and len(buf.data):
            return np.asarray(buf.data, dtype=np.uint8)
        if buf.offset > 1 and buf.size:
            return np.frombuffer(self.data, dtype=np.uint8, count=buf.size, offset=buf.offset)
        return np.zeros(0, dtype=np.uint8)


def read_tflite(path_or_bytes, name: str | None = None) -> TFLiteGraph:
    """Parse a .tflite file (path or bytes) into a `TFLiteGraph`."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = bytes(path_or_bytes)
        label = name or "model.tflite"
    else:
        label = str(path_or_bytes)
        try:
            with open(path_or_bytes, "rb") as f:
                data = f.read()
        except OSError as e:
            raise TFLiteModelError(f"cannot read model {label!r}: {e.strerror or e}") from None
        name = name or os.path.splitext(os.path.basename(label))[0]
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise TFLiteModelError(f"cannot read model {label!r}: not a .tflite flatbuffer "
                               "(missing TFL3 identifier)")
    s = schema()
    try:
        model = s.ModelT.InitFromPackedBuf(data, 0)
    except Exception as e:  # noqa: BLE001 - a corrupt flatbuffer raises anything
        raise TFLiteModelError(f"cannot read model {label!r}: corrupt flatbuffer "
                               f"({type(e).__name__})") from None
    try:
        return _build(model, data, name or "model", label)
    except TFLiteModelError:
        raise
    except (GraphError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise TFLiteModelError(f"cannot read model {label!r}: malformed model "
                               f"({type(e).__name__}: {e})") from None


def _build(model, data: bytes, name: str, label: str) -> TFLiteGraph:
    if not model.subgraphs:
        raise TFLiteModelError(f"cannot read model {label!r}: no subgraph")
    sg = model.subgraphs[0]
    tensors = sg.tensors or []
    ops = sg.operators or []
    codes = model.operatorCodes or []
    buffers = model.buffers or []
    names = op_names()
    nt = len(tensors)

    def check_index(t, what):
        if not 0 <= t < nt:
            raise TFLiteModelError(f"cannot read model {label!r}: {what} refers to tensor {t} "
                                   f"of {nt}")

    inputs = [int(t) for t in (sg.inputs if sg.inputs is not None else [])]
    outputs = [int(t) for t in (sg.outputs if sg.outputs is not None else [])]
    for t in inputs + outputs:
        check_index(t, "subgraph input/output")
    producer: dict[int, int] = {}
    for v, op in enumerate(ops):
        for t in (op.outputs if op.outputs is not None else []):
            t = int(t)
            if t < 0:
                continue
            check_index(t, f"operator {v}")
            if t in producer or t in inputs:
                raise TFLiteModelError(f"cannot read model {label!r}: tensor {t} is written "
                                       "twice")
            producer[t] = v
    b = GraphBuilder(name)
    tmap: dict[int, int] = {}
    tensor_index: list[int] = []
    for t in inputs:
        if t not in tmap:
            tmap[t] = b.input(_tname(tensors[t], t), tensor_nbytes(tensors[t]))
            tensor_index.append(t)
    pmap: dict[int, int] = {}  # buffer index -> parameter id
    param_bytes: list[int] = []
    param_buffer: list[int] = []
    op_params: list[tuple[int, ...]] = []
    for v, op in enumerate(ops):
        if not 0 <= op.opcodeIndex < len(codes):
            raise TFLiteModelError(f"cannot read model {label!r}: operator {v} has opcode "
                                   f"index {op.opcodeIndex} of {len(codes)}")
        code = codes[op.opcodeIndex]
        builtin = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
        kind = names.get(builtin, f"BUILTIN_{builtin}")
        if kind == "CUSTOM":
            kind = _text(code.customCode) or "CUSTOM"
        ins, params = [], []
        for t in (op.inputs if op.inputs is not None else []):
            t = int(t)
            if t < 0:
                continue  # optional input left out
            check_index(t, f"operator {v}")
            if t in tmap:
                ins.append(tmap[t])
            elif t in producer:
                raise TFLiteModelError(f"cannot read model {label!r}: operator {v} reads tensor "
                                       f"{t} before operator {producer[t]} writes it")
            else:  # a constant: weights, bias, shape, ...
                bi = int(tensors[t].buffer)
                if not 0 <= bi < len(buffers):
                    raise TFLiteModelError(f"cannot read model {label!r}: tensor {t} uses "
                                           f"buffer {bi} of {len(buffers)}")
                nbytes = _buffer_len(buffers[bi], len(data), label)
                if nbytes:
                    if bi not in pmap:
                        pmap[bi] = len(param_bytes)
                        param_bytes.append(nbytes)
                        param_buffer.append(bi)
                    params.append(pmap[bi])
        outs = []
        for t in (op.outputs if op.outputs is not None else []):
            t = int(t)
            if t >= 0:
                outs.append(t)
        vid = b.op(f"{v}:{kind}", kind, ins,
                   [(_tname(tensors[t], t), tensor_nbytes(tensors[t])) for t in outs], source=v)
        for t, gt in zip(outs, b.ops[vid].outputs):
            tmap[t] = gt
            tensor_index.append(t)
        op_params.append(tuple(dict.fromkeys(params)))
    for t in outputs:
        if t in tmap:
            b.mark_output(tmap[t])
    graph = b.build()
    return TFLiteGraph(name, model, graph, op_params, param_bytes, param_buffer, tensor_index,
                       data)


def _buffer_len(buf, file_len: int, label: str) -> int:
    if buf.data is not None and len(buf.data):
        return len(buf.data)
    if buf.offset > 1 and buf.size:
        if buf.offset + buf.size > file_len:
            raise TFLiteModelError(f"cannot read model {label!r}: buffer data beyond the end "
                                   "of the file")
        return int(buf.size)
    return 0


def _text(x) -> str:
    if x is None:
        return ""
    return x.decode("utf-8", "replace") if isinstance(x, (bytes, bytearray)) else str(x)


def _tname(tensor, index: int) -> str:
    return _text(tensor.name) or f"tensor_{index}"


def op_macs(tg: TFLiteGraph) -> list[int]:
    """Multiply-accumulates per operator (convolutions and fully connected layers from their
    weight shapes; every other op counts one per output element) -- the compute term of a
    latency model, not a measurement."""
    sg = tg.subgraph
    out = []
    for v, op in enumerate(sg.operators or []):
        kind = tg.graph.ops[v].kind
        ins = [int(t) for t in (op.inputs if op.inputs is not None else [])]
        outs = [int(t) for t in (op.outputs if op.outputs is not None else []) if t >= 0]
        elems = sum(tensor_elements(sg.tensors[t]) for t in outs)
        w = [int(d) for d in sg.tensors[ins[1]].shape] if len(ins) > 1 and ins[1] >= 0 and \
            sg.tensors[ins[1]].shape is not None else []
        if kind == "CONV_2D" and len(w) == 4:
            out.append(elems * w[1] * w[2] * w[3])
        elif kind == "DEPTHWISE_CONV_2D" and len(w) == 4:
            out.append(elems * w[1] * w[2])
        elif kind == "FULLY_CONNECTED" and len(w) == 2:
            out.append(elems * w[1])
        else:
            out.append(elems)
    return out

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

from ...graph import GraphBuilder, GraphError, OpGraph, UnsupportedModelError
from ...errors import ModelLoadError

# bytes per element (INT4/UINT4/INT2 are packed: handled in tensor_nbytes)
DTYPE_BYTES = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 5: 1, 6: 1, 7: 2, 8: 8, 9: 1, 10: 8, 11: 16,
               12: 8, 13: 0, 14: 0, 15: 4, 16: 2, 18: 2, 21: 1, 22: 1}
SUB_BYTE_BITS = {17: 4, 19: 2, 20: 4}
NUMPY_DTYPES = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64,
                6: np.bool_, 7: np.int16, 9: np.int8, 10: np.float64, 12: np.uint64,
                15: np.uint32, 16: np.uint16}


class TFLiteModelError(ModelLoadError):
    """A .tflite file that cannot be read or partitioned; the message names file and problem."""


# TFLite Micro's offline memory plan: metadata of int32 [version 1, subgraph 0, n, offsets]
OFFLINE_METADATA = "OfflineMemoryAllocation"


def _name(x) -> str:
    return x.decode("utf-8", "replace") if isinstance(x, (bytes, bytearray)) else str(x or "")


def _plan_entries(model) -> list[int]:
    return [i for i, m in enumerate(model.metadata or []) if _name(m.name) == OFFLINE_METADATA]


def read_offline_plan(model) -> list[int] | None:
    """The offsets of the model's ``OfflineMemoryAllocation`` metadata (one per tensor), or None.

    Raises `TFLiteModelError` for a plan TFLite Micro would not read (bad header, truncated)."""
    entries = _plan_entries(model)
    if not entries:
        return None
    meta = model.metadata[entries[-1]]
    buffers = model.buffers or []
    if not 0 <= meta.buffer < len(buffers) or buffers[meta.buffer].data is None:
        raise TFLiteModelError(f"its {OFFLINE_METADATA} metadata points to no buffer data")
    raw = np.asarray(buffers[meta.buffer].data, dtype=np.uint8).tobytes()
    if len(raw) < 12 or len(raw) % 4:
        raise TFLiteModelError(f"its {OFFLINE_METADATA} metadata is truncated "
                               f"({len(raw)} bytes)")
    words = np.frombuffer(raw, dtype="<i4")
    version, _subgraph, n = (int(x) for x in words[:3])
    if version != 1 or n != len(words) - 3:
        raise TFLiteModelError(f"its {OFFLINE_METADATA} metadata has version {version} and "
                               f"{len(words) - 3} offsets for a header of {n}")
    return [int(x) for x in words[3:]]


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


def read_tflite(path_or_bytes, name: str | None = None, label: str | None = None
                ) -> TFLiteGraph:
    """Parse a .tflite file (path or bytes) into a `TFLiteGraph`; ``label`` names the file in
    errors."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = bytes(path_or_bytes)
        label = label or name or "model.tflite"
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
    return graph_of(model, name or "model", label, data)


def graph_of(model, name: str = "model", label: str = "model.tflite", data: bytes = b""
             ) -> TFLiteGraph:
    """The `TFLiteGraph` of an unpacked ``ModelT`` already in memory (a file just parsed, or a
    model a rewrite built: no serialise-and-parse round trip). ``data``: the file's bytes, for
    buffers stored by offset."""
    try:
        return _build(model, data, name, label)
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


# The interpreter's in-place ops (TFLite's ArenaPlanner, checked against the LiteRT interpreter's
# tensor addresses, without delegates): RESHAPE / SQUEEZE / EXPAND_DIMS leave data unmodified and
# their output shares input 0's buffer whenever that input is an activation that is not a
# subgraph input and the output is not a subgraph output (other readers of the input are fine);
# ADD / MUL / SUB write over input 0 or 1 when that input is read by this op only (reference
# count 1), has the output's size, and neither is a subgraph input/output.
VIEW_OPS = {"RESHAPE", "SQUEEZE", "EXPAND_DIMS"}
INPLACE_OPS = {"ADD", "MUL", "SUB"}
# DEQUANTIZE of a constant (float16 / int8 weights) is computed once when the interpreter
# prepares the model, into a persistent buffer: a parameter, not an activation.
PREPARED_OPS = {"DEQUANTIZE", "DENSIFY"}
# ops running other subgraphs: their memory is not in subgraph 0's graph
CONTROL_FLOW = {"WHILE", "IF", "STABLEHLO_WHILE", "STABLEHLO_CASE", "STABLEHLO_COMPOSITE"}


def analysis_graph(tg: TFLiteGraph) -> OpGraph:
    """The `OpGraph` the TFLite interpreter's arena sees: one op per operator of subgraph 0 in
    file order (``Op.source``), tensors in the file's own dtypes (int8 = 1 byte per element),
    views and in-place ops as the interpreter treats them (`VIEW_OPS`, `INPLACE_OPS`), weights
    dequantized at prepare time (`PREPARED_OPS` of constants) counted as parameters."""
    sg = tg.subgraph
    tensors = sg.tensors or []
    ops = sg.operators or []
    sub_in = [int(t) for t in (sg.inputs if sg.inputs is not None else [])]
    sub_out = {int(t) for t in (sg.outputs if sg.outputs is not None else [])}
    sub_in_set = set(sub_in)
    refs: dict[int, int] = {}
    for op in ops:
        for t in (op.inputs if op.inputs is not None else []):
            if t >= 0:
                refs[int(t)] = refs.get(int(t), 0) + 1
    for t in sub_out:
        refs[t] = refs.get(t, 0) + 1
    b = GraphBuilder(tg.name)
    tmap: dict[int, int] = {}  # file tensor -> graph tensor holding its data
    deps: dict[int, list[int]] = {}  # file tensor -> the alias / prepare op defining it
    own: set[int] = set()  # file tensors with their own buffer (not a view)
    for t in sub_in:
        if t not in tmap:
            tmap[t] = b.input(_tname(tensors[t], t), tensor_nbytes(tensors[t]))
            own.add(t)
    for v, op in enumerate(ops):
        kind = tg.graph.ops[v].kind
        label = tg.graph.ops[v].name
        if kind in CONTROL_FLOW:
            raise UnsupportedModelError(f"control flow: operator {v} is {kind}; graphs with "
                                        "control flow cannot be scheduled")
        ins = [int(t) for t in (op.inputs if op.inputs is not None else []) if t >= 0]
        outs = [int(t) for t in (op.outputs if op.outputs is not None else []) if t >= 0]
        reads, preds = [], []
        for t in ins:
            if t in tmap:
                reads.append(tmap[t])
            preds += deps.get(t, [])
        if kind in PREPARED_OPS and not reads and not preds:
            vid = b.op(label, kind, [], [], source=v)
            for t in outs:
                deps[t] = [vid]
            continue
        if kind in VIEW_OPS and len(outs) == 1 and ins and ins[0] in tmap and \
                ins[0] not in sub_in_set and outs[0] not in sub_out:
            vid = b.op(label, kind, reads, [], alias=True, source=v, extra_preds=preds)
            tmap[outs[0]] = tmap[ins[0]]
            deps[outs[0]] = [vid]
            continue
        inplace = []
        if kind in INPLACE_OPS and len(outs) == 1 and outs[0] not in sub_out:
            size = tensor_nbytes(tensors[outs[0]])
            for t in ins[:2]:
                if t in own and t not in sub_in_set and t not in sub_out and \
                        refs.get(t, 0) == 1 and tensor_nbytes(tensors[t]) == size:
                    inplace = [tmap[t]]
                    break
        vid = b.op(label, kind, reads,
                   [(_tname(tensors[t], t), tensor_nbytes(tensors[t])) for t in outs],
                   source=v, extra_preds=preds, inplace=inplace)
        for t, gt in zip(outs, b.ops[vid].outputs):
            tmap[t] = gt
            own.add(t)
    for t in sorted(sub_out):
        if t in tmap:
            b.mark_output(tmap[t])
    return b.build()


def load_tflite_graph(path: str, input_shapes: dict | None = None) -> OpGraph:
    """`analysis_graph` of the .tflite file ``path`` (checked first by
    `tvm_guard.check_tflite`); no TVM. ``input_shapes`` may only restate the file's shapes:
    a .tflite file fixes every tensor's shape."""
    from ...limits import MAX_TFLITE_BYTES
    from .tvm_guard import check_tflite

    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise TFLiteModelError(f"cannot read model {path!r}: {e.strerror or e}") from None
    if size > MAX_TFLITE_BYTES:
        raise TFLiteModelError(f"cannot read model {path!r}: larger than the 2 GiB flatbuffer "
                               "limit")
    with open(path, "rb") as f:
        data = f.read()
    # one validating walk over the flatbuffer yields what the graph needs (`tvm_guard.Lean`):
    # 0.1-0.2 s on a 1 MB file where unpacking the object API took 0.3-0.45 s
    lean = check_tflite(path, data, input_shapes, schema=schema(), lean=True)
    try:
        tg = _build(lean, data, os.path.splitext(os.path.basename(path))[0], path)
    except TFLiteModelError:
        raise
    except (GraphError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise TFLiteModelError(f"cannot read model {path!r}: malformed model "
                               f"({type(e).__name__}: {e})") from None
    sg = tg.subgraph
    for name, dims in (input_shapes or {}).items():
        for t in (sg.inputs if sg.inputs is not None else []):
            if _tname(sg.tensors[t], t) == name:
                have = [int(d) for d in sg.tensors[t].shape]
                if have != list(dims):
                    raise TFLiteModelError(
                        f"cannot read model {path!r}: --input-shapes gives {name!r} "
                        f"{'x'.join(map(str, dims))} but a .tflite file fixes its shapes "
                        f"({'x'.join(map(str, have))}); convert the model with the shape you "
                        "want")
    try:
        return analysis_graph(tg)
    except GraphError as e:
        raise TFLiteModelError(f"cannot read model {path!r}: malformed model ({e})") from None

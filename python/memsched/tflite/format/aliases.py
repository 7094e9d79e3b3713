"""Which tensors of a .tflite file may share bytes in TFLite Micro, read from the file: an
in-place QUANTIZE (`quantize_aliases`) and the patch writer's view RESHAPEs (`reshape_aliases`,
`alias_roots`). One rule for the independent checker (`check`), the memory model
(`memsched.tflite.memory.model`) and the offline plan (`memsched.tflite.plan.pack`)."""
from __future__ import annotations

# TFLite Micro's QUANTIZE from float32 (quantize_common.cc -> reference_ops::AffineQuantize)
# loops i = 0 .. n-1 reading input[i] and then writing output[i]. With the output at the input's
# offset, output byte(s) of element i lie inside input elements <= i (output element size <=
# 4 bytes), all already read: the kernel runs in place. `quantize_aliases` finds these
# operators; the offline plan puts such an output at its input's offset (a merged lifetime),
# the checker accepts exactly that overlap, and the patch search prices it (`TFLM_INPLACE`).


def quantize_aliases(model) -> list[tuple[int, int, int]]:
    """(input, output, operator) tensor and operator indices of subgraph 0's QUANTIZE operators
    TFLite Micro can run in place: float32 input that no other operator reads and that is not
    a subgraph output, int8 / uint8 output, neither constant nor variable."""
    from .read import op_names, schema

    s = schema()
    names = op_names()
    sg = model.subgraphs[0]
    tensors = sg.tensors or []
    buffers = model.buffers or []
    codes = model.operatorCodes or []
    ops = sg.operators or []
    outs = {int(t) for t in (sg.outputs if sg.outputs is not None else [])}
    readers: dict[int, int] = {}
    for op in ops:
        for t in set(int(t) for t in (op.inputs if op.inputs is not None else []) if t >= 0):
            readers[t] = readers.get(t, 0) + 1

    def const(t: int) -> bool:
        b = int(tensors[t].buffer)
        buf = buffers[b] if 0 <= b < len(buffers) else None
        return tensors[t].isVariable or (buf is not None and (
            (buf.data is not None and len(buf.data) > 0) or (buf.offset > 1 and buf.size > 0)))

    found = []
    for v, op in enumerate(ops):
        code = codes[op.opcodeIndex]
        if names.get(max(int(code.builtinCode), int(code.deprecatedBuiltinCode))) != "QUANTIZE":
            continue
        ins = [int(t) for t in (op.inputs if op.inputs is not None else []) if t >= 0]
        o = [int(t) for t in (op.outputs if op.outputs is not None else []) if t >= 0]
        if len(ins) != 1 or len(o) != 1 or ins[0] == o[0]:
            continue
        x, y = ins[0], o[0]
        if int(tensors[x].type) != s.TensorType.FLOAT32 or \
                int(tensors[y].type) not in (s.TensorType.INT8, s.TensorType.UINT8):
            continue
        if readers.get(x, 0) != 1 or x in outs or const(x) or const(y):
            continue
        found.append((x, y, v))
    return found


# Row views (`memsched.tflite.patch.tile` with an offline plan): TFLite Micro's STRIDED_SLICE copies
# one innermost run per position of the outer dimensions, so a window of a narrow-channel NHWC
# map [1, H, W, C] costs one memcpy of C elements per pixel. The writer reads it as rows
# instead: a RESHAPE views the source as [1, H, W*C] (one per source, shared by its slices),
# the STRIDED_SLICE cuts rows x columns [w0*C, w1*C) (one memcpy per row) and a RESHAPE views
# that as [1, h, w, C]. TFLite Micro's RESHAPE copies nothing when its input and output share
# the buffer (`kernels/reshape.cc`: ``if (input->data.raw != output->data.raw) memcpy``): the
# offline plan gives each such RESHAPE's output its input's offset (`reshape_aliases`), the
# order and the plan see one buffer (`view_graph`), the checker accepts exactly those pairs.
VIEW_SUFFIX = "/view"  # the names of the tensors the writer's view RESHAPEs write


def reshape_aliases(model, named_only: bool = True) -> list[tuple[int, int, int]]:
    """(input, output, operator) of subgraph 0's RESHAPE operators that can run in place in
    TFLite Micro (output at the input's offset: the kernel skips its copy): an activation input
    (neither constant nor variable) and an output of the same bytes that is neither constant,
    variable nor a subgraph output. ``named_only``: only the view RESHAPEs the patch writer
    adds (input or output named ``...`` + `VIEW_SUFFIX`), the ones the offline plan aliases;
    False: every RESHAPE that may share its input's bytes (what the checker accepts)."""
    from .read import op_names, tensor_nbytes

    names = op_names()
    sg = model.subgraphs[0]
    tensors = sg.tensors or []
    buffers = model.buffers or []
    codes = model.operatorCodes or []
    outs = {int(t) for t in (sg.outputs if sg.outputs is not None else [])}

    def const(t: int) -> bool:
        b = int(tensors[t].buffer)
        buf = buffers[b] if 0 <= b < len(buffers) else None
        return bool(tensors[t].isVariable) or (buf is not None and (
            (buf.data is not None and len(buf.data) > 0) or (buf.offset > 1 and buf.size > 0)))

    found = []
    for v, op in enumerate(sg.operators or []):
        code = codes[op.opcodeIndex]
        if names.get(max(int(code.builtinCode), int(code.deprecatedBuiltinCode))) != "RESHAPE":
            continue
        ins = [int(t) for t in (op.inputs if op.inputs is not None else []) if t >= 0]
        o = [int(t) for t in (op.outputs if op.outputs is not None else []) if t >= 0]
        if not ins or len(o) != 1 or ins[0] == o[0]:
            continue
        x, y = ins[0], o[0]
        if const(x) or const(y) or y in outs or \
                tensor_nbytes(tensors[x]) != tensor_nbytes(tensors[y]):
            continue
        if named_only and not (_name(tensors[y]).endswith(VIEW_SUFFIX) or
                               _name(tensors[x]).endswith(VIEW_SUFFIX)):
            continue
        found.append((x, y, v))
    return found


def _name(t) -> str:
    n = t.name
    return n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n or "")


def alias_roots(model, named_only: bool = True) -> dict[int, int]:
    """{tensor: the tensor whose buffer it shares} for the outputs of `reshape_aliases`
    (chains followed to their first tensor)."""
    parent = {y: x for x, y, _ in reshape_aliases(model, named_only)}
    roots = {}
    for y in parent:
        r = y
        while r in parent:
            r = parent[r]
        roots[y] = r
    return roots

"""Reading an untrusted ``.onnx`` file: checked before anything acts on it.

`read_onnx` is the only way memsched opens an ONNX file (for the graph importer and for TVM's
frontend). In order:

1. the protobuf is parsed **without** its external data;
2. every external-data reference must name a regular file inside the model's directory (no
   absolute paths, no ``..``, no symlink leading out), with ``offset``/``length`` inside that
   file and ``length`` equal to what the tensor's dims and dtype declare;
3. the graph is validated (`check_onnx`): at least one node; known, fixed-size dtypes;
   non-negative dims; no name defined twice; every node input defined before it is read;
   every graph output computed; ``--input-shapes`` naming real inputs with the right rank;
   initializers no larger than the data they hold; and every tensor TVM's frontend computes at
   load time (constants, ``Shape`` of static tensors and what is computed from them only, such
   as ``ConstantOfShape``) must have a shape known to ONNX shape inference and at most
   `limits.MAX_FOLD_BYTES` bytes, so a tiny file cannot make the importer allocate terabytes;
4. only then is the external data read;
5. the front door (`onnx_front.prepare_onnx`): inputs pinned to ``--input-shapes``, shapes
   inferred and constants folded (bounded by `limits.MAX_FOLD_BYTES`) until every tensor is
   static, else one line naming the tensor that is not and the fix; the sizes of what TVM's
   frontend would still compute at load time are checked on the result.

Every problem is a `ModelLoadError` whose one-line message names the file and the problem.
"""
from __future__ import annotations

import os
import re

from ..errors import ModelLoadError
from ..limits import MAX_FOLD_BYTES
# the ONNX dtype table and shape ops are shared with the front door, which read_onnx runs
from .onnx_front import DTYPE_BITS, SHAPE_OPS

MAX_FILE_BYTES = 2 << 30  # protobuf's own limit
MAX_EXTERNAL_BYTES = 1 << 36  # 64 GiB of external tensor data in all
MAX_TENSOR_BYTES = 1 << 60  # same bound as memsched.graph.MAX_GRAPH_BYTES



def _fail(path: str, problem: str):
    raise ModelLoadError(f"cannot read model {path!r}: {problem}")


def dtype_name(code: int) -> str:
    import onnx

    try:
        return onnx.TensorProto.DataType.Name(code)
    except ValueError:
        return f"code {code}"


def _bits(path: str, code: int, what: str) -> int:
    if code not in DTYPE_BITS:
        known = code in (0, 8) or dtype_name(code) != f"code {code}"
        _fail(path, f"{what} has {'unsupported' if known else 'unknown'} dtype "
                    f"{dtype_name(code)}")
    return DTYPE_BITS[code]


def _nbytes(dims, bits: int) -> int:
    n = 1
    for d in dims:
        n *= d
    return (n * bits + 7) // 8


def _value_dims(path: str, vi, what: str):
    """Static dims of a ValueInfo (None where unknown); checks dtype and signs."""
    if not vi.type.HasField("tensor_type"):
        return None, None
    tt = vi.type.tensor_type
    bits = _bits(path, tt.elem_type, what) if tt.elem_type or tt.HasField("shape") else None
    if not tt.HasField("shape"):
        return None, bits
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            if d.dim_value < 0:
                _fail(path, f"{what} has negative dimension {d.dim_value}")
            dims.append(d.dim_value)
        else:
            dims.append(None)
    if bits is not None and None not in dims and _nbytes(dims, bits) > MAX_TENSOR_BYTES:
        _fail(path, f"{what} has shape {dims}: {_nbytes(dims, bits):,} bytes, more than 2**60 "
                    "(absurd shape)")
    return dims, bits


def _check_external(path: str, model) -> None:
    """External-data references stay inside the model's directory and inside their files."""
    from onnx import TensorProto
    from onnx.external_data_helper import _get_all_tensors

    base = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    total = 0
    for t in _get_all_tensors(model):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        what = f"tensor {t.name!r}"
        entries = {e.key: e.value for e in t.external_data}
        loc = entries.get("location", "")
        parts = re.split(r"[\\/]", loc)
        if not loc or os.path.isabs(loc) or ".." in parts or "\0" in loc or \
                re.match(r"^[A-Za-z]:", loc):
            _fail(path, f"{what}: external data location {loc[:100]!r} is not a relative path "
                        "inside the model's directory")
        real = os.path.realpath(os.path.join(base, loc))
        if os.path.commonpath([real, base]) != base:
            _fail(path, f"{what}: external data {loc[:100]!r} leads outside the model's "
                        "directory")
        if not os.path.isfile(real):
            _fail(path, f"{what}: external data file {loc[:100]!r} does not exist")
        size = os.path.getsize(real)
        try:
            offset = int(entries.get("offset", "0"))
            length = int(entries["length"]) if "length" in entries else size - offset
        except ValueError:
            _fail(path, f"{what}: external data offset/length are not integers")
        if offset < 0 or length < 0 or offset + length > size:
            _fail(path, f"{what}: external data range {offset}+{length} is outside "
                        f"{loc[:100]!r} ({size} bytes)")
        if any(d < 0 for d in t.dims):
            _fail(path, f"{what} has a negative dimension {list(t.dims)}")
        want = _nbytes(t.dims, _bits(path, t.data_type, what))
        if length != want:
            _fail(path, f"{what}: external data holds {length} bytes, its shape "
                        f"{list(t.dims)} needs {want}")
        total += length
    if total > MAX_EXTERNAL_BYTES:
        _fail(path, f"external data totals {total:,} bytes (limit {MAX_EXTERNAL_BYTES:,})")


def _initializer_bytes(path: str, t) -> int:
    """Declared bytes of an initializer, checked against the data it holds."""
    from onnx import TensorProto

    what = f"initializer {t.name!r}"
    if any(d < 0 for d in t.dims):
        _fail(path, f"{what} has a negative dimension {list(t.dims)}")
    want = _nbytes(t.dims, _bits(path, t.data_type, what))
    if t.data_location == TensorProto.EXTERNAL:
        return want  # checked against the file by _check_external
    held = len(t.raw_data) if t.raw_data else 8 * (
        len(t.float_data) + len(t.int32_data) + len(t.int64_data) + len(t.double_data) +
        len(t.uint64_data)) + sum(len(s) for s in t.string_data)
    if want > held + 64:
        _fail(path, f"{what} declares shape {list(t.dims)} ({want:,} bytes) but holds "
                    f"{held:,} bytes of data")
    return want


def _check_text(path: str, g) -> None:
    """Names must be text: protobuf hands invalid UTF-8 in a string field back as bytes."""
    def bad(x) -> bool:
        return not isinstance(x, str)

    for k, node in enumerate(g.node):
        if bad(node.name) or bad(node.op_type) or bad(node.domain) or \
                any(bad(n) for n in list(node.input) + list(node.output)):
            _fail(path, f"node {k} has a name or operator type that is not valid UTF-8")
    for what, items in (("input", g.input), ("output", g.output),
                        ("value_info", g.value_info), ("initializer", g.initializer)):
        for k, vi in enumerate(items):
            if bad(vi.name):
                _fail(path, f"{what} {k} has a name that is not valid UTF-8")


def check_onnx(path: str, model, input_shapes: dict | None = None, *,
               fold_sizes: bool = True) -> None:
    """Validate a parsed ``ModelProto`` (see the module docstring); `ModelLoadError` if bad.
    ``fold_sizes=False`` leaves out the sizes of what is computed from constants at load time
    (`read_onnx` checks them after `onnx_front.prepare_onnx` has folded what it can)."""
    g = model.graph
    if len(g.node) == 0:
        _fail(path, "the model has no operators (empty graph)")
    _check_text(path, g)
    inits = {}
    for t in g.initializer:
        if t.name in inits:
            _fail(path, f"duplicate tensor name {t.name!r} (two initializers)")
        inits[t.name] = _initializer_bytes(path, t)
    inputs = []
    seen_inputs = set()
    for vi in g.input:
        if vi.name in seen_inputs:
            _fail(path, f"duplicate tensor name {vi.name!r} (two graph inputs)")
        seen_inputs.add(vi.name)
        _value_dims(path, vi, f"input {vi.name!r}")
        if vi.name not in inits:
            inputs.append(vi)
    for name, dims in (input_shapes or {}).items():
        match = [vi for vi in inputs if vi.name == name]
        if not match:
            names = ", ".join(vi.name for vi in inputs) or "none"
            _fail(path, f"--input-shapes names {name!r}, which is not an input of the model "
                        f"(inputs: {names})")
        tt = match[0].type.tensor_type
        if tt.HasField("shape") and len(tt.shape.dim) != len(dims):
            _fail(path, f"--input-shapes gives {name!r} {len(dims)} dims; the model's input "
                        f"has rank {len(tt.shape.dim)}")
    _check_nodes(path, model, _inferred(path, model, input_shapes) if fold_sizes else None,
                 inits, seen_inputs)


def check_fold_sizes(path: str, model) -> None:
    """The size check of `check_onnx` on a model whose value_info holds inferred shapes."""
    g = model.graph
    info = {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)}
    _check_nodes(path, model, info, {t.name for t in g.initializer},
                 {vi.name for vi in g.input})


def _check_nodes(path: str, model, info, inits, seen_inputs) -> None:
    """Dangling inputs, duplicate names, outputs; with ``info`` (inferred value infos) also the
    sizes of the tensors computed from constants at load time."""
    import onnx

    g = model.graph

    def static(name: str) -> bool:
        vi = info.get(name)
        dims = _value_dims(path, vi, f"tensor {name!r}")[0] if vi is not None else None
        return dims is not None and None not in dims

    defined = set(inits) | seen_inputs
    const = set(inits)
    for k, node in enumerate(g.node):
        label = node.name or f"{node.op_type}_{k}"
        for name in node.input:
            if name and name not in defined:
                _fail(path, f"node {label!r} reads {name!r}, which nothing defines before it "
                            "(dangling input)")
        for name in node.output:
            if not name:
                continue
            if name in defined:
                _fail(path, f"duplicate tensor name {name!r} (defined twice; node {label!r})")
            defined.add(name)
        ins = [n for n in node.input if n]
        if info is None:
            continue
        if node.op_type in SHAPE_OPS:
            folded = bool(ins) and static(ins[0])
        else:
            folded = all(n in const for n in ins) and not any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                for a in node.attribute)
        if folded:
            const.update(n for n in node.output if n)
    for vi in g.output:
        if vi.name not in defined:
            _fail(path, f"graph output {vi.name!r} is not computed by any node")
        _value_dims(path, vi, f"output {vi.name!r}")
    for vi in g.value_info:
        _value_dims(path, vi, f"tensor {vi.name!r}")
    if info is None:
        return
    # Sizes of what the frontend computes at import time, from ONNX shape inference.
    for name in sorted(const - set(inits)):
        vi = info.get(name)
        dims, bits = _value_dims(path, vi, f"tensor {name!r}") if vi is not None \
            else (None, None)
        if dims is None or bits is None or None in dims:
            _fail(path, f"tensor {name!r} is computed from constants at load time but its "
                        "size is unknown; refusing to compute it")
        if _nbytes(dims, bits) > MAX_FOLD_BYTES:
            _fail(path, f"tensor {name!r} is computed from constants at load time and "
                        f"would take {_nbytes(dims, bits):,} bytes (limit "
                        f"{MAX_FOLD_BYTES:,})")


def _inferred(path: str, model, input_shapes: dict | None) -> dict:
    """name -> ValueInfo after ONNX shape inference (inputs overridden by ``input_shapes``)."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in m.graph.input:
        if vi.name in (input_shapes or {}):
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for v in input_shapes[vi.name]:
                dims.add().dim_value = int(v)
    try:
        m = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    except Exception as e:  # noqa: BLE001 - onnx raises several types
        lines = str(e).strip().splitlines()
        _fail(path, f"ONNX shape inference failed ({lines[0][:160] if lines else e})")
    return {vi.name: vi for vi in list(m.graph.input) + list(m.graph.value_info) +
            list(m.graph.output)}


def read_onnx(path: str, input_shapes: dict | None = None, *, check: bool = True):
    """The ``ModelProto`` in ``path`` with its external data, after the checks above."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model

    try:
        size = os.path.getsize(path)
    except OSError as e:
        _fail(path, e.strerror or str(e))
    if size > MAX_FILE_BYTES:
        _fail(path, f"file is {size:,} bytes, above protobuf's 2 GiB limit")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:  # noqa: BLE001 - protobuf raises several types
        lines = str(e).strip().splitlines()
        _fail(path, f"malformed ONNX file ({type(e).__name__}: "
                    f"{lines[0][:160] if lines else ''})")
    if not model.HasField("graph"):
        _fail(path, "malformed ONNX file (no graph)")
    _check_external(path, model)
    if check:
        check_onnx(path, model, input_shapes, fold_sizes=False)
    try:
        load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
    except Exception as e:  # noqa: BLE001
        _fail(path, f"cannot read external data ({type(e).__name__}: {e})")
    if check:
        from .onnx_front import prepare_onnx

        model = prepare_onnx(path, model, input_shapes)
        check_fold_sizes(path, model)
    return model

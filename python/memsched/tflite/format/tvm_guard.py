"""Checking an untrusted ``.tflite`` flatbuffer before TVM's frontend walks it.

A flatbuffer is read lazily and unverified: a corrupt file yields garbage vector lengths and
offsets, and TVM's frontend would loop over them, index out of range or allocate what a shape
claims. `check_tflite` walks the part of the model the frontend uses (subgraph 0, its tensors,
operators and the buffers they name) with the ``tflite`` package's accessors, bounding every
vector length by the file size first, and refuses: a missing ``TFL3`` identifier, no subgraph,
no operators, unknown or unsized dtypes (STRING, RESOURCE, VARIANT), negative or absurd dims,
tensor/opcode/buffer indices out of range, buffers reaching past the end of the file,
duplicate input names, and ``--input-shapes`` naming something that is not an input (or with
the wrong rank). Every problem is a `ModelLoadError` naming the file.
"""
from __future__ import annotations

from ...errors import ModelLoadError

# bits per element of the sized TFLite dtypes (tflite.TensorType)
DTYPE_BITS = {0: 32, 1: 16, 2: 32, 3: 8, 4: 64, 6: 8, 7: 16, 8: 64, 9: 8, 10: 64, 11: 128,
              12: 64, 15: 32, 16: 16, 17: 4, 18: 16}
DTYPE_NAMES = {5: "STRING", 13: "RESOURCE", 14: "VARIANT"}
MAX_TENSOR_BYTES = 1 << 60


def _fail(path: str, problem: str):
    raise ModelLoadError(f"cannot read model {path!r}: {problem}")


def _text(x) -> str:
    if x is None:
        return ""
    return x.decode("utf-8", "replace") if isinstance(x, (bytes, bytearray)) else str(x)


class Lean:
    """Plain attributes named as in the schema's object API (``ModelT``, ``SubGraphT``,
    ``TensorT``, ``OperatorT``, ``OperatorCodeT``, ``BufferT``), holding only what a graph
    reader needs: `check_tflite` fills them while it validates (``lean=True``), much faster
    than unpacking the whole object tree."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def check_tflite(path: str, buf: bytes, input_shapes: dict | None = None, schema=None,
                 lean: bool = False):
    """Validate the flatbuffer ``buf`` read from ``path``; returns the ``tflite.Model`` (the
    root ``Model`` of ``schema``, a flatbuffer schema module with the same accessors such as
    LiteRT's ``schema_py_generated``, when given), or with ``lean=True`` a `Lean` model
    (``subgraphs[0]`` only, operator codes, buffers) read during the walk."""
    if schema is None:
        import tflite
    else:
        tflite = schema

    if len(buf) < 8 or buf[4:8] != b"TFL3":
        _fail(path, "not a .tflite flatbuffer (missing TFL3 identifier)")
    limit = len(buf) // 4  # a vector of n 4-byte entries needs 4n bytes of the file

    def length(n: int, what: str) -> int:
        if not 0 <= n <= limit:
            _fail(path, f"corrupt flatbuffer ({what} claims {n} entries)")
        return n

    try:
        model = tflite.Model.GetRootAs(buf, 0)
        if length(model.SubgraphsLength(), "subgraphs") < 1:
            _fail(path, "the model has no subgraph")
        sg = model.Subgraphs(0)
        n_tensors = length(sg.TensorsLength(), "tensors")
        n_ops = length(sg.OperatorsLength(), "operators")
        n_codes = length(model.OperatorCodesLength(), "operator codes")
        n_buffers = length(model.BuffersLength(), "buffers")
        if n_ops == 0:
            _fail(path, "the model has no operators (empty graph)")

        def index(t: int, what: str, optional: bool = False) -> int:
            if optional and t == -1:
                return t
            if not 0 <= t < n_tensors:
                _fail(path, f"{what} refers to tensor {t}, but there are {n_tensors}")
            return t

        shapes = {}
        lean_tensors = []
        for i in range(n_tensors):
            t = sg.Tensors(i)
            tname = t.Name()
            what = f"tensor {_text(tname) or i!r}"
            code = t.Type()
            if code not in DTYPE_BITS:
                name = DTYPE_NAMES.get(code)
                _fail(path, f"{what} has unsupported dtype {name}" if name else
                      f"{what} has unknown dtype code {code}")
            dims = [int(t.Shape(j)) for j in range(length(t.ShapeLength(), f"{what} shape"))]
            if any(d < 0 for d in dims):
                _fail(path, f"{what} has negative dimension in shape {dims}")
            n = 1
            for d in dims:
                n *= d
            if (n * DTYPE_BITS[code] + 7) // 8 > MAX_TENSOR_BYTES:
                _fail(path, f"{what} has shape {dims}, more than 2**60 bytes (absurd shape)")
            b = t.Buffer()
            if not 0 <= b < n_buffers:
                _fail(path, f"{what} uses buffer {b}, but there are {n_buffers}")
            shapes[i] = dims
            if lean:
                lean_tensors.append(Lean(shape=dims, type=code, buffer=b, name=tname))
        lean_buffers = []
        for i in range(n_buffers):
            bf = model.Buffers(i)
            data = bf.DataLength() if not bf.DataIsNone() else 0  # bytes, not 4-byte entries
            if not 0 <= data <= len(buf):
                _fail(path, f"buffer {i} claims {data} bytes")
            off, size = int(bf.Offset()), int(bf.Size())
            if off > 1 and size and off + size > len(buf):
                _fail(path, f"buffer {i} reaches past the end of the file")
            if lean:
                lean_buffers.append(Lean(data=bf.DataAsNumpy() if data else None, offset=off,
                                         size=size))
        inputs = [index(int(sg.Inputs(i)), "subgraph input")
                  for i in range(length(sg.InputsLength(), "inputs"))]
        outputs = [index(int(sg.Outputs(i)), "subgraph output")
                   for i in range(length(sg.OutputsLength(), "outputs"))]
        lean_ops = []
        for v in range(n_ops):
            op = sg.Operators(v)
            if not 0 <= op.OpcodeIndex() < n_codes:
                _fail(path, f"operator {v} has opcode index {op.OpcodeIndex()}, but there are "
                            f"{n_codes} opcodes")
            ins = [index(int(op.Inputs(j)), f"operator {v} input", optional=True)
                   for j in range(length(op.InputsLength(), f"operator {v} inputs"))]
            outs = [index(int(op.Outputs(j)), f"operator {v} output", optional=True)
                    for j in range(length(op.OutputsLength(), f"operator {v} outputs"))]
            if lean:
                lean_ops.append(Lean(opcodeIndex=op.OpcodeIndex(), inputs=ins, outputs=outs))
        lean_codes = []
        if lean:
            for i in range(n_codes):
                c = model.OperatorCodes(i)
                lean_codes.append(Lean(builtinCode=c.BuiltinCode(),
                                       deprecatedBuiltinCode=c.DeprecatedBuiltinCode(),
                                       customCode=c.CustomCode()))
        names = {}
        for t in inputs:
            name = _text(sg.Tensors(t).Name())
            if name in names and names[name] != t:
                _fail(path, f"duplicate tensor name {name!r} (two subgraph inputs)")
            names[name] = t
    except ModelLoadError:
        raise
    except Exception as e:  # noqa: BLE001 - unverified flatbuffers raise anything
        _fail(path, f"corrupt flatbuffer ({type(e).__name__})")
    for name, dims in (input_shapes or {}).items():
        if name not in names:
            _fail(path, f"--input-shapes names {name!r}, which is not an input of the model "
                        f"(inputs: {', '.join(names) or 'none'})")
        if len(shapes[names[name]]) != len(dims):
            _fail(path, f"--input-shapes gives {name!r} {len(dims)} dims; the model's input "
                        f"has rank {len(shapes[names[name]])}")
    if lean:
        sub = Lean(tensors=lean_tensors, operators=lean_ops, inputs=inputs, outputs=outputs)
        return Lean(subgraphs=[sub], operatorCodes=lean_codes, buffers=lean_buffers)
    return model

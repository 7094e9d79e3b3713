"""Loading a model given on the command line: a file path or ``example:NAME``.

Formats: ``.onnx`` (TVM's ONNX frontend; the op graph for analysis is read from the ONNX graph
itself), ``.tflite`` (TVM's TFLite frontend with the ``tflite`` parser), ``.pt2`` (a saved
``torch.export`` program, TVM's torch frontend) and ``example:NAME``
(`memsched.generators.examples`).

Model files are untrusted. Nothing from a file is executed (`importers.pt2` reads ``.pt2``
archives without unpickling); each format is validated before a frontend sees it
(`importers.onnx_file`, `tflite.format.tvm_guard`); tensors a frontend would compute at load time
(constant folding) are bounded by `MAX_FOLD_BYTES`. Every failure, including anything a TVM
frontend raises, is a `ModelLoadError` (a ``ValueError``) whose one-line message names the file
and the problem.
"""
from __future__ import annotations

import os

from ..errors import ModelLoadError, UnsupportedModelError
from ..graph import OpGraph
from ..limits import MAX_DIM, MAX_FOLD_BYTES, MAX_TFLITE_BYTES

# No .json (tvm.ir.save_json): in TVM 0.27 it segfaults on modules holding constants.
FORMATS = (".onnx", ".tflite", ".pt2")


def parse_shapes(spec: str | None) -> dict[str, list[int]]:
    """``"x:1x3x224x224,y:1x10"`` -> ``{"x": [1, 3, 224, 224], "y": [1, 10]}``."""
    shapes: dict[str, list[int]] = {}
    if spec is None:
        return shapes
    if not spec.strip():
        raise ModelLoadError("bad --input-shapes: empty; expected NAME:1x3x224x224[,NAME:...]")
    for part in spec.split(","):
        name, sep, dims = part.strip().rpartition(":")
        try:
            if not sep or not name.strip() or not dims:
                raise ValueError
            shape = [int(d) for d in dims.lower().split("x")]
        except ValueError:
            raise ModelLoadError(f"bad --input-shapes entry {part!r}; expected "
                                 "NAME:1x3x224x224") from None
        if any(not 1 <= d <= MAX_DIM for d in shape):
            raise ModelLoadError(f"bad --input-shapes entry {part!r}: dimensions must be "
                                 f"integers from 1 to {MAX_DIM}")
        if name in shapes:
            raise ModelLoadError(f"bad --input-shapes: {name!r} is given twice")
        shapes[name] = shape
    return shapes


def _check_file(path: str) -> str:
    if path.startswith("example:"):
        return "example"
    ext = os.path.splitext(path)[1].lower()
    if not os.path.exists(path):
        raise ModelLoadError(f"cannot read model {path!r}: no such file")
    if not os.path.isfile(path):
        raise ModelLoadError(f"cannot read model {path!r}: not a regular file")
    if ext not in FORMATS:
        raise ModelLoadError(f"cannot read model {path!r}: unknown format {ext or '(none)'!r}; "
                             f"expected one of {', '.join(FORMATS)} or example:NAME")
    if not os.access(path, os.R_OK):
        raise ModelLoadError(f"cannot read model {path!r}: permission denied")
    return ext


def _no_shapes(path: str, input_shapes, why: str) -> None:
    if input_shapes:
        raise ModelLoadError(f"cannot use --input-shapes with {path!r}: {why}")


_DATA_MOVEMENT = ("relax.reshape", "relax.permute_dims")


def _is_constant(e, consts) -> bool:
    """A constant, a shape, a tuple of those, or a variable in ``consts`` (bound to one)."""
    import tvm
    from tvm import relax

    if isinstance(e, (tvm.ir.expr.Constant, relax.ShapeExpr)):
        return True
    if isinstance(e, relax.Tuple):
        return all(_is_constant(f, consts) for f in e.fields)
    return isinstance(e, tvm.ir.Var) and e in consts


def _fold_data_movement(mod):
    """``mod`` with every ``reshape`` / ``permute_dims`` of a constant bound to its value,
    computed with numpy (exact: data movement only). These are all the constant computations
    TVM's ONNX frontend leaves in the zoo networks (bias reshapes: 213 in AmoebaNet-A CIFAR), and
    ``FoldConstant`` builds one LLVM kernel for each: 7.8 s -> 1.3 s of AmoebaNet's import,
    1.85 -> 0.2 s of ResNet-50's. ``FoldConstant`` still runs afterwards when anything else is
    constant (`_has_constant_computation`), else `_inline_constants` does what it would have
    done: the same module (structurally equal on the 14 zoo files where FoldConstant's own
    output is structurally equal to itself across two runs, and in tests/test_onnx_cli.py)."""
    import numpy as np
    import tvm
    from tvm import relax

    changed = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        values: dict = {}
        blocks, touched = [], False
        for block in func.body.blocks:
            bindings = []
            for b in block.bindings:
                v = getattr(b, "value", None)
                arr = None
                if isinstance(v, tvm.ir.Call) and getattr(v.op, "name", None) in _DATA_MOVEMENT \
                        and v.args and (isinstance(v.args[0], tvm.ir.expr.Constant)
                                        or v.args[0] in values):
                    x = values[v.args[0]] if v.args[0] in values else v.args[0].value.numpy()
                    try:
                        if v.op.name == "relax.reshape":
                            if not isinstance(v.args[1], relax.ShapeExpr):
                                raise TypeError
                            arr = x.reshape([int(d) for d in v.args[1].values])
                        else:
                            axes = v.attrs.axes
                            arr = np.transpose(x, None if axes is None else
                                               [int(a) for a in axes])
                    except (TypeError, ValueError):  # symbolic shape or axes: leave it
                        arr = None
                if arr is None:
                    bindings.append(b)
                    continue
                arr = np.ascontiguousarray(arr)
                values[b.var] = arr
                bindings.append(relax.VarBinding(b.var, relax.const(arr, str(arr.dtype))))
                touched = True
            blocks.append(relax.DataflowBlock(bindings, block.span)
                          if isinstance(block, relax.DataflowBlock)
                          else relax.BindingBlock(bindings, block.span))
        if touched:
            changed[gv] = relax.Function(func.params, relax.SeqExpr(blocks, func.body.body),
                                         func.ret_ty, func.is_pure, func.attrs, func.span)
    if not changed:
        return mod
    mod = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    for gv, func in changed.items():
        mod[gv] = func
    return mod


def _inline_constants(mod):
    """What ``FoldConstant`` does to a module it has nothing to compute in: every variable bound
    to a constant replaced by the constant at its uses, unused bindings dropped (it legalizes
    every op to find that out: ~1.3 s on AmoebaNet-A CIFAR after `_fold_data_movement`)."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class _Inline(relax.PyExprMutator):
        def __init__(self, m):
            super().__init__(m)
            self.values = {}

        def visit_var_binding_(self, binding):
            if isinstance(binding.value, tvm.ir.expr.Constant):
                self.values[binding.var] = binding.value
                return
            super().visit_var_binding_(binding)

        def visit_var_(self, var):
            return self.values.get(var, var)

        def visit_dataflow_var_(self, var):
            return self.values.get(var, var)

    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            out[gv] = _Inline(mod).visit_expr(func)
    return relax.transform.DeadCodeElimination()(out)


def _has_constant_computation(mod) -> bool:
    """Whether ``FoldConstant`` has anything to compute: a binding of a call, tuple or tuple
    item on constants only."""
    import tvm
    from tvm import relax

    for func in mod.functions.values():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        consts = set()
        for block in func.body.blocks:
            for b in block.bindings:
                v = getattr(b, "value", None)
                if isinstance(v, tvm.ir.expr.Constant):
                    consts.add(b.var)
                elif isinstance(v, tvm.ir.Call):
                    if len(v.args) and all(_is_constant(a, consts) for a in v.args):
                        return True
                elif isinstance(v, relax.Tuple):
                    if len(v.fields) and _is_constant(v, consts):
                        return True
                elif isinstance(v, relax.TupleGetItem) and _is_constant(v.tuple_value, consts):
                    return True
    return False


def _check_folding(mod, path: str) -> None:
    """Refuse a module whose constant folding would compute a tensor above `MAX_FOLD_BYTES`
    (FoldConstant evaluates every binding whose arguments are all constants)."""
    import tvm
    from tvm import relax

    for gv, func in mod.functions.items():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        consts = set()
        for block in func.body.blocks:
            for b in block.bindings:
                v = b.value
                if not isinstance(v, tvm.ir.Call) or not all(_is_constant(a, consts)
                                                             for a in v.args):
                    continue
                consts.add(b.var)
                ty = b.var.ty
                if not isinstance(ty, relax.TensorType) or \
                        not isinstance(ty.shape, relax.ShapeExpr):
                    continue
                dims = [d.value for d in ty.shape.values if hasattr(d, "value")]
                if len(dims) != len(ty.shape.values):
                    continue
                n = 1
                for d in dims:
                    n *= max(int(d), 0)
                dt = tvm.DataType(ty.dtype)
                nbytes = (n * dt.bits * dt.lanes + 7) // 8
                if nbytes > MAX_FOLD_BYTES:
                    raise ModelLoadError(
                        f"cannot read model {path!r}: {b.var.name!r} would be computed from "
                        f"constants at load time with {nbytes:,} bytes (limit "
                        f"{MAX_FOLD_BYTES:,})")


def _has_ops(mod) -> bool:
    from tvm import relax

    for _, func in mod.functions.items():
        if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr) and \
                any(len(b.bindings) for b in func.body.blocks):
            return True
    return False


def load_relax(path: str, input_shapes: dict | None = None):
    """A Relax IRModule for the model (constants folded, parameters bound as constants)."""
    from tvm import relax

    kind = _check_file(path)
    try:
        if kind == "example":
            from ..generators.examples import example_model

            _no_shapes(path, input_shapes, "example models have fixed shapes")
            try:
                return example_model(path.split(":", 1)[1])
            except ValueError as e:
                raise ModelLoadError(str(e)) from None
        if kind == ".onnx":
            from tvm.relax.frontend.onnx import from_onnx

            from .onnx_file import read_onnx

            model = read_onnx(path, input_shapes)
            mod = from_onnx(model, shape_dict=input_shapes or None, keep_params_in_input=False)
        elif kind == ".tflite":
            from tvm.relax.frontend.tflite import from_tflite

            from ..tflite.format.tvm_guard import check_tflite

            if os.path.getsize(path) > MAX_TFLITE_BYTES:
                raise ModelLoadError(f"cannot read model {path!r}: larger than the 2 GiB "
                                     "flatbuffer limit")
            with open(path, "rb") as f:
                buf = f.read()
            tfl = check_tflite(path, buf, input_shapes)
            from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter

            from ..tflite.tvm_prepare import prepare_for_tvm

            # float16/int8 weight DEQUANTIZE, SQUEEZE/EXPAND_DIMS, quantized PAD/STRIDED_SLICE,
            # custom ops: rewritten exactly or refused by name (tflite.tvm_prepare)
            fixed = prepare_for_tvm(path, buf, getattr(
                OperatorConverter, "_SUPPORTED_QUANTIZED_OPS", frozenset()))
            if fixed is not buf:
                tfl = check_tflite(path, fixed, input_shapes)
            mod = from_tflite(tfl, input_shapes or None, None)
        else:  # .pt2
            from tvm.relax.frontend.torch import from_exported_program

            from .pt2 import load_exported_program

            _no_shapes(path, input_shapes, "a torch.export program fixes its input shapes "
                                           "at export time")
            ep = load_exported_program(path)  # never torch.export.load: it unpickles
            mod = from_exported_program(ep, keep_params_as_input=False,
                                        unwrap_unit_return_tuple=True)
        _check_folding(mod, path)
        mod = _fold_data_movement(mod)
        mod = relax.transform.FoldConstant()(mod) if _has_constant_computation(mod) else \
            _inline_constants(mod)
        if not _has_ops(mod):
            raise ModelLoadError(f"cannot read model {path!r}: the model has no operators")
        return mod
    except (ModelLoadError, UnsupportedModelError):
        raise
    except RecursionError:
        failure = "nested too deeply"
    except Exception as e:  # noqa: BLE001 - frontends raise anything; name the file
        msg = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
        if type(e).__name__ == "OpNotImplemented":  # a frontend's list of ops: keep every line
            text = "; ".join(msg)[:600]
        else:
            text = msg[-1][:300] if msg else ""
        failure = f"{type(e).__name__}: {text}"
    # A frontend that raised leaves its half-built BlockBuilder in reference cycles; collected
    # at exit it logs "BlockBuilder destroyed with remaining blocks" after the error line.
    # Collect it now, while the caller (the CLI) still holds TVM's log back.
    import gc

    gc.collect()
    raise ModelLoadError(f"cannot read model {path!r}: {failure}")


def load_graph(path: str, input_shapes: dict | None = None) -> OpGraph:
    """The `OpGraph` of a model: ONNX files are read directly (`importers.onnx`), .tflite
    files from the flatbuffer as the TFLite interpreter sees them
    (`tflite.format.read.analysis_graph`: the file's dtypes, its in-place ops); others
    through Relax."""
    kind = _check_file(path)
    if kind == ".onnx":
        from .onnx import from_onnx
        from .onnx_file import read_onnx

        model = read_onnx(path, input_shapes)
        graph = from_onnx(model, input_shapes, name=os.path.basename(path), check=False)
    elif kind == ".tflite":  # read from the flatbuffer: the file's dtypes, no TVM
        from ..tflite.format.read import load_tflite_graph

        graph = load_tflite_graph(path, input_shapes)
    else:
        from .relax import from_relax

        graph = from_relax(load_relax(path, input_shapes))
    if len(graph) == 0:
        raise ModelLoadError(f"cannot read model {path!r}: the model has no operators")
    return graph

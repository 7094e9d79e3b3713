"""Loading a model given on the command line: a file path or ``example:NAME``.

Formats: ``.onnx`` (TVM's ONNX frontend; the op graph for analysis is read from the ONNX graph
itself), ``.tflite`` (TVM's TFLite frontend with the ``tflite`` parser), ``.pt2`` (a saved
``torch.export`` program, TVM's torch frontend) and ``example:NAME`` (`memsched.examples`). Every failure is a
`ModelLoadError` naming the file and the problem.
"""
from __future__ import annotations

import os

from ..graph import OpGraph
from .relax import UnsupportedModelError

# No .json (tvm.ir.save_json): in TVM 0.27 it segfaults on modules holding constants.
FORMATS = (".onnx", ".tflite", ".pt2")


class ModelLoadError(ValueError):
    """A model file that cannot be read or converted; the message names file and problem."""


def parse_shapes(spec: str | None) -> dict[str, list[int]]:
    """``"x:1x3x224x224,y:1x10"`` -> ``{"x": [1, 3, 224, 224], "y": [1, 10]}``."""
    shapes: dict[str, list[int]] = {}
    if not spec:
        return shapes
    for part in spec.split(","):
        name, sep, dims = part.strip().rpartition(":")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = [int(d) for d in dims.lower().split("x")]
        except ValueError:
            raise ModelLoadError(f"bad --input-shapes entry {part!r}; expected NAME:1x3x224x224") \
                from None
    return shapes


def _check_file(path: str) -> str:
    if path.startswith("example:"):
        return "example"
    ext = os.path.splitext(path)[1].lower()
    if not os.path.isfile(path):
        raise ModelLoadError(f"cannot read model {path!r}: no such file")
    if ext not in FORMATS:
        raise ModelLoadError(f"cannot read model {path!r}: unknown format {ext or '(none)'!r}; "
                             f"expected one of {', '.join(FORMATS)} or example:NAME")
    return ext


def load_relax(path: str, input_shapes: dict | None = None):
    """A Relax IRModule for the model (constants folded, parameters bound as constants)."""
    from tvm import relax

    kind = _check_file(path)
    try:
        if kind == "example":
            from ..examples import example_model

            return example_model(path.split(":", 1)[1])
        if kind == ".onnx":
            import onnx

            from tvm.relax.frontend.onnx import from_onnx

            model = onnx.load(path)
            mod = from_onnx(model, shape_dict=input_shapes or None, keep_params_in_input=False)
        elif kind == ".tflite":
            import tflite
            from tvm.relax.frontend.tflite import from_tflite

            with open(path, "rb") as f:
                buf = f.read()
            tfl = tflite.Model.GetRootAsModel(buf, 0)
            mod = from_tflite(tfl, input_shapes or None, None)
        else:  # .pt2
            from tvm.relax.frontend.torch import from_exported_program

            from .pt2 import load_exported_program

            ep = load_exported_program(path)  # never torch.export.load: it unpickles
            mod = from_exported_program(ep, keep_params_as_input=False,
                                        unwrap_unit_return_tuple=True)
        return relax.transform.FoldConstant()(mod)
    except (ModelLoadError, UnsupportedModelError):
        raise
    except Exception as e:  # noqa: BLE001 - frontends raise anything; name the file
        msg = str(e).strip().splitlines()
        raise ModelLoadError(f"cannot read model {path!r}: {type(e).__name__}: "
                             f"{msg[-1] if msg else ''}") from None


def load_graph(path: str, input_shapes: dict | None = None) -> OpGraph:
    """The `OpGraph` of a model: ONNX files are read directly; others through Relax."""
    kind = _check_file(path)
    if kind == ".onnx":
        from .onnx import from_onnx

        try:
            import onnx

            model = onnx.load(path)
        except Exception as e:  # noqa: BLE001
            raise ModelLoadError(f"cannot read model {path!r}: malformed ONNX file ({e})") \
                from None
        return from_onnx(model, input_shapes, name=os.path.basename(path))
    from .relax import from_relax

    return from_relax(load_relax(path, input_shapes))

"""The ONNX front door: static shapes and folded constants before any importer sees a model.

ONNX files from the classic ``torch.onnx.export`` path compute reshape targets at run time
(``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` for a channel shuffle or a flatten),
often carry a symbolic batch dimension (``unk__0``) and no ``value_info``; exporters such as
Paddle2ONNX leave tensors of unknown rank. Plain ONNX shape inference cannot size those tensors,
so `prepare_onnx` does, in order:

1. pins every graph input to its ``--input-shapes`` entry; an input still holding a symbolic or
   missing dimension is an error naming the input and the ``--input-shapes`` entry to give;
2. drops stale ``value_info`` / output dims that are not static (they were inferred by the
   exporter for the symbolic shapes);
3. iterates to a fixed point: ONNX shape inference (``onnx.shape_inference``, with data
   propagation), then constant folding of every node whose inputs are all constants (or the
   ``Shape``/``Size`` of a static tensor) *and* whose outputs have a known size of at most
   `limits.MAX_FOLD_BYTES` -- so a tiny file cannot make the importer allocate terabytes;
4. refuses, in one line naming the tensor and the fix, a model with a tensor still not static.

Constant folding evaluates the constant subgraph with ONNX's own **reference implementation**
(``onnx.reference``, numpy; ~20 ms to import) in one pass in file order, so Shape arithmetic
chains fold at once. When it cannot evaluate a node (an op it does not implement, a custom
domain) the fold falls back to **onnxslim** (its bundled ONNX-GraphSurgeon ``fold_constants``,
which evaluates with ONNX Runtime; ~0.3 s of import and graph conversion). onnxslim was chosen
over onnxsim because it is a small pure-Python wheel (``py3-none-any``, 0.25 MB, MIT) that
installs wherever TVM does, while onnxsim 0.8 is a 9.7 MB native wheel that requires Python >=
3.11 (this package supports 3.10); its folding can be called on its own (no fusions, so the op
graph stays one op per ONNX node) with a per-node exclusion hook (our size bound).
Every constant computation is folded, also in fully static files: ops on parameters only
(RandWire's ``Identity -> Sigmoid -> Gather`` edge weights, ``Constant`` nodes) would otherwise
stay in the op graph as sources that may run at any time, hiding every cut point of the
schedule, and TVM's ``FoldConstant`` would build one TIR kernel per such op at import (35 s of
the 55 s `analyze` took on RandWire-WS-1 before).
"""
from __future__ import annotations

import contextlib

from ..graph import UnsupportedModelError
from ..errors import ModelLoadError
from ..limits import MAX_FOLD_BYTES

# bits per element of the fixed-size ONNX dtypes (STRING and UNDEFINED have none)
DTYPE_BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32,
              13: 64, 14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4,
              23: 4, 24: 8, 25: 2, 26: 2, 27: 6, 28: 6}
# ops whose output TVM's ONNX frontend computes at import when the inputs are static
SHAPE_OPS = {"Shape", "Size"}
MAX_ROUNDS = 8


class DynamicShapeError(ModelLoadError, UnsupportedModelError):
    """A model whose shapes are not static after the front door (both error kinds: a file that
    cannot be loaded, a model that cannot be scheduled)."""


def _fail(path: str, problem: str):
    raise ModelLoadError(f"cannot read model {path!r}: {problem}")


def _dynamic(path: str, problem: str):
    raise DynamicShapeError(f"cannot read model {path!r}: dynamic shape: {problem}")


def _dims(vi):
    """Static dims of a ValueInfo; None for unknown rank; entries None where not static."""
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None
            for d in vi.type.tensor_type.shape.dim]


def _dim_text(vi) -> str:
    return "x".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?")
                    for d in vi.type.tensor_type.shape.dim)


def _suggest(vi) -> str:
    """``NAME:1x3x224x224`` for an input: static dims as they are, a symbolic batch (dim 0) as
    1, other symbolic dims as ``<name>`` placeholders for the sizes the user will run."""
    dims = []
    for k, d in enumerate(vi.type.tensor_type.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(str(d.dim_value))
        else:
            dims.append("1" if k == 0 else f"<{d.dim_param or 'size'}>")
    return f"{vi.name}:{'x'.join(dims)}"


def _pin_inputs(path: str, model, input_shapes: dict) -> bool:
    """Pins inputs to ``input_shapes``; True when a static dim was changed."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    changed = False
    for vi in g.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        if vi.name in input_shapes:
            old = _dims(vi)
            new = [int(v) for v in input_shapes[vi.name]]
            if old is not None and any(o is not None and o != n for o, n in zip(old, new)):
                changed = True
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for v in new:
                dims.add().dim_value = v
            continue
        dims = _dims(vi)
        if dims is None:
            _dynamic(path, f"input {vi.name!r} has unknown rank; give its shape with "
                        f"--input-shapes {vi.name}:1x3x224x224 (its real dims)")
        bad = [k for k, d in enumerate(dims) if d is None]
        if bad:
            d = vi.type.tensor_type.shape.dim[bad[0]]
            sym = d.dim_param or "?"
            _dynamic(path, f"input {vi.name!r} has symbolic dimension {sym!r} (dim {bad[0]} of "
                        f"{_dim_text(vi)}); pin it with --input-shapes {_suggest(vi)}")
    return changed


def _clear_dynamic(model, everything: bool) -> None:
    """Drops value_info that is not static (or all of it) and non-static output dims."""
    g = model.graph
    keep = [vi for vi in g.value_info if not everything and _dims(vi) is not None
            and None not in _dims(vi)]
    del g.value_info[:]
    g.value_info.extend(keep)
    for vi in g.output:
        dims = _dims(vi)
        if dims is not None and (everything or None in dims):
            vi.type.tensor_type.ClearField("shape")


SKELETON_BYTES = 4096  # initializers above this are only dims+dtype to shape inference


def _infer(path: str, model):
    """``model`` with value_info and outputs from ONNX shape inference (data propagation on).
    Inference runs on a skeleton: initializers above `SKELETON_BYTES` (weights; shape tensors
    are tiny) become typed graph inputs, so the weights are not serialized for it."""
    import onnx

    g = model.graph
    sk = onnx.ModelProto()
    sk.ir_version = max(model.ir_version, 4)
    sk.opset_import.extend(model.opset_import)
    sk.functions.extend(model.functions)
    sg = sk.graph
    sg.name = g.name
    sg.node.extend(g.node)
    sg.input.extend(g.input)
    sg.output.extend(g.output)
    sg.value_info.extend(g.value_info)
    declared = {vi.name for vi in g.input}
    for t in g.initializer:
        if t.ByteSize() <= SKELETON_BYTES:
            sg.initializer.append(t)
        elif t.name not in declared:
            sg.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type,
                                                               list(t.dims)))
    try:
        sk = onnx.shape_inference.infer_shapes(sk, strict_mode=False, data_prop=True)
    except Exception as e:  # noqa: BLE001 - onnx raises several types
        lines = str(e).strip().splitlines()
        _fail(path, f"ONNX shape inference failed ({lines[0][:160] if lines else e})")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.value_info[:]
    out.graph.value_info.extend(sk.graph.value_info)
    del out.graph.output[:]
    out.graph.output.extend(sk.graph.output)
    return out


def _info(model) -> dict:
    g = model.graph
    return {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output)}


def _nbytes(vi):
    dims = _dims(vi)
    if dims is None or None in dims:
        return None
    bits = DTYPE_BITS.get(vi.type.tensor_type.elem_type)
    if bits is None:
        return None
    n = 1
    for d in dims:
        n *= d
    return (n * bits + 7) // 8


def _static(vi) -> bool:
    dims = _dims(vi)
    return dims is not None and None not in dims


def _foldable(model, info) -> tuple[set, bool]:
    """(names of node outputs constant folding may compute, whether any tensor is unsized).

    A node is folded when every input is constant (an initializer, a ``Constant`` output or
    something folded) -- or it is ``Shape``/``Size`` of a static tensor -- and every output has
    a known size within `MAX_FOLD_BYTES`. ``Constant`` nodes alone are not counted."""
    import onnx

    g = model.graph
    const = {t.name for t in g.initializer}
    fold: set[str] = set()
    dynamic = False
    for node in g.node:
        ins = [n for n in node.input if n]
        outs = [n for n in node.output if n]
        if node.op_type in SHAPE_OPS:
            ok = bool(ins) and ins[0] in info and _static(info[ins[0]])
        else:
            ok = all(n in const for n in ins) and not any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                for a in node.attribute)
        sized = [info.get(o) is not None and _nbytes(info[o]) is not None for o in outs]
        if not all(sized):
            dynamic = True
        if ok and all(sized) and all(_nbytes(info[o]) <= MAX_FOLD_BYTES for o in outs):
            const.update(outs)
            if node.op_type != "Constant":
                fold.update(outs)
    return fold, dynamic


_GS_MODULES: dict = {}


@contextlib.contextmanager
def _graphsurgeon():
    """onnxslim's bundled ONNX-GraphSurgeon, without running ``onnxslim/__init__`` (which
    imports its CLI, its symbolic shape inference and sympy: ~0.9 s that folding never uses;
    GraphSurgeon imports nothing else from onnxslim). While the block runs, ``onnxslim`` and
    ``onnxslim.third_party`` are plain package stubs in ``sys.modules`` (GraphSurgeon imports
    its own submodules lazily); afterwards they and GraphSurgeon's modules are taken out again
    (kept here for the next fold), so a later ``import onnxslim`` loads the real package. When
    the real package is already imported it is used as it is."""
    import importlib
    import importlib.util
    import os
    import sys
    import types

    name = "onnxslim.third_party.onnx_graphsurgeon"
    if "onnxslim" in sys.modules and not getattr(sys.modules["onnxslim"], "_memsched_stub",
                                                 False):
        yield importlib.import_module(name)
        return
    if not _GS_MODULES:
        spec = importlib.util.find_spec("onnxslim")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("onnxslim is not installed (pip install onnxslim)")
        root = list(spec.submodule_search_locations)[0]
        for mod, path in (("onnxslim", root),
                          ("onnxslim.third_party", os.path.join(root, "third_party"))):
            stub = types.ModuleType(mod)
            stub.__path__ = [path]
            stub._memsched_stub = True
            _GS_MODULES[mod] = stub
    sys.modules.update(_GS_MODULES)
    try:
        yield importlib.import_module(name)
    finally:
        for mod in [m for m in sys.modules if m == "onnxslim" or m.startswith("onnxslim.")]:
            _GS_MODULES[mod] = sys.modules.pop(mod)


def _fold(model, fold: set):
    """Folds the nodes whose outputs are in ``fold`` with onnxslim (ONNX-GraphSurgeon)."""
    import onnxruntime as ort

    ort.set_default_logger_severity(4)  # no ORT warnings on the terminal
    with _graphsurgeon() as gs, gs.logger.G_LOGGER.suppress():
        graph = gs.import_onnx(model)
        graph.toposort()

        def exclude(node) -> bool:
            return not all(t.name in fold for t in node.outputs if t.name)

        graph.fold_constants(size_threshold=MAX_FOLD_BYTES, should_exclude_node=exclude,
                             flatten_subgraphs=False, recurse_subgraphs=False,
                             recurse_functions=False)
        graph.cleanup(remove_unused_graph_inputs=False).toposort()
        out = gs.export_onnx(graph, do_type_check=False)
    # GraphSurgeon's toposort regroups nodes: put the kept ones back in file order (the input
    # order memsched reports is the file's)
    pos = {o: k for k, n in enumerate(model.graph.node) for o in n.output if o}
    nodes = sorted(out.graph.node, key=lambda n: min(
        (pos.get(o, len(pos)) for o in n.output if o), default=len(pos)))
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    # keep what GraphSurgeon does not carry over
    out.ir_version = model.ir_version
    del out.opset_import[:]
    out.opset_import.extend(model.opset_import)
    out.producer_name = model.producer_name
    return out


def _fold_reference(model, info, fold: set):
    """Folds the nodes whose outputs are in ``fold`` with ONNX's own reference implementation
    (``onnx.reference``: numpy, imported in ~20 ms, where ONNX Runtime plus GraphSurgeon cost
    ~0.3 s of whole-process time). One pass in file order (ONNX graphs are topologically
    sorted), so a ``Shape -> Gather -> Unsqueeze -> Concat`` chain folds at once. Returns the
    new model, or None when a node cannot be evaluated here (an op the reference does not
    implement, a custom domain): the caller then folds with onnxslim."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    g = model.graph
    opset = {o.domain or "": o.version for o in model.opset_import}
    inits = {t.name: t for t in g.initializer}
    outputs = {o.name for o in g.output}
    values: dict = {}

    def value(name):
        if name not in values:
            values[name] = numpy_helper.to_array(inits[name])
        return values[name]

    graph = onnx.GraphProto()  # the folded nodes, run by one evaluator
    feeds, needed, kept = {}, set(), []
    for node in g.node:
        outs = [o for o in node.output if o]
        if node.op_type == "Constant" and (node.domain or "") == "" and outs:
            graph.node.append(node)  # becomes an initializer, as in GraphSurgeon's fold
            needed.update(outs)
            continue
        if not outs or not all(o in fold for o in outs) or outputs.intersection(outs):
            kept.append(node)
            continue
        if (node.domain or "") != "":
            return None
        if node.op_type in SHAPE_OPS:
            dims = _dims(info[node.input[0]])
            if node.op_type == "Size":
                feeds[outs[0]] = np.array(int(np.prod(dims, dtype=np.int64)), np.int64)
            else:
                attrs = {a.name: a.i for a in node.attribute}
                start, end = attrs.get("start", 0), attrs.get("end", len(dims))
                feeds[outs[0]] = np.array(dims[start:end] if "end" in attrs else dims[start:],
                                          np.int64)
            needed.update(outs)
            continue
        for n in node.input:
            if n and n in inits and n not in feeds:
                feeds[n] = value(n)
        graph.node.append(node)
        needed.update(outs)
    if not needed:
        return None
    made = {o for n in graph.node for o in n.output if o} | set(feeds)
    graph.input.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
                       for n in feeds)
    graph.output.extend(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
                        for n in sorted(needed) if n in made)
    sub = onnx.helper.make_model(graph, opset_imports=[
        onnx.helper.make_opsetid(d, v) for d, v in opset.items()])
    try:
        names = [o.name for o in graph.output]
        got = dict(zip(names, ReferenceEvaluator(sub).run(None, feeds)))
    except Exception:  # noqa: BLE001 - not implemented / not evaluable here: use onnxslim
        return None
    for n in needed:
        if n not in got and n in feeds:
            got[n] = feeds[n]
    if any(np.asarray(v).nbytes > MAX_FOLD_BYTES for v in got.values()):
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    og = out.graph
    del og.node[:]
    og.node.extend(kept)
    used = {n for node in og.node for n in node.input if n} | outputs
    declared = {vi.name for vi in og.input}
    keep_inits = [t for t in og.initializer if t.name in used or t.name in declared]
    del og.initializer[:]
    og.initializer.extend(keep_inits)
    for name in sorted(n for n in got if n in used):
        og.initializer.append(numpy_helper.from_array(np.asarray(got[name]), name))
    return out


def _first_dynamic(model, info):
    """(tensor name, node label, description) of the first tensor that is not static."""
    for k, node in enumerate(model.graph.node):
        for o in node.output:
            if not o:
                continue
            vi = info.get(o)
            if vi is None or _dims(vi) is None:
                what = "has unknown rank"
            elif None in _dims(vi):
                what = f"has shape {_dim_text(vi)}"
            else:
                continue
            return o, node.name or f"{node.op_type}_{k}", node.op_type, what
    return None


def prepare_onnx(path: str, model, input_shapes: dict | None = None):
    """``model`` with static inputs, inferred shapes and folded constants (see the module
    docstring); `ModelLoadError` naming the tensor and the fix when that is not possible.
    ``model`` is modified (inputs pinned) and a model is returned (possibly a new one)."""
    everything = _pin_inputs(path, model, input_shapes or {})
    _clear_dynamic(model, everything)
    for _ in range(MAX_ROUNDS):
        inferred = _infer(path, model)
        info = _info(inferred)
        fold, dynamic = _foldable(inferred, info)
        if not fold:
            break
        before = len(inferred.graph.node)
        try:
            model = _fold_reference(inferred, info, fold) or _fold(inferred, fold)
        except ModelLoadError:
            raise
        except Exception as e:  # noqa: BLE001 - the folder raises anything on odd graphs
            lines = str(e).strip().splitlines()
            _fail(path, f"constant folding failed ({type(e).__name__}: "
                        f"{lines[-1][:160] if lines else ''})")
        if len(model.graph.node) == before:
            inferred = _infer(path, model)
            info = _info(inferred)
            break
    else:
        inferred = _infer(path, model)
        info = _info(inferred)
    bad = _first_dynamic(inferred, info)
    if bad:
        name, label, op, what = bad
        inputs = [vi for vi in inferred.graph.input
                  if vi.name not in {t.name for t in inferred.graph.initializer}]
        hint = ", ".join(_suggest(vi) for vi in inputs) or "NAME:1x3x224x224"
        _dynamic(path, f"tensor {name!r} ({op} node {label!r}) {what} after shape inference and "
                    "constant folding: the model is dynamic; give every input its real "
                    f"static shape (--input-shapes {hint}) or re-export the model with "
                    "static shapes")
    return inferred

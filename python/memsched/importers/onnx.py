"""ONNX importer: an ONNX ``ModelProto`` -> `OpGraph`, one op per node in file order.

Reading the ONNX graph directly (not through TVM's frontend) keeps the op graph identical to
what other tools (HMCOS, SERENITY re-implementations, onnxruntime) see in the same file, so
peaks can be compared one to one. Tensor sizes come from ONNX shape inference; initializers and
``Constant`` outputs are weights (not activations); ``Reshape``/``Flatten``/``Squeeze``/
``Unsqueeze``/``Identity`` are views (alias ops); graph outputs are graph outputs.
"""
from __future__ import annotations

import os

from ..graph import GraphBuilder, OpGraph
from ..graph import UnsupportedModelError

VIEW_OPS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}
CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}
ELEMENTWISE = {"Relu", "Add", "Mul", "Sub", "Div", "Sigmoid", "Tanh", "Clip", "LeakyRelu",
               "HardSwish", "HardSigmoid", "Exp", "Neg", "Sqrt", "BatchNormalization"}


def _nbytes(vi, what: str) -> int:
    from .onnx_file import DTYPE_BITS, dtype_name

    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise UnsupportedModelError(f"{what}: non-tensor value (sequence/map) is not supported")
    if not tt.HasField("shape"):
        raise UnsupportedModelError(f"dynamic shape: {what} has unknown rank")
    n = 1
    for d in tt.shape.dim:
        if not d.HasField("dim_value"):
            raise UnsupportedModelError(
                f"dynamic shape: {what} has dimension {d.dim_param or '?'!r}; give static "
                "shapes (--input-shapes) or fix the model's input dims")
        if d.dim_value < 0:
            raise UnsupportedModelError(f"{what} has negative dimension {d.dim_value}")
        n *= d.dim_value  # Python ints: no overflow; OpGraph bounds the total
    if tt.elem_type not in DTYPE_BITS:
        raise UnsupportedModelError(f"{what} has unsupported dtype {dtype_name(tt.elem_type)}")
    return (n * DTYPE_BITS[tt.elem_type] + 7) // 8


def _shapes_known(model) -> bool:
    """Every node output has a static shape in value_info or the graph outputs."""
    g = model.graph
    known = {vi.name for vi in list(g.value_info) + list(g.output)
             if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape") and
             all(d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)}
    return all(o in known for n in g.node for o in n.output if o)


def from_onnx(model, input_shapes: dict | None = None, name: str | None = None, *,
              check: bool = True) -> OpGraph:
    """The `OpGraph` of an ONNX model (a ModelProto or a path). ``input_shapes`` overrides the
    shapes of graph inputs (e.g. to fix a symbolic batch dimension). The model is validated
    first (`onnx_file.check_onnx`; ``check=False`` when the caller already did, as
    `onnx_file.read_onnx` does); a path is read with `onnx_file.read_onnx`."""
    import onnx

    from .onnx_file import check_onnx, read_onnx

    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        path = os.fsdecode(model)
        model = read_onnx(path, input_shapes)
        name = name or os.path.basename(path)
    elif check:
        from .onnx_file import check_fold_sizes
        from .onnx_front import prepare_onnx

        label = name or model.graph.name or "<ModelProto>"
        check_onnx(label, model, input_shapes, fold_sizes=False)
        copy = onnx.ModelProto()
        copy.CopyFrom(model)  # the caller's model stays as it was
        model = prepare_onnx(label, copy, input_shapes)
        check_fold_sizes(label, model)
    graph = model.graph
    pinned = False
    if input_shapes:
        for inp in graph.input:
            if inp.name in input_shapes:
                dims = inp.type.tensor_type.shape.dim
                new = [int(v) for v in input_shapes[inp.name]]
                if [d.dim_value if d.HasField("dim_value") else None for d in dims] != new:
                    pinned = True
                del dims[:]
                for v in new:
                    dims.add().dim_value = v
    # the front door (onnx_front.prepare_onnx) has inferred every shape already
    if pinned or not _shapes_known(model):
        try:
            model = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        except Exception as e:  # noqa: BLE001 - onnx raises several types
            raise UnsupportedModelError(f"ONNX shape inference failed: {e}") from None
    graph = model.graph
    weights = {i.name for i in graph.initializer}
    info = {vi.name: vi for vi in list(graph.value_info) + list(graph.input) + list(graph.output)}
    b = GraphBuilder(name or graph.name or "onnx")
    value: dict[str, tuple[list[int], list[int]]] = {}  # name -> (tensor ids, defining ops)
    for inp in graph.input:
        if inp.name in weights:
            continue
        value[inp.name] = ([b.input(inp.name, _nbytes(inp, f"input {inp.name!r}"))], [])
    for k, node in enumerate(graph.node):
        label = node.name or f"{node.op_type}_{k}"
        if node.op_type in CONTROL_FLOW:
            raise UnsupportedModelError(f"control flow: node {label!r} is {node.op_type}; "
                                        "graphs with control flow cannot be scheduled")
        reads, deps = [], []
        for name_ in node.input:
            if not name_ or name_ in weights:
                continue
            if name_ not in value:
                raise UnsupportedModelError(
                    f"malformed model: node {label!r} reads {name_!r}, which nothing defines "
                    "before it (nodes must be in topological order)")
            ts, ds = value[name_]
            reads += ts
            deps += ds
        if node.op_type == "Constant":
            v = b.op(label, "Constant", [], [], source=k)
            for o in node.output:
                value[o] = ([], [v])
            continue
        if node.op_type in VIEW_OPS:
            v = b.op(label, node.op_type, reads, [], alias=True, source=k, extra_preds=deps)
            data = node.input[0]
            value[node.output[0]] = (value[data][0] if data in value else [], [v])
            continue
        outs = []
        for o in node.output:
            if not o:
                continue
            if o not in info:
                raise UnsupportedModelError(
                    f"unknown op or shape: shape inference gave no shape for {o!r} "
                    f"({node.op_type} node {label!r})")
            outs.append((o, _nbytes(info[o], f"{node.op_type} output {o!r}")))
        inplace = reads[:1] if node.op_type in ELEMENTWISE and len(outs) == 1 else []
        v = b.op(label, node.op_type, reads, outs, source=k, extra_preds=deps, inplace=inplace)
        for (o, _), t in zip(outs, b.ops[v].outputs):
            value[o] = ([t], [v])
    for out in graph.output:
        if out.name not in value:
            raise UnsupportedModelError(f"malformed model: output {out.name!r} is not computed")
        for t in value[out.name][0]:
            b.mark_output(t)
    return b.build()

"""The instructions one ``Invoke()`` of TFLite Micro runs on a Cortex-M55 with the CMSIS-NN MVE
kernels, predicted from the ``.tflite`` file (no board needed).

Each kernel's cost is a linear function of counts that follow its loop structure (calls of
the inner loops, vector iterations over 16-byte / 4-lane channel blocks, output rows and
pixels, MACs), with coefficients fitted on the emulated board (`memsched.board`, the
``--per-op`` firmware; ``benchmarks/tflite/tflm_instructions.py --calibrate`` regenerates them):
QEMU is deterministic, so the residuals are model error. A kernel or a variant no fit covers
(float convolutions, ADD of a scalar, ...) is *unknown*: named, never guessed. A fused
activation costs nothing extra (the CMSIS-NN kernels clamp to the activation range always;
the calibration files mix RELU and none), and the CMSIS-NN kernels run the same instructions
whatever the data; TFLite's element-wise reference kernels (HARD_SWISH, RELU, broadcasting
MUL) vary a little with it.

* `op_instructions` (`memsched.tflite.memory.kernel_costs`): one operator, from its builtin
  name, shapes, dtype and options (callable with synthetic shapes: the patch search prices
  windows).
* `model_instructions`: every operator of a file and the whole ``Invoke()``.
* `TFLMTime`: the same as the patch search's `memsched.patches.RuntimeTime`.

What is counted (see ``../shared/notes/tflm-cortex-m55.md``): the board's ``invoke_instructions``
is the sum of the operators' profiler windows + `PER_OP` per operator + `PER_INVOKE`; the fits
are of the windows (kernel ``Invoke()``, ``ResetTempAllocations()``, 26 instructions of glue).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...patches import PAD_MIN, RuntimeTime, SpatialModel
from .kernel_costs import PER_OP, _memcpy_insns, features, op_instructions  # noqa: F401

TARGET = "Cortex-M55 (TFLite Micro, CMSIS-NN MVE)"
PER_INVOKE = 74  # Invoke()'s own entry and exit

@dataclass(frozen=True)
class OpCost:
    """One operator's predicted instructions (``instructions``: None when ``variant`` has no
    model: ``reason`` says why); ``index``: the operator in the file (-1: synthetic)."""

    index: int
    kind: str
    variant: str
    instructions: int | None
    reason: str = ""


@dataclass
class ModelInstructions:
    """`model_instructions`' result: ``total`` (one ``Invoke()``, None when some operator has
    no model), ``ops`` (`OpCost` per operator in file order), ``unknown`` (sorted
    ``"KIND (variant)"`` names of the kernels without a model)."""

    total: int | None
    ops: list = field(default_factory=list)
    unknown: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"target": TARGET, "total": self.total, "unknown": list(self.unknown),
                "ops": [{"index": c.index, "op": c.kind, "variant": c.variant,
                         "instructions": c.instructions} for c in self.ops]}


# ------------------------------------------------------------------------------ files
_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 7: "int16",
           9: "int8", 17: "int4"}
_ITEMSIZE = {"float32": 4, "float16": 2, "int32": 4, "uint8": 1, "int64": 8, "int16": 2,
             "int8": 1, "int4": 1}


def _const(model, t):
    b = model.buffers[int(t.buffer)] if 0 <= int(t.buffer) < len(model.buffers or []) else None
    if b is None or b.data is None or len(b.data) == 0:
        return None
    return np.frombuffer(np.asarray(b.data, np.uint8).tobytes(),
                         dtype=np.int64 if int(t.type) == 4 else np.int32)


def file_ops(model) -> list[tuple[int, str, dict]]:
    """(index, builtin name, {"inputs", "output", "dtype", "options"}) per operator of
    subgraph 0 of ``model`` (a ``memsched.tflite.format.read`` `TFLiteGraph` or a ``ModelT``):
    what `op_instructions` takes."""
    from ..format.read import TFLiteModelError, op_names, read_offline_plan

    model = getattr(model, "model", model)
    names = op_names()
    sg = model.subgraphs[0]
    tensors = sg.tensors or []
    try:  # offsets: a RESHAPE whose output is at its input's offset copies nothing
        aliased = read_offline_plan(model)
    except TFLiteModelError:
        aliased = None
    if aliased is not None and len(aliased) < len(tensors):
        aliased = None
    out = []
    for v, op in enumerate(sg.operators or []):
        try:
            out.append(_file_op(model, names, tensors, v, op, aliased))
        except (AttributeError, IndexError, TypeError, ValueError):  # options or inputs missing
            code = model.operatorCodes[op.opcodeIndex]
            kind = names.get(max(int(code.builtinCode), int(code.deprecatedBuiltinCode)), "?")
            out.append((v, kind, {"inputs": [], "output": (), "dtype": "malformed",
                                  "options": {}}))
    return out


def _file_op(model, names, tensors, v, op, aliased=None):
    code = model.operatorCodes[op.opcodeIndex]
    kind = names.get(max(int(code.builtinCode), int(code.deprecatedBuiltinCode)), "?")
    ins = [int(t) for t in (op.inputs if op.inputs is not None else []) if t >= 0]
    outs = [int(t) for t in (op.outputs if op.outputs is not None else []) if t >= 0]
    shape = [tuple(int(d) for d in (tensors[t].shape if tensors[t].shape is not None
                                    else [])) for t in ins]
    oshape = tuple(int(d) for d in (tensors[outs[0]].shape
                                     if outs and tensors[outs[0]].shape is not None else []))
    dtype = _DTYPES.get(int(tensors[ins[0]].type), "?") if ins else "?"
    odt = _DTYPES.get(int(tensors[outs[0]].type), "?") if outs else "?"
    o = op.builtinOptions
    opt: dict = {"itemsize": _ITEMSIZE.get(dtype, 1), "out_dtype": odt}
    acts = shape[:1]
    if kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        w = shape[1]
        opt["filter"] = (w[1], w[2])
        opt["stride"] = (int(o.strideH), int(o.strideW))
        opt["dilation"] = (int(o.dilationHFactor or 1), int(o.dilationWFactor or 1))
        opt["padding"] = "SAME" if int(o.padding) == 0 else "VALID"
    elif kind in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        opt["filter"] = (int(o.filterHeight), int(o.filterWidth))
        opt["stride"] = (int(o.strideH), int(o.strideW))
        opt["padding"] = "SAME" if int(o.padding) == 0 else "VALID"
    elif kind in ("ADD", "MUL", "SUB"):
        acts = shape[:2]
    elif kind == "CONCATENATION":
        acts = shape
        opt["axis"] = int(o.axis)
    elif kind == "RESHAPE" and aliased is not None and outs and \
            0 <= aliased[ins[0]] == aliased[outs[0]]:
        opt["aliased"] = True  # the offline plan shares the buffer: no copy
    elif kind == "GATHER":
        opt["axis"] = int(getattr(o, "axis", 0) or 0) if o is not None else 0
        idx = _const(model, tensors[ins[1]]) if len(ins) > 1 else None
        if idx is not None and len(idx):
            opt["begin"] = int(idx[0])
    elif kind == "STRIDED_SLICE":
        b, st = _const(model, tensors[ins[1]]), _const(model, tensors[ins[3]])
        if b is not None:
            opt["begin"] = tuple(int(x) for x in b)
        if st is not None:
            opt["strides"] = tuple(int(x) for x in st)
    return v, kind, {"inputs": acts, "output": oshape, "dtype": dtype, "options": opt}


def model_instructions(model) -> ModelInstructions:
    """Predicted instructions of one ``Invoke()`` of ``model`` in TFLite Micro on the
    Cortex-M55 with the CMSIS-NN MVE kernels (the board's ``invoke_instructions``).

    Parameters
    ----------
    model : TFLiteGraph, ModelT, str or bytes
        What `memsched.tflite.format.read.read_tflite` gives, or a path or the file's bytes.

    Returns
    -------
    ModelInstructions
        ``total`` is None when an operator has no cost model; ``unknown`` names them.
    """
    if isinstance(model, (str, bytes, bytearray)) or hasattr(model, "__fspath__"):
        from ..format.read import read_tflite

        model = read_tflite(model if not hasattr(model, "__fspath__") else str(model))
    costs, unknown = [], set()
    for v, kind, a in file_ops(model):
        try:
            r = features(kind, a["inputs"], a["output"], a["dtype"], **a["options"])
        except (ValueError, IndexError, ZeroDivisionError, TypeError):  # shapes it cannot run
            r = ("malformed", None, "shapes or options no kernel runs")
        n = None
        reason = r[2] if r[1] is None else ""
        if r[1] is not None:
            n = op_instructions(kind, a["inputs"], a["output"], a["dtype"], **a["options"])
            if n is None:
                reason = "not calibrated"
        if n is None:
            unknown.add(f"{kind} ({r[0]})" if r[0] else kind)
        costs.append(OpCost(v, kind, r[0], n, reason))
    total = None if unknown else sum(c.instructions for c in costs) + PER_INVOKE
    return ModelInstructions(total, costs, sorted(unknown))


# ------------------------------------------------------------------------------ the search
class UnknownKernel(ValueError):
    """A plan node whose kernel has no cost model (the message names it)."""


class TFLMTime(RuntimeTime):
    """TFLite Micro's instructions on the Cortex-M55 as the patch search prices them
    (`memsched.patches.RuntimeTime`), for the file ``model`` (a `TFLiteGraph`) whose
    `SpatialModel` the search runs on (``SOp.index`` = the file's operator). Build it with
    `tflm_time`, which gives None for a file with an unmodelled kernel (the search then bounds
    MACs alone). Plan nodes are priced as `memsched.tflite.patch.tile` writes them: a copied
    operator on its window (VALID unless it keeps its own padding), STRIDED_SLICE, PAD /
    PADV2, CONCATENATION; each with `PER_OP`."""

    name = TARGET

    def __init__(self, model, views: bool = False):
        self.model = model
        self.views = views  # slices read as row views where that pays (an offline plan)
        self.report = model_instructions(model)
        self.args = {v: (kind, a) for v, kind, a in file_ops(model)}
        self.cost = {c.index: c.instructions for c in self.report.ops}

    def program(self, sm: SpatialModel) -> int:
        if self.report.total is None:
            raise UnknownKernel("no cost model for " + ", ".join(self.report.unknown))
        return self.report.total

    def op(self, sm: SpatialModel, k: int) -> int:
        n = self.cost[sm.ops[k].index]
        if n is None:
            raise UnknownKernel(f"no cost model for operator {sm.ops[k].index} "
                                f"({sm.ops[k].kind})")
        return n

    def plan(self, sm: SpatialModel, plan) -> int:
        from .nodes import view_shapes

        viewed, sources = view_slices(sm, plan.nodes, self.views)
        n = sum(self.node(sm, plan, i, i in viewed) for i in range(len(plan.nodes)))
        # one in-place RESHAPE per source read as rows, shared by its slices
        for src in sources:
            k = next(k for k in viewed if plan.nodes[k].inputs[0] == src)
            nd = plan.nodes[k]
            ten = sm.tensors[nd.tensor]
            c = int(ten.shape[-1])
            n += aliased_reshape((1, nd.base.height, nd.base.width, c),
                                 view_shapes(nd, c)[0], int(ten.itemsize))
        return n

    def node(self, sm: SpatialModel, plan, i: int, view: bool | None = None) -> int:
        """Instructions of node ``i`` of ``plan`` as written (`PER_OP` included); ``view``:
        a slice read as rows (`view_slices`; None: decided here), with the
        in-place RESHAPE of its cut (the source's RESHAPE is the plan's, `plan`)."""
        from .nodes import pad_constant

        nd = plan.nodes[i]
        ten = sm.tensors[nd.tensor]
        c = int(ten.shape[-1])
        isz = int(ten.itemsize)
        dtype = _DTYPES.get(int(ten.dtype), "?")
        win = (1, nd.win.height, nd.win.width, c)

        def shape_of(src):
            if isinstance(src, tuple):  # a region input, whole
                return tuple(int(d) for d in sm.tensors[src[1]].shape)
            w = plan.nodes[src].win
            return (1, w.height, w.width, int(sm.tensors[plan.nodes[src].tensor].shape[-1]))

        if nd.kind == "slice":
            if view is None:

                view = bool(view_slices(sm, [nd], self.views)[0])
            r = slice_instructions(nd, c, isz, dtype, view, int(ten.dtype))
            kind = "STRIDED_SLICE"
        elif nd.kind == "pad":
            top, bottom, left, right = nd.pads
            src = (1, nd.win.height - top - bottom, nd.win.width - left - right, c)
            kind = "PADV2" if nd.pad_value == PAD_MIN else "PAD"
            r = op_instructions(kind, [src], win, dtype, itemsize=isz)
        elif nd.kind == "concat":
            kind = "CONCATENATION"
            r = op_instructions(kind, [shape_of(s) for s in nd.inputs], win, dtype,
                                itemsize=isz, axis=nd.axis)
        elif nd.kind == "op":
            sop = sm.ops[nd.op]
            kind, a = self.args[sop.index]
            opts = dict(a["options"])
            if kind in ("PAD", "PADV2"):
                opts["pads"] = pad_constant(nd)
            elif sop.cls == "window" and not nd.implicit and "padding" in opts:
                opts["padding"] = "VALID"  # the writer's explicit plans
            ins = [shape_of(s) for s in nd.inputs]
            r = op_instructions(kind, ins, win, a["dtype"], **opts)
        else:
            raise UnknownKernel(f"plan node kind {nd.kind!r} (TFLite Micro's writer has "
                                "none)")
        if r is None:
            raise UnknownKernel(f"no cost model for {kind} on plan node {i}")
        return r


def aliased_reshape(src_shape, out_shape, itemsize: int = 1) -> int:
    """Instructions of a RESHAPE whose output shares its input's buffer (no memcpy)."""
    return op_instructions("RESHAPE", [src_shape], out_shape, "int8", itemsize=itemsize,
                           aliased=True)


def slice_instructions(nd, channels: int, itemsize: int, dtype: str, view: bool,
                       ttype: int | None = None) -> int | None:
    """Instructions of a plan's slice node as written (`PER_OP` included): a GATHER along the
    one axis it cuts (`nodes.gather_axis`, for a tensor of TensorType ``ttype``), else a 4-D
    STRIDED_SLICE of its source window, or (``view``) the STRIDED_SLICE of the source's row
    view [1, H, W*C] and the in-place RESHAPE of its cut to [1, h, w, C]."""
    from .nodes import gather_axis, gather_indices, slice_constants, view_shapes

    b, c, isz = nd.base, channels, itemsize
    win = (1, nd.win.height, nd.win.width, c)
    axis = None if view or ttype is None else gather_axis(nd, ttype)
    if axis is not None:
        return op_instructions("GATHER", [(1, b.height, b.width, c)], win, dtype,
                               itemsize=isz, axis=axis, begin=gather_indices(nd, axis)[0])
    begin, _, strides = slice_constants(nd, c, view)
    if not view:
        return op_instructions("STRIDED_SLICE", [(1, b.height, b.width, c)], win, dtype,
                               itemsize=isz, begin=begin, strides=strides)
    src, cut = view_shapes(nd, c)
    r = op_instructions("STRIDED_SLICE", [src], cut, dtype, itemsize=isz, begin=begin,
                        strides=strides)
    return None if r is None else r + aliased_reshape(cut, win, isz)


def view_pays(nd, channels: int, itemsize: int, dtype: int) -> bool:
    """Whether a plan's slice node costs fewer instructions read as rows (its STRIDED_SLICE
    on the row view plus the in-place RESHAPE of its cut) than as a 4-D STRIDED_SLICE: where
    a window cuts a map's columns or rows into more than one run per row."""
    name = _DTYPES.get(int(dtype), "?")
    flat = slice_instructions(nd, channels, itemsize, name, False, int(dtype))
    rows = slice_instructions(nd, channels, itemsize, name, True)
    return flat is not None and rows is not None and rows < flat


def view_slices(sm: SpatialModel, nodes, views: bool = True) -> tuple[frozenset, list]:
    """Which slice nodes of a plan the writer reads as row views (``views``: the file gets an
    offline plan, where the view RESHAPEs run in place), and the distinct sources they read
    (each viewed once, by one RESHAPE shared by its slices): a slice is a view where that
    costs fewer instructions on the Cortex-M55 than the 4-D slice, its in-place RESHAPE
    included (`memory.instructions.view_pays`)."""
    if not views:
        return frozenset(), []
    chosen, sources = [], []
    for k, nd in enumerate(nodes):
        if nd.kind != "slice":
            continue
        ten = sm.tensors[nd.tensor]
        if view_pays(nd, int(ten.shape[-1]), int(ten.itemsize), int(ten.dtype)):
            chosen.append(k)
            src = nd.inputs[0]
            if src not in sources:
                sources.append(src)
    return frozenset(chosen), sources


def tflm_time(model, views: bool = False) -> TFLMTime | None:
    """`TFLMTime` for ``model`` (a `TFLiteGraph`), or None when one of its kernels has no
    cost model (`model_instructions` names them); ``views``: the writer reads slices as row
    views where that pays (with an offline plan)."""
    t = TFLMTime(model, views)
    return t if t.report.total is not None else None


__all__ = ["ModelInstructions", "OpCost", "PER_INVOKE", "PER_OP", "TARGET", "TFLMTime",
           "UnknownKernel", "aliased_reshape", "features", "file_ops", "model_instructions",
           "op_instructions", "slice_instructions", "tflm_time", "view_pays", "view_slices"]

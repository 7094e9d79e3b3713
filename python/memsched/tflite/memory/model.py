"""TFLite Micro's memory model, stated once: what its arena holds and when a tensor lives.

* **Activations** (the head section its planner packs): a tensor is live from the operator that
  writes it (subgraph inputs: from the first operator) to the last operator that reads it;
  subgraph outputs live to the end; an output nobody reads lives during its operator only;
  constants and variable tensors are not planned. That is memsched's ``paper`` model with each
  operator a schedule step (`TFLM_MODEL`), so a schedule's peak is the liveness bound of the
  arena, and an offline plan aligned as TFLM aligns (`TFLM_ALIGNMENT`) reaches it whenever the
  packing does (`lifetimes`).
* **Persistent bytes** (the tail section): what TFLM keeps per operator and per tensor
  (`TFLMPersistent`, measured), which patch-based execution pays again for every copied
  operator. `TFLMMemory` hands both to the one patch search (`memsched.patches.search`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import arena as _arena
from ...memory import MemoryModel
from ...patches import PAD_MIN, PatchPlan, Runtime, RuntimeMemory, SOp, SpatialModel
from ..format.aliases import (VIEW_SUFFIX, alias_roots, quantize_aliases,  # noqa: F401
                              reshape_aliases)
from ..format.read import TFLiteGraph
from .instructions import view_slices
from .nodes import (gather_axis, gather_indices, pad_constant, slice_constants,  # noqa: F401
                    view_shapes)

GATHER_DIMS = 32  # GatherPrepare's persistent copy of the output's dims (4 + 4 x 4 B, aligned)

TFLM_ALIGNMENT = 16  # MicroArenaBufferAlignment()
TFLM_MODEL = MemoryModel(count_inputs=True, count_outputs=True, inplace=False, workspace=True,
                         name="tflm")


# TFLite Micro's QUANTIZE from float32 runs in place (`memsched.tflite.format.aliases`:
# `quantize_aliases`); the patch search prices it under this model.
TFLM_INPLACE = MemoryModel(count_inputs=True, count_outputs=True, inplace=True, workspace=True,
                           name="tflm-inplace-quantize")


def view_graph(tg: TFLiteGraph, graph=None):
    """``graph`` (default ``tg.graph``; one op per operator of subgraph 0, e.g.
    `inplace_quantize_graph`) with the view RESHAPEs of `reshape_aliases` as alias ops (their
    output is their input's buffer: readers of the view read it), and the file tensor of each
    of its tensors (the view's root for a shared buffer). Returns (graph, tensor_index)."""
    from ...graph import GraphBuilder

    g = tg.graph if graph is None else graph
    # by the tensors they write (``tg.model`` may be reordered already, ``graph`` not)
    views = {y for _, y, _ in reshape_aliases(tg.model)}
    if not views:
        return g, list(tg.tensor_index)
    b = GraphBuilder(g.name)
    tmap: dict[int, int] = {}
    index: list[int] = []
    deps: dict[int, list[int]] = {}  # graph tensor -> the alias op that defines it
    for t, ten in enumerate(g.tensors):
        if ten.producer is None:
            tmap[t] = b.input(ten.name, ten.nbytes)
            index.append(tg.tensor_index[t])
    for v, op in enumerate(g.ops):
        reads = [tmap[t] for t in op.inputs]
        preds = [p for t in op.inputs for p in deps.get(t, [])]
        if len(op.inputs) == 1 and len(op.outputs) == 1 and \
                tg.tensor_index[op.outputs[0]] in views:
            vid = b.op(op.name, op.kind, reads, [], workspace=op.workspace, alias=True,
                       source=op.source, extra_preds=preds)
            tmap[op.outputs[0]] = tmap[op.inputs[0]]
            deps[op.outputs[0]] = deps.get(op.inputs[0], []) + [vid]
            continue
        vid = b.op(op.name, op.kind, reads,
                   [(g.tensors[t].name, g.tensors[t].nbytes) for t in op.outputs],
                   workspace=op.workspace, source=op.source, extra_preds=preds,
                   inplace=[tmap[t] for t in op.inplace])
        for t, nt in zip(op.outputs, b.ops[vid].outputs):
            tmap[t] = nt
            index.append(tg.tensor_index[t])
    for t, ten in enumerate(g.tensors):
        if ten.is_output:
            b.mark_output(tmap[t])
    return b.build(), index


def with_scratch(graph, scratch: dict[int, list[int]]):
    """``graph`` (an `OpGraph` of a TFLite subgraph) with each operator's workspace = the
    scratch buffers its kernel requests (`memory.arena.scratch_requests`: file operator index ->
    bytes): TFLite Micro plans them beside the tensors during that operator, so the order and
    the peak see them too."""
    from dataclasses import replace

    from ...graph import OpGraph

    if not scratch:
        return graph
    ops = [replace(op, workspace=sum(scratch.get(op.source, ()))) for op in graph.ops]
    return OpGraph(ops, graph.tensors, graph.name)


def inplace_quantize_graph(tg: TFLiteGraph):
    """``tg.graph`` with ``Op.inplace`` = the input of each `quantize_aliases` operator and
    nothing else (for `TFLM_INPLACE`: LiteRT's in-place ops do not run in place in TFLM)."""
    from dataclasses import replace

    from ...graph import OpGraph

    g = tg.graph
    gid = {ti: t for t, ti in enumerate(tg.tensor_index)}
    alias = {v: gid[x] for x, _, v in quantize_aliases(tg.model) if x in gid}
    ops = [replace(op, inplace=(alias[op.source],) if op.source in alias else ())
           for op in g.ops]
    return OpGraph(ops, g.tensors, g.name)


def lifetimes(tg: TFLiteGraph, order, graph=None, tensor_index=None
              ) -> list[tuple[int, _arena.Lifetime]]:
    """(file tensor index, TFLM lifetime in steps of ``order``) of every planned activation;
    ``graph`` / ``tensor_index``: another graph of the file's operators and the file tensor of
    each of its tensors (`view_graph`: one lifetime per shared buffer, its root's index)."""
    g = tg.graph if graph is None else graph
    index = tg.tensor_index if tensor_index is None else tensor_index
    pos = {v: k for k, v in enumerate(order)}
    last = len(order) - 1
    out = []
    for t, ten in enumerate(g.tensors):
        if ten.nbytes <= 0:
            continue
        start = 0 if ten.producer is None else pos[ten.producer]
        if ten.is_output:
            end = last
        elif ten.consumers:
            end = max(pos[c] for c in ten.consumers)
        else:
            end = start
        out.append((index[t], _arena.Lifetime(ten.nbytes, start, max(start, end))))
    return out


@dataclass(frozen=True)
class TFLMPersistent:
    """Bytes TFLite Micro allocates in the persistent (tail) section, per operator and tensor.

    Measured with the ``tflite-micro`` Python interpreter's recording allocator (reference
    kernels, 64-bit host): a ``NodeAndRegistration`` of 64 B per operator, a
    ``TfLiteEvalTensor`` of 24 B per tensor of the subgraph (constants included), each kernel's
    op data (``op_data``: measured per kind as the tail growth of int8 models with 1 and 11
    copies of the operator, minus node and tensors) and, for CONV_2D / DEPTHWISE_CONV_2D, the
    per-channel output multiplier and shift arrays: 2 x 4 B per output channel, each array
    16-byte aligned (TFLM's Prepare allocates them for float models too; ``quantized=False``
    leaves them out, for runtimes that do not)."""

    node: int = 64
    eval_tensor: int = 24
    op_data: tuple = (("CONV_2D", 108), ("DEPTHWISE_CONV_2D", 108), ("STRIDED_SLICE", 120),
                      ("PAD", 64), ("PADV2", 64), ("CONCATENATION", 88), ("ADD", 72),
                      ("MAX_POOL_2D", 72), ("AVERAGE_POOL_2D", 72), ("MUL", 53),
                      ("HARD_SWISH", 32), ("RELU", 32), ("QUANTIZE", 32), ("LEAKY_RELU", 35),
                      ("RELU6", 16), ("LOGISTIC", 16), ("TANH", 16))
    default_op_data: int = 48
    per_channel: int = 8

    def op(self, kind: str, cout: int = 0, quantized: bool = True, new_tensors: int = 1) -> int:
        data = dict(self.op_data).get(kind, self.default_op_data)
        chan = self.per_channel * cout if quantized and kind in ("CONV_2D",
                                                                  "DEPTHWISE_CONV_2D") else 0
        return self.node + data + _align16(chan // 2) * 2 + self.eval_tensor * new_tensors


def _align16(n: int) -> int:
    return -(-n // 16) * 16


PERSISTENT = TFLMPersistent()
# new constant tensors per inserted node: STRIDED_SLICE begin/end (strides shared), PAD paddings
NEW_CONSTS = {"slice": 2, "pad": 1, "concat": 0, "op": 0}
NODE_KIND = {"slice": "STRIDED_SLICE", "pad": "PAD", "concat": "CONCATENATION"}


def new_constants(sm: SpatialModel, nodes, views: bool = False) -> int:
    """How many constant tensors the writer (`memsched.tflite.patch.tile`) adds for these plan
    nodes: one per distinct unquantized value (a slice's begin, end and strides, a pad's amounts, a
    copied PAD's amounts), one per quantized pad value (PADV2's minimum). ``views``: as
    `view_slices`."""
    values, quantized = set(), 0
    nodes = list(nodes)
    viewed = view_slices(sm, nodes, views)[0]
    for k, nd in enumerate(nodes):
        axis = gather_axis(nd, sm.tensors[nd.tensor].dtype) \
            if nd.kind == "slice" and k not in viewed else None
        if axis is not None:
            values.add(("gather", gather_indices(nd, axis)))
        elif nd.kind == "slice":
            values.update(slice_constants(nd, int(sm.tensors[nd.tensor].shape[3]),
                                          k in viewed))
        elif nd.kind == "pad" or (nd.kind == "op" and sm.ops[nd.op].kind in ("PAD", "PADV2")):
            values.add(pad_constant(nd))
            quantized += nd.kind == "pad" and nd.pad_value == PAD_MIN
    return len(values) + quantized


@dataclass(frozen=True)
class TFLMMemory(RuntimeMemory):
    """TFLite Micro's arena for the patch search: activations under `TFLM_MODEL` plus the
    persistent bytes of every operator (``n_tensors``: tensors of the subgraph, constants
    included, each with an eval tensor; 0: those of the `SpatialModel`)."""

    name: str = "tflm"
    activations: MemoryModel = TFLM_MODEL
    n_tensors: int = 0
    quantized: bool = True
    price: TFLMPersistent = PERSISTENT
    # slices read as row views where that pays (`view_slices`): an offline plan is written
    views: bool = False

    def model_persistent(self, sm: SpatialModel) -> int:
        n = self.n_tensors or len(sm.tensors)
        return sum(self.price.op(op.kind, op.cout, self.quantized, 0) for op in sm.ops) + \
            self.price.eval_tensor * n

    def copy_price(self, op: SOp) -> int:
        # a PAD is not copied into interior patches: not counted
        if op.kind in ("PAD", "PADV2"):
            return 0
        return self.price.op(op.kind, op.cout, self.quantized, 1)

    def node_persistent(self, sm: SpatialModel, nd, consts: bool = True) -> int:
        """Persistent bytes of one node of a plan (`PNode`): its operator, op data, output
        tensor and (``consts``) the constant tensors it reads, counted as its own (a plan
        writes each distinct constant once: `new_constants`)."""
        if nd.kind == "op":
            op = sm.ops[nd.op]
            return self.price.op(op.kind, op.cout, self.quantized, 1)
        n = NEW_CONSTS[nd.kind] + (nd.kind == "pad" and nd.pad_value == PAD_MIN) if consts else 0
        if nd.kind == "slice" and view_slices(sm, [nd], self.views)[0]:
            own = self.price.op(NODE_KIND[nd.kind], 0, self.quantized, 1 + n)
            return own + self.price.op("RESHAPE", 0, self.quantized, 1)  # [1, h, w*C] -> NHWC
        if nd.kind == "slice" and gather_axis(nd, sm.tensors[nd.tensor].dtype) is not None:
            # one constant (the indices); GatherPrepare keeps a copy of the output's dims
            return self.price.op("GATHER", 0, self.quantized, 1 + (n > 0)) + GATHER_DIMS
        return self.price.op(NODE_KIND[nd.kind], 0, self.quantized, 1 + n)

    def plan_persistent_delta(self, sm: SpatialModel, plan: PatchPlan) -> int:
        price, quantized = self.price, self.quantized
        # each node with its output tensor; the constants once per distinct value, as written
        add = sum(self.node_persistent(sm, nd, consts=False) for nd in plan.nodes)
        add += price.eval_tensor * new_constants(sm, plan.nodes, self.views)
        # one RESHAPE (and its output tensor) per source read as rows
        add += len(view_slices(sm, plan.nodes, self.views)[1]) * \
            price.op("RESHAPE", 0, quantized, 1)
        removed = sum(price.op(sm.ops[k].kind, sm.ops[k].cout, quantized, 1)
                      for k in plan.region.ops)
        removed -= price.eval_tensor * len(plan.region.split)  # split tensors keep their index
        return add - removed


# TFLite Micro's CONCATENATION takes at most kMaxInputNum = 10 inputs
TFLM_MAX_CONCAT_INPUTS = 10


def tflm_runtime(memory: RuntimeMemory, time=None) -> Runtime:
    """TFLite Micro as the patch search sees it (`memsched.patches.Runtime`): ``memory`` (a
    `TFLMMemory`), a copied operator keeps its SAME / VALID padding on a window (plans with
    margins), at most ten inputs per CONCATENATION (more pieces chained), and NHWC row bands
    are contiguous slices, so taller grids are tried too. No squeeze-and-excitation rewrite.
    ``time``: its instructions on the Cortex-M55 (`memory.instructions.tflm_time` of the file;
    None: no time model). Each explicit plan is also priced with its region inputs padded
    once, whole (`memsched.patches.plans.pad_sources`: each PAD node costs its records)."""
    return Runtime(memory, implicit_padding=True, padding_rule="same",
                   max_concat_inputs=TFLM_MAX_CONCAT_INPUTS, band_grids=True, time=time,
                   pad_sources=True)

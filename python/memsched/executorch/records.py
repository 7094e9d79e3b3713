"""The method allocator's records of an ExecuTorch call: what one more instruction costs a
loaded program besides its planned arenas.

At ``Program::load_method`` the runtime takes, from the method allocator, one `EValue` per
value of the plan, a `TensorImpl` with its sizes, dim order and strides per tensor value, a
boxed and an unboxed array per list value, and one `EValue*` per argument of each instruction.
The emitter makes a new value for every scalar and list argument of every call, and an
out-variant call names its outputs twice (as ``out`` arguments and as its return). So one
call costs:

    136 B per tensor it writes (the tensor value 120 B, two argument slots)
    + 8 B per tensor argument (the slot; the value exists already)
    + 24 B per scalar argument, ``None`` included (a value and a slot)
    + 48 B + 32 B per element per int list (its value, the boxed list, each element's value)
    + 48 B + 16 B per element per tensor list

Measured on the x86-64 ``libexecutorch`` of the executorch 1.5.1 wheel by loading programs
with 1 and 5 copies of a call in `benchmarks/executorch_method_bytes.py`'s harness
(``relu`` 144 B, ``slice_copy`` 240 B, ``constant_pad_nd`` 344 B, ``cat`` of two 240 B,
``convolution`` 656 B, batch norm 504 B; the formula gives each to within 8 B). A 32-bit
build takes less (4-byte pointers); the counts are the same.
"""
from __future__ import annotations

from ..patches import Layout, RuntimeMemory

TENSOR_OUT = 136
TENSOR_ARG = 8
SCALAR_ARG = 24
LIST = 48
INT_ELEMENT = 32
TENSOR_ELEMENT = 16


def call_bytes(n_outputs: int, tensor_args: int = 0, scalar_args: int = 0,
               int_lists: tuple = (), tensor_lists: tuple = ()) -> int:
    """The method allocator's bytes of one call (lists given by their lengths)."""
    return (TENSOR_OUT * n_outputs + TENSOR_ARG * tensor_args + SCALAR_ARG * scalar_args +
            sum(LIST + INT_ELEMENT * n for n in int_lists) +
            sum(LIST + TENSOR_ELEMENT * n for n in tensor_lists))


def node_call_bytes(node) -> int:
    """`call_bytes` of an edge-dialect FX call node, its arguments read against the operator's
    schema (defaults included: the emitter writes every argument); 0 for a node that is no
    instruction (``getitem``, a placeholder)."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None:
        return 0
    import torch

    args = list(node.args)
    tensors = scalars = 0
    ints, tlists = [], []
    for i, a in enumerate(schema.arguments):
        if a.kwarg_only and a.name not in node.kwargs:
            if a.name.startswith("out"):
                continue  # the out variant's outputs: counted with the outputs
            v = a.default_value if a.has_default_value() else None
        elif i < len(args):
            v = args[i]
        else:
            v = node.kwargs.get(a.name, a.default_value if a.has_default_value() else None)
        if isinstance(v, (list, tuple)):
            if any(hasattr(x, "op") for x in v) or isinstance(a.type, torch.ListType) and \
                    str(a.type.getElementType()).startswith("Tensor"):
                tlists.append(len(v))
            else:
                ints.append(len(v))
        elif hasattr(v, "op"):
            tensors += 1
        else:
            scalars += 1
    val = node.meta.get("val")
    outs = sum(1 for x in val if isinstance(x, torch.Tensor)) \
        if isinstance(val, (tuple, list)) else 1
    return call_bytes(outs, tensors, scalars, tuple(ints), tuple(tlists))


SLICE = call_bytes(1, 1, 4)  # slice_copy(self, dim, start, end, step)
WINDOW = call_bytes(1, 1, 1, (4, 4))  # as_strided_copy(self, size, stride, storage_offset)
PAD = call_bytes(1, 1, 1, (4,))  # constant_pad_nd(self, pad, value)
PARTIAL = call_bytes(1, 1, 2, (2,))  # sum.dim_IntList(self, dim, keepdim, dtype)
ACCUMULATE = call_bytes(1, 2, 1)  # add.Tensor(self, other, alpha)
DIVIDE = call_bytes(1, 1, 1)  # div.Scalar(self, other)
# a planned static view (`patch_layout`): the emitter writes no call, only its tensor value
VIEW_RECORD = TENSOR_OUT - 2 * TENSOR_ARG


class ExecutorchRecords(RuntimeMemory):
    """ExecuTorch's memory model for the patch search with the method allocator priced: the
    planned arena (activations, as `EXECUTORCH_MEMORY`) plus the records every call the
    rewrite adds costs (`call_bytes`), so the one evaluator chooses on what a
    microcontroller provisions. ``op_bytes``: operator index -> the records of its call in the
    described graph (`node_call_bytes`); ``layout``: the runtime's layout contract
    (`memsched.patches.Layout`, the Cortex-M one: `patch_layout.CHANNELS_LAST`), whose views
    between a feature map's forms are priced too (None: no views)."""

    def __init__(self, activations, op_bytes: dict[int, int], layout: Layout | None = None):
        super().__init__("executorch+records", activations)
        self.op_bytes = dict(op_bytes)
        self.layout = layout  # the rewrite adds layout views

    def model_persistent(self, sm) -> int:
        return sum(self.op_bytes.get(op.index, 0) for op in sm.ops)

    def copy_price(self, op) -> int:
        # every patch runs a copy of each window / element-wise / concat operator
        return self.op_bytes.get(op.index, 0) if op.cls in ("window", "eltwise", "concat") \
            else 0

    def plan_persistent_delta(self, sm, plan) -> int:
        add = 0
        for nd in plan.nodes:
            if nd.kind == "slice":  # as the rewrite cuts: one axis, or a strided window
                b, w = nd.base, nd.win
                rows = (w.h0 - b.h0, w.h1 - b.h0) != (0, b.height)
                cols = (w.w0 - b.w0, w.w1 - b.w0) != (0, b.width)
                add += WINDOW if rows and cols else SLICE
            elif nd.kind == "pad":
                add += PAD
            elif nd.kind == "concat":
                add += call_bytes(1, 0, 1, (), (len(nd.inputs),))
            elif nd.kind == "partial":
                add += PARTIAL
            elif nd.kind == "accumulate":
                add += ACCUMULATE
            elif nd.kind == "reduce":
                add += DIVIDE if sm.ops[nd.op].divisor != 1 else 0
            else:  # op, vector: a copy of the operator's call
                add += self.op_bytes.get(sm.ops[nd.op].index, 0)
        if self.layout is not None:
            add += VIEW_RECORD * len(self.layout.conversions(plan))
        return add - sum(self.op_bytes.get(sm.ops[k].index, 0) for k in plan.region.ops)


__all__ = ["ExecutorchRecords", "call_bytes", "node_call_bytes"]

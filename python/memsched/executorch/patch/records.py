"""The method allocator's records of an ExecuTorch call, at a target's ABI: what one more
instruction costs a loaded program besides its planned arenas.

At ``Program::load_method`` the runtime takes from the method allocator one `EValue` per value
of the plan, the records ``parse_values`` makes for it (a tensor's strides and `TensorImpl`,
a list's boxed and unboxed arrays: `ram.value_records`), and per instruction an
``OpFunction``, an ``InstructionArgs`` and one ``EValue*`` per argument. The emitter makes a
new value for every scalar, ``None`` and list argument of every call (an int list's items
are values too), and an out-variant call names its outputs twice: as ``out`` arguments, each
a new tensor value, and as its return (one more slot each, or for an operator returning a
tuple, a batch norm or a max pool with indices, one slot and a tensor list of them). A
Cortex-M call's CMSIS-NN scratch buffers are new tensor values too (a ``memory.alloc``
each). Tensors a call only reads (activations, weights) are values already: a slot each. A
layout view (`patch.layout`) of a planned tensor is a tensor value and no instruction; of a
user input outside the plan, an ``et_view`` call.

The sizes and alignments are `ram.ABIS`' (stated once, there): a call is priced by replaying
its values' allocations (`ram.value_records`) from where an int list leaves the bump pointer
(the emitter's commonest state), so a call costs (4-D tensors; ``host``: x86-64,
``cortex-m``: 32-bit Arm)::

                                                   host        cortex-m
    instruction (OpFunction + InstructionArgs)       24            12
    argument slot (EValue*)                           8             4
    output tensor (value + 2 slots)             96 + 16        64 + 8
    scalar / None (value + slot)                16 + 8         16 + 4
    int list of n (values + slot)          40 + 32n + 8   28 + 28n + 4 (+ 4 padding)
    tensor list of n (value + slot)        40 + 16n + 8    28 + 8n + 4

``relu`` costs 144 B on the host and 88 B on a Cortex-M; a Cortex-M convolution (13
arguments: three int pairs, four ints, a scratch buffer) 704 B and 512 B. The figures are
`ram.program_ram`'s, which equals the wheel's x86-64 runtime and the emulated Cortex-M55
(`memsched.board`) to the byte: what a patch search prices as added equals the difference of
`ram.program_ram` between the patched and the unpatched program exactly on the host ABI, and
to within 4 B per call on the 32-bit one, where an int list's ``int64`` items are 8-aligned
after 4-byte pointers and the padding depends on the values before it
(tests/test_records_abi.py).

Which ABI prices a graph (`default_target`): ``cortex-m`` for the Cortex-M backend's graphs
(any ``cortex_m::`` operator: they ship to a 32-bit Cortex-M), ``host`` for the rest (portable
fp32 programs); ``backend_config(target=...)`` chooses.
"""
from __future__ import annotations

from ...patches import Layout, RuntimeMemory
from ..memory.ram import ABIS, TARGETS, Abi, _Bump, value_records

CORTEX_M, HOST = "cortex-m", "host"

# an argument of a call: a tensor value it only reads (one slot), or a value the call brings
# (kind, n) as `ram.value_records` names it: ("Tensor", rank) for a new tensor (a scratch
# buffer), ("Int", 0) for a scalar, ("IntList", n), ("TensorList", n), ("Null", 0), ...
READ = ("read", 0)
INT = ("Int", 0)


def check_target(target) -> str | None:
    """``target`` if it names an ABI of `ram.ABIS` (or is None: chosen per graph by
    `default_target`); else ValueError."""
    if target is None or target in TARGETS:
        return target
    raise ValueError(f"records target {target!r}: one of {', '.join(TARGETS)} or None "
                     "(cortex-m for graphs with cortex_m:: operators, else host)")


def default_target(nodes) -> str:
    """The ABI a graph is priced at: ``cortex-m`` when any of its FX ``nodes`` calls a
    ``cortex_m::`` operator (the Cortex-M backend's graphs run on a 32-bit Cortex-M), else
    ``host``."""
    from .cortex_m import is_cortex_m

    return CORTEX_M if any(getattr(n, "op", None) == "call_function" and
                           is_cortex_m(n.target) for n in nodes) else HOST


# values `memsched.executorch.plan.share` shares by content: with ``shared`` prices a call's
# scalars, ``None`` and int / bool / double lists cost their slot only (the first call with
# that content pays for them, as in the unpatched program)
SHARED_KINDS = frozenset(("Null", "Int", "Bool", "Double", "String", "IntList", "BoolList",
                          "DoubleList"))


class Prices:
    """The method allocator's bytes of calls and values at one target's ABI (`ram.ABIS`).
    ``shared``: the program's equal values are shared (`memsched.executorch.plan.share`), so a
    call's scalars and scalar lists cost their slot only (new content, a patch's bounds, is
    priced once per plan by `ExecutorchRecords`)."""

    def __init__(self, target: str = HOST, shared: bool = False):
        check_target(target)
        self.target = target or HOST
        self.shared = bool(shared)
        self.abi: Abi = ABIS[self.target]
        # where an int list (its BoxedEvalueList last) leaves the bump pointer, off 8 bytes
        self._start = self.abi.boxed_list[0] % self.abi.int64[1]

    def values(self, values) -> int:
        """Bytes of new values ``values`` (``(kind, n)`` each, in the emitter's order): an
        `EValue` each (an int list's items are values too) and what ``parse_values``
        allocates for it, its alignment included."""
        b = _Bump()
        b.cur = self._start
        count = 0
        for kind, n in values:
            if self.shared and kind in SHARED_KINDS:
                continue
            count += 1 + (n if kind == "IntList" else 0)  # an int list's items: Int values
            for rec, k in value_records(self.abi, kind, n):
                b.alloc(rec, k)
        return self.abi.evalue[0] * count + b.cur - self._start

    def call(self, args, outputs=(4,), tuple_return: bool = False) -> int:
        """Bytes of one out-variant call: its instruction, an ``EValue*`` per argument (each of
        ``args``: `READ` or a new value ``(kind, n)``) and per output (``outputs``: their
        ranks), and its new values: the tensors it brings (scratch buffers), its outputs, its
        scalars and lists in argument order. The return names the outputs again: one more
        slot each, or (``tuple_return``: an operator returning a tuple, a batch norm's or a max
        pool's) one slot and a tensor list of them."""
        abi = self.abi
        new = [a for a in args if a != READ]
        # with shared values a call's scratch buffers are priced once, with the unpatched
        # call: they live for one call, the planner puts equal ones at one offset
        # (`arena.align_equal`) and they become one value (MobileNetV1-0.25's 2x4 + 1x2
        # plan: 29 CMSIS-NN buffers of 4,464 B at 9 offsets, 23 empty ones at 1)
        tensors = [a for a in new if a[0] == "Tensor" and not self.shared]
        rest = [a for a in new if a[0] != "Tensor"]
        ret = [("TensorList", len(outputs))] if tuple_return else []
        slots = len(args) + len(outputs) + (1 if tuple_return else len(outputs))
        return (abi.pointer[0] + abi.array_ref[0] + abi.pointer[0] * slots +
                self.values(tensors + [("Tensor", r) for r in outputs] + rest + ret))

    def view(self, rank: int = 4, planned: bool = True) -> int:
        """A layout view (`patch.layout`): of a planned tensor the emitter writes no call, only
        its tensor value; of one outside the plan (a user input the caller provides) an
        ``executorch_prim::et_view(self, size) -> out`` call (three slots, the sizes a new int
        list)."""
        if planned:
            return self.values([("Tensor", rank)])
        abi = self.abi  # OpFunction and InstructionArgs, three slots, sizes and the view
        return abi.pointer[0] * (1 + 3) + abi.array_ref[0] + \
            self.values([("IntList", rank), ("Tensor", rank)])

    # the calls a patch rewrite writes (`patch.rewrite`), on 4-D feature maps; with
    # ``shared`` their new scalar content is priced once per plan
    # (`ExecutorchRecords._shared_content`)
    def slice(self) -> int:  # slice_copy(self, dim, start, end, step)
        return self.call([READ, INT, INT, INT, INT])

    def window(self, rank: int = 4) -> int:  # as_strided_copy(self, size, stride, offset)
        return self.call([READ, ("IntList", rank), ("IntList", rank), INT])

    def pad(self, pads: int = 4) -> int:  # constant_pad_nd(self, pad, value)
        return self.call([READ, ("IntList", pads), ("Double", 0)])

    def cm_pad(self) -> int:  # cortex_m::pad(self, pre_pad, post_pad, pad_value)
        return self.call([READ, ("IntList", 4), ("IntList", 4), INT])

    def concat(self, n: int) -> int:  # cat(tensors, dim)
        return self.call([("TensorList", n), INT])

    def partial(self, rank: int) -> int:  # sum.dim_IntList(self, dim, keepdim, dtype)
        return self.call([READ, ("IntList", 2), ("Bool", 0), ("Null", 0)], (rank,))

    def accumulate(self, rank: int) -> int:  # add.Tensor(self, other, alpha)
        return self.call([READ, READ, INT], (rank,))

    def divide(self, rank: int) -> int:  # div.Scalar(self, other)
        return self.call([READ, ("Double", 0)], (rank,))


def _scalar_kind(v) -> str:
    if v is None:
        return "Null"
    if isinstance(v, bool):
        return "Bool"
    if isinstance(v, float):
        return "Double"
    if isinstance(v, str):
        return "String"
    return "Int"  # ints, dtypes, layouts, memory formats: the emitter writes an Int


def _list_kind(a, v) -> str:
    """The value kind of list argument ``v`` of schema argument ``a``."""
    import torch

    el = str(a.type.getElementType()) if isinstance(a.type, torch.ListType) else ""
    if el.startswith("Optional[Tensor") or el.startswith("Tensor?"):
        return "OptionalTensorList"
    if el.startswith("Tensor") or any(hasattr(x, "op") for x in v):
        return "TensorList"
    if el == "bool":
        return "BoolList"
    if el == "float":
        return "DoubleList"
    return "IntList"


def _is_alloc(v) -> bool:
    return getattr(v, "op", None) == "call_function" and \
        getattr(v.target, "__name__", "") == "alloc"


def node_call(node):
    """``(args, output ranks, tuple_return)`` of an edge-dialect FX call node as `Prices.call`
    takes them,
    its arguments read against the operator's schema (defaults included: the emitter writes
    every argument; a ``memory.alloc`` argument, a Cortex-M scratch buffer, is a new tensor);
    None for a node that is no instruction (``getitem``, a placeholder)."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None:
        return None
    import torch

    args = list(node.args)
    out = []
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
            out.append((_list_kind(a, v), len(v)))
        elif hasattr(v, "op"):
            val = v.meta.get("val")
            out.append(("Tensor", val.dim()) if _is_alloc(v) and isinstance(val, torch.Tensor)
                       else READ)
        else:
            out.append((_scalar_kind(v), 0))
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):  # each tensor of the tuple an output
        return out, tuple(x.dim() for x in val if isinstance(x, torch.Tensor)), True
    return out, (val.dim() if isinstance(val, torch.Tensor) else 4,), False


def node_call_bytes(node, target: str = HOST, shared: bool = False) -> int:
    """The method allocator's bytes of edge-dialect FX call node ``node`` at ``target``'s ABI
    (`node_call`, `Prices.call`; ``shared``: with the program's equal values shared); 0 for a
    node that is no instruction."""
    call = node_call(node)
    return Prices(target, shared).call(*call) if call is not None else 0


class ExecutorchRecords(RuntimeMemory):
    """ExecuTorch's memory model for the patch search with the method allocator priced: the
    planned arena (activations, as `EXECUTORCH_MEMORY`) plus the records every call the
    rewrite adds costs (`Prices`), so the one evaluator chooses on what the device
    provisions. ``op_bytes``: operator index -> the records of its call in the described graph
    (`node_call_bytes` at ``target``); ``layout``: the runtime's layout contract
    (`memsched.patches.Layout`, the Cortex-M one: `patch.layout.CHANNELS_LAST`), whose views
    between a feature map's forms are priced too and whose cuts pad the NHWC form (None: no
    views); ``target``: the ABI (`ram.ABIS`) the records are priced at; ``unplanned``: the
    model inputs outside the planned arena (``alloc_graph_input=False``), whose views are
    calls; ``shared``: the written program's equal values are shared
    (`memsched.executorch.plan.share`; ``op_bytes`` priced the same way)."""

    def __init__(self, activations, op_bytes: dict[int, int], layout: Layout | None = None,
                 target: str = HOST, unplanned=(), shared: bool = False,
                 out_bytes: dict[int, int] | None = None):
        super().__init__(f"executorch+records@{target}{'+shared' if shared else ''}",
                         activations)
        self.op_bytes = dict(op_bytes)
        self.layout = layout  # the rewrite adds layout views
        self.prices = p = Prices(target, shared)
        self._plain = Prices(target)  # new content priced in full (_shared_content)
        # with shared values: the part of op_bytes that is the call's output tensors, priced
        # once per (operator, window shape) of a plan (see plan_persistent_delta)
        self.out_bytes = dict(out_bytes or {}) if shared else {}
        self.target = p.target
        # constant_pad_nd's pads: (C,) W, H on the NHWC form of channels-last maps
        # a window copied row-contiguous (`patch.layout.flat_windows`): 3-item lists
        self._slice, self._window, self._flat_window = p.slice(), p.window(), p.window(3)
        self._pad = p.pad(6 if layout is not None else 4)
        self._cm_pad = p.cm_pad()  # int8 border pads on the NHWC form (`_is_cm_pad`)
        self._view, self._input_view = p.view(), p.view(planned=False)
        self.unplanned = frozenset(unplanned)

    def model_persistent(self, sm) -> int:
        return sum(self.op_bytes.get(op.index, 0) for op in sm.ops)

    def copy_price(self, op) -> int:
        # every patch runs a copy of each window / element-wise / concat operator
        return self.op_bytes.get(op.index, 0) if op.cls in ("window", "eltwise", "concat") \
            else 0

    def plan_persistent_delta(self, sm, plan) -> int:
        p = self.prices
        flat = self._flat(plan)
        add = self._shared_content(plan, flat, sm) if p.shared else 0
        seen: set = set()
        for k, nd in enumerate(plan.nodes):
            if nd.kind == "slice":  # as the rewrite cuts: one axis, or a strided window
                add += (self._flat_window if k in flat else self._window) \
                    if all(nd.cuts()) else self._slice
            elif nd.kind == "pad":
                add += self._cm_pad if self._is_cm_pad(sm, nd) else self._pad
            elif nd.kind == "concat":
                add += p.concat(len(nd.inputs))
            elif nd.kind in ("partial", "accumulate", "reduce"):
                rank = len(sm.tensors[nd.tensor].shape)  # the reduction's own result
                if nd.kind == "partial":
                    add += p.partial(rank)
                elif nd.kind == "accumulate":
                    add += p.accumulate(rank)
                elif sm.ops[nd.op].divisor != 1:
                    add += p.divide(rank)
            else:  # op, vector: a copy of the operator's call
                index = sm.ops[nd.op].index
                add += self.op_bytes.get(index, 0)
                if self.out_bytes:
                    # equal windows of one operator: equal tensors the planner can put at
                    # one offset (`arena.align_equal`), then one value (`share`)
                    shape = (index, nd.kind, nd.win.height, nd.win.width) \
                        if nd.win is not None else (index, nd.kind, id(nd))
                    if shape in seen:
                        add -= self.out_bytes.get(index, 0)
                    seen.add(shape)
        if self.layout is not None:
            for src, _ in self.layout.conversions(plan):
                outside = isinstance(src, tuple) and src[1] in self.unplanned
                add += self._input_view if outside else self._view
        return add - sum(self.op_bytes.get(sm.ops[k].index, 0) for k in plan.region.ops)

    def _is_cm_pad(self, sm, nd) -> bool:
        """Whether the rewrite writes border pad ``nd`` as ``cortex_m::pad``
        (`patch.cortex_m.cm_pad_fits`: int8, one byte a value in the Cortex-M flow, on the
        NHWC form of channels-last maps)."""
        from .cortex_m import cm_pad_fits
        from .layout import CHANNELS_LAST

        if self.layout != CHANNELS_LAST or sm.tensors[nd.tensor].itemsize != 1:
            return False
        top, bottom, left, right = nd.pads
        n, _, _, c = (list(sm.tensors[nd.tensor].shape) + [1, 1, 1, 1])[:4]
        return cm_pad_fits([n, nd.win.height - top - bottom, nd.win.width - left - right, c],
                           "int8")

    def _flat(self, plan) -> set:
        """The windows the rewrite copies row-contiguous (on channels-last maps only)."""
        from .layout import CHANNELS_LAST, flat_windows

        return flat_windows(plan) if self.layout == CHANNELS_LAST else set()

    def _shared_content(self, plan, flat, sm) -> int:
        """With shared values: the bytes of the scalar content the plan's cuts bring, each
        distinct value once (`Prices.slice` and friends then price their calls without it):
        a slice's bounds and a window's offset (ints), a window's sizes and a border's pads
        (int lists, by their items)."""
        ints, lists = set(), set()
        pad_items = 6 if self.layout is not None else 4
        for k, nd in enumerate(plan.nodes):
            if nd.kind == "slice":
                b, w = nd.base, nd.win
                rows = (w.h0 - b.h0, w.h1 - b.h0)
                cols = (w.w0 - b.w0, w.w1 - b.w0)
                cut_rows, cut_cols = nd.cuts()
                if cut_rows and cut_cols:
                    ints.add(("offset", rows[0], cols[0]))
                    size = (rows[1] - rows[0], cols[1] - cols[0])
                    lists.add(("size", 3 if k in flat else 4, *size))
                    ints.update(size)
                else:
                    ints.update(rows if cut_rows else cols)
            elif nd.kind == "pad" and self._is_cm_pad(sm, nd):  # pre and post, 4 items
                top, bottom, left, right = nd.pads
                lists.update({("ints", 4, 0, top, left, 0), ("ints", 4, 0, bottom, right, 0)})
                ints.update((0, *nd.pads))
            elif nd.kind == "pad":
                lists.add(("pads", pad_items, *nd.pads))
                ints.update(nd.pads)
        plain = self._plain
        # a list's items are Int values like any other (in ``ints``): the list brings its
        # EValue, pointers and unboxed copies
        return plain.values([INT] * len(ints)) + sum(
            plain.values([("IntList", key[1])]) - key[1] * plain.abi.evalue[0] for key in lists)


__all__ = ["CORTEX_M", "HOST", "ExecutorchRecords", "Prices", "check_target",
           "default_target", "node_call", "node_call_bytes"]

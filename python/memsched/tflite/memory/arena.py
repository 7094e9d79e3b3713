"""TFLite Micro's minimal arena for a .tflite file, computed from the file (no interpreter).

`arena` replays what ``MicroInterpreter::AllocateTensors()`` allocates over a
``RecordingMicroAllocator`` (how the ``tflite-micro`` Python package and the emulated Cortex-M55's
runner set the interpreter up) and bisects the smallest arena exactly as
`memsched.tflite.tflm.min_arena_bytes` and the board's ``--min-arena`` do (start at 1 MiB,
double until it fits, halve to 16 B). Two targets:

* ``cortex-m`` (default): a 32-bit Cortex-M (the emulated M55, ``memsched.board``): TFLM
  90b983c2, ``TF_LITE_STATIC_MEMORY``, the CMSIS-NN kernels with MVE where TFLM has them
  (``OPTIMIZED_KERNEL_DIR=cmsis_nn``, ``KERNELS_OPTIMIZED_FOR_SPEED``), GCC's short enums;
* ``host``: the venv's ``tflite-micro`` package on x86-64 (TFLM 8f6596d, reference kernels,
  ``TF_LITE_STATIC_MEMORY`` and ``USE_TFLM_COMPRESSION``).

**Where TFLM allocates.** One arena, a head section growing up from its start and a tail
section growing down from its end (``SingleArenaBufferAllocator``):

* *tail* (persistent, never freed; ``AllocatePersistentBuffer`` aligns *down* and fails only
  when it would cross the head): the allocator objects themselves (the recording buffer
  allocator, the ``GreedyMemoryPlanner``, the ``RecordingMicroAllocator``, the builtin-data
  allocator), one ``SubgraphAllocations``, one ``TfLiteEvalTensor`` per tensor of the subgraph
  (constants included), one ``NodeAndRegistration`` per operator, each operator's parsed
  builtin options (``TfLiteConvParams`` ...: size and alignment of the C struct), each kernel's
  op data (``Init``: 16-byte aligned), what the kernels' ``Prepare`` keeps (per-channel output
  multipliers and shifts, 4 B per channel each, for quantized CONV_2D / DEPTHWISE_CONV_2D /
  per-channel FULLY_CONNECTED; CMSIS-NN's FULLY_CONNECTED, SVDF and int8 LSTM kernel sums, 4 B
  per output channel, filter or (8 vectors) unit;
  int16 softmax tables; a RESHAPE's resolved dims; a GATHER's output dims; BATCH_MATMUL's
  transposed operand copies, output dims and quantization record), the scratch-buffer
  handles (one pointer each), variable tensors without an offline offset, and at the end the
  ``TfLiteTensor`` (+ quantization: ``TfLiteAffineQuantization`` and a zero-point array of 4 +
  4 x channels B) of every model input and output plus the two pointer arrays to them.
* *head* (non-persistent): after ``AllocateTensors`` exactly the memory plan, i.e. the greedy
  planner's maximum of offset + size over the planned buffers: every non-constant,
  non-variable tensor of non-zero size and every scratch buffer a kernel requested, each
  rounded up to 16 B. While it runs the head holds the scratch-buffer requests
  (``ScratchBufferRequest`` x (requests + 12)), and above it *temporary* allocations that only
  move up until the next reset: the ``TfLiteTensor`` structs (+ quantization) each ``Prepare``
  asks for (one node at a time), then, for planning, ``size_t`` per subgraph, one
  ``AllocationInfo`` per tensor and scratch buffer, and all the remaining memory for the
  planner, which needs 40 B per planned buffer. Those transient needs are why the minimal
  arena can exceed head + tail (``transient_bytes``).

**Sizes** (bytes, 32-bit Cortex-M / 64-bit host): ``TfLiteEvalTensor`` 12 / 24,
``NodeAndRegistration`` 32 / 64, ``TfLiteTensor`` 32 / 64, ``TfLiteAffineQuantization`` 12 /
24, ``SubgraphAllocations`` 8 / 24, ``ScratchBufferRequest`` 12 / 16, ``AllocationInfo`` 24 /
32, scratch handle 4 / 8, allocator objects 52 + 44 + 124 + 8 / 104 + 72 + 272 + 16; builtin
options and op data per kernel in `ABIS`: ``sizeof``/``alignof`` of TFLM's headers compiled
by ``arm-none-eabi-g++ -mcpu=cortex-m55`` (short enums: ``TfLiteFullyConnectedParams`` is 5 B)
and by the host ``g++`` with the package's defines; the host's builtin options checked against
the package's own parse functions (8f6596d's ``TfLiteFullyConnectedParams`` is 32 B, 8-aligned,
not 90b983c2's 16).

**CMSIS-NN scratch buffers** (``cortex-m``; the ``arm_*_get_buffer_size_mve`` functions, int8):
CONV_2D: 0 for a 1x1 convolution without padding or dilation, the 1xN size for a one-row
input, else im2col ``4 x ceil(C_in x K_w x K_h / 16) x 16``; DEPTHWISE_CONV_2D: ``4 x 124 x
K_w x K_h`` when C_in == C_out, batch 1 and no dilation, or (one input channel) the
convolution's size plus the filter's; FULLY_CONNECTED: ``8 x C_out`` when the output has more
than two dimensions and the depth is a multiple of 4 (per-tensor quantization), else the
kernel sums go to the tail; BATCH_MATMUL: ``4 x`` the output's columns; AVERAGE_POOL_2D: 0
with MVE; int8 TRANSPOSE_CONV: a column buffer and a reversed-filter buffer
(`kernels_elementwise`). The reference kernels (``host``) ask for none of these (MEAN / SUM
ask for their accumulators on both, SVDF for its feature products and int8 outputs on both,
LSTM for 4 buffers of its cell state, 3 with CMSIS-NN in int8; ADD_N for its input pointers,
MIRROR_PAD for two arrays of 4 B per dimension, int8 TRANSPOSE_CONV (reference) for 4 B per
output element).

**The planner** (``GreedyMemoryPlanner``, `greedy_plan`): buffers with an offline offset (the
``OfflineMemoryAllocation`` metadata) are placed at it first, in tensor order; the others,
largest first (ties: the later-added buffer first; scratch buffers are added after the
tensors), go at the lowest offset where they do not overlap any buffer live at the same time.
A tight offline plan leaves no gap, so CMSIS-NN's scratch buffers land above it and the head
grows past the plan's size. Lifetimes: operator ``i`` is step ``i + 1``; subgraph inputs from
step 0, outputs to the last step, scratch buffers during their operator. With several
subgraphs (CALL_ONCE, IF, WHILE) every subgraph's tensors are planned together, in subgraph
order, and each subgraph an operator runs is marked inside that operator's steps (one new step
per call, `_lifetimes`); eval tensors and nodes are allocated per subgraph.

**The bisection's transient needs**: a probe fails as soon as one allocation fails: a
temporary one with fewer bytes left below the tail, the planner's memory under 40 B per
buffer, the head's reservations, or a persistent one reaching below the head *or into
temporary data a kernel still reads*. TFLM itself checks a persistent allocation against the
head only (and a temporary one with an unsigned count that passes once it starts above the
tail): in such a probe a kernel's ``Prepare`` writes its per-channel arrays or kernel sums over
its own temporary ``TfLiteTensor`` structs. What it reads afterwards is the whole
``TfLiteTensor`` and the two pointers of its ``TfLiteAffineQuantization``, never the
quantized dimension or the zero-point array, so those last bytes may be overwritten (the
replay allows exactly that). When the overwrite does hit a struct, the host package failed
the probe in every file checked, and the board's firmware can fault in the planner (a
FULLY_CONNECTED stack whose kernel sums overlap the temporaries): the board's
``--min-arena`` then has no answer while `arena` gives the smallest arena that allocates
cleanly (checked on the board with ``--arena N`` and ``N - 16``). Otherwise ``arena_bytes``
is the board's (and the host's) bisection result.

Priced: the builtin operators of `priced_operators`, on float32, int8 and 16x8 (int16
activations, int8 weights) tensors, convolutions and fully connected layers also with int4
weights (the CMSIS-NN s16 and s4 sizes; the reference kernels' int4 unpacking and 16x8
TRANSPOSE_CONV's int64 accumulators as scratch), any number of subgraphs; the resource
variables as the ``tflite-micro`` package sets them up (`kernels_misc`).
Anything else raises `UnpricedModelError` naming it; bad files raise `TFLiteModelError` (both
``ValueError``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import SimpleNamespace

from ..format.read import (TFLiteGraph, TFLiteModelError, _text, op_names, read_offline_plan,
                           read_tflite)
from .abi import (ABIS, ALIGN, MAX_SCRATCH_PER_OP, ONLINE, PLANNER_BYTES_PER_BUFFER,
                  RESOURCE_VARIABLES, TARGETS, Abi, UnpricedModelError, persistent_price,  # noqa: F401
                  priced_operators, round_down, round_up)
from .kernels import PREPARE, Node, tensors_of
from .kernels_misc import CUSTOM, UNREGISTERED, resource_variables
from .planner import greedy_plan  # noqa: F401 (importable here)


@dataclass(frozen=True)
class ArenaReport:
    """TFLite Micro's minimal arena for one file on one target.

    ``arena_bytes``: the smallest arena (16-B bisection, as the board and the host measure it)
    in which ``AllocateTensors()`` succeeds; ``head_bytes``: the planned part it keeps
    (activations and scratch buffers); ``tail_bytes``: the persistent part (``tail_parts``: by
    kind: allocator objects, eval tensors, nodes, builtin options, op data, what ``Prepare``
    keeps, scratch handles, variables, the input and output tensors); ``transient_bytes``: what
    ``AllocateTensors()`` needs only while it runs (temporary allocations), beyond head + tail
    rounded up to 16 B; ``scratch_bytes``: what the kernels' scratch buffers add to the head
    (the head minus the same plan without them); ``scratch``: (operator, kind, bytes rounded
    to 16) of each scratch buffer (each lives during its operator only); ``offline_plan``: the
    file carries an ``OfflineMemoryAllocation``; ``plan_bytes``: the largest offset + size of
    the offline-planned tensors (None without a plan)."""

    target: str
    kernels: str
    arena_bytes: int
    head_bytes: int
    tail_bytes: int
    transient_bytes: int
    scratch_bytes: int
    scratch: tuple = ()
    offline_plan: bool = False
    plan_bytes: int | None = None
    ops: int = 0
    tensors: int = 0
    tail_parts: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"target": self.target, "kernels": self.kernels, "arena_bytes": self.arena_bytes,
                "head_bytes": self.head_bytes, "tail_bytes": self.tail_bytes,
                "transient_bytes": self.transient_bytes, "scratch_bytes": self.scratch_bytes,
                "scratch": [list(s) for s in self.scratch], "offline_plan": self.offline_plan,
                "plan_bytes": self.plan_bytes, "ops": self.ops, "tensors": self.tensors,
                "tail_parts": dict(self.tail_parts)}


# ---------------------------------------------------------------------------------------------
# the replay


@dataclass
class _Trace:
    """What AllocateTensors does, in order, whatever the arena size: ``events`` are
    ("p", bytes, align, part): persistent; ("t", bytes, align, bytes still read): temporary;
    ("reset",): temporaries freed; ("resize", bytes, align): the head's resizable buffer;
    ("planner", buffers): the planner takes all the memory left. ``head``: the plan's size
    (``head_without_scratch``: without the kernels' scratch buffers)."""

    events: list
    head: int
    head_without_scratch: int
    scratch: list
    plan_bytes: int | None
    parts: tuple


_CALLS = {"IF": ("thenSubgraphIndex", "elseSubgraphIndex"), "CALL_ONCE":
          ("initSubgraphIndex",), "WHILE": ("condSubgraphIndex", "bodySubgraphIndex")}


def _lifetimes(model, sgs, requests):
    """``AllocationInfoBuilder::MarkAllocationLifetimes`` from subgraph 0: one scope per
    operator, and the subgraphs a control-flow operator runs marked inside it (a new scope
    each); a scratch buffer lives from its operator's scope to the end of its subgraphs'.
    Returns first and last scope per subgraph and tensor, and (first, last) per request."""
    names = op_names()
    codes = model.operatorCodes or []
    first = [[-1] * len(g.tensors or []) for g in sgs]
    last = [[-1] * len(g.tensors or []) for g in sgs]
    req_life = [(-1, -1)] * len(requests)
    scope = 0
    depth = 0

    def mark(s):
        nonlocal scope, depth
        depth += 1
        if depth > 64:
            raise UnpricedModelError("control flow nested deeper than 64 subgraphs (a cycle?)")
        g = sgs[s]
        f, la = first[s], last[s]
        for t in (g.inputs if g.inputs is not None else []):
            t = int(t)
            if f[t] == -1:
                f[t] = scope
            la[t] = scope
        for v, op in enumerate(g.operators or []):
            scope += 1
            for t in (op.outputs if op.outputs is not None else []):
                if f[int(t)] == -1:
                    f[int(t)] = scope
            start = scope
            code = codes[op.opcodeIndex]
            kind = names.get(max(int(code.builtinCode), int(code.deprecatedBuiltinCode)))
            for attr in _CALLS.get(kind, ()):
                callee = int(getattr(op.builtinOptions, attr))
                if not 0 <= callee < len(sgs):
                    raise UnpricedModelError(f"operator {v} ({kind}) calls subgraph {callee} "
                                             f"of {len(sgs)}; TFLite Micro rejects the file")
                scope += 1
                mark(callee)
            for t in (op.inputs if op.inputs is not None else []):
                if int(t) >= 0:
                    la[int(t)] = scope
            for t in (op.outputs if op.outputs is not None else []):
                la[int(t)] = scope
            for r, (_, rs, rv) in enumerate(requests):
                if rs == s and rv == v:
                    req_life[r] = (start if req_life[r][0] == -1 else req_life[r][0], scope)
        for t in (g.outputs if g.outputs is not None else []):
            t = int(t)
            if f[t] == -1:
                f[t] = scope
            la[t] = scope
        depth -= 1

    mark(0)
    return first, last, req_life


def _trace(tg: TFLiteGraph, abi: Abi, label: str) -> _Trace:
    model = tg.model
    sgs = list(model.subgraphs or [])
    if not sgs:
        raise UnpricedModelError(f"{label}: no subgraph")
    sg = sgs[0]
    names = op_names()
    # per subgraph: its tensors as TFLM sees them (control flow: IF, WHILE, CALL_ONCE run
    # the others; every subgraph is allocated, prepared and planned together)
    tensors_by = [tensors_of(SimpleNamespace(model=model, subgraph=g), label) for g in sgs]
    tensors = tensors_by[0]
    nt_all = sum(len(t) for t in tensors_by)
    codes = model.operatorCodes or []
    cmsis = abi.kernels == "cmsis-nn"
    ev: list = []

    def persist(what, size, align):
        ev.append(("p", int(size), int(align), what))

    for size, align in abi.allocator_objects:
        persist("allocator", size, align)
    nvars = resource_variables(tg)
    if nvars:  # MicroResourceVariables::Create, before the interpreter (as the package does)
        persist("resource_variables", RESOURCE_VARIABLES[abi.name][0], ALIGN)
        persist("resource_variables", RESOURCE_VARIABLES[abi.name][1] * nvars, ALIGN)
    # StartModelAllocation
    persist("allocator", *abi.builtin_data_allocator)
    req_size, req_align = abi.scratch_request
    ev.append(("resize", req_size * MAX_SCRATCH_PER_OP, req_align))
    persist("allocator", abi.subgraph_allocations[0] * len(sgs), abi.subgraph_allocations[1])
    for ts in tensors_by:
        persist("eval_tensors", abi.eval_tensor[0] * len(ts), abi.eval_tensor[1])
    for g in sgs:
        persist("nodes", abi.node_and_registration[0] * len(g.operators or []),
                abi.node_and_registration[1])
    nodes = []
    unpriced: dict[str, list[int]] = {}
    unregistered: dict[str, str] = {}  # name -> why stock TFLM cannot run it
    state: dict = {}
    for s, g in enumerate(sgs):
        ts, nt = tensors_by[s], len(tensors_by[s])
        for v, op in enumerate(g.operators or []):
            code = codes[op.opcodeIndex]
            kind = names.get(max(int(code.builtinCode), int(code.deprecatedBuiltinCode)), "?")
            if kind == "CUSTOM":
                kind = CUSTOM.get(_text(code.customCode), kind)
            if kind == "CUSTOM" or kind not in PREPARE:
                name = kind if kind != "CUSTOM" else f"CUSTOM {_text(code.customCode)!r}"
                if kind == "CUSTOM" and _text(code.customCode) in UNREGISTERED:
                    name, why = UNREGISTERED[_text(code.customCode)]
                    unregistered[name] = why
                unpriced.setdefault(name, []).append(v if s == 0 else f"{v} of subgraph {s}")
                continue
            node = Node(v, kind, op, ts, abi)
            node.state, node.sg, node.subgraphs = state, s, sgs
            for t in node.outs:
                if not 0 <= t < nt:
                    raise TFLiteModelError(f"cannot read model {label!r}: operator {v} "
                                           f"writes tensor {t}")
            inter = [int(t) for t in (op.intermediates if op.intermediates is not None
                                      else [])]
            if any(not 0 <= t < nt for t in inter):
                raise TFLiteModelError(f"cannot read model {label!r}: operator {v} has an "
                                       "intermediate tensor out of range")
            if any(ts[t].bytes != 0 for t in inter):
                raise UnpricedModelError(f"{label}: operator {v} ({kind}) has intermediate "
                                         "tensors of non-zero size, which TFLite Micro "
                                         "rejects")
            nodes.append(node)
    if unpriced:
        def where(k):
            v = unpriced[k]
            return (f"{k} (operator{'s' if len(v) > 1 else ''} "
                    f"{', '.join(map(str, v[:5]))}{' ...' if len(v) > 5 else ''})")

        # operators stock TFLM cannot run: the reason, not the list of priced ones
        why = "; ".join(f"{where(k)}: {unregistered[k]}" for k in sorted(unregistered))
        what = ", ".join(where(k) for k in sorted(unpriced) if k not in unregistered)
        raise UnpricedModelError(
            f"{label}: " + "; ".join(
                ([why] if why else []) +
                ([f"TFLite Micro's arena is not priced for {what}; priced operators: "
                  f"{', '.join(priced_operators())}"] if what else [])))
    for node in nodes:  # PrepareNodeAndRegistrationDataFromFlatbuffer: builtin options
        if node.kind in abi.builtin:
            persist("builtin_data", *abi.builtin[node.kind])
    for node in nodes:  # InitSubgraphs
        size = abi.op_data[node.kind]
        if size is not None:
            persist("op_data", size, ALIGN)
    scratch: list[tuple[int, str, int]] = []
    requests: list[tuple[int, int, int]] = []  # (bytes, subgraph, node)
    for node in nodes:  # PrepareSubgraphs
        PREPARE[node.kind](node, cmsis)
        for e in node.events:
            if e[0] == "s":
                requests.append((e[1], node.sg, node.v))
                if node.sg == 0:
                    scratch.append((node.v, node.kind, round_up(e[1], ALIGN)))
            elif e[0] == "p":
                ev.append(("p", e[1], e[2], "prepare"))
            else:
                ev.append(e)
        for t in node.outs:
            t = node.tensors[t]
            if t.bytes < 0 or (any(d <= 0 for d in t.shape) and t.shape != (0,)):
                raise UnpricedModelError(f"{label}: operator {node.v} ({node.kind}) has a "
                                         "dynamic output shape, which TFLite Micro rejects")
        ev.append(("reset",))
        # FinishPrepareNodeAllocations: room for the next operator's requests (TFLM ignores
        # a failure here, but then the requests overwrite temporaries: counted as failing;
        # planning needs more room anyway)
        ev.append(("resize", req_size * (len(requests) + MAX_SCRATCH_PER_OP), req_align))
    if any(t.bytes < 0 for ts in tensors_by for t in ts):
        raise UnpricedModelError(f"{label}: a tensor of dynamic shape: not priced")
    # FinishModelAllocation
    if requests:
        persist("scratch_handles", abi.scratch_handle[0] * len(requests), abi.scratch_handle[1])
    ev.append(("t", abi.word * len(sgs), abi.word, abi.word * len(sgs)))  # subgraph offsets
    ai_size, ai_align = abi.allocation_info
    ai_bytes = ai_size * (nt_all + len(requests))
    ev.append(("t", ai_bytes, ai_align, ai_bytes))
    plan = read_offline_plan(model)
    if plan is not None and len(plan) != nt_all:
        raise UnpricedModelError(f"{label}: its offline plan has {len(plan)} offsets for "
                                 f"{nt_all} tensors; TFLite Micro rejects the file")
    for ts in tensors_by:  # AllocateVariables (each subgraph indexes the plan from 0)
        for i, t in enumerate(ts):
            if t.variable and (plan is None or plan[i] == ONLINE):
                persist("variables", t.bytes, ALIGN)
    first, last, req_life = _lifetimes(model, sgs, requests)
    buffers = []
    # a VAR_HANDLE's output points at its op data after Prepare: not planned
    handles = state.get("tensor_ids", {})
    k = 0
    for s, ts in enumerate(tensors_by):
        for i, t in enumerate(ts):
            needs = not t.const and not t.variable and t.bytes != 0 and (s, i) not in handles
            off = plan[k] if plan is not None else ONLINE
            if plan is not None and t.variable and off != ONLINE:
                needs = True
            if needs:
                buffers.append((round_up(t.bytes, ALIGN), first[s][i], last[s][i], off))
            k += 1
    for (nbytes, _, _), (a, b) in zip(requests, req_life):
        buffers.append((round_up(nbytes, ALIGN), a, b, ONLINE))
    offsets = greedy_plan(buffers)
    head = max((o + b[0] for o, b in zip(offsets, buffers)), default=0)
    tensor_buffers = buffers[:len(buffers) - len(requests)]
    head_without_scratch = max((o + b[0] for o, b in zip(greedy_plan(tensor_buffers),
                                                         tensor_buffers)), default=0)
    plan_bytes = None
    if plan is not None:
        plan_bytes = max((o + b[0] for o, b in zip(offsets, buffers) if b[3] != ONLINE),
                         default=0)
    ev.append(("planner", len(buffers)))
    ev.append(("reset",))
    ev.append(("resize", 0, 1))  # DeallocateResizableBuffer
    ev.append(("resize", head, ALIGN))  # ReserveNonPersistentOverlayMemory
    # the interpreter's input and output TfLiteTensors
    for ids, what in ((sg.inputs, "inputs"), (sg.outputs, "outputs")):
        ids = [int(t) for t in (ids if ids is not None else [])]
        persist(what, abi.word * len(ids), ALIGN)
        for t in ids:
            persist(what, *abi.tflite_tensor)
            if tensors[t].channels:
                persist(what, *abi.affine_quantization)
                persist(what, 4 + 4 * tensors[t].channels, 4)
    parts = tuple(dict.fromkeys(e[3] for e in ev if e[0] == "p"))
    return _Trace(ev, head, head_without_scratch, scratch, plan_bytes, parts)


def _replay(trace: _Trace, size: int, base: int = 1 << 20):
    """Whether AllocateTensors succeeds in ``size`` bytes at a 16-byte aligned ``base``
    without overwriting data it still reads: (ok, head bytes, tail bytes, tail bytes per
    part). TFLM checks less: a persistent allocation only against the head, a temporary one
    with an unsigned count that passes once it starts above the tail; such a probe corrupts
    the arena (on the board the bisection then faults, see `arena`)."""
    bh = base
    head = temp = live = base  # live: the end of the temporary data still read
    tail = base + size
    parts = dict.fromkeys(trace.parts, 0)
    for e in trace.events:
        k = e[0]
        if k == "p":
            r = round_down(tail - e[1], e[2])
            if r < live:  # crosses the head, or temporary data still read
                return False, 0, 0, parts
            parts[e[3]] += tail - r
            tail = r
        elif k == "t":
            r = round_up(temp, e[2])
            if tail - r < e[1]:
                return False, 0, 0, parts
            temp = r + e[1]
            if e[3]:
                live = r + e[3]
        elif k == "reset":
            temp = live = head
        elif k == "resize":
            r = round_up(bh, e[2])
            if tail - r < e[1]:
                return False, 0, 0, parts
            head = temp = live = r + e[1]
        elif k == "planner":  # all the memory left, 40 B per planned buffer
            start = round_up(temp, ALIGN)
            remaining = round_down(tail, ALIGN) - start
            if remaining < 0 or e[1] > remaining // PLANNER_BYTES_PER_BUFFER:
                return False, 0, 0, parts
            temp = live = start + remaining
    return True, max(head, temp) - bh, base + size - tail, parts


def _bisect(allocates, resolution: int = 16, start: int = 1 << 20, limit: int = 1 << 34) -> int:
    """The runner's and `memsched.tflite.tflm.min_arena_bytes`'s bisection."""
    hi = start
    while not allocates(hi):
        hi *= 2
        if hi > limit:
            raise UnpricedModelError("TFLite Micro cannot allocate the model in any arena "
                                     f"up to {limit:,} B")
    lo = 0
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        if allocates(mid):
            hi = mid
        else:
            lo = mid
    return hi


def arena(model_or_path, target: str = "cortex-m") -> ArenaReport:
    """TFLite Micro's minimal arena for a .tflite file (a path, its bytes or a `TFLiteGraph`)
    on ``target`` (`TARGETS`), computed by replaying ``AllocateTensors()`` (module docstring).

    Raises `TFLiteModelError` for a bad file and `UnpricedModelError` for operators, types or
    structures it does not price (the message names them)."""
    if target not in ABIS:
        raise ValueError(f"target {target!r}: choose one of {', '.join(TARGETS)}")
    abi = ABIS[target]
    if isinstance(model_or_path, TFLiteGraph):
        tg, label = model_or_path, model_or_path.name
    elif isinstance(model_or_path, (bytes, bytearray, memoryview)):
        tg, label = read_tflite(bytes(model_or_path)), "model.tflite"
    else:
        label = os.fspath(model_or_path)
        tg = read_tflite(label)
    try:
        trace = _trace(tg, abi, label)
    except (IndexError, KeyError, TypeError, AttributeError, ZeroDivisionError,
            OverflowError) as e:  # a malformed file the reader let through
        raise TFLiteModelError(f"cannot read model {label!r}: malformed model for TFLite "
                               f"Micro ({type(e).__name__}: {e})") from None
    size = _bisect(lambda s: _replay(trace, s)[0])
    ok, head, tail, parts = _replay(trace, size)
    assert ok
    return ArenaReport(
        target=target, kernels=abi.kernels, arena_bytes=size, head_bytes=head,
        tail_bytes=tail, transient_bytes=size - round_up(head + tail, ALIGN),
        scratch_bytes=trace.head - trace.head_without_scratch, scratch=tuple(trace.scratch),
        offline_plan=trace.plan_bytes is not None, plan_bytes=trace.plan_bytes,
        ops=len(tg.subgraph.operators or []), tensors=len(tg.subgraph.tensors or []),
        tail_parts={k: v for k, v in parts.items() if v})


def scratch_requests(tg: TFLiteGraph, target: str = "cortex-m") -> dict[int, list[int]]:
    """The scratch buffers each operator's kernel requests on ``target`` (file operator index
    -> bytes of each, rounded up to 16 as TFLM plans them; operators without any are left
    out): what the memory plan must hold during that operator besides its tensors. Raises as
    `arena` does."""
    if target not in ABIS:
        raise ValueError(f"target {target!r}: choose one of {', '.join(TARGETS)}")
    out: dict[int, list[int]] = {}
    for v, _, size in _trace(tg, ABIS[target], tg.name).scratch:
        out.setdefault(int(v), []).append(int(size))
    return out


__all__ = ["ArenaReport", "TARGETS", "UnpricedModelError", "arena", "greedy_plan",
           "persistent_price", "priced_operators", "scratch_requests"]

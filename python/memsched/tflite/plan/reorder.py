"""Rewrite a .tflite file so TFLite and TFLite Micro need less activation memory.

Both interpreters run subgraph 0's operators in file order and plan their activation arena
from that order. `reorder_tflite` schedules the operators with memsched (certified minimum peak
under TFLM's memory model) and writes the file back with the operator list in the new order;
tensors, quantization, signatures and metadata are kept, except what the new order makes
stale: an offline plan already in the file is re-planned for the new order (see
`reorder_tflite`), and buffers nothing references any more are dropped. With
``offline_plan=True`` it also writes tensor offsets from memsched's arena packing into the
``OfflineMemoryAllocation`` metadata that TFLM's GreedyMemoryPlanner takes as fixed offsets
(TFLM docs, "Offline planned tensor allocations": int32 ``[version 1, subgraph 0, n,
offset of tensor 0 .. n-1]``, ``-1`` = plan at run time, offsets from the start of the arena's
head section).

TFLM's memory model (when a tensor lives, what the arena holds) is stated once in
`memsched.tflite.memory.model`; the schedule's peak under it is the liveness bound of TFLM's
arena, and the offline plan (16-byte aligned, as TFLM aligns) reaches it whenever the packing
does.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ...memory import Problem
from ..format.check import check_model
from ..format.read import TFLiteGraph, TFLiteModelError, read_tflite
from ..format.write import OFFLINE_METADATA  # noqa: F401 - the metadata name, re-exported
from ..format.write import (drop_orphan_buffers, finish_model, inline_buffers, pack_model,
                            read_offline_plan, remove_offline_plan, set_offline_plan, write_model)
from ..memory.model import TFLM_MODEL, with_scratch
from .pack import offline_offsets


@dataclass
class ReorderResult:
    """What `reorder_tflite` did. Bytes are activation bytes of subgraph 0."""

    ops: int
    order: list[int]  # new position -> original operator index
    input_peak: int  # liveness peak of the file's order
    peak: int  # liveness peak of the written order
    lower_bound: int
    optimal: bool
    algorithm: str
    seconds: float
    offline_arena: int | None = None  # bytes of the offline plan (head section), if written
    offline_optimal: bool | None = None
    offline_plan_action: str | None = None  # written | replanned | kept | removed | None
    # TFLite Micro's minimal total arena of the written file on ``target``, computed from it
    # (`memory.arena.arena`; None: no target, or an operator it does not price)
    target: str | None = None
    arena_bytes: int | None = None
    original_arena_bytes: int | None = None
    arena_unpriced: str | None = None  # why ``arena_bytes`` is None with a target
    notes: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"ops": self.ops, "input_order_peak_bytes": self.input_peak,
                "peak_bytes": self.peak, "lower_bound": self.lower_bound,
                "optimal": self.optimal, "algorithm": self.algorithm,
                "seconds": round(self.seconds, 4), "offline_arena_bytes": self.offline_arena,
                "offline_arena_optimal": self.offline_optimal,
                "offline_plan_action": self.offline_plan_action, "target": self.target,
                "arena_bytes": self.arena_bytes,
                "original_arena_bytes": self.original_arena_bytes,
                "arena_unpriced": self.arena_unpriced, "notes": self.notes,
                "order": self.order}


def reorder_tflite(src: str, dst: str | None = None, *, offline_plan: bool = False,
                   algorithm: str = "auto", time_limit: float | None = 60.0,
                   arena_time_limit: float = 10.0, target: str | None = "cortex-m"
                   ) -> tuple[bytes, ReorderResult]:
    """Schedule subgraph 0 of ``src`` (path or bytes) for minimum peak and write the reordered
    model.

    Returns (file bytes, result); writes them to ``dst`` (atomically, umask honoured) when given.
    The order is only changed when it lowers the peak; an already optimal file keeps its order.

    An ``OfflineMemoryAllocation`` plan already in ``src`` is never kept stale: it is kept only
    if the operator order is unchanged and the plan is valid for it, else re-planned for the
    written order (``offline_plan_action`` says which; a control-flow model's plan, which this
    writer cannot re-plan, is removed). The written bytes pass the independent checker
    (`memsched.tflite.format.check`) before they are returned.

    ``target``: the device the file is planned for (`memory.arena.TARGETS`): ``cortex-m`` (a
    32-bit Cortex-M with the CMSIS-NN kernels, whose scratch buffers the order and the
    offline plan make room for), ``host`` (the ``tflite-micro`` package's reference kernels)
    or None (tensors only); ``arena_bytes`` is then TFLite Micro's minimal arena there.
    """
    t0 = time.perf_counter()
    tg = read_tflite(src)
    label = src if isinstance(src, str) else "model.tflite"
    original = target and _target_arena(tg.data, target)  # before reorder_model changes tg
    data, res = reorder_model(tg, label, out_label=dst, offline_plan=offline_plan,
                              algorithm=algorithm, time_limit=time_limit,
                              arena_time_limit=arena_time_limit, target=target)
    res.original_arena_bytes = original or None
    if original and res.arena_bytes is not None and res.arena_bytes > original:
        # never larger than the original on the target: the original is written unchanged
        res.notes.append(f"the reordered file needs {res.arena_bytes:,} B on {target}, the "
                         f"original {original:,} B: the original is written unchanged")
        data, res.arena_bytes = bytes(tg.data), original
    res.seconds = time.perf_counter() - t0
    if dst is not None:
        write_model(dst, data)
    return data, res


def reorder_model(tg: TFLiteGraph, label: str = "model.tflite", *, out_label: str | None = None,
                  offline_plan: bool = False, algorithm: str = "auto",
                  time_limit: float | None = 60.0, arena_time_limit: float | None = 10.0,
                  inplace_quantize: bool = False, schedule_options: dict | None = None,
                  arena_nodes: int | None = None, target: str | None = None,
                  views: bool = False) -> tuple[bytes, ReorderResult]:
    """`reorder_tflite` of a model already in memory (``tg``: a parsed file, or a rewrite's
    model through `memsched.tflite.format.read.graph_of`); ``tg.model`` is reordered in place.
    ``inplace_quantize``: the offline plan runs float-to-int8 QUANTIZE operators in place
    (`offline_offsets`). ``schedule_options``: the scheduler's options instead of
    ``time_limit`` (`memsched.patches.budget.Budget.final_options`: bounded by work, so the
    order depends on the model alone); ``arena_nodes``: the offline packer's node budget
    (with ``arena_time_limit=None``: offsets that depend on the model alone). ``target``: as
    in `reorder_tflite` (None here: tensors only). ``views`` (with ``offline_plan``): the patch
    writer's view RESHAPEs share their input's buffer (`memory.model.reshape_aliases`), in the
    order and the offsets. Returns (checked file bytes, result)."""
    from ...schedulers import schedule

    t0 = time.perf_counter()
    model = tg.model
    try:
        existing = read_offline_plan(model)
    except TFLiteModelError as e:
        raise TFLiteModelError(f"cannot reorder {label!r}: {str(e).removeprefix('its ')}") \
            from None
    inline_buffers(model, tg.data)
    drop_orphan_buffers(model)  # also the buffer of a plan replaced below
    multi = len(model.subgraphs) > 1
    if offline_plan and multi:
        raise TFLiteModelError(f"cannot plan {label!r} offline: it has "
                               f"{len(model.subgraphs)} subgraphs (control flow); reorder "
                               "without --offline-plan")
    g, mm = tg.graph, TFLM_MODEL
    if inplace_quantize and offline_plan:  # the order knows the QUANTIZE runs in place
        from ..memory.model import TFLM_INPLACE, inplace_quantize_graph

        g, mm = inplace_quantize_graph(tg), TFLM_INPLACE
    if views and offline_plan:  # the writer's view RESHAPEs share their input's buffer
        from ..memory.model import view_graph

        g = view_graph(tg, g)[0]
    scratch = _scratch(tg, target)
    g = with_scratch(g, scratch)  # the kernels' scratch buffers: priced in the order
    problem = Problem.from_graph(g, mm)
    base = list(range(len(g)))
    input_peak = problem.evaluate(base).peak
    s = schedule(g, algorithm, mm, **(schedule_options if schedule_options is not None
                                       else {"time_limit": time_limit}))
    order = s.order if s.peak < input_peak else base
    peak = min(s.peak, input_peak)
    sg = tg.subgraph
    if order != base:
        ops = list(sg.operators)
        sg.operators = [ops[g.ops[v].source] for v in order]
    res = ReorderResult(ops=len(g), order=[int(g.ops[v].source) for v in order],
                        input_peak=input_peak, peak=peak,
                        lower_bound=min(s.lower_bound, peak), optimal=s.optimal or
                        peak <= s.lower_bound, algorithm=algorithm, seconds=0.0,
                        stats=dict(s.stats))
    action = "written" if offline_plan else None
    if not offline_plan and existing is not None:
        if order == base and check_model(model, label).ok:
            action = "kept"  # the user's own plan, still valid for the unchanged order
        elif multi:
            remove_offline_plan(model)
            action = "removed"
            res.notes.append("removed the file's offline plan: it was made for the old "
                             "operator order and a control-flow model cannot be re-planned")
        else:
            action = "replanned"
            res.notes.append("re-planned the file's offline plan for the new operator order "
                             "(the old offsets would overlap co-live tensors)"
                             if order != base else
                             "re-planned the file's offline plan: it was not valid for its "
                             "own operator order")
    if action in ("written", "replanned"):
        # with the scratch buffers reserved (gaps where TFLM's first fit puts them) and
        # without: the smaller minimal arena on the target wins (computed, `memory.arena`)
        best = None
        for reserve in ([scratch, None] if scratch else [None]):
            offsets, plan = offline_offsets(tg, order, arena_time_limit, max_nodes=arena_nodes,
                                            inplace_quantize=inplace_quantize, scratch=reserve,
                                            views=views)
            set_offline_plan(model, offsets)
            total = _target_arena(pack_model(model), target) if scratch else None
            if best is None or (total is not None and total < best[2]):
                best = (offsets, plan, total)
        offsets, plan, _ = best
        set_offline_plan(model, offsets)
        res.offline_arena, res.offline_optimal = plan.arena, bool(plan.optimal)
    res.offline_plan_action = action
    # packed and checked once; the checker also counts the written operators
    data = finish_model(model, label=out_label or label, operators=len(g))
    if target is not None:
        why: list = []
        res.target, res.arena_bytes = target, _target_arena(data, target, why)
        res.arena_unpriced = why[0] if why else None
    res.seconds = time.perf_counter() - t0
    return data, res


def _scratch(tg: TFLiteGraph, target: str | None) -> dict:
    """The scratch buffers of each operator on ``target`` ({} for None or a model the arena
    model does not price)."""
    if target is None:
        return {}
    from ..memory.arena import UnpricedModelError, scratch_requests

    try:
        return scratch_requests(tg, target)
    except UnpricedModelError:
        return {}


def _target_arena(data: bytes, target: str, why: list | None = None) -> int | None:
    """TFLite Micro's minimal arena of the file ``data`` on ``target``, or None (unpriced:
    the reason appended to ``why``, e.g. the operator the model does not price)."""
    from ..memory.arena import UnpricedModelError, arena

    try:
        return arena(data, target).arena_bytes
    except UnpricedModelError as e:
        if why is not None:
            why.append(str(e))
        return None

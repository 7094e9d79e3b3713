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
`memsched.tflite.tflm_memory`; the schedule's peak under it is the liveness bound of TFLM's
arena, and the offline plan (16-byte aligned, as TFLM aligns) reaches it whenever the packing
does.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from .. import arena as _arena
from ..memory import Problem
from .check import check_model
from .read import TFLiteGraph, TFLiteModelError, read_tflite
from .tflm_memory import TFLM_ALIGNMENT, TFLM_MODEL, lifetimes, with_scratch
from .write import OFFLINE_METADATA  # noqa: F401 - the metadata name, re-exported
from .write import (drop_orphan_buffers, finish_model, inline_buffers, pack_model,
                    read_offline_plan, remove_offline_plan, set_offline_plan, write_model)

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
    # (`tflm_arena.arena`; None: no target, or an operator it does not price)
    target: str | None = None
    arena_bytes: int | None = None
    original_arena_bytes: int | None = None
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
                "original_arena_bytes": self.original_arena_bytes, "notes": self.notes,
                "order": self.order}


def offline_offsets(tg: TFLiteGraph, order, time_limit: float | None = 10.0,
                    alignment: int = TFLM_ALIGNMENT, inplace_quantize: bool = False,
                    max_nodes: int | None = None, scratch: dict | None = None,
                    views: bool = False) -> tuple[list[int], _arena.ArenaPlan]:
    """One offset per tensor of subgraph 0 (``-1`` for what TFLM plans itself) and the plan.
    ``inplace_quantize``: a `quantize_aliases` operator that runs first and whose float input
    is live at that step only (a leading QUANTIZE of a float model input) writes its output
    over its input, which starts at the output's offset (the input beyond the output is packed
    as its own rectangle at step 0; the packing or its mirror image, whichever leaves room
    above the output). Kept when its arena is below the plain packing's. ``time_limit`` /
    ``max_nodes``: the exact packer's limits (`memsched.arena.plan_exact`; ``time_limit=None``
    and a ``max_nodes``: offsets that depend on the input alone). ``scratch`` (file operator
    index -> bytes of each scratch buffer its kernel requests, `tflm_arena.scratch_requests`):
    packed as buffers live during their operator but not written, so the plan leaves a gap
    where TFLite Micro's planner puts them (first fit) instead of above the plan. ``views``:
    the patch writer's view RESHAPEs (`tflm_memory.reshape_aliases`) run in place: each output
    gets its input's offset (one buffer, one lifetime)."""
    roots: dict[int, int] = {}
    if views:
        from .tflm_memory import alias_roots, view_graph

        roots = alias_roots(tg.model)
        lts = lifetimes(tg, order, *view_graph(tg)) if roots else lifetimes(tg, order)
    else:
        lts = lifetimes(tg, order)
    alias: dict[int, int] = {}  # input -> output
    if inplace_quantize:
        from .tflm_memory import quantize_aliases

        at = {ti: k for k, (ti, _) in enumerate(lts)}
        first = int(tg.graph.ops[order[0]].source) if len(order) else -1
        for x, y, v in quantize_aliases(tg.model):
            if v == first and x in at and y in at and lts[at[x]][1].end == 0:
                alias[x] = y
    packed = [(ti, lt) for ti, lt in lts if ti not in alias]
    items = [lt for _, lt in packed]
    if alias:
        (x, y), = alias.items()  # one operator runs first
        iy = [ti for ti, _ in packed].index(y)
        sy = _arena.align_up(items[iy].size, alignment)
        # the rest of the input: live at step 0 only, with the output (nothing else is, but
        # other model inputs): packed as its own rectangle, so the arena holds the input then
        items.append(_arena.Lifetime(max(dict(lts)[x].size - sy, 0), 0, 0))
    n_written = len(packed)
    for step, v in enumerate(order):  # reserved, not written: TFLM places them itself
        for size in (scratch or {}).get(tg.graph.ops[v].source, ()):
            items.append(_arena.Lifetime(size, step, step))
    plan = _arena.plan(items, "auto", alignment, time_limit, max_nodes=max_nodes)
    _arena.verify(items, plan.offsets, alignment, plan.arena)
    offsets = [-1] * len(tg.subgraph.tensors or [])
    for (ti, _), off in zip(packed, plan.offsets):
        offsets[ti] = int(off)
    if alias:
        # the input must start at the output's offset: it fits there at step 0 when no other
        # tensor live at step 0 is in the way; the packing or its mirror image, the lower
        size_x = dict(lts)[x].size
        sizes = [_arena.align_up(lt.size, alignment) for lt in items]
        step0 = [k for k, (_, lt) in enumerate(packed) if lt.start == 0 and k != iy]
        best = None
        for offs in (plan.offsets, [plan.arena - o - sz for o, sz in zip(plan.offsets, sizes)]):
            lo, hi = offs[iy], offs[iy] + size_x
            if any(offs[k] < hi and lo < offs[k] + sizes[k] for k in step0):
                continue
            arena = max(plan.arena, _arena.align_up(hi, alignment))
            if best is None or arena < best[0]:
                best = (arena, offs)
        plain = offline_offsets(tg, order, time_limit, alignment, False, max_nodes, scratch,
                                views)
        if best is None or best[0] >= plain[1].arena:
            return plain  # no gain: the input planned as any tensor
        arena, offs = best
        for (ti, _), off in zip(packed, offs):
            offsets[ti] = int(off)
        offsets[x] = offsets[y]
        plan = _arena.ArenaPlan(arena, list(offs[:n_written]), plan.lower_bound,
                                plan.optimal and arena == plan.arena, plan.method + "+inplace",
                                alignment, plan.live_peak, plan.seconds, dict(plan.stats))
    for y, r in roots.items():  # a view shares its root's buffer
        offsets[y] = offsets[r]
    return offsets, plan


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
    (`memsched.tflite.check`) before they are returned.

    ``target``: the device the file is planned for (`tflm_arena.TARGETS`): ``cortex-m`` (a
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
    model through `memsched.tflite.read.graph_of`); ``tg.model`` is reordered in place.
    ``inplace_quantize``: the offline plan runs float-to-int8 QUANTIZE operators in place
    (`offline_offsets`). ``schedule_options``: the scheduler's options instead of
    ``time_limit`` (`memsched.patches.budget.Budget.final_options`: bounded by work, so the
    order depends on the model alone); ``arena_nodes``: the offline packer's node budget
    (with ``arena_time_limit=None``: offsets that depend on the model alone). ``target``: as
    in `reorder_tflite` (None here: tensors only). ``views`` (with ``offline_plan``): the patch
    writer's view RESHAPEs share their input's buffer (`tflm_memory.reshape_aliases`), in the
    order and the offsets. Returns (checked file bytes, result)."""
    from ..schedulers import schedule

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
        from .tflm_memory import TFLM_INPLACE, inplace_quantize_graph

        g, mm = inplace_quantize_graph(tg), TFLM_INPLACE
    if views and offline_plan:  # the writer's view RESHAPEs share their input's buffer
        from .tflm_memory import view_graph

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
        # without: the smaller minimal arena on the target wins (computed, `tflm_arena`)
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
        res.target, res.arena_bytes = target, _target_arena(data, target)
    res.seconds = time.perf_counter() - t0
    return data, res


def _scratch(tg: TFLiteGraph, target: str | None) -> dict:
    """The scratch buffers of each operator on ``target`` ({} for None or a model the arena
    model does not price)."""
    if target is None:
        return {}
    from .tflm_arena import UnpricedModelError, scratch_requests

    try:
        return scratch_requests(tg, target)
    except UnpricedModelError:
        return {}


def _target_arena(data: bytes, target: str) -> int | None:
    """TFLite Micro's minimal arena of the file ``data`` on ``target``, or None (unpriced)."""
    from .tflm_arena import UnpricedModelError, arena

    try:
        return arena(data, target).arena_bytes
    except UnpricedModelError:
        return None

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
from .tflm_memory import TFLM_ALIGNMENT, TFLM_MODEL, lifetimes
from .write import OFFLINE_METADATA  # noqa: F401 - the metadata name, re-exported
from .write import (drop_orphan_buffers, finish_model, inline_buffers, read_offline_plan,
                           remove_offline_plan, set_offline_plan, write_model)

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
    notes: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"ops": self.ops, "input_order_peak_bytes": self.input_peak,
                "peak_bytes": self.peak, "lower_bound": self.lower_bound,
                "optimal": self.optimal, "algorithm": self.algorithm,
                "seconds": round(self.seconds, 4), "offline_arena_bytes": self.offline_arena,
                "offline_arena_optimal": self.offline_optimal,
                "offline_plan_action": self.offline_plan_action, "notes": self.notes,
                "order": self.order}


def offline_offsets(tg: TFLiteGraph, order, time_limit: float = 10.0,
                    alignment: int = TFLM_ALIGNMENT) -> tuple[list[int], _arena.ArenaPlan]:
    """One offset per tensor of subgraph 0 (``-1`` for what TFLM plans itself) and the plan."""
    lts = lifetimes(tg, order)
    plan = _arena.plan([lt for _, lt in lts], "auto", alignment, time_limit)
    _arena.verify([lt for _, lt in lts], plan.offsets, alignment, plan.arena)
    offsets = [-1] * len(tg.subgraph.tensors or [])
    for (ti, _), off in zip(lts, plan.offsets):
        offsets[ti] = int(off)
    return offsets, plan


def reorder_tflite(src: str, dst: str | None = None, *, offline_plan: bool = False,
                   algorithm: str = "auto", time_limit: float | None = 60.0,
                   arena_time_limit: float = 10.0) -> tuple[bytes, ReorderResult]:
    """Schedule subgraph 0 of ``src`` (path or bytes) for minimum peak and write the reordered
    model.

    Returns (file bytes, result); writes them to ``dst`` (atomically, umask honoured) when given.
    The order is only changed when it lowers the peak; an already optimal file keeps its order.

    An ``OfflineMemoryAllocation`` plan already in ``src`` is never kept stale: it is kept only
    if the operator order is unchanged and the plan is valid for it, else re-planned for the
    written order (``offline_plan_action`` says which; a control-flow model's plan, which this
    writer cannot re-plan, is removed). The written bytes pass the independent checker
    (`memsched.tflite.check`) before they are returned.
    """
    t0 = time.perf_counter()
    tg = read_tflite(src)
    label = src if isinstance(src, str) else "model.tflite"
    data, res = reorder_model(tg, label, out_label=dst, offline_plan=offline_plan,
                              algorithm=algorithm, time_limit=time_limit,
                              arena_time_limit=arena_time_limit)
    res.seconds = time.perf_counter() - t0
    if dst is not None:
        write_model(dst, data)
    return data, res


def reorder_model(tg: TFLiteGraph, label: str = "model.tflite", *, out_label: str | None = None,
                  offline_plan: bool = False, algorithm: str = "auto",
                  time_limit: float | None = 60.0, arena_time_limit: float = 10.0
                  ) -> tuple[bytes, ReorderResult]:
    """`reorder_tflite` of a model already in memory (``tg``: a parsed file, or a rewrite's
    model through `memsched.tflite.read.graph_of`); ``tg.model`` is reordered in place.
    Returns (checked file bytes, result)."""
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
    g = tg.graph
    problem = Problem.from_graph(g, TFLM_MODEL)
    base = list(range(len(g)))
    input_peak = problem.evaluate(base).peak
    s = schedule(g, algorithm, TFLM_MODEL, time_limit=time_limit)
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
        offsets, plan = offline_offsets(tg, order, arena_time_limit)
        set_offline_plan(model, offsets)
        res.offline_arena, res.offline_optimal = plan.arena, bool(plan.optimal)
    res.offline_plan_action = action
    # packed and checked once; the checker also counts the written operators
    data = finish_model(model, label=out_label or label, operators=len(g))
    res.seconds = time.perf_counter() - t0
    return data, res

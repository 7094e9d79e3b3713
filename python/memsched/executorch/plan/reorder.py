"""Reorder a graph module's nodes into memsched's certified peak-optimal order.

Runs on the graph `MemoryPlanningPass` is about to plan (after ``ToOutVarPass``), where the
node order is the schedule ExecuTorch's lifetimes are measured in
(`memsched.executorch.memory.model`). The order is taken only when its liveness peak, measured again
by ExecuTorch's rule on the reordered nodes, is below the input order's; otherwise the graph is left
as it was.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..errors import UnsupportedProgramError
from ..memory.model import (FastSignature, PlanFlags, ProgramModel, build_model, liveness_peak,
                            planned_specs)


@dataclass
class OrderReport:
    """The order decision for one graph: peaks (bytes, aligned, planned specs only) of the
    input order and of the order kept, the scheduler's proven lower bound, whether the kept
    order is certified optimal, and seconds spent (model, scheduler and checks)."""

    ops: int
    tensors: int
    input_peak: int
    peak: int
    lower_bound: int
    optimal: bool
    reordered: bool
    seconds: float
    stats: dict = field(default_factory=dict)


def schedule_model(model: ProgramModel, time_limit: float | None = 10.0,
                   options: dict | None = None):
    """memsched's `auto` scheduler on the model's op graph (its `Schedule`); ``options``: the
    scheduler's options instead of ``time_limit`` (`memsched.patches.Budget.final_options`:
    bounded by work, the same order on any machine)."""
    from ...schedulers import schedule

    from ..memory.model import EXECUTORCH_MODEL
    return schedule(model.graph, "auto", EXECUTORCH_MODEL,
                    **(options if options is not None else {"time_limit": time_limit}))


def apply_node_order(graph_module, nodes) -> None:
    """Move ``graph_module``'s nodes into the order ``nodes`` (all of them, each once)."""
    graph = graph_module.graph
    current = list(graph.nodes)
    if len(nodes) != len(current) or {id(n) for n in nodes} != {id(n) for n in current}:
        raise UnsupportedProgramError("internal: a node order must hold every node once")
    prev = nodes[0]
    if prev is not current[0]:
        current[0].prepend(prev)
    for n in nodes[1:]:
        if n.prev is not prev:
            prev.append(n)
        prev = n
    graph.lint()  # every node after its inputs
    graph_module.recompile()


def reorder_graph_module(graph_module, graph_signature=None, flags: PlanFlags | None = None,
                         time_limit: float | None = 10.0,
                         schedule_options: dict | None = None) -> OrderReport:
    """Reorder ``graph_module`` in place into memsched's order when it lowers the liveness
    peak of the planned specs; return the `OrderReport`."""
    t0 = time.perf_counter()
    flags = flags or PlanFlags()
    graph_signature = FastSignature.of(graph_signature)
    model = build_model(graph_module, graph_signature, flags)
    planned = planned_specs(graph_module, graph_signature, flags)
    original = list(graph_module.graph.nodes)
    input_peak = liveness_peak(original, graph_signature, flags, planned, model.refs)
    # the model's peak of the input order must be ExecuTorch's: otherwise do not trust it
    ident = model.input_order()
    model_peak = _model_peak(model, ident)
    if model_peak != input_peak:
        raise UnsupportedProgramError(
            f"memsched's model of this graph gives {model_peak:,} B for the input order where "
            f"ExecuTorch's lifetimes give {input_peak:,} B; not reordering")
    s = schedule_model(model, time_limit, schedule_options)
    nodes = model.nodes_in_order(s.order)
    peak = liveness_peak(nodes, graph_signature, flags, planned, model.refs)
    if peak != s.peak:
        raise UnsupportedProgramError(
            f"memsched's order has peak {s.peak:,} B in its model but {peak:,} B by "
            "ExecuTorch's lifetimes; not reordering")
    reordered = peak < input_peak
    if reordered:
        apply_node_order(graph_module, nodes)
    kept = peak if reordered else input_peak
    lb = min(s.lower_bound, kept)
    return OrderReport(len(model.graph.ops), len(model.specs), input_peak, kept, lb,
                       kept <= lb, reordered, time.perf_counter() - t0,
                       {"scheduler": s.stats.get("proof"), "model": model.stats})


def _model_peak(model: ProgramModel, order) -> int:
    from ...memory import Problem

    from ..memory.model import EXECUTORCH_MODEL
    return Problem.from_graph(model.graph, EXECUTORCH_MODEL).evaluate(order).peak

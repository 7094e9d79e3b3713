"""`MemoryAwareSchedule`: reorder every dataflow block of every Relax function for minimum peak
activation memory.

TVM plans memory (StaticPlanBlockMemory) in binding order and ships no memory-aware ordering,
so the order the frontend emitted decides how much memory the compiled model needs. This pass
imports each dataflow block as an `OpGraph`, schedules it (`memsched.schedule`), and rewrites
the block with its bindings in the new order. Pure reordering: outputs are bit-identical.

A block is reordered only when the new order has a strictly lower peak, so the pass never makes
memory worse under its model. Blocks that cannot be modelled (dynamic shapes, impure calls,
unknown binding kinds) are left exactly as they were; the reason is recorded and warned about.

Results are attached to each function as attributes (all integers are bytes):
``memsched.peak_before``, ``memsched.peak_after``, ``memsched.lower_bound``,
``memsched.optimal`` (1/0), ``memsched.algorithm``,
``memsched.blocks_reordered``, and ``memsched.skipped`` (reasons) when a block was skipped.
"""
from __future__ import annotations

import time
import warnings

import tvm
from tvm import relax

from ..importers.relax import UnsupportedModelError, block_graph, reorder_block
from ..memory import MemoryModel, Problem
from ..schedulers import schedule
from . import config, timings
from .common import (check_scheduler_options, map_relax_functions, scheduler_options,
                     with_blocks)


@tvm.transform.module_pass(opt_level=0, name="MemoryAwareSchedule")
class MemoryAwareSchedule:
    """Reorder Relax dataflow blocks for minimum peak memory.

    Parameters
    ----------
    algorithm : str
        Scheduler name (see `memsched.available()`); ``"auto"`` (default) is the exact search,
        anytime under ``time_limit``.
    time_limit : float or None
        Seconds for the whole module (shared by its blocks); None means no limit.
    memory_model : str or MemoryModel
        ``"tvm"`` (default: what StaticPlanBlockMemory plans: parameters and the returned
        tensor are not planned) or ``"paper"`` (inputs and outputs counted).
    functions : list of str, optional
        Only these functions (default: every Relax function).
    progress : bool
        Show a progress line on a terminal during long searches.

    memory_limit : int, optional
        Bytes an exact search may hold (default: a quarter of physical memory); past it the
        search stops with its best order and proven lower bound.

    PassContext config keys ``memsched.algorithm``, ``memsched.time_limit_s``,
    ``memsched.memory_model`` and ``memsched.memory_limit`` override the defaults (registered
    by ``import memsched`` as soon as TVM is imported).
    """

    def __init__(self, algorithm: str | None = None, time_limit: float | None = -1.0,
                 memory_model: str | MemoryModel | None = None, functions=None,
                 progress: bool = False, memory_limit: int | None = None):
        self.algorithm = algorithm
        self.time_limit = time_limit
        self.memory_model = memory_model
        self.functions = None if functions is None else set(functions)
        self.progress = progress
        self.memory_limit = memory_limit
        check_scheduler_options(algorithm, memory_model)

    def _options(self, ctx):
        return scheduler_options(ctx, self.algorithm, self.time_limit, self.memory_model, 10.0)

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        algorithm, time_limit, model = self._options(ctx)
        self._memory_limit = self.memory_limit or config.get(ctx, "memsched.memory_limit", None,
                                                             int)
        deadline = None if time_limit is None else time.perf_counter() + time_limit
        self._mod = mod  # kernels: writes a fused call_tir makes into its arguments
        return map_relax_functions(
            mod, self.functions,
            lambda func, name: self._schedule_function(func, name, algorithm, deadline, model))

    def _schedule_function(self, func, name, algorithm, deadline, model):
        body = func.body
        if not isinstance(body, relax.SeqExpr):
            return None
        blocks = list(body.blocks)
        before = after = lower = 0
        optimal = True
        reordered = 0
        skipped = []
        t0 = time.perf_counter()
        n_blocks = sum(isinstance(b, relax.DataflowBlock) for b in blocks)
        for i, blk in enumerate(blocks):
            if not isinstance(blk, relax.DataflowBlock):
                continue
            try:
                graph = block_graph(blk, name=f"{name}.block{i}", mod=self._mod)
            except UnsupportedModelError as e:
                skipped.append(f"block {i}: {e}")
                warnings.warn(f"MemoryAwareSchedule: {name}: left block {i} unchanged: {e}",
                              stacklevel=2)
                continue
            problem = Problem.from_graph(graph, model)
            base = problem.evaluate(range(len(graph))).peak
            left = None if deadline is None else max(0.0, deadline - time.perf_counter())
            sched = schedule(graph, algorithm, model, time_limit=left,
                             progress=self.progress and n_blocks >= 1,
                             memory_limit=self._memory_limit)
            before = max(before, base)
            if sched.peak < base:
                blocks[i] = reorder_block(blk, graph, sched.order)
                reordered += 1
                after = max(after, sched.peak)
            else:
                after = max(after, base)
            lower = max(lower, sched.lower_bound)
            optimal = optimal and (sched.optimal or base <= sched.lower_bound)
        if n_blocks == 0:
            return None
        attrs = {
            "memsched.peak_before": int(before),
            "memsched.peak_after": int(after),
            "memsched.lower_bound": int(min(lower, after)),
            "memsched.optimal": int(optimal and not skipped),
            "memsched.algorithm": algorithm,
            "memsched.memory_model": model.name,
            "memsched.blocks_reordered": int(reordered),
        }
        timings.record("MemoryAwareSchedule", name, time.perf_counter() - t0)  # not in attrs
        if skipped:
            attrs["memsched.skipped"] = "; ".join(skipped)
        if reordered:
            func = with_blocks(func, blocks)
        return func.with_attrs(attrs)

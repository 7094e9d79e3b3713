"""The planning pass and `backend_config`: what an ExecuTorch user puts in
``edge.to_executorch(...)``.

`MemschedPlanningPass` is a `MemoryPlanningPass` that, right before planning, reorders the graph
into memsched's certified peak-optimal order (`memsched.executorch.plan.reorder`) and then plans
with ``MemoryPlanningAlgorithmSuite(algo_list=[greedy, MemschedAlgo])``. The reorder sits here and
not in ``ExecutorchBackendConfig.passes`` because user passes run before ``ToOutVarPass``,
``alloc`` nodes and ``memory.view``: only at planning time is the node order the schedule
ExecuTorch measures lifetimes in, and nothing runs between this pass and the emitter. After
planning, the plan is checked independently (`memsched.executorch.memory.check`) and the pass keeps
a `PlanReport` per method in ``report``.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from ..errors import GraphError
from .memory.check import check_graph_module
from .errors import UnsupportedProgramError
from .fold_constants import fold_constants as _fold_constants
from .memory.model import FastSignature, PlanFlags
from .plan.packer import ArenaReport, MemschedAlgo
from .patch.layout import lower_layout_views
from .plan.reorder import OrderReport, reorder_graph_module

DEFAULT_TIME_LIMIT = 10.0


@dataclass
class PlanReport:
    """What memsched did to one method: the order decision (``order``, or ``None`` when
    reordering was off or refused, with the reason in ``note``), one `ArenaReport` per planned
    arena (top level and control-flow submodules), the planned sizes as written and the
    number of tensors the independent check passed."""

    method: str
    order: OrderReport | None
    arenas: list[ArenaReport]
    bufsizes: list[int]
    checked_tensors: int
    seconds: float
    note: str = ""
    patches: object = None  # the `tile.TileReport` of this method (tile_patches=True)
    # one `plan.banks.BankReport` per bank of the memory map (``memory_map=``), top level
    banks: list = field(default_factory=list)

    def fast_share(self) -> float | None:
        """The fastest bank's share of the activation traffic (None without a map)."""
        total = sum(b.traffic for b in self.banks)
        return (self.banks[0].traffic / total if total else 1.0) if self.banks else None

    @property
    def planned_bytes(self) -> int:
        return sum(self.bufsizes)

    @property
    def greedy_bytes(self) -> int:
        """What ExecuTorch's greedy plans for the same (reordered) graph, top level."""
        top = [a for a in self.arenas if a.graph == "top"]
        return sum(a.greedy for a in top)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        lines = [f"method {self.method}: planned {self.planned_bytes:,} B "
                 f"(buffers {self.bufsizes}), check passed on {self.checked_tensors} tensors"]
        if self.order is not None:
            o = self.order
            lines.append(f"  order: {o.ops} ops, liveness peak {o.input_peak:,} B -> {o.peak:,} B"
                         f" (bound {o.lower_bound:,} B, {'optimal' if o.optimal else 'not proven'}"
                         f", {'reordered' if o.reordered else 'input order kept'}, "
                         f"{o.seconds:.2f} s)")
        elif self.note:
            lines.append(f"  order: {self.note}")
        if self.patches is not None:
            lines.append(f"  {self.patches.summary()}")
        for b in self.banks:
            g = "" if b.greedy_traffic is None else \
                f"; ExecuTorch's banked greedy {b.greedy_used:,} B, traffic {b.greedy_traffic:,} B"
            lines.append(f"  bank {b.name} (mem_id {b.mem_id}): {b.used:,} of {b.size:,} B, "
                         f"{b.tensors} tensors, traffic {b.traffic:,} B (bound "
                         f"{b.traffic_bound:,} B){g}")
        for a in self.arenas:
            lines.append(f"  arena {a.mem_id} ({a.graph}): greedy {a.greedy:,} B, memsched "
                         f"{a.memsched:,} B, bound {a.lower_bound:,} B, "
                         f"{'optimal' if a.optimal else 'not proven'}, {a.chosen} kept, "
                         f"{a.seconds:.2f} s")
        return "\n".join(lines)


class MemschedPlanningPass:
    """`MemoryPlanningPass` with memsched's order and packer (see module docstring).

    ``reorder=False`` plans ExecuTorch's order with the exact packer only; ``budget`` (a
    `memsched.patches.Budget`; `backend_config` gives the patch search's when
    ``tile_patches=True``) bounds the order and the packing by work instead of
    ``time_limit``, so the program does not depend on the machine's speed. Other keyword
    arguments are `MemoryPlanningPass`'s. Built lazily as a subclass so that importing this
    module does not import ExecuTorch.
    """

    def __new__(cls, *args, **kwargs):
        return _pass_class()(*args, **kwargs)


_PASS_CLASS = None


def _pass_class():
    global _PASS_CLASS
    if _PASS_CLASS is not None:
        return _PASS_CLASS
    from executorch.exir.memory_planning import MemoryPlanningAlgorithmSuite, greedy
    from executorch.exir.passes import MemoryPlanningPass

    class _MemschedPlanningPass(MemoryPlanningPass):
        __doc__ = MemschedPlanningPass.__doc__

        def __init__(self, time_limit: float | None = DEFAULT_TIME_LIMIT, reorder: bool = True,
                     check: bool = True, budget=None, memory_map=None, **kwargs):
            if "memory_planning_algo" in kwargs:
                raise TypeError("MemschedPlanningPass chooses its own memory_planning_algo")
            if memory_map is not None and kwargs.get("share_mutable_buffers"):
                from .plan.banks import MemoryMapError
                raise MemoryMapError("share_mutable_buffers reserves arena 2 for shared state: "
                                     "not with a memory map (as in ExecuTorch's banked planner)")
            # ``budget`` (a `memsched.patches.Budget`, given after a patch search): the order
            # and the packing bounded by its work, not by ``time_limit``
            self.budget = budget
            self.memory_map = memory_map
            self.algo = MemschedAlgo(time_limit, arena_nodes=budget.arena_nodes
                                     if budget is not None else None)
            if memory_map is not None:  # the banks, each packed by memsched's packer
                from .plan.banks import BankedAlgo
                self.algo = BankedAlgo(memory_map, self.algo)
            # under a map the suite must not compare with ``greedy``: it would pick the smaller
            # sum of bytes, blind to the banks' capacities
            algos = [self.algo] if memory_map is not None else [greedy, self.algo]
            super().__init__(
                memory_planning_algo=MemoryPlanningAlgorithmSuite(algo_list=algos), **kwargs)
            self.time_limit = time_limit
            self.reorder = reorder
            self.check = check
            self.report: dict[str, PlanReport] = {}

        def _set_alloc_node_spec(self, graph_module) -> None:
            # ExecuTorch gives alloc nodes their specs at the start of run(); the reorder needs
            # them earlier, and the base method must not run twice (it asserts on a second run)
            import torch.fx
            from executorch.exir import memory

            allocs = [n for m in graph_module.modules() if isinstance(m, torch.fx.GraphModule)
                      for n in m.graph.nodes
                      if n.op == "call_function" and n.target is memory.alloc]
            if not allocs or any("spec" not in n.meta for n in allocs):
                super()._set_alloc_node_spec(graph_module)

        def flags(self) -> PlanFlags:
            return PlanFlags(self.alloc_graph_input, self.alloc_graph_output,
                             self.alloc_mutable_buffers and not self.share_mutable_buffers,
                             self.alignment)

        def run(self, graph_module, graph_signature=None):
            t0 = time.perf_counter()
            # same answers as the signature, without torch rebuilding its dicts on each
            # question (ExecuTorch's own planning asks once per node and spec)
            graph_signature = FastSignature.of(graph_signature)
            flags = self.flags()
            order, note = None, ""
            # permutes that only rename the dims of a layout (a patch rewrite's changes of
            # form on channels-last maps) become views: no copy, no planned bytes
            lower_layout_views(graph_module)
            self._set_alloc_node_spec(graph_module)
            if self.reorder:
                try:
                    order = reorder_graph_module(
                        graph_module, graph_signature, flags, self.time_limit,
                        self.budget.final_options() if self.budget is not None else None)
                except (UnsupportedProgramError, GraphError) as e:  # plan the input order
                    note = f"input order kept: {e}"
            else:
                note = "reordering off"
            first = len(self.algo.reports)
            first_bank = len(getattr(self.algo, "bank_reports", ()))
            self.algo.top = graph_module  # apply_algo also calls the algorithm on submodules
            result = super().run(graph_module, graph_signature)
            arenas = self.algo.reports[first:]
            checked = check_graph_module(graph_module, graph_signature, flags) \
                if self.check else 0
            name = f"method{len(self.report)}"
            banks = [b for b in getattr(self.algo, "bank_reports", [])[first_bank:]
                     if b.graph == "top"]
            self.report[name] = PlanReport(
                name, order, arenas, list(graph_module.meta["non_const_buffer_sizes"]),
                checked, time.perf_counter() - t0, note, banks=banks)
            return result

    _PASS_CLASS = _MemschedPlanningPass
    return _PASS_CLASS


_PASS_OPTIONS = ("alloc_graph_input", "alloc_graph_output", "alloc_mutable_buffers",
                 "share_mutable_buffers", "alignment", "allow_lifetime_and_storage_overlap")


def backend_config(time_limit: float | None = DEFAULT_TIME_LIMIT, reorder: bool = True,
                   tile_patches: bool = False, max_overhead: float | None = None, grid=None,
                   split: str | None = None, se_patches: str | None = None,
                   second_region: bool | None = None, price_records: bool = True,
                   exact_reductions: bool | None = None, padding: str | None = None,
                   max_regions: int | None = None, patch_options=None,
                   target: str | None = None, share_values: bool = False,
                   max_slowdown=..., fold_constants=None, memory_map=None,
                   **executorch_config_options):
    """An ``ExecutorchBackendConfig`` whose memory planning is memsched's.

    ``time_limit``: seconds for the scheduler and for each arena's packer. ``tile_patches``:
    run the spatial prefix patch by patch (`memsched.executorch.patch.tile.TilePatchesPass`,
    appended to ``passes``) with the search's options ``patch_options``
    (`memsched.patches.PatchOptions`, or a dict of its fields) and these keywords put over
    them: ``max_overhead`` extra MACs (default 0.3); ``max_slowdown``: the most instructions
    per execute the choice may run on a Cortex-M55, predicted from the program
    (`memsched.executorch.memory.instructions`), as a factor of the unpatched program's (default
    1.10; None: no bound, the RAM-only choice); ``grid`` ("RxC" or (rows, cols)) and
    ``split`` (a node name) force the choice, and so does ``se_patches`` ("recompute" /
    "keep": how the patches after a squeeze-and-excitation block's mean get their feature
    maps; default: the cheaper one); ``max_regions``: regions in sequence (each starting where
    the one before ends, its own grid, one MAC budget; default 4, kept when they lower the
    total; ``second_region``: its deprecated name); ``exact_reductions=False``: regions may
    run through a squeeze-and-excitation block's float mean (per-patch partial sums: equal up
    to rounding, not bit-equal; refused by default); ``padding``: "explicit" or "margins"
    (default: both priced). The search is bounded by its work budgets; its wall-clock safety
    net is ``PatchOptions.time_limit`` (default 60 s), not ``time_limit``. ``price_records``:
    choose on the planned arena plus the method allocator's records the patches add
    (`memsched.executorch.patch.records`: what a microcontroller provisions), or (False) on the
    planned arena alone. ``target``: the device whose ABI those records are priced at,
    ``"cortex-m"`` (32-bit Arm: a TensorImpl of 32 B, 4-byte pointers) or ``"host"`` (x86-64:
    64 B, 8 bytes); None (the default): ``"cortex-m"`` for the Cortex-M backend's graphs
    (``cortex_m::`` operators), ``"host"`` for the rest (portable kernels); what
    ``memsched analyze --target`` and `memsched.executorch.memory.ram` compute for the written
    program. ``share_values``: the patches' records are priced for the program with its
    equal values shared (`memsched.executorch.plan.share`: write ``share_values(et)``, not
    ``et.buffer``; a copied call then costs its instruction, slots and new tensors, not its
    scalars again); default False, the emitter's values. Bad patch options, an unknown
    ``target`` included, raise `TilePatchesError`.
    Options named like `MemoryPlanningPass`'s (``alloc_graph_input``, ``alignment``, ...) go
    to the planning pass, the rest to ``ExecutorchBackendConfig``. The
    report: ``report(config)`` after ``to_executorch(config)``. ``fold_constants``
    (`memsched.executorch.fold_constants`): what is computed on constants while lowering,
    before the passes, so that the search and the plan see no arena tensor the report leaves
    out. "layout" (the default; True): only value-exact operators, copies and rearrangements
    of constants (an ``nn.Linear``'s weight transpose, views, slices, cat, ...); the program
    stays bit-equal to ExecuTorch's default program. "arithmetic": ExecuTorch's constant
    propagation (``do_quant_fusion_and_const_prop=True``, still accepted): arithmetic on
    constants too, a smaller program with fewer operators, but outputs equal to the default
    program's only up to rounding. "none" (False; ``do_quant_fusion_and_const_prop=False``):
    nothing, ExecuTorch's default. ``memory_map``: ExecuTorch's own
    ``executorch.exir.banked_memory_planning.TargetMemoryMap`` (banks fastest first): every
    planned buffer is placed in one of its banks, the fastest bank's activation traffic
    maximized first (`memsched.executorch.plan.banks`, `memsched.banks`), pins (a ``mem_id``
    a pass set) kept, per-bank alignment; a map that cannot hold the program raises
    `MemoryMapError` naming the bank and the bytes missing. With ``tile_patches`` the search
    prefers a plan whose arena fits the fastest bank over a smaller one that does not.
    """
    from executorch.exir import ExecutorchBackendConfig

    from .patch.tile import records_target

    target = records_target(target)  # checked once, patches or not
    _fold_constants(executorch_config_options, fold_constants)

    if tile_patches:
        from .patch.tile import TilePatchesPass

        tp = TilePatchesPass(patch_options, max_overhead=max_overhead, grid=grid,
                             max_slowdown=max_slowdown,
                             split=split, se_patches=se_patches, second_region=second_region,
                             price_records=price_records, exact_reductions=exact_reductions,
                             padding=padding, max_regions=max_regions, target=target,
                             share_values=share_values, memory_map=memory_map,
                             planned_inputs=executorch_config_options.get(
                                 "alloc_graph_input", True))
        executorch_config_options["passes"] = \
            list(executorch_config_options.get("passes") or []) + [tp]

    if "memory_planning_pass" in executorch_config_options:
        raise TypeError("backend_config() sets memory_planning_pass itself; compose "
                        "MemschedPlanningPass yourself to change it")
    pass_opts = {k: executorch_config_options.pop(k) for k in _PASS_OPTIONS
                 if k in executorch_config_options}
    # after a patch search the plan is bounded by its work budgets too: the same program on an
    # idle and a loaded machine
    mp = MemschedPlanningPass(time_limit=time_limit, reorder=reorder,
                              budget=tp.options.budget if tile_patches else None,
                              memory_map=memory_map, **pass_opts)
    return ExecutorchBackendConfig(memory_planning_pass=mp, **executorch_config_options)


def report(config) -> dict[str, PlanReport]:
    """The `PlanReport` of each method planned with ``config`` (from `backend_config`)."""
    mp = config.memory_planning_pass
    passes = mp.values() if isinstance(mp, dict) else [mp]
    out: dict[str, PlanReport] = {}
    for p in passes:
        out.update(getattr(p, "report", {}) or {})
    # the patch pass's reports, one per method in the same order (tile_patches=True)
    tiles = [r for p in (getattr(config, "passes", None) or [])
             if type(p).__name__ == "TilePatchesPass" for r in p.report]
    for r, t in zip(out.values(), tiles):
        r.patches = t
    return out


__all__ = ["MemschedPlanningPass", "PlanReport", "backend_config", "report"]

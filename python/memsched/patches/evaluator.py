"""The problem of one patch search, and the evaluator that prices its candidates.

The objective, stated once, with the runtime's memory model as its parameter (`RuntimeMemory`:
TVM's planned storage, TFLite Micro's arena plus the bytes it keeps per operator, ExecuTorch's
activation-only arenas). A candidate is a region (operators ``[start, length)`` ending at its
split tensors), a grid ``R x C`` and a variant (squeeze-and-excitation: keep or recompute; the
plan explicit or with margins); the evaluator prices

* **peak**: the activation peak of the patched graph under the runtime's activation model
  (``memory.activations``, the one evaluator of `memsched.memory`). While searching: the
  patched part (from the end of the regions before to this one's reassembly) run patch by
  patch as an `OpGraph` of its own, and the rest of the model in file order -- after a region
  exactly its split tensors (and the model inputs still read) are live, so the peak is the
  largest of the parts and of the operators after. The best candidates are then scheduled
  whole by the certified scheduler (`memsched.schedule(graph, "auto", model)`), whose order
  the runtimes apply;
* **persistent**: what the runtime keeps besides the activations, per operator and tensor
  (`RuntimeMemory.model_persistent` / `plan_persistent_delta`; TFLite Micro's tail section:
  `memsched.tflite.memory.model`). Schedule-independent; 0 where the arena holds activations;
* **total** = peak + persistent: the arena a user must give the runtime -- **the objective**;
* **MACs** of the whole model (region operators on their patch windows).

`resolve` turns the user's `PatchOptions` into one concrete `Request` against the runtime and
the model (grids, variants, region starts, the MAC cap, the work `Meter`). `Evaluator` holds the
problem (file-order peaks, per-operator floors, MACs), the caches a whole search shares (MACs,
plans, priced parts: a region's price does not depend on which search asks) and prices:
`Evaluator.plan`, `floors`, `price`, `refine`, `certify`. The strategies over it:
`search.search_one` (one region), `sequence.search_sequence` (regions in sequence).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..graph import OpGraph
from ..memory import MemoryModel, Problem
from .budget import Meter
from .errors import Refused
from .geometry import SpatialModel
from .margins import plan_margins
from .options import PatchOptions
from .patched import heuristic_order, node_order, patched_graph
from .plans import PatchPlan, kept_floor, pad_sources, plan_patches
from .regions import Region, regions
from .result import Candidate, Floors, within
from .runtime import Runtime, RuntimeMemory, runtime_of
from .starts import region_starts
from .windows import grid_macs

REFINE_WINDOW = 1.25  # refine candidates whose heuristic total is within this of the best
DEFAULT_GRIDS = ((1, 2), (2, 1), (1, 3), (3, 1), (2, 2), (1, 4), (4, 1), (2, 3), (3, 2),
                 (2, 4), (4, 2), (3, 3), (3, 4), (4, 3), (4, 4), (5, 5), (6, 6), (7, 7), (8, 8))
# more height bands (the rows of an NHWC tensor: contiguous pieces), beyond CONCATENATION's 10
# inputs by chaining (`plans.MAX_CONCAT_INPUTS`), where `Runtime.band_grids`
BAND_GRIDS = ((5, 1), (6, 1), (7, 1), (8, 1), (10, 1), (12, 1), (14, 1), (16, 1), (5, 2),
              (6, 2))
SE_MODES = {None: (False, True), "recompute": (False,), "keep": (True,)}


@dataclass(frozen=True)
class Described:
    """An adapter's description of its graph: ``sm`` the spatial model (operator ``k`` = op
    ``k`` of ``graph``), ``graph`` the `OpGraph` its memory is priced on, ``tensor_index[t]``
    the ``sm`` tensor of ``graph`` tensor ``t``."""

    sm: SpatialModel
    graph: OpGraph
    tensor_index: list


@dataclass(frozen=True)
class Request:
    """The options of one search resolved against its runtime and model (`resolve`)."""

    grids: tuple  # (rows, cols) tried, in this order (it breaks the MAC order's ties)
    forced: bool  # a grid or split asked for: the best of what was asked, whatever it costs
    split: str | None  # regions end at the tensor of that name
    starts: tuple  # the operators the first region may start at
    se_modes: tuple  # keep flags a squeeze-and-excitation region is priced with
    margins: bool  # every plan with margins (``padding="margins"``)
    try_margins: bool  # explicit plans, the best ones priced with margins too
    se: bool  # regions may contain squeeze-and-excitation blocks (`Runtime.se`)
    exact_reductions: bool
    no_split: frozenset  # tensors a region must not end at (`Runtime.no_split`)
    max_overhead: float
    cap: float  # candidates above this MAC overhead are not priced
    # the predicted instructions the choice may run, a factor of the unpatched program's
    # (None: no bound, or a runtime without a cost model)
    max_slowdown: float | None
    # the fastest memory bank's bytes: a plan whose arena fits it beats one that does not
    fast_memory: int | None
    certify: bool
    max_regions: int
    meter: Meter  # the work budget and the clock of the whole search

    def variants(self, se_region: bool) -> list[tuple]:
        """The (keep, margins) plans a region is priced with."""
        return [(keep, False) for keep in self.se_modes] if se_region else \
            [(False, self.margins)]

    def over_cap(self, macs: int, total_macs: int) -> bool:
        return bool(total_macs) and macs / total_macs - 1 > self.cap

    def eligible(self, c: Candidate) -> bool:
        """Whether candidate ``c`` may be chosen: within the MAC and the instruction budgets
        (a forced grid or split: whatever it costs)."""
        return self.forced or within(c, self.max_overhead, self.max_slowdown)


def resolve(options: PatchOptions | dict | None, runtime: Runtime | RuntimeMemory,
            sm: SpatialModel, *, starts=None, frontier_overhead: float | None = None
            ) -> Request:
    """``options`` (checked by `PatchOptions`) resolved against ``runtime`` and the model
    ``sm``; the request's clock starts here. ``starts``: the operators the first region may
    start at (default `region_starts`; a forced ``region_start`` wins); ``frontier_overhead``:
    the MAC cap (default ``max(1, 3 * max_overhead)``, none when forced; tests: the whole
    frontier, for brute force)."""
    opts = PatchOptions.of(options)
    rt = runtime_of(runtime)
    padding = rt.default_padding if opts.padding is None else opts.padding
    if padding == "margins" and not rt.implicit_padding:
        raise Refused(f"padding='margins': the {rt.name} adapter writes explicit padding only")
    # a forced start alone still searches every grid (and one region: `PatchOptions.regions`)
    forced = opts.grid is not None or opts.split is not None
    extra = BAND_GRIDS if rt.band_grids else ()
    grids = (opts.grid,) if opts.grid is not None else \
        DEFAULT_GRIDS + tuple(g for g in extra if g not in DEFAULT_GRIDS)
    if opts.region_start is not None:
        starts = (opts.region_start,)
    elif starts is None:
        starts = region_starts(sm)
    cap = frontier_overhead if frontier_overhead is not None else (
        float("inf") if forced else max(1.0, 3 * opts.max_overhead))
    return Request(
        grids=tuple(grids), forced=forced, split=opts.split, starts=tuple(starts),
        se_modes=SE_MODES[opts.se_patches], margins=padding == "margins",
        # pricing every candidate twice would halve what the budget visits
        try_margins=padding is None and rt.implicit_padding, se=rt.se,
        exact_reductions=opts.exact_reductions, no_split=frozenset(rt.no_split(sm)),
        max_overhead=opts.max_overhead, cap=cap,
        max_slowdown=opts.max_slowdown if rt.time is not None else None,
        fast_memory=opts.fast_memory, certify=opts.certify,
        max_regions=opts.regions, meter=Meter(opts.budget, opts.time_limit))


@dataclass(frozen=True)
class Before:
    """The regions a search's candidates follow, patched (none: the first region's search):
    the candidates start at their end (``begin``), their part is priced from there, and their
    totals and MACs are the whole model's with those regions too."""

    sequence: tuple = ()
    begin: int = 0
    part_peak: int = 0  # the largest of their parts' peaks
    macs: int = 0  # the MACs they add
    persistent: int = 0  # the persistent bytes they add
    ops: int = 0  # the operators they add
    instructions: int = 0  # the instructions they add (a runtime with a cost model)

    @classmethod
    def of(cls, last: Candidate, n_ops: int) -> Before:
        seq = tuple(last.sequence)
        return cls(seq, last.region_ops, max(c.part_peak for c in seq),
                   sum(c.own_macs for c in seq), sum(c.own_persistent for c in seq),
                   last.ops - n_ops, sum(c.own_instructions for c in seq))


class Evaluator:
    """The problem of one search (a `Described` model under a runtime, a `Request`) and the
    prices of its candidates: the objective of the module docstring. Everything here depends on
    the model, the runtime and the request alone, so every strategy over it (`search`,
    `sequence`) shares its caches."""

    def __init__(self, described: Described, runtime: Runtime | RuntimeMemory,
                 request: Request):
        sm, graph = described.sm, described.graph
        self.sm, self.graph = sm, graph
        self.tensor_index = list(described.tensor_index)
        self.runtime = rt = runtime_of(runtime)
        self.memory = rt.memory
        self.model = model = rt.memory.activations
        self.request, self.meter = request, request.meter
        # MACs per op: the geometry's count for spatial ops (PAD moves data: 0; element-wise:
        # one per output element), the importer's for the others, so a region's MACs whole
        # and patched are counted alike
        self.op_macs = [sm.op_macs(op) if op.cls != "other" else sm.macs[k]
                        for k, op in enumerate(sm.ops)]
        self.total_macs = sum(self.op_macs)
        # the instructions of one inference, unpatched (None: the runtime has no cost model)
        self.time = rt.time
        self.base_instructions = int(rt.time.program(sm)) if rt.time is not None else None
        self._ins: dict = {}  # plan key (as `plan`'s) -> the instructions it adds, or None
        self._persistent: dict = {}  # ... -> the persistent bytes it adds
        self._node_floor: dict = {}  # ... -> `node_floor`
        steps = Problem.from_graph(graph, model).evaluate(list(range(len(graph)))).steps
        # per operator k: the file order's peak from k on (what the operators after a region
        # ending at k hold at least; the same in the patched model, whose regions reassemble
        # their split tensors)
        self.suffix = [0] * (len(steps) + 1)
        for k in range(len(steps) - 1, -1, -1):
            self.suffix[k] = max(steps[k], self.suffix[k + 1])
        self.base_persistent = self.memory.model_persistent(sm)
        inputs = sum(graph.tensors[t].nbytes for t in graph.input_tensors) \
            if model.count_inputs else 0
        self.floors_of = Floors(tuple(_operator_bytes(graph, model)), self.base_persistent,
                                inputs)
        # copies of a region's operators are the least the patches add to the persistent part
        self.copy_prices = [0]
        for op in sm.ops:
            self.copy_prices.append(self.copy_prices[-1] + self.memory.copy_price(op))
        # a region's input is whole until its first slice reads it: each one the memory
        # model counts bounds the part from below (MobileNetV2's planned float input under
        # Cortex-M: 602,112 B, where the other floors said 380,928 B)
        self.held = _held_inputs(graph, self.tensor_index, model, set(sm.outputs))
        self._regions: dict = {}  # starts -> (regions, why)
        self._axis: dict = {}  # (start, length) -> `grid_macs`' sums of that region
        self._walks: dict = {}  # `grid_macs`' walks, shared by the regions of one end
        self._macs: dict = {}  # (start, length, grid, keep) -> MACs or Refused
        self._region_macs: dict = {}  # (start, length) -> its MACs unpatched
        self._margins: dict = {}  # the margin windows (`margins.plan_margins`)
        self._plans: dict = {}  # (region, grid, keep, margins) -> plan or Refused
        self._parts: dict = {}  # ... and begin -> [part, order, refined (peak, order)]
        self._floors: dict = {}  # (start, length) -> (reassembly, held input)
        self._kept: dict = {}  # (start, length) -> `plans.kept_floor`
        self._prefix: dict = {}  # begin -> per operator, the largest run whole from begin

    # ------------------------------------------------------------------ the unpatched model
    def unpatched(self, note: str = "") -> Candidate:
        """The unpatched model in file order (grid 1x1)."""
        return Candidate([], [], 0, (1, 1), self.suffix[0], self.base_persistent,
                         self.total_macs, 0.0, len(self.sm.ops), note=note,
                         instructions=self.base_instructions,
                         slowdown=1.0 if self.base_instructions else None)

    def reordered(self) -> Candidate:
        """The unpatched model in its best order, what a patched candidate must beat: the
        certified scheduler's where it does better than the file order (when certifying)."""
        c = self.unpatched("file order")
        if self.request.certify:
            from ..schedulers import schedule

            s = schedule(self.graph, "auto", self.model, **self.meter.schedule_options())
            if s.peak <= c.peak:
                c.peak, c.note = int(s.peak), "scheduled"
            c.lower_bound, c.certified = int(s.lower_bound), bool(s.optimal)
        return c

    # ------------------------------------------------------------ regions, MACs, plans
    def regions(self, starts: tuple) -> tuple[list[Region], str]:
        """The regions from ``starts`` the runtime can reassemble (ending at the request's
        split when it names one), by start then length; and why the spatial prefix ends."""
        hit = self._regions.get(starts)
        if hit is not None:
            return hit
        req, sm = self.request, self.sm
        regs, why = regions(sm, starts, se=req.se, exact_reductions=req.exact_reductions)
        regs = [r for r in regs if not req.no_split.intersection(r.split)]
        if req.split is not None:
            regs = [r for r in regs if any(sm.tensors[t].name == req.split for t in r.split)]
            # the region that ends at that tensor alone, where there is one
            regs = [r for r in regs if len(r.split) == 1] or regs
            if not regs:
                raise Refused(f"no patch region ends at tensor {req.split!r} (the spatial "
                              f"prefix ends at {why})")
        self._regions[starts] = (regs, why)
        return regs, why

    def macs(self, r: Region, g: tuple, keep: bool, before: Before) -> int | Refused:
        """The whole model's MACs with region ``r`` in grid ``g`` (and the regions ``before``)
        patched (separable per axis: cheap, `windows.grid_macs`); Refused when it does not
        fit."""
        key = (r.start, r.length, g, keep)
        pm = self._macs.get(key)
        if pm is None:
            try:
                pm = grid_macs(self.sm, r, g, keep, self._axis.setdefault(
                    (r.start, r.length), {"walks": self._walks}))
            except Refused as e:
                pm = e
            self._macs[key] = pm
        return pm if isinstance(pm, Refused) else self.whole_macs(r, pm, before)

    def whole_macs(self, r: Region, region_macs: int, before: Before) -> int:
        """The whole model's MACs with region ``r`` costing ``region_macs`` patched."""
        key = (r.start, r.length)
        own = self._region_macs.get(key)
        if own is None:
            own = self._region_macs[key] = sum(self.op_macs[k] for k in r.ops)
        return self.total_macs + before.macs - own + region_macs

    def over_cap(self, macs: int) -> bool:
        return self.request.over_cap(macs, self.total_macs)

    def plan(self, r: Region, g: tuple, mode: tuple) -> PatchPlan | Refused:
        """The plan of region ``r`` in grid ``g``, ``mode`` = (keep, margins); Refused (with
        its reason) when it cannot be written."""
        keep, margins = mode
        key = (r.start, r.length, tuple(r.split), g, keep, margins)
        plan = self._plans.get(key)
        if plan is None:
            rt = self.runtime
            try:
                plan = plan_margins(self.sm, r, g, self._margins, rule=rt.padding_rule,
                                    max_concat=rt.max_concat_inputs) if margins else \
                    plan_patches(self.sm, r, g, keep, max_concat=rt.max_concat_inputs,
                                 own_padding=rt.own_padding)
            except Refused as e:
                plan = e
            self._plans[key] = plan
        return plan

    def padded(self, r: Region, g: tuple, mode: tuple) -> PatchPlan | None:
        """The plan of `plan` with its region inputs padded once (`plans.pad_sources`), for
        a runtime that asks for it (`Runtime.pad_sources`); None otherwise or when nothing
        changes."""
        if not self.runtime.pad_sources or mode[1]:
            return None
        key = (r.start, r.length, tuple(r.split), g, *mode, "padded")
        if key not in self._plans:
            base = self.plan(r, g, mode)
            self._plans[key] = None if isinstance(base, Refused) else pad_sources(base)
        return self._plans[key]

    def added_instructions(self, plan: PatchPlan) -> int | None:
        """The instructions ``plan`` adds over the region it replaces (0 without a cost
        model): its nodes' cost less the region's operators' whole; None when the cost model
        has no kernel for one of its nodes (`RuntimeTime` raises a ``ValueError``)."""
        if self.time is None:
            return 0
        r = plan.region
        key = (r.start, r.length, tuple(r.split), plan.grid, plan.keep, plan.margins,
               plan.padded_sources)
        if key not in self._ins:
            try:
                self._ins[key] = int(self.time.plan(self.sm, plan)) - sum(
                    int(self.time.op(self.sm, k)) for k in r.ops)
            except ValueError:  # a node the cost model has no kernel for: never guessed
                self._ins[key] = None
        return self._ins[key]

    def persistent(self, plan: PatchPlan) -> int:
        """The persistent bytes ``plan`` adds over the region it replaces (per plan: every
        search after a region asks again for the same plans)."""
        r = plan.region
        key = (r.start, r.length, tuple(r.split), plan.grid, plan.keep, plan.margins,
               plan.padded_sources)
        got = self._persistent.get(key)
        if got is None:
            got = self._persistent[key] = self.memory.plan_persistent_delta(self.sm, plan)
        return got

    # ------------------------------------------------------------------ lower bounds
    def node_floor(self, plan: PatchPlan) -> int:
        """A lower bound on the peak of any order of ``plan``'s part: a node runs with its
        inputs among the plan's nodes and its output live (and its workspace), each counted
        as `Problem` counts it in `patched_graph` (no in-place reuse there; a model output
        only where the model counts outputs). Cheap beside building and ordering the part:
        on long regions in few patches the windows barely shrink and this alone shows most
        candidates cannot win (TVM's MobileNetV3-Small-like int8 @128: 792 of its 1,000
        priced candidates)."""
        r = plan.region
        key = (r.start, r.length, tuple(r.split), plan.grid, plan.keep, plan.margins,
               plan.padded_sources)
        got = self._node_floor.get(key)
        if got is None:
            sm, a = self.sm, max(1, int(self.model.alignment))
            size = [-(-plan.node_bytes(sm, k) // a) * a for k in range(len(plan.nodes))]
            if not self.model.count_outputs:  # a model output's reassembly is not counted
                for t, k in plan.result.items():
                    if t in sm.outputs:
                        size[k] = 0
            ws = self.model.workspace
            got = self._node_floor[key] = max((
                size[k] + sum(size[i] for i in set(nd.inputs) if not isinstance(i, tuple)) +
                (sm.ops[nd.op].workspace if ws and nd.kind == "op" else 0)
                for k, nd in enumerate(plan.nodes)), default=0)
        return got

    def floors(self, r: Region, keep: bool, before: Before, max_end: int) -> tuple[int, int]:
        """Lower bounds on the peak of region ``r`` after ``before``: with the operators
        after it, and (for the sequences through it) with those after ``max_end``, the end of
        the deepest region a next one may start from."""
        key = (r.start, r.length)
        hit = self._floors.get(key)
        if hit is None:
            hit = self._floors[key] = (
                self.reassembly(r),
                max((self.held.get(t, 0) for t in r.inputs), default=0))
        kept = 0
        if keep:
            kept = self._kept.get(key)
            if kept is None:
                kept = self._kept[key] = kept_floor(self.sm, r)
        part = max(hit[0], self._before_region(before.begin)[r.start], kept,
                   before.part_peak, hit[1])
        return max(part, self.suffix[r.length]), max(part, self.suffix[max_end])

    def copies(self, r: Region, patches: int, before: Before) -> int:
        """The least persistent bytes with region ``r`` in ``patches`` patches: the copies
        of its operators."""
        return self.base_persistent + before.persistent + (patches - 1) * (
            self.copy_prices[r.length] - self.copy_prices[r.start])

    def reassembly(self, r: Region) -> int:
        """Bytes live at the final concatenation: every piece of the split tensors and the
        tensors it writes (unless they are model outputs the runtime does not plan)."""
        sm, model = self.sm, self.model
        pieces = sum(sm.tensors[t].nbytes for t in r.split)
        return pieces + sum(sm.tensors[t].nbytes for t in r.split
                            if model.count_outputs or t not in sm.outputs)

    def _before_region(self, begin: int) -> list[int]:
        """Per operator k: the largest operator from ``begin`` to k, run whole before a
        region starting at k (each holds at least its own inputs and outputs)."""
        hit = self._prefix.get(begin)
        if hit is None:
            own = self.floors_of.operators
            hit = [0] * (len(own) + 1)
            for k in range(len(own)):
                hit[k + 1] = max(hit[k], own[k]) if k >= begin else 0
            self._prefix[begin] = hit
        return hit

    # ------------------------------------------------------------------ prices
    def price(self, r: Region, g: tuple, mode: tuple, plan: PatchPlan, macs: int,
              own_persistent: int, before: Before, limit: int | None) -> Candidate:
        """The candidate (region ``r``, grid ``g``, ``mode`` = (keep, margins), its ``plan``)
        after the regions ``before``: its part ordered patch by patch, and by the scheduler
        package's heuristics too when its total is within `REFINE_WINDOW` of ``limit`` (the
        best total so far; None: always)."""
        keep, margins = mode
        sm, length = self.sm, r.length
        persist = self.base_persistent + before.persistent + own_persistent
        part, nodes, refined = self._part(r, g, mode, plan, before.begin)
        peak = max(part, self.suffix[length], before.part_peak)
        if limit is None or peak + persist <= self.window(limit):
            best = refined()  # close to the best: the heuristics may do better
            if best[0] < part:
                part, nodes = best
            peak = max(part, self.suffix[length], before.part_peak)
        total = self.total_macs
        c = Candidate([sm.tensors[t].name for t in r.split], list(r.split), length, g, peak,
                      persist, macs, macs / total - 1 if total else 0.0,
                      len(sm.ops) - length + r.start + len(plan.nodes), r.start, keep=keep,
                      margins=margins, node_order=list(nodes), part_peak=part,
                      own_macs=macs - total - before.macs, own_persistent=own_persistent,
                      before=before.sequence)
        if before.sequence:  # the operators of the regions before, patched
            c.ops += before.ops
        added = self.added_instructions(plan)
        if self.base_instructions is not None and added is not None and \
                all(b.instructions is not None for b in before.sequence):
            c.own_instructions = added
            c.instructions = self.base_instructions + before.instructions + added
            c.slowdown = c.instructions / self.base_instructions if self.base_instructions \
                else 1.0
        return c

    @staticmethod
    def window(limit: int) -> float:
        """Totals up to this are close enough to ``limit`` to refine."""
        return REFINE_WINDOW * limit

    def _part(self, r: Region, g: tuple, mode: tuple, plan: PatchPlan, begin: int):
        """(peak, plan node order, refined) of the patched part from ``begin``: the best
        patch-by-patch order, and ``refined()`` the scheduler package's best heuristic (the
        part depends on the plan and ``begin`` alone: sequences ending at the same operator
        price it once)."""
        key = ((r.start, r.length, tuple(r.split), g, *mode, plan.padded_sources), begin)
        built: list = []  # (patched part, its Problem), built at most once here

        def part_graph() -> tuple:
            if not built:
                pg = patched_graph(self.sm, self.graph, self.tensor_index, plan,
                                   prefix_only=True, begin=begin)
                built.append((pg, Problem.from_graph(pg, self.model)))
            return built[0]

        hit = self._parts.get(key)
        if hit is None:
            pg, pp = part_graph()
            part, order = heuristic_order(pg, plan, pp, baselines=False)
            hit = self._parts[key] = [part, node_order(pg, order), None]

        def refined() -> tuple:
            if hit[2] is None:
                from ..schedulers import best_heuristic

                pg, pp = part_graph()
                h_order, h_peak, _ = best_heuristic(pp)
                hit[2] = (h_peak, node_order(pg, h_order))
            return hit[2]

        return hit[0], hit[1], refined

    def refine_floor(self, c: Candidate, plan: PatchPlan, before: Before) -> int:
        """What bounds candidate ``c``'s total however its part is ordered."""
        return max(self.suffix[c.region_ops], self.reassembly(plan.region),
                   before.part_peak) + c.persistent

    def refine(self, c: Candidate, plan: PatchPlan, before: Before) -> None:
        """Order candidate ``c``'s patched part (its ``plan`` after ``before``) by the
        certified scheduler, bounded by work: its peak and order where it does better."""
        from ..schedulers import schedule

        pg = patched_graph(self.sm, self.graph, self.tensor_index, plan, prefix_only=True,
                           begin=before.begin)
        s = schedule(pg, "auto", self.model, **self.meter.schedule_options())
        if int(s.peak) < c.part_peak:
            c.node_order = node_order(pg, s.order)
        c.part_peak = min(c.part_peak, int(s.peak))
        c.peak = min(c.peak, max(c.part_peak, self.suffix[c.region_ops], before.part_peak))
        c.note = "prefix scheduled"

    def certify(self, c: Candidate, plans: list[PatchPlan], orders: bool) -> None:
        """Schedule candidate ``c``'s whole patched model (its regions' ``plans``) by the
        certified scheduler, bounded by work: its peak where it does better, the scheduler's
        lower bound, certified when optimal. ``orders``: take the scheduler's plan node order
        too (one region: `Candidate.node_order` is that region's)."""
        from ..schedulers import schedule

        full = patched_graph(self.sm, self.graph, self.tensor_index, plans)
        s = schedule(full, "auto", self.model, **self.meter.schedule_options())
        if orders:
            c.lower_bound = s.lower_bound
            if s.peak <= c.peak:
                c.peak, c.node_order = s.peak, node_order(full, s.order)
        else:
            c.lower_bound = int(s.lower_bound)
            if s.peak <= c.peak:
                c.peak = int(s.peak)
        c.certified = bool(s.optimal and s.peak <= c.peak)


def _operator_bytes(graph: OpGraph, model: MemoryModel) -> list[int]:
    """Per operator: its inputs and outputs (less what it writes in place), which any order
    holds at once."""
    return [sum(graph.tensors[t].nbytes for t in set(op.inputs) | set(op.outputs)) -
            (max((min(graph.tensors[t].nbytes,
                      sum(graph.tensors[o].nbytes for o in op.outputs))
                  for t in op.inplace), default=0) if model.inplace else 0)
            for op in graph.ops]


def _held_inputs(graph: OpGraph, tensor_index: list[int], model: MemoryModel, outputs: set
                 ) -> dict[int, int]:
    """``sm`` tensor -> its bytes where ``model`` counts it while it is live (a model input
    only with ``count_inputs``, a model output only with ``count_outputs``): what a region
    reading it holds at its first slice, in the patched graph as in the model."""
    inputs = set(graph.input_tensors)
    held = {}
    for gt, ten in enumerate(graph.tensors):
        t = tensor_index[gt]
        if (gt in inputs and not model.count_inputs) or \
                (t in outputs and not model.count_outputs):
            continue
        held[t] = ten.nbytes
    return held

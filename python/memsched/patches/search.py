"""Choose the split point and the patch grid: one evaluator, a Pareto frontier, a default.

The objective is stated once, here, with the runtime's memory model as its parameter
(`RuntimeMemory`): TVM's planned storage, TFLite Micro's arena (activations + the bytes it keeps
per operator), ExecuTorch's activation-only arenas. For every candidate (region = spatial prefix
ending at its split tensors, grid ``R x C``) the evaluator prices

* **peak**: the activation peak of the patched graph under the runtime's activation model
  (``memory.activations``, the one evaluator of `memsched.memory`). During the search: the
  patched prefix run patch by patch (each row's patches, its row concatenation, then the final
  one) as an `OpGraph` of its own, and the rest of the model in file order -- after the region
  exactly the split tensors (and model inputs still read) are live, so the peak is the larger
  of the two parts. The frontier's candidates are then scheduled whole by the certified
  scheduler (`memsched.schedule(graph, "auto", model)`), whose order the runtimes apply;
* **persistent**: what the runtime keeps per operator and per tensor besides the activations
  (`RuntimeMemory.model_persistent` / `plan_persistent_delta`; TFLite Micro's tail section:
  `memsched.tflite.tflm_memory`). Schedule-independent; 0 where the arena holds activations only;
* **total** = peak + persistent: the arena a user must give the runtime (the objective);
* **MACs** of the whole model (region operators on their patch windows).

The frontier keeps the candidates no other beats on both total and MACs; the default choice is
the lowest total within ``max_overhead`` extra MACs, ties to fewer patches, and only if it beats
the unpatched model in its best order. Candidates are visited by MACs, and one whose lower bound
(the rest of the model's peak, the split tensors' pieces and their reassembly, the copies'
persistent bytes) cannot beat a cheaper candidate is skipped: the frontier is exact for the
evaluator, at a fraction of the work.
"""
from __future__ import annotations

import time

from ..graph import OpGraph
from ..memory import MemoryModel, Problem
from .budget import Budget, Clock
from .errors import Refused
from .geometry import SpatialModel
from .margins import plan_margins
from .result import Candidate, Deferred, SearchResult, choose, pareto  # noqa: F401
from .patched import heuristic_order, heuristic_peak, node_order, patch_order, \
    patched_graph  # noqa: F401 (the evaluator's graphs; names kept importable from here)
from .plans import kept_floor, plan_patches
from .regions import Region, is_se, regions
from .runtime import Runtime, RuntimeMemory, runtime_of  # noqa: F401 (importable from here)
from .windows import grid_macs

MARGIN_TRIES = 8  # best explicit candidates also priced with margins (`margins`)
REFINE_WINDOW = 1.25  # refine candidates whose heuristic total is within this of the best
DEFAULT_GRIDS = ((1, 2), (2, 1), (1, 3), (3, 1), (2, 2), (1, 4), (4, 1), (2, 3), (3, 2),
                 (2, 4), (4, 2), (3, 3), (3, 4), (4, 3), (4, 4), (5, 5), (6, 6), (7, 7), (8, 8))
# more height bands (the rows of an NHWC tensor: contiguous pieces), beyond CONCATENATION's 10
# inputs by chaining (`plans.MAX_CONCAT_INPUTS`): ``extra_grids`` of `search_patches`
BAND_GRIDS = ((5, 1), (6, 1), (7, 1), (8, 1), (10, 1), (12, 1), (14, 1), (16, 1), (5, 2),
              (6, 2))


# ---------------------------------------------------------------------------- search
def search_patches(sm: SpatialModel, graph: OpGraph, tensor_index: list[int],
                   runtime: Runtime | RuntimeMemory, *, grids=None, split: str | None = None,
                   max_overhead: float = 0.3, certify: bool = True, time_limit: float = 10.0,
                   frontier_overhead: float | None = None, exclude_split=(),
                   starts=(0,), extra_grids=None, se: bool | None = None,
                   exact_reductions: bool = True, se_patches: str | None = None,
                   after: Candidate | None = None, incumbent: int | None = None,
                   extend: bool = False, padding: str | None = None,
                   budget: Budget | None = None, clock: Clock | None = None,
                   cache: dict | None = None) -> SearchResult:
    """Evaluate candidates (region, grid) under ``runtime`` (`runtime.Runtime`: its memory
    model and what its adapter can write; a bare `RuntimeMemory`: explicit plans only) and
    return the frontier and the default choice.

    ``graph``: the model's `OpGraph` (op ``v`` = operator ``v`` of ``sm``, ``tensor_index[t]``
    the ``sm`` tensor of its tensor ``t``); ``grids``: (rows, cols) to try (default
    `DEFAULT_GRIDS`); ``split``: only regions ending at the tensor of that name. Asking for a
    grid or a split forces a choice: the best candidate asked for, whatever it costs.
    ``frontier_overhead``: skip candidates above this MAC overhead (default: ``max(1,
    3*max_overhead)``; forced: none); ``certify``: refine the promising candidates and schedule
    the frontier with the certified scheduler; ``budget``: the work it may do (`budget.Budget`:
    candidates priced, scheduler calls and their A* states; the result depends on the input
    alone); ``time_limit``: a wall-clock safety net in seconds (``clock``: a shared one), which
    stops the search early and says so in ``SearchResult.stopped``; ``exclude_split``: ``sm``
    tensors a region must not end at (besides those the runtime cannot reassemble,
    `Runtime.no_split_kinds`); ``starts``: the operator indices a region may start at (the
    operators before run whole; default: the model inputs only); ``extra_grids``: grids tried
    besides the default ones (not a forced choice; default: `BAND_GRIDS` where
    `Runtime.band_grids`); ``se``: regions may contain squeeze-and-excitation blocks
    (`regions.regions`; default `Runtime.se`: runtimes whose adapter rewrites the reduce /
    vector / scale nodes); ``exact_reductions``: only through reductions whose partial sums
    combine exactly (False: float sums too, equal up to rounding; `geometry.inexact_reduction`);
    ``se_patches``: how the passes after a reduction get their feature maps, ``"recompute"`` or
    ``"keep"`` (`plans.plan_patches`; default: both priced, the evaluator chooses);
    ``padding``: ``"explicit"`` (exact windows, PADs on borders: `plans.plan_patches`),
    ``"margins"`` (operators with their own padding on wider windows: `margins.plan_margins`,
    where `Runtime.implicit_padding`); default `Runtime.default_padding`, else explicit and the
    best candidates with margins too. The options are checked once, by `options.PatchOptions`
    (what `memsched.patches.search_model` takes).

    One region per candidate; `memsched.patches.sequence.search_regions` (what the adapters
    call) chains them. Its parameters here: ``after``: the regions before (the last one's
    candidate: its ``sequence``), patched -- the candidates' regions start at its end, their
    totals and MACs are the whole model's with those regions too, and their part is priced
    from that end on (`patched_graph` ``begin``); ``incumbent``: a total already reached (a
    candidate whose lower bound cannot beat it is skipped); ``extend``: a next region may
    follow a candidate, so the operators after it do not bound it (skipping stays exact for
    the sequences); ``cache``: what depends on a region alone (its MAC sums, its margin
    windows, its plans and their heuristic parts from ``begin``; the bytes each input holds),
    shared by the searches of one sequence search.
    """
    from ..schedulers import best_heuristic, schedule

    rt = runtime_of(runtime)
    memory = rt.memory
    se = rt.se if se is None else se
    if extra_grids is None:
        extra_grids = BAND_GRIDS if rt.band_grids else ()
    exclude_split = [*exclude_split, *rt.no_split(sm)]
    padding = rt.default_padding if padding is None else padding
    modes = {None: (False, True), "recompute": (False,), "keep": (True,)}[se_patches]
    if padding == "margins" and not rt.implicit_padding:
        raise Refused(f"padding='margins': the {rt.name} adapter writes explicit padding only")
    # the plan with margins: asked for, or (default) tried on the best explicit candidates
    # below (pricing every candidate twice would halve what the budget visits)
    try_margins = padding is None and rt.implicit_padding
    t0 = time.perf_counter()  # for the report only: the budgets decide, the clock only stops
    budget = budget or Budget()
    clock = clock or Clock(time_limit)
    sched = budget.schedule_options()
    model = memory.activations
    forced = bool(grids) or split is not None
    grids = list(grids or DEFAULT_GRIDS + tuple(g for g in extra_grids
                                                if g not in DEFAULT_GRIDS))
    cap = frontier_overhead if frontier_overhead is not None else (
        float("inf") if forced else max(1.0, 3 * max_overhead))
    # MACs per op: the geometry's count for spatial ops (PAD moves data: 0; element-wise: one
    # per output element), the importer's for the others, so a region's MACs whole and patched
    # are counted alike
    op_macs = [sm.op_macs(op) if op.cls != "other" else sm.macs[k]
               for k, op in enumerate(sm.ops)]
    total_macs = sum(op_macs)
    begin = after.region_ops if after is not None else 0
    # the regions before: the largest of their parts' peaks, what they add
    floor_peak = max((c.part_peak for c in after.sequence), default=0) if after else 0
    floor_macs = sum(c.own_macs for c in after.sequence) if after else 0
    floor_persist = sum(c.own_persistent for c in after.sequence) if after else 0
    if after is not None:
        starts = (begin,)
    problem = Problem.from_graph(graph, model)
    file_order = list(range(len(graph)))
    steps = problem.evaluate(file_order).steps
    suffix = [0] * (len(steps) + 1)
    for k in range(len(steps) - 1, -1, -1):
        suffix[k] = max(steps[k], suffix[k + 1])
    # the operators before a region run whole: each holds at least its own inputs and outputs
    prefix = [0] * (len(graph.ops) + 1)  # from ``begin`` on: those before are patched
    own = [sum(graph.tensors[t].nbytes for t in set(op.inputs) | set(op.outputs)) -
           (max((min(graph.tensors[t].nbytes, sum(graph.tensors[o].nbytes for o in op.outputs))
                 for t in op.inplace), default=0) if model.inplace else 0)
           for op in graph.ops]
    for k in range(len(own)):
        prefix[k + 1] = max(prefix[k], own[k]) if k >= begin else 0
    base_persist = memory.model_persistent(sm)
    original = Candidate([], [], 0, (1, 1), suffix[0], base_persist, total_macs, 0.0,
                         len(sm.ops))
    # the unpatched model in its best order: what a patched candidate must beat
    reordered = Candidate([], [], 0, (1, 1), suffix[0], base_persist, total_macs, 0.0,
                          len(sm.ops), note="file order")
    if certify and after is None:
        s = schedule(graph, "auto", model, **sched)
        if s.peak <= reordered.peak:
            reordered.peak, reordered.note = int(s.peak), "scheduled"
        reordered.lower_bound, reordered.certified = int(s.lower_bound), bool(s.optimal)
    regs, why = regions(sm, starts, se=se, exact_reductions=exact_reductions)
    excluded = set(exclude_split)
    regs = [r for r in regs if not excluded.intersection(r.split)]
    if split is not None:
        regs = [r for r in regs if any(sm.tensors[t].name == split for t in r.split)]
        # the region that ends at that tensor alone, where there is one
        regs = [r for r in regs if len(r.split) == 1] or regs
        if not regs:
            raise Refused(f"no patch region ends at tensor {split!r} (the spatial prefix ends "
                          f"at {why})")
    refused: list[str] = []
    plans: dict = {}
    # MACs first (separable per axis: cheap), then plans and peaks in MAC order, skipping a
    # candidate whose lower bound cannot beat a cheaper one (exact Pareto pruning)
    cands = []
    region_price = [0]
    for op in sm.ops:
        region_price.append(region_price[-1] + memory.copy_price(op))
    # regions by start, then length; the grids side by side, so a long search drops the
    # deepest regions (for every grid) when ``budget.enumerate`` MAC counts are spent
    over_cap: dict = {}
    # what depends on a region alone, shared by the searches of one sequence search (``cache``):
    # a region's sums along one axis per band count, its margin windows (`margins`)
    cache = {} if cache is None else cache
    margin_cache = cache.setdefault("margins", {})
    plan_cache = cache.setdefault("plans", {})  # (region, grid, mode) -> plan or Refused
    part_cache = cache.setdefault("parts", {})  # ... and begin -> [part, order, refined]
    at = None
    counted = 0
    # with ``extend``, what bounds a candidate after it is the operators after the deepest
    # region (a next region may patch those before)
    max_end = max((r.length for r in regs), default=0)
    for r in regs:
        if r.start != at:
            over_cap, at = {g: 0 for g in grids}, r.start
        if cands and (counted >= budget.enumerate or clock.out("counting MACs")):
            break
        mac_cache = cache.setdefault((r.start, r.length), {})
        for gi, g in enumerate(grids):
            if over_cap[g] >= 3 or g[0] > r.hw[0] or g[1] > r.hw[1]:
                continue
            fits = over = False
            # a squeeze-and-excitation region: recompute or keep, both priced; with a
            # runtime that pads on windows, the plan with margins too
            variants = [(keep, False) for keep in modes] if is_se(sm, r) else \
                [(False, padding == "margins")]
            for mode in variants:
                try:
                    # margins: the exact plan's MACs bound them from below (counted when
                    # the plan is built: windows per band cost more than this loop may spend)
                    counted += 1
                    pm = grid_macs(sm, r, g, mode[0], mac_cache)
                except Refused as e:
                    _refuse(refused, sm, r, g, e)
                    continue
                macs = total_macs + floor_macs - sum(op_macs[k] for k in r.ops) + pm
                if total_macs and macs / total_macs - 1 > cap:
                    over = True
                    continue
                fits = True
                cands.append((macs, g[0] * g[1], r.length - r.start, mode, gi, r.start, g, r))
            # halos only grow with depth: three regions in a row over the cap end the grid
            if fits or over:
                over_cap[g] = 0 if fits else over_cap[g] + 1
    cands.sort(key=lambda c: c[:6])  # ties: the grids' order, then the regions'
    evaluated = skipped = priced = 0
    results: list[Candidate] = []
    best_total = incumbent
    # with ``extend``: candidates skipped only because of the operators after them (a next
    # region may patch those), or not visited in the time limit: (their bound for the
    # sequences after them, MACs, region, grid, keep, not visited), for
    # `sequence.search_regions` to price (``SearchResult.price``) when it gets there
    deferred: list = []
    # a region's input is whole until its first slice reads it: each one the memory model
    # counts bounds the part from below (MobileNetV2's planned float input under Cortex-M:
    # 602,112 B, where the other floors said 380,928 and its regions' deferred candidates took
    # the sequence search's steps)
    if "held" not in cache:
        cache["held"] = _held_inputs(graph, tensor_index, model, set(sm.outputs))
    held = cache["held"]

    def floors(r: Region, keep: bool) -> tuple[int, int]:
        """Lower bounds on the peak: with the operators after the region, and (for the
        sequences after it) with those after the deepest region."""
        part = max(_reassembly(sm, r.split, model), prefix[r.start],
                   kept_floor(sm, r) if keep else 0, floor_peak,
                   max((held.get(t, 0) for t in r.inputs), default=0))
        return max(part, suffix[r.length]), max(part, suffix[max_end])

    def build(macs: int, r: Region, g, mode: tuple, limit) -> Candidate | None:
        """The candidate (region ``r``, grid ``g``, ``mode`` = (keep, margins)) priced by the
        evaluator; None when refused or when its bound reaches ``limit`` (None: no limit)."""
        nonlocal evaluated, skipped, priced
        keep, margins = mode
        pkey = (r.start, r.length, tuple(r.split), g, keep, margins)
        plan = plan_cache.get(pkey)
        if plan is None:
            try:
                plan = plan_margins(sm, r, g, margin_cache, rule=rt.padding_rule,
                                    max_concat=rt.max_concat_inputs) if margins else \
                    plan_patches(sm, r, g, keep, max_concat=rt.max_concat_inputs)
            except Refused as e:
                plan = e
            plan_cache[pkey] = plan
        if isinstance(plan, Refused):
            _refuse(refused, sm, r, g, plan)
            return None
        if margins:  # the MACs of its wider windows
            macs = total_macs + floor_macs - sum(op_macs[k] for k in r.ops) + plan.macs
            if total_macs and macs / total_macs - 1 > cap:
                return None
        own_persist = memory.plan_persistent_delta(sm, plan)
        persist = base_persist + floor_persist + own_persist
        floor, floor_ext = floors(r, keep)
        if limit is not None and floor + persist >= limit:
            skipped += 1
            if extend and floor_ext + persist < limit:
                deferred.append(Deferred(floor_ext + persist, macs, r, g, mode, False))
            return None
        length = r.length
        priced += 1
        # the patched part from ``begin`` depends on the plan and ``begin`` alone: sequences
        # ending at the same operator price it once (``cache``)
        built: list = []  # (patched part, its Problem), built at most once here

        def part_graph() -> tuple:
            if not built:
                pg = patched_graph(sm, graph, tensor_index, plan, prefix_only=True, begin=begin)
                built.append((pg, Problem.from_graph(pg, model)))
            return built[0]

        hit = part_cache.get((pkey, begin))
        if hit is None:
            pg, pp = part_graph()
            part, order = heuristic_order(pg, plan, pp, baselines=False)
            hit = part_cache[(pkey, begin)] = [part, node_order(pg, order), None]
        part, nodes = hit[0], hit[1]
        peak = max(part, suffix[length], floor_peak)
        if limit is None or peak + persist <= REFINE_WINDOW * limit:
            # close to the best: the scheduler package's heuristics may do better
            if hit[2] is None:
                pg, pp = part_graph()
                h_order, h_peak, _ = best_heuristic(pp)
                hit[2] = (h_peak, node_order(pg, h_order))
            if hit[2][0] < part:
                part, nodes = hit[2]
            peak = max(part, suffix[length], floor_peak)
        evaluated += 1
        c = Candidate([sm.tensors[t].name for t in r.split], list(r.split), length, g, peak,
                      persist, macs, macs / total_macs - 1 if total_macs else 0.0,
                      len(sm.ops) - length + r.start + len(plan.nodes), r.start, keep=keep,
                      margins=margins,
                      node_order=list(nodes),
                      part_peak=part, own_macs=macs - total_macs - floor_macs,
                      own_persistent=own_persist,
                      before=tuple(after.sequence) if after is not None else ())
        if after is not None:  # the operators of the regions before, patched
            c.ops += after.ops - len(sm.ops)
        results.append(c)
        plans[c.key] = plan
        return c

    out_of_time = False  # out of budget (or, as a safety net, of time)
    for macs, patches, length, mode, _, _, g, r in cands:
        keep = mode[0]
        out_of_time = out_of_time or bool(results and (priced >= budget.priced or
                                                       clock.out("pricing candidates")))
        # copies of the region's operators are the least the patches add to the persistent part
        floor, floor_ext = floors(r, keep)
        copies = base_persist + floor_persist + (patches - 1) * (
            region_price[r.length] - region_price[r.start])
        if out_of_time:  # not visited: with ``extend``, the sequence search may get there
            if extend and (best_total is None or floor_ext + copies < best_total):
                deferred.append(Deferred(floor_ext + copies, macs, r, g, mode, True))
            continue
        if best_total is not None and floor + copies >= best_total:
            skipped += 1
            if extend and floor_ext + copies < best_total:
                deferred.append(Deferred(floor_ext + copies, macs, r, g, mode, False))
            continue
        c = build(macs, r, g, mode, best_total)
        if c is not None and (best_total is None or c.total < best_total):
            best_total = c.total
    if try_margins:  # the same regions and grids with margins: no PADs, fewer crops
        for c in sorted(results, key=lambda c: (c.total, c.macs))[:MARGIN_TRIES]:
            if c.keep or clock.out("margins"):
                continue
            m = build(c.macs, plans[c.key].region, c.grid, (False, True), best_total)
            if m is not None and (best_total is None or m.total < best_total):
                best_total = m.total
    # refine: the scheduler on the patched prefix of the most promising candidates (the
    # heuristic orders above can be 20 % off on the peak), best heuristic total first, at most
    # ``budget.refine`` of them; skipped: a candidate whose lower bound cannot beat the best
    # refined total, or whose heuristic total is more than REFINE_WINDOW times it. In the
    # one-region search only (a sequence's regions are ordered whole at the end): a candidate
    # the heuristics misjudge would otherwise leave the frontier before it is certified
    # (MobileNetV1 0.25 @128 under TFLite Micro: 2x3 below 3x2 only once scheduled)
    best_refined = None
    refined = 0
    for c in sorted(results, key=lambda c: (c.total, c.macs)):
        if not certify or after is not None or refined >= budget.refine or \
                clock.out("refining"):
            break
        plan = plans[c.key]
        reassembly = _reassembly(sm, plan.region.split, model)
        floor = max(suffix[c.region_ops], reassembly, floor_peak) + c.persistent
        if best_refined is not None and (floor >= best_refined or
                                         c.total > REFINE_WINDOW * best_refined):
            continue
        pg = patched_graph(sm, graph, tensor_index, plan, prefix_only=True, begin=begin)
        refined += 1
        s = schedule(pg, "auto", model, **sched)
        if int(s.peak) < c.part_peak:
            c.node_order = node_order(pg, s.order)
        c.part_peak = min(c.part_peak, int(s.peak))
        c.peak = min(c.peak, max(c.part_peak, suffix[c.region_ops], floor_peak))
        c.note = "prefix scheduled"
        if best_refined is None or c.total < best_refined:
            best_refined = c.total
    frontier = pareto(results)
    if certify and frontier and after is None:
        # the candidates the choice is made from first (within the MAC budget unless forced),
        # best total first, at most ``budget.certify`` of them
        eligible = [c for c in sorted(frontier, key=lambda c: (
            not forced and c.overhead > max_overhead + 1e-12, c.total, c.macs))]
        for c in eligible[:budget.certify]:
            if clock.out("certifying"):
                break
            plan = plans[c.key]
            full = patched_graph(sm, graph, tensor_index, plan)
            s = schedule(full, "auto", model, **sched)
            c.lower_bound = s.lower_bound
            if s.peak <= c.peak:
                c.peak, c.node_order = s.peak, node_order(full, s.order)
            c.certified = bool(s.optimal and s.peak <= c.peak)
        frontier = pareto(frontier)
    if forced:  # asked for: the best of what was asked, even if it is no better
        choice = min(frontier, key=lambda c: (c.total, c.patches, c.macs)) if frontier else None
    else:
        choice = choose(frontier, reordered, max_overhead)
    inputs = sum(graph.tensors[t].nbytes for t in graph.input_tensors) \
        if model.count_inputs else 0
    return SearchResult(original, frontier, choice, evaluated, skipped, refused, why,
                        time.perf_counter() - t0, plans, reordered, own, base_persist, inputs,
                        results, suffix, max_end, deferred=deferred,
                        price=lambda d: build(d.macs, d.region, d.grid, d.mode, None),
                        priced=priced, stopped=clock.stopped)


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


def _reassembly(sm: SpatialModel, split, model: MemoryModel) -> int:
    """Bytes live at the final concatenation: every piece of the split tensors and the tensors
    it writes (unless they are model outputs the runtime does not plan)."""
    pieces = sum(sm.tensors[t].nbytes for t in split)
    return pieces + sum(sm.tensors[t].nbytes for t in split
                        if model.count_outputs or t not in sm.outputs)


def _refuse(refused: list, sm: SpatialModel, r: Region, g, e: Exception) -> None:
    msg = f"split {sm.tensors[r.split[-1]].name!r} grid {g[0]}x{g[1]}: {e}"
    if msg not in refused:
        refused.append(msg)

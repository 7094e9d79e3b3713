"""Regions as a search dimension: a sequence of k >= 1 patch regions, each with its own grid.

The first, high-resolution stage of a CNN wants many patches, the next one a few (halos grow
with depth, so one grid for both costs MACs or bytes). `search_regions` chooses a sequence of
regions ``[s1, e1), [e1, e2), ...`` (each starting where the one before ends) and a grid and
SE variant per region, under one MAC budget for the whole model, priced by the one evaluator
of `memsched.patches.search` under the runtime's memory model (`RuntimeMemory`).

Why the regions can be priced one at a time: after a region's reassembly exactly the tensors
read later (its split tensors, and whatever crosses it) are live, whatever its grid. So the
model as region i leaves it is the same for every grid of region i, and region i+1 is priced
on it (`search_patches` with ``after=``: its part from region i's end, the tensors crossing
made by one ``source`` operator -- `patched_graph` ``begin``). A sequence's peak is the
largest of its regions' parts and of the operators after the last region (file order); its
persistent bytes and MACs add up. Every region is priced by the same evaluator as one region
alone, and the certified scheduler then schedules the chosen sequence's whole patched graph.

The search: the one-region search first (its choice is the k = 1 answer); then, in turn,
(a) sequences to extend: first the one-region choice's region with any grid and the
frontier's shallower regions, by their part alone (what a next region leaves of them; what
the adapters' second-region code tried first before issue 40), then every sequence by its
total as it is (lowest first: a bound cannot tell a shallow sequence, its rest still to
patch, from a deep one), each extended by the one-region search
from its end (with the sequence's totals, the global best as incumbent), and (b) the
candidates a search deferred, in two queues: those not visited within its budget (by MACs,
as the one-region search visits them) and those skipped only for the operators after them
(a next region may patch those; lowest bound first: a shallow region whose part is small is
the most promising start of a sequence, even when alone it is no answer, mbv2-0.35-144 in
docs/patches.md; once priced, extended by bound like the seeds). A sequence whose bound (the
largest part so far, the operators after the deepest region, the persistent bytes so far)
cannot beat the best total is not extended, nor one another beats on part peak, persistent
bytes and MACs at the same end. A sequence is kept only when it lowers the total: the
search stops where no further region does (or at
``max_regions`` / the work budgets of `memsched.patches.budget`, which make the result a
function of the input alone; the time limit is a safety net that says when it stopped it).
On small models it visits every sequence the bound cannot
exclude: exact for the evaluator
(tests/test_patches_regions.py checks it against brute-force enumeration).
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
import time

from ..graph import OpGraph
from ..memory import Problem
from .budget import Clock
from .geometry import SpatialModel
from .plans import PatchPlan
from .options import MAX_REGIONS, PatchOptions  # noqa: F401 (MAX_REGIONS: importable here)
from .runtime import Runtime, RuntimeMemory, runtime_of
from .search import Candidate, SearchResult, choose, heuristic_peak, patched_graph, \
    search_patches

def search_regions(sm: SpatialModel, graph: OpGraph, tensor_index: list[int],
                   runtime: Runtime | RuntimeMemory, options: PatchOptions | None = None, *,
                   starts=(0,), frontier_overhead: float | None = None,
                   **given) -> SearchResult:
    """The patch search (what `memsched.patches.search` runs for every adapter): one region
    (`search_patches`), then up to ``options.max_regions`` regions in sequence, within the
    work ``options.budget`` (`budget.Budget`; the result depends on the input alone), under
    ``runtime`` (`runtime.Runtime`: its memory model and what its adapter can write).
    ``options.time_limit``: the wall-clock safety net of the whole search; when it stops the
    search, ``SearchResult.stopped`` says where. A forced grid / split / start asks for one
    region. ``starts``: the operators a region may start at; ``frontier_overhead``: as
    `search_patches` (tests: the whole frontier, for brute force). ``given``: `PatchOptions` fields
    put over ``options``. Returns the one-region search's `SearchResult` with ``choice`` the
    best sequence's last region (``choice.sequence``: every region; ``plans_of(choice)``: their
    plans; its ``peak`` / ``persistent`` / ``macs`` the whole model's), ``candidates`` every
    one-region candidate."""
    opts = PatchOptions.of(options, **given)
    if opts.region_start is not None:
        starts = (opts.region_start,)
    work = opts.budget
    max_overhead, certify, max_regions = opts.max_overhead, opts.certify, opts.regions
    clock = Clock(opts.time_limit)
    # what every search of the sequence shares (the regions after the first start at the end
    # of the one before)
    options = dict(se_patches=opts.se_patches, exact_reductions=opts.exact_reductions,
                   padding=opts.padding, starts=tuple(starts),
                   frontier_overhead=frontier_overhead, cache={})
    grids = [opts.grid] if opts.grid is not None else None
    split = opts.split
    first = search_patches(sm, graph, tensor_index, runtime, grids=grids, split=split,
                           max_overhead=max_overhead, certify=certify, budget=work,
                           clock=clock, extend=max_regions > 1, **options)
    if max_regions <= 1 or not first.candidates:
        return first
    t0 = time.perf_counter()  # for the report only
    priced = first.priced  # candidates priced so far (`Budget.total_priced`)
    total_macs = first.original.macs
    mac_budget = (1 + max_overhead) * total_macs + 1e-9 * max(total_macs, 1)
    bar = first.reordered.total if first.reordered is not None else first.original.total
    best = first.choice
    best_total = best.total if best is not None else bar
    suffix, max_end = first.suffix, first.max_end

    def bound(c: Candidate) -> int:
        """No sequence extending ``c`` totals less: its parts so far, the operators after the
        deepest region, its persistent bytes (extensions only add MACs and bytes)."""
        return max(max(r.part_peak for r in c.sequence), suffix[max_end]) + c.persistent

    # three queues, taken in turn: sequences to extend; candidates a search deferred, not
    # visited (by MACs) or skipped for the operators after them (by their bound for the
    # sequences through them). Each is dropped once its bound cannot beat the best. A step
    # (`Budget.steps`) is work: an extension or a deferred candidate priced; a sequence
    # dominated at its end is dropped without one.
    ext: list = []
    unvisited: list = []  # deferred candidates the search did not visit
    skipped: list = []  # ... it skipped for the operators after them
    pushed = itertools.count()  # ties: first pushed first (never compares candidates)
    front: dict = {}  # end -> [(part peak, persistent, MACs)] of the sequences extended there

    # first regions to follow first: the one-region choice's region (finer grids than its
    # own: alone no better, with a next region they can be) and the frontier's shallower
    # regions, by their part alone (what a next region leaves of them)
    ref = first.choice or min(first.frontier, key=lambda c: c.total, default=None)
    seeds = {(c.region_start, c.region_ops) for c in first.frontier
             if ref is None or c.region_ops < ref.region_ops}
    if ref is not None:
        seeds.add((ref.region_start, ref.region_ops))

    def push(c: Candidate, start: bool = False) -> None:
        # then by the total a sequence has as it is: a bound cannot tell a shallow sequence
        # (its rest still to patch) from a deep one, its total can
        if len(c.sequence) < max_regions and c.macs <= mac_budget and c.region_ops < max_end:
            # ``start``: a candidate skipped for the operators after it (its worth is what a
            # next region leaves of it), taken by its bound like the seeds
            seed = start or len(c.sequence) == 1 and (c.region_start, c.region_ops) in seeds
            key = (0, bound(c)) if seed else (1, c.total)
            heapq.heappush(ext, (*key, c.macs, next(pushed), c))

    def defer(res: SearchResult) -> None:
        # two queues, each by its bound, the lowest first: the ones not visited in the
        # one-region search's budget (each may be an answer itself: by MACs, the order that
        # search visits, TVM's int8 mbv2-0.35-144 waited for its 4-5x5 regions behind hundreds
        # of cheap ones, 361,728 B instead of 256,000 B), and those skipped for the operators
        # after them (only a next region can make them one, and a shallow region with a small
        # part is the best start of a sequence; in one queue with the others, one waited past
        # the step budget: mbv2-0.35-144 under TFLite)
        for d in res.deferred:
            if d.macs <= mac_budget:
                seed = res is first and (d.region.start, d.region.length) in seeds
                key = (not seed, d.bound, d.macs) if d.unvisited else (False, d.bound, d.macs)
                heapq.heappush(unvisited if d.unvisited else skipped,
                               (*key, next(pushed), d, res))

    def take(turn: int):
        """The next entry worth a look (None: every queue done): the three queues in turn,
        an empty one's turn to the next."""
        for q, at in ((unvisited, 1), (skipped, 1)):
            while q and q[0][at] >= best_total:
                heapq.heappop(q)
        while ext and bound(ext[0][-1]) >= best_total:
            heapq.heappop(ext)
        for k in range(3):
            q = (ext, unvisited, skipped)[(turn + k) % 3]
            if q is ext and ext:
                return heapq.heappop(ext)[-1], None
            if q is not ext and q:
                *_, d, res = heapq.heappop(q)
                return d, res
        return None

    # the best sequences by their heuristic totals, for the certified scheduler at the end
    # (``budget.certify`` of them): heuristic orders can be 5 % off, and the best heuristic
    # total is not always the best certified one (mbv2-0.35-144 under TFLite Micro)
    finalists: list = []

    def consider(c: Candidate) -> None:
        nonlocal best, best_total
        if c.total < best_total:
            best, best_total = c, c.total
        if c is not first.choice and not any(o is c for _, _, o in finalists):
            finalists.append((c.total, next(pushed), c))
            finalists.sort(key=lambda f: f[:2])
            del finalists[work.certify:]

    for c in first.candidates:
        push(c)
    defer(first)
    extended = 0
    turn = 0
    while turn < work.steps and priced < work.total_priced and \
            not clock.out("regions after the first"):
        turn += 1
        got = take(turn)
        if got is None:
            break
        c, owner = got
        start = owner is not None and not c.unvisited
        if owner is not None:  # a deferred candidate: price it, then it waits its turn
            priced += 1
            c = owner.price(c)
            if c is not None:
                first.plans[c.key] = owner.plans[c.key]
                if c.macs <= mac_budget and c.overhead <= max_overhead + 1e-12:
                    consider(c)  # e.g. one the first search had no budget for
                push(c, start)
            continue
        key = (max(r.part_peak for r in c.sequence), c.persistent, c.macs)
        seen = front.setdefault(c.region_ops, [])
        if any(all(a <= b for a, b in zip(o, key)) for o in seen):
            turn -= 1  # no work: not a step
            continue  # another sequence to the same end is no worse on all three
        seen.append(key)
        extended += 1
        left = work.total_priced - priced
        # a share of what is left: the sequences after this one and the deferred candidates
        # get their turns too
        share = dataclasses.replace(work, priced=max(1, min(left // 3, work.extend_priced)))
        res = search_patches(sm, graph, tensor_index, runtime, max_overhead=max_overhead,
                             certify=certify, after=c, incumbent=best_total,
                             extend=len(c.sequence) + 1 < max_regions, budget=share,
                             clock=clock, **options)
        priced += res.priced
        first.plans.update(res.plans)
        first.refused += [r for r in res.refused if r not in first.refused]
        ok = [n for n in res.candidates if n.macs <= mac_budget]
        pick = choose(ok, first.reordered or first.original, max_overhead)
        if pick is not None:
            consider(pick)
        for n in res.candidates:
            push(n)
        defer(res)
    if certify and finalists and best is not first.choice:
        # the whole patched graph of each finalist, by the certified scheduler (bounded by
        # work); the lowest total wins (ties: the one-region choice, then the heuristic rank)
        from ..schedulers import schedule

        for _, _, c in finalists:
            if clock.out("certifying the sequence"):
                break
            full = patched_graph(sm, graph, tensor_index, first.plans_of(c))
            s = schedule(full, "auto", runtime_of(runtime).memory.activations,
                         **work.schedule_options())
            c.lower_bound = int(s.lower_bound)
            if s.peak <= c.peak:
                c.peak = int(s.peak)
            c.certified = bool(s.optimal and s.peak <= c.peak)
        best = min(finalists, key=lambda f: (f[2].total, f[0], f[1]))[2]
        if first.choice is not None and first.choice.total <= best.total:
            best = first.choice
    if best is not None and best is not first.choice:
        best.note = f"{len(best.sequence)} region" + ("s" if len(best.sequence) > 1 else "")
    first.choice = best
    first.seconds += time.perf_counter() - t0
    first.extended = extended
    first.priced = priced
    first.stopped = clock.stopped
    return first


def price_sequence(sm: SpatialModel, graph: OpGraph, tensor_index: list[int],
                   runtime: Runtime | RuntimeMemory, plans: list[PatchPlan]
                   ) -> tuple[int, int]:
    """(total bytes, MACs) of the model with the regions of ``plans`` patched (model order,
    each starting where the one before ends), as the search prices a sequence with every
    heuristic on (`heuristic_peak` with the scheduler package's baselines, no certified
    scheduler): the largest of the regions' parts (each from the end of the one before) and
    of the operators after the last region in file order, plus the persistent bytes. The
    reference the search is checked against (brute-force enumeration in the tests)."""
    memory = runtime_of(runtime).memory
    model = memory.activations
    steps = Problem.from_graph(graph, model).evaluate(list(range(len(graph)))).steps
    peak = max(steps[plans[-1].region.length:], default=0)
    begin = 0
    for p in plans:
        pg = patched_graph(sm, graph, tensor_index, p, prefix_only=True, begin=begin)
        peak = max(peak, heuristic_peak(pg, p, Problem.from_graph(pg, model)))
        begin = p.region.length
    persist = memory.model_persistent(sm) + sum(memory.plan_persistent_delta(sm, p)
                                                for p in plans)
    macs = sum(sm.op_macs(op) if op.cls != "other" else sm.macs[k]
               for k, op in enumerate(sm.ops))
    return peak + persist, macs + sum(p.macs - p.region_macs for p in plans)

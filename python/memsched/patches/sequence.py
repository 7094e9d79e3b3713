"""Regions as a search dimension: a sequence of k >= 1 patch regions, each with its own grid.

The first, high-resolution stage of a CNN wants many patches, the next one a few (halos grow
with depth, so one grid for both costs MACs or bytes). `search_sequence` chooses a sequence of
regions ``[s1, e1), [e1, e2), ...`` (each starting where the one before ends) and a grid and
SE variant per region, under one MAC budget for the whole model, priced by the one evaluator
of `memsched.patches.evaluator` under the runtime's memory model (`RuntimeMemory`).

Why the regions can be priced one at a time: after a region's reassembly exactly the tensors
read later (its split tensors, and whatever crosses it) are live, whatever its grid. So the
model as region i leaves it is the same for every grid of region i, and region i+1 is priced
on it (`search.RegionSearch` after `evaluator.Before`: its part from region i's end, the
tensors crossing made by one ``source`` operator -- `patched_graph` ``begin``). A sequence's
peak is the largest of its regions' parts and of the operators after the last region (file
order); its persistent bytes and MACs add up. Every region is priced by the same evaluator as
one region alone, and the certified scheduler then schedules the chosen sequence's whole
patched graph.

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

import heapq
import itertools

from ..graph import OpGraph
from ..memory import Problem
from .evaluator import Before, Evaluator
from .fast_bank import best_for_bank
from .geometry import SpatialModel
from .options import MAX_REGIONS  # noqa: F401 (importable from here)
from .patched import heuristic_peak, patched_graph
from .plans import PatchPlan
from .result import Candidate, SearchResult, choose
from .runtime import Runtime, RuntimeMemory, runtime_of
from .search import FirstRegion, RegionSearch, search_one


def search_sequence(ev: Evaluator) -> SearchResult:
    """The patch search over ``ev`` (what `memsched.patches.search_model` runs for every
    adapter): one region (`search.search_one`), then up to ``max_regions`` regions in
    sequence within the request's work budget. Returns the one-region search's answer with
    ``choice`` the best sequence's last region (``choice.sequence``: every region;
    ``plans_of(choice)``: their plans; its ``peak`` / ``persistent`` / ``macs`` the whole
    model's)."""
    max_regions = ev.request.max_regions
    first = search_one(ev, extend=max_regions > 1)
    if max_regions <= 1 or not first.results:
        return first.answer(_for_bank(ev, first, first.choice, first.results))
    t0 = ev.meter.elapsed()  # for the report only
    seq = SequenceSearch(ev, first).run()
    best = _for_bank(ev, first, seq.best, [*first.results, *(f[2] for f in seq.finalists),
                                           *seq.seen])
    return first.answer(best, seq.extended, ev.meter.elapsed() - t0)


def _for_bank(ev: Evaluator, first: FirstRegion, choice, priced: list):
    """``choice``, or under a fast bank it does not fit the plan among ``priced`` (the
    one-region candidates and the sequences priced within the MAC budget) whose fast bank
    serves the largest share of the traffic (`fast_bank.best_for_bank`)."""
    return best_for_bank(ev, priced,
                         lambda c: [first.plans[r.key] for r in c.sequence],
                         first.reordered or first.original, choice)


class SequenceSearch:
    """Sequences of regions after the one-region search ``first`` (see the module
    docstring): three queues taken in turn -- sequences to extend; candidates a search
    deferred, not visited (by MACs) or skipped for the operators after them (by their bound
    for the sequences through them). Each entry is dropped once its bound cannot beat the best
    total. A step (`Budget.steps`) is work: an extension or a deferred candidate priced; a
    sequence dominated at its end is dropped without one."""

    def __init__(self, ev: Evaluator, first: FirstRegion):
        self.ev, self.first = ev, first
        req, total_macs = ev.request, first.original.macs
        self.mac_budget = (1 + req.max_overhead) * total_macs + 1e-9 * max(total_macs, 1)
        bar = first.reordered.total if first.reordered is not None else first.original.total
        self.best = first.choice
        self.best_total = self.best.total if self.best is not None else bar
        self.ext: list = []
        self.unvisited: list = []  # deferred candidates a search did not visit
        self.skipped: list = []  # ... it skipped for the operators after them
        self.pushed = itertools.count()  # ties: first pushed first (never compares candidates)
        self.front: dict = {}  # end -> [(part peak, persistent, MACs)] of the sequences there
        self.extended = 0
        self.seen: list = []  # the sequences priced within the MAC budget (`fast_bank`)
        # the best sequences by their heuristic totals, for the certified scheduler at the end
        # (``budget.certify`` of them): heuristic orders can be 5 % off, and the best heuristic
        # total is not always the best certified one (mbv2-0.35-144 under TFLite Micro)
        self.finalists: list = []
        # first regions to follow first: the one-region choice's region (finer grids than its
        # own: alone no better, with a next region they can be) and the frontier's shallower
        # regions, by their part alone (what a next region leaves of them)
        ref = first.choice or min(first.frontier, key=lambda c: c.total, default=None)
        self.seeds = {(c.region_start, c.region_ops) for c in first.frontier
                      if ref is None or c.region_ops < ref.region_ops}
        if ref is not None:
            self.seeds.add((ref.region_start, ref.region_ops))

    def run(self) -> SequenceSearch:
        ev, work = self.ev, self.ev.meter.budget
        for c in self.first.results:
            self.push(c)
        self.defer(self.first)
        turn = 0
        while turn < work.steps and ev.meter.priced < work.total_priced and \
                not ev.meter.out("regions after the first"):
            turn += 1
            got = self.take(turn)
            if got is None:
                break
            c, owner = got
            if owner is not None:  # a deferred candidate: price it, then it waits its turn
                self.price_deferred(c, owner)
            elif not self.extend(c):
                turn -= 1  # no work: not a step
        if ev.request.certify and self.finalists and self.best is not self.first.choice:
            self.certify()
        if self.best is not None and self.best is not self.first.choice:
            n = len(self.best.sequence)
            self.best.note = f"{n} region" + ("s" if n > 1 else "")
        return self

    def bound(self, c: Candidate) -> int:
        """No sequence extending ``c`` totals less: its parts so far, the operators after the
        deepest region, its persistent bytes (extensions only add MACs and bytes)."""
        return max(max(r.part_peak for r in c.sequence),
                   self.ev.suffix[self.first.max_end]) + c.persistent

    def push(self, c: Candidate, start: bool = False) -> None:
        """Queue ``c`` to extend: by the total a sequence has as it is (a bound cannot tell a
        shallow sequence, its rest still to patch, from a deep one; its total can); a seed or
        ``start`` (a candidate skipped for the operators after it: its worth is what a next
        region leaves of it) first, by its bound. Not one over the instruction budget
        (``max_slowdown``): every region after it adds instructions (its copies, halos and
        cuts), so no extension of it may be chosen and the budget goes to those that may."""
        req = self.ev.request
        if req.max_slowdown is not None and not req.forced and c.slowdown is not None and \
                c.slowdown > req.max_slowdown + 1e-12:
            return  # over the instruction budget already: a next region only adds to it
        if len(c.sequence) < req.max_regions and c.macs <= self.mac_budget and \
                c.region_ops < self.first.max_end:
            seed = start or len(c.sequence) == 1 and (c.region_start, c.region_ops) in self.seeds
            key = (0, self.bound(c)) if seed else (1, c.total)
            heapq.heappush(self.ext, (*key, c.macs, next(self.pushed), c))

    def defer(self, res: RegionSearch) -> None:
        """The candidates search ``res`` deferred, in two queues, each by its bound, the
        lowest first: those not visited in its budget (each may be an answer itself: by
        MACs, the order that search visits; TVM's int8 mbv2-0.35-144 waited for its 4-5x5
        regions behind hundreds of cheap ones, 361,728 B instead of 256,000 B), and those
        skipped for the operators after them (only a next region can make them one, and a
        shallow region with a small part is the best start of a sequence; in one queue with
        the others, one waited past the step budget: mbv2-0.35-144 under TFLite)."""
        for d in res.deferred:
            if d.macs <= self.mac_budget:
                seed = res is self.first and (d.region.start, d.region.length) in self.seeds
                key = (not seed, d.bound, d.macs) if d.unvisited else (False, d.bound, d.macs)
                heapq.heappush(self.unvisited if d.unvisited else self.skipped,
                               (*key, next(self.pushed), d, res))

    def take(self, turn: int):
        """The next entry worth a look (None: every queue done): the three queues in turn,
        an empty one's turn to the next."""
        for q, at in ((self.unvisited, 1), (self.skipped, 1)):
            while q and q[0][at] >= self.best_total:
                heapq.heappop(q)
        while self.ext and self.bound(self.ext[0][-1]) >= self.best_total:
            heapq.heappop(self.ext)
        for k in range(3):
            q = (self.ext, self.unvisited, self.skipped)[(turn + k) % 3]
            if q is self.ext and q:
                return heapq.heappop(q)[-1], None
            if q is not self.ext and q:
                *_, d, res = heapq.heappop(q)
                return d, res
        return None

    def consider(self, c: Candidate) -> None:
        """A sequence within the MAC budget: the best so far when it lowers the total, and
        among the finalists by its heuristic total."""
        if c.total < self.best_total:
            self.best, self.best_total = c, c.total
        if c is not self.first.choice and not any(o is c for _, _, o in self.finalists):
            self.finalists.append((c.total, next(self.pushed), c))
            self.finalists.sort(key=lambda f: f[:2])
            del self.finalists[self.ev.meter.budget.certify:]

    def price_deferred(self, d, owner: RegionSearch) -> None:
        """Price deferred candidate ``d`` by the search that deferred it, as if it had got
        there; then it waits its turn to be extended."""
        self.ev.meter.priced += 1
        c = owner.price_deferred(d, self.best_total)
        if c is not None:
            self.first.plans[c.key] = owner.plans[c.key]
            if c.macs <= self.mac_budget and self.ev.request.eligible(c):
                self.consider(c)  # e.g. one the first search had no budget for
                if self.ev.request.fast_memory is not None:
                    self.seen.append(c)
            self.push(c, not d.unvisited)

    def extend(self, c: Candidate) -> bool:
        """Search the next region after sequence ``c`` (False: another sequence to the same
        end is no worse on part peak, persistent bytes and MACs; no work done)."""
        ev, first = self.ev, self.first
        key = (max(r.part_peak for r in c.sequence), c.persistent, c.macs)
        seen = self.front.setdefault(c.region_ops, [])
        if any(all(a <= b for a, b in zip(o, key)) for o in seen):
            return False
        seen.append(key)
        self.extended += 1
        work = ev.meter.budget
        # a share of what is left: the sequences after this one and the deferred candidates
        # get their turns too
        share = max(1, min((work.total_priced - ev.meter.priced) // 3, work.extend_priced))
        res = RegionSearch(ev, Before.of(c, len(ev.sm.ops)), incumbent=self.best_total,
                           extend=len(c.sequence) + 1 < ev.request.max_regions,
                           priced=share).run()
        ev.meter.priced += res.priced
        first.plans.update(res.plans)
        first.refused += [r for r in res.refused if r not in first.refused]
        ok = [n for n in res.results if n.macs <= self.mac_budget]
        if ev.request.fast_memory is not None:
            self.seen += ok
        pick = choose(ok, first.reordered or first.original, ev.request.max_overhead,
                      ev.request.max_slowdown, ev.request.fast_memory)
        if pick is not None:
            self.consider(pick)
        for n in res.results:
            self.push(n)
        self.defer(res)
        return True

    def certify(self) -> None:
        """The whole patched model of each finalist by the certified scheduler (bounded by
        work); the lowest total wins (ties: the one-region choice, then the heuristic
        rank)."""
        ev, first = self.ev, self.first
        for _, _, c in self.finalists:
            if ev.meter.out("certifying the sequence"):
                break
            ev.certify(c, [first.plans[r.key] for r in c.sequence], orders=False)
        self.best = min(self.finalists, key=lambda f: (f[2].total, f[0], f[1]))[2]
        if first.choice is not None and first.choice.total <= self.best.total:
            self.best = first.choice


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

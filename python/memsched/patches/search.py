"""The one-region search: a strategy over the `evaluator.Evaluator` (whose docstring states
the objective) that gives a Pareto frontier of (region, grid, variant) candidates and a default
choice.

Candidates are enumerated with their MACs first (separable per axis: cheap), then visited by
MACs; one whose lower bound (the rest of the model's peak, the split tensors' pieces and their
reassembly, the copies' persistent bytes) cannot beat a cheaper candidate is skipped: the
frontier is exact for the evaluator, at a fraction of the work. The frontier keeps the
candidates no other beats on total, MACs and predicted instructions; the default choice is the
lowest total within ``max_overhead`` extra MACs and ``max_slowdown`` times the unpatched
program's predicted instructions (a runtime with a kernel cost model, `runtime.RuntimeTime`),
ties to fewer patches, and only if it beats the unpatched model in its best order.

`RegionSearch` is one such search; `sequence.search_sequence` also runs it after the regions
of a sequence (`evaluator.Before`), where a next region may follow its candidates.
"""
from __future__ import annotations

from .errors import Refused
from .evaluator import BAND_GRIDS, DEFAULT_GRIDS, Before, Evaluator  # noqa: F401 (importable)
from .regions import Region, is_se
from .result import Candidate, Deferred, SearchResult, choose, pareto, within

MARGIN_TRIES = 8  # best explicit candidates also priced with margins (`margins`)


class RegionSearch:
    """One search of one region per candidate over ``ev``, after the regions ``before``
    (none: the first region). ``incumbent``: a total already reached (a candidate whose lower
    bound cannot beat it is skipped); ``extend``: a next region may follow a candidate, so the
    operators after it do not bound it: a candidate skipped only for them, or not visited
    within the budget, is kept in ``deferred`` for the sequence search (`price_deferred`);
    ``priced``: the candidates it may price (default `Budget.priced`)."""

    def __init__(self, ev: Evaluator, before: Before = Before(), incumbent: int | None = None,
                 extend: bool = False, priced: int | None = None):
        self.ev, self.before, self.extend = ev, before, extend
        self.limit = ev.meter.budget.priced if priced is None else priced
        self.best_total = self.incumbent = incumbent
        self.results: list[Candidate] = []  # every candidate priced
        self.plans: dict = {}  # Candidate.key -> PatchPlan
        self.refused: list[str] = []
        self.deferred: list[Deferred] = []
        self.evaluated = self.skipped = self.priced = 0
        self.max_end = 0  # the end of the deepest region (what bounds the sequences after)
        self.prefix_end = ""  # why the spatial prefix ends

    def run(self) -> RegionSearch:
        starts = (self.before.begin,) if self.before.sequence else self.ev.request.starts
        regs, self.prefix_end = self.ev.regions(starts)
        self.max_end = max((r.length for r in regs), default=0)
        self._visit(self._enumerate(regs))
        if self.ev.request.try_margins:
            self._try_margins()
        self._try_padded()
        return self

    def _enumerate(self, regs: list[Region]) -> list[tuple]:
        """Every (region, grid, variant) within the MAC cap, by MACs (ties: patches, depth,
        variant, the grids' order, then the regions'). Regions by start, then length, the
        grids side by side, so a long search drops the deepest regions (for every grid) when
        ``budget.enumerate`` MAC counts are spent."""
        ev = self.ev
        grids, sm = ev.request.grids, ev.sm
        cands: list = []
        over_cap: dict = {}
        at = None
        counted = 0
        for r in regs:
            if r.start != at:
                over_cap, at = {g: 0 for g in grids}, r.start
            if cands and (counted >= ev.meter.budget.enumerate or
                          ev.meter.out("counting MACs")):
                break
            variants = ev.request.variants(is_se(sm, r))
            for gi, g in enumerate(grids):
                if over_cap[g] >= 3 or g[0] > r.hw[0] or g[1] > r.hw[1]:
                    continue
                fits = over = False
                for mode in variants:
                    # margins: the exact plan's MACs bound them from below (counted when the
                    # plan is built: windows per band cost more than this loop may spend)
                    counted += 1
                    macs = ev.macs(r, g, mode[0], self.before)
                    if isinstance(macs, Refused):
                        self._refuse(r, g, macs)
                        continue
                    if ev.over_cap(macs):
                        over = True
                        continue
                    fits = True
                    cands.append((macs, g[0] * g[1], r.length - r.start, mode, gi, r.start, g,
                                  r))
                # halos only grow with depth: three regions in a row over the cap end the grid
                if fits or over:
                    over_cap[g] = 0 if fits else over_cap[g] + 1
        cands.sort(key=lambda c: c[:6])
        return cands

    def _visit(self, cands: list[tuple]) -> None:
        """Price the candidates in MAC order, skipping those whose lower bound cannot beat
        the best total so far (exact Pareto pruning); past the budget, defer the rest."""
        ev, before = self.ev, self.before
        out_of_time = False  # out of budget (or, as a safety net, of time)
        for macs, patches, _, mode, _, _, g, r in cands:
            out_of_time = out_of_time or bool(self.priced and (
                self.priced >= self.limit or ev.meter.out("pricing candidates")))
            floor, floor_ext = ev.floors(r, mode[0], before, self.max_end)
            copies = ev.copies(r, patches, before)
            best = self.best_total
            if out_of_time:  # not visited: with ``extend``, the sequence search may get there
                if self.extend and (best is None or floor_ext + copies < best):
                    self.deferred.append(Deferred(floor_ext + copies, macs, r, g, mode, True))
                continue
            if best is not None and floor + copies >= best:
                self._skip(floor_ext + copies, macs, r, g, mode, best)
                continue
            c = self.price(macs, r, g, mode, best, hopeless_at=self.bar())
            self._improve(c)

    def _try_margins(self) -> None:
        """The best explicit candidates' regions and grids with margins too: no PADs, fewer
        crops (pricing every candidate twice would halve what the budget visits)."""
        for c in sorted(self.results, key=lambda c: (c.total, c.macs))[:MARGIN_TRIES]:
            if c.keep or self.ev.meter.out("margins"):
                continue
            m = self.price(c.macs, self.plans[c.key].region, c.grid, (False, True),
                           self.best_total, hopeless_at=self.bar())
            self._improve(m)

    def _try_padded(self) -> None:
        """The best explicit candidates with their region inputs padded once, whole
        (`plans.pad_sources`, for a runtime that asks for it): kept in a candidate's place
        when that lowers its total (ties: fewer instructions). After the visit, as margins
        are, so the visit itself prices what it did before."""
        ev = self.ev
        if not ev.runtime.pad_sources:
            return
        best = sorted(range(len(self.results)),
                      key=lambda i: (self.results[i].total, self.results[i].macs))
        for i in best[:MARGIN_TRIES]:
            c = self.results[i]
            if c.keep or c.margins or ev.meter.out("padding region inputs once"):
                continue
            plan = self.plans[c.key]
            alt = ev.padded(plan.region, c.grid, (c.keep, c.margins))
            if alt is None:
                continue
            a = ev.price(plan.region, c.grid, (c.keep, c.margins), alt, c.macs,
                         ev.persistent(alt), self.before, self.best_total)
            if (a.total, a.instructions or 0) < (c.total, c.instructions or 0):
                self.results[i], self.plans[c.key] = a, alt
                self._improve(a)

    def _improve(self, c: Candidate | None) -> None:
        """``c``'s total as the best so far, which later candidates' bounds must beat: only
        when it lowers it and ``c`` may be chosen within the instruction budget (predicted
        instructions do not grow with MACs, so a faster candidate visited later must not be
        skipped for a slower one; MACs are visited in order, the MAC cap needs no check)."""
        if c is None or (self.best_total is not None and c.total >= self.best_total):
            return
        req = self.ev.request
        if req.max_slowdown is None or req.forced or within(c, float("inf"), req.max_slowdown):
            self.best_total = c.total

    def price(self, macs: int, r: Region, g: tuple, mode: tuple, limit: int | None,
              counted: bool = True, hopeless_at: int | None = None) -> Candidate | None:
        """The candidate (region ``r``, grid ``g``, ``mode`` = (keep, margins)) priced by the
        evaluator; None when refused, over the MAC cap or when its bound reaches ``limit``
        (None: no limit) or when it is over ``max_slowdown`` after regions before
        (`_too_slow`), or when its nodes alone put it at ``hopeless_at`` or above
        (`_hopeless`). ``counted``: by this search's counters (else by the sequence
        search's)."""
        ev, before = self.ev, self.before
        plan = ev.plan(r, g, mode)
        if isinstance(plan, Refused):
            self._refuse(r, g, plan)
            return None
        if mode[1]:  # margins: the MACs of its wider windows
            macs = ev.whole_macs(r, plan.macs, before)
            if ev.over_cap(macs):
                return None
        if self._too_slow(plan, counted):  # neither an answer nor a start: not deferred
            return None
        own = ev.persistent(plan)
        persist = ev.base_persistent + before.persistent + own
        floor, floor_ext = ev.floors(r, mode[0], before, self.max_end)
        if limit is not None and floor + persist >= limit:
            self._skip(floor_ext + persist, macs, r, g, mode, limit)
            return None
        self.priced += counted
        if hopeless_at is not None and self._hopeless(plan, persist, hopeless_at):
            self.skipped += counted
            return None
        c = ev.price(r, g, mode, plan, macs, own, before, limit)
        self.evaluated += counted
        self.results.append(c)
        self.plans[c.key] = plan
        return c

    def bar(self) -> int | None:
        """The total a candidate of this search must beat to matter (`_hopeless`): after
        regions before, the sequence search's best total when this search began. None in
        the first search, whose own best total may be one the MAC budget does not allow (it
        draws the report's frontier and the sequences' seeds)."""
        return self.incumbent if self.before.sequence else None

    def _hopeless(self, plan, persist: int, bar: int) -> bool:
        """Whether ``plan``'s nodes alone (`Evaluator.node_floor`) put its total, and every
        sequence's through it, at ``bar`` or above: then its part is neither built nor
        ordered. It still counts as priced (its plan was built), so the budgets run as they
        did and the answer is the same, sooner (TVM's MobileNetV3-Small-like int8 @128:
        most candidates after its first region are 1x2 plans over long regions, whose
        windows barely shrink). Not under a fast bank (`fast_bank` weighs candidates of
        any total)."""
        if self.ev.request.fast_memory is not None:
            return False
        return self.ev.node_floor(plan) + persist >= bar

    def _too_slow(self, plan, counted: bool) -> bool:
        """Whether ``plan`` after the regions before is over ``max_slowdown`` (its
        instructions come from the plan alone, before its part is built and ordered): such
        a candidate can be neither chosen nor extended (each further region only adds
        instructions), so the sequence search does not spend its budget pricing it. The
        one-region search (``counted``, no region before) still prices it: its candidates
        draw the report's (RAM, instructions) frontier beyond the bound."""
        req = self.ev.request
        if req.max_slowdown is None or req.forced or (counted and not self.before.sequence):
            return False
        base = self.ev.base_instructions
        added = self.ev.added_instructions(plan)
        if not base or added is None or any(b.instructions is None
                                            for b in self.before.sequence):
            return False
        return (base + self.before.instructions + added) / base > req.max_slowdown + 1e-12

    def price_deferred(self, d: Deferred, bar: int | None = None) -> Candidate | None:
        """Deferred candidate ``d`` priced as if this search had got to it (no limit);
        ``bar``: the sequence search's best total now (`_hopeless`)."""
        # a first region's candidates draw the report's time frontier, of any total
        if not self.before.sequence and self.ev.time is not None:
            bar = None
        return self.price(d.macs, d.region, d.grid, d.mode, None, counted=False,
                          hopeless_at=bar)

    def _skip(self, bound: int, macs: int, r: Region, g: tuple, mode: tuple, best: int):
        self.skipped += 1
        # only the operators after it bound it: a next region may patch those
        if self.extend and bound < best:
            self.deferred.append(Deferred(bound, macs, r, g, mode, False))

    def _refuse(self, r: Region, g: tuple, e: Exception) -> None:
        msg = f"split {self.ev.sm.tensors[r.split[-1]].name!r} grid {g[0]}x{g[1]}: {e}"
        if msg not in self.refused:
            self.refused.append(msg)


class FirstRegion(RegionSearch):
    """The one-region search from the request's starts: its candidates refined and the
    frontier certified by the scheduler, its ``frontier`` and default ``choice``; the first
    step of `sequence.search_sequence` (its answer when one region is asked for)."""

    def run(self) -> FirstRegion:
        t0 = self.ev.meter.elapsed()  # for the report only: the budgets decide
        ev = self.ev
        self.original = ev.unpatched()
        self.reordered = ev.reordered()
        super().run()
        if ev.request.certify:
            self._refine()
        self.frontier = pareto(self.results)
        if ev.request.certify and self.frontier:
            self._certify()
        req = ev.request
        if req.forced:  # asked for: the best of what was asked, even if it is no better
            self.choice = min(self.frontier, key=lambda c: (c.total, c.patches, c.macs)) \
                if self.frontier else None
        else:
            self.choice = choose(self.frontier, self.reordered, req.max_overhead,
                                 req.max_slowdown, req.fast_memory)
        ev.meter.priced += self.priced
        self.seconds = ev.meter.elapsed() - t0
        return self

    def _refine(self) -> None:
        """The scheduler on the patched part of the most promising candidates (the
        heuristic orders can be 20 % off on the peak), best heuristic total first, at most
        ``budget.refine``; skipped: one whose lower bound cannot beat the best refined total,
        or whose heuristic total is beyond `evaluator.REFINE_WINDOW` of it. In the first
        search only (a sequence's regions are ordered whole at the end): a candidate the
        heuristics misjudge would otherwise leave the frontier before it is certified
        (MobileNetV1 0.25 @128 under TFLite Micro: 2x3 below 3x2 only once scheduled)."""
        ev = self.ev
        best = None
        refined = 0
        for c in sorted(self.results, key=lambda c: (c.total, c.macs)):
            if refined >= ev.meter.budget.refine or ev.meter.out("refining"):
                break
            plan = self.plans[c.key]
            floor = ev.refine_floor(c, plan, self.before)
            if best is not None and (floor >= best or c.total > ev.window(best)):
                continue
            refined += 1
            ev.refine(c, plan, self.before)
            if best is None or c.total < best:
                best = c.total

    def _certify(self) -> None:
        """The frontier's candidates the choice is made from first (within the MAC budget
        unless forced), best total first, at most ``budget.certify``: their whole patched
        model by the certified scheduler; then the frontier again."""
        ev, req = self.ev, self.ev.request
        eligible = sorted(self.frontier, key=lambda c: (not req.eligible(c), c.total, c.macs))
        for c in eligible[:ev.meter.budget.certify]:
            if ev.meter.out("certifying"):
                break
            ev.certify(c, [self.plans[c.key]], orders=True)
        self.frontier = pareto(self.frontier)

    def answer(self, choice: Candidate | None, extended: int = 0, seconds: float = 0.0
               ) -> SearchResult:
        """The search's answer with ``choice`` (a sequence's last region, or this search's
        own choice)."""
        ev = self.ev
        return SearchResult(
            self.original, tuple(self.frontier), choice, self.evaluated, self.skipped,
            tuple(self.refused), self.prefix_end, self.seconds + seconds, self.plans,
            self.reordered, ev.floors_of, tuple(self.results), extended=extended,
            priced=ev.meter.priced, stopped=ev.meter.stopped)


def search_one(ev: Evaluator, extend: bool = False) -> FirstRegion:
    """The one-region search over ``ev`` (``extend``: a next region may follow its
    candidates, so it defers those only the operators after them bound)."""
    return FirstRegion(ev, extend=extend).run()

"""The patch search's results: a priced candidate (`Candidate`), the answer of a search
(`SearchResult`, with the floors its totals are bounded by, `Floors`), a candidate a search
deferred (`Deferred`), and the two rules every search ends with (`pareto`, `choose`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from .plans import PatchPlan
from .regions import Region


class Deferred(NamedTuple):
    """A candidate a one-region search did not price, for the sequence search to price later
    (`search.RegionSearch.price_deferred`): not visited within the budget, or skipped only for
    the operators after it (a next region may patch those)."""

    bound: int  # what bounds the total of the sequences through it
    macs: int  # the whole model's MACs with it
    region: Region
    grid: tuple
    mode: tuple  # (keep, margins)
    unvisited: bool  # not visited (else skipped for the operators after it)


@dataclass
class Candidate:
    split: list[str]  # split tensor names
    split_index: list[int]  # their file tensor indices
    region_ops: int
    grid: tuple[int, int]
    peak: int
    persistent: int
    macs: int
    overhead: float  # extra MACs / original MACs
    ops: int  # operators of the patched model
    region_start: int = 0  # operators before the region run whole
    certified: bool = False  # peak proven optimal for the patched graph
    lower_bound: int = 0
    note: str = ""
    keep: bool = False  # squeeze-and-excitation: later passes read kept pieces (no recompute)
    margins: bool = False  # operators with their own padding on wider windows (`margins`)
    # the plan's nodes (`PatchPlan.nodes` ids) in the order that gave ``peak``: an adapter
    # that writes them in this order hands the runtime's planner the priced schedule
    node_order: list | None = None
    # several regions (`memsched.patches.sequence`): ``peak`` / ``persistent`` / ``macs`` /
    # ``overhead`` are the whole model's, with the regions in ``before`` patched too; this
    # region's own part: ``part_peak`` (the peak of the patched part alone, from the end of
    # the region before to this one's reassembly), ``own_macs`` (the MACs it adds),
    # ``own_persistent`` (the persistent bytes it adds)
    part_peak: int = 0
    own_macs: int = 0
    own_persistent: int = 0
    before: tuple = ()  # the regions before this one (Candidates, in model order)
    # a runtime with a kernel cost model (`runtime.RuntimeTime`): the instructions of one
    # inference with every region of this choice patched, their factor over the unpatched
    # program's, and what this region adds (None / 0: no model)
    instructions: int | None = None
    slowdown: float | None = None
    own_instructions: int = 0

    @property
    def total(self) -> int:
        return self.peak + self.persistent

    @property
    def sequence(self) -> list:
        """Every region of this choice, in model order (this one last)."""
        return [*self.before, self]

    @property
    def patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def key(self) -> tuple:
        return (self.region_start, self.region_ops, self.grid, self.keep, self.margins)

    @property
    def label(self) -> str:
        """``RxC``, with ``+keep`` when a squeeze-and-excitation region keeps its pieces,
        ``+margins`` for a plan with margins."""
        return f"{self.grid[0]}x{self.grid[1]}" + ("+keep" if self.keep else "") + \
            ("+margins" if self.margins else "")

    def region_dict(self) -> dict:
        """This region alone: where it is, its grid and what it adds."""
        return {"split": self.split, "region_start": self.region_start,
                "region_ops": self.region_ops, "grid": f"{self.grid[0]}x{self.grid[1]}",
                "patches": self.patches, "part_peak_bytes": self.part_peak,
                "macs_added": self.own_macs, "persistent_added": self.own_persistent,
                "instructions_added": self.own_instructions if self.instructions is not None
                else None,
                "se_patches": "keep" if self.keep else None,
                "padding": "margins" if self.margins else "explicit"}

    def as_dict(self) -> dict:
        first = self.sequence[0]  # the old one-region fields: the first region's
        return {"split": first.split, "region_start": first.region_start,
                "region_ops": first.region_ops,
                "grid": f"{first.grid[0]}x{first.grid[1]}", "patches": first.patches,
                "peak_bytes": self.peak, "persistent_bytes": self.persistent,
                "total_bytes": self.total, "macs": self.macs,
                "mac_overhead": round(self.overhead, 4), "ops": self.ops,
                "cpu_instructions": self.instructions,
                "slowdown": round(self.slowdown, 4) if self.slowdown is not None else None,
                "se_patches": "keep" if first.keep else None,
                "padding": "margins" if first.margins else "explicit",
                "certified": self.certified, "note": self.note,
                "regions": [c.region_dict() for c in self.sequence]}


@dataclass(frozen=True)
class Floors:
    """What bounds the total of any choice from below, whatever its regions and grids."""

    operators: tuple  # per operator: its inputs and outputs, which any order holds at once
    base_persistent: int  # persistent bytes of the unpatched model
    input_bytes: int  # the model inputs (in the arena when the runtime counts them)

    def bound(self, c: Candidate | None, original: Candidate) -> dict:
        """What bounds the total of candidate ``c`` (None: the unpatched model, ``original``)
        from below: the unpatched model's persistent bytes plus the largest of the model
        inputs, the largest operator run whole before the (first) region and the largest
        operator after the (last) one; ``floor`` is that sum, ``bound_by`` its largest term,
        ``above_floor`` how far ``c`` is above."""
        own = self.operators
        if c is None or not c.region_ops:
            terms = {"model_input": self.input_bytes, "largest_operator": max(own, default=0)}
        else:
            terms = {"model_input": self.input_bytes,
                     "before_region": max(own[:c.sequence[0].region_start], default=0),
                     "after_region": max(own[c.region_ops:], default=0)}
        by = max(terms, key=terms.get)
        floor = self.base_persistent + terms[by]
        total = c.total if c is not None else original.total
        return {"persistent_original": self.base_persistent,
                "persistent_added": (c.persistent if c is not None else
                                     self.base_persistent) - self.base_persistent,
                **terms, "floor": floor, "bound_by": by, "above_floor": total - floor,
                "operators": len(own), "regions": len(c.sequence) if c is not None else 0}


@dataclass(frozen=True)
class SearchResult:
    """The answer of one patch search (`memsched.patches.search_model`): the one-region
    frontier, the choice (a sequence of regions: ``choice.sequence``; None when nothing beats
    the unpatched model in its best order), the plans an adapter applies (`plans_of`) and what
    the search did."""

    original: Candidate  # the unpatched model (grid 1x1)
    frontier: tuple  # the one-region candidates no other beats on total and MACs
    choice: Candidate | None
    evaluated: int  # candidates the one-region search priced
    skipped: int  # ... it skipped by their lower bound
    refused: tuple  # why a region or grid could not be patched
    prefix_end: str  # why the spatial prefix ends
    seconds: float
    plans: dict = field(default_factory=dict, repr=False)  # Candidate.key -> PatchPlan
    # the unpatched model in the scheduler's order (peak <= the file order's): the choice
    # beats it
    reordered: Candidate | None = None
    floors: Floors | None = field(default=None, repr=False)
    # every one-region candidate priced (the frontier's and the others)
    candidates: tuple = field(default=(), repr=False)
    extended: int = 0  # sequences a next region was searched after (`sequence`)
    priced: int = 0  # candidates priced by the whole search (the work `budget.Budget` counts)
    # what the wall-clock safety net stopped (`budget.Clock`; None: the budgets alone decided,
    # and the same input gives the same result on any machine)
    stopped: str | None = None

    def bound(self, c: Candidate | None) -> dict:
        """What bounds the total of candidate ``c`` (None: the unpatched model) from below
        (`Floors.bound`)."""
        return self.floors.bound(c, self.original)

    def plans_of(self, c: Candidate) -> list[PatchPlan]:
        """The plans of every region of choice ``c``, in model order: an adapter applies
        them in turn (each refers to the unpatched model's operators and tensors; a region's
        split tensors are reassembled into their own tensors, which the next region reads)."""
        return [self.plans[r.key] for r in c.sequence]

    def time_frontier(self) -> list[Candidate]:
        """The (total bytes, predicted instructions) frontier of what the search priced: the
        unpatched model, every one-region candidate and the choice (empty without a cost
        model)."""
        extra = [c for c in (self.original, self.reordered, self.choice) if c is not None]
        return time_frontier([*self.candidates, *extra])

    def as_dict(self) -> dict:
        return {"original": self.original.as_dict(),
                "reordered": self.reordered.as_dict() if self.reordered else None,
                "choice": self.choice.as_dict() if self.choice else None,
                "frontier": [c.as_dict() for c in self.frontier],
                "candidates_evaluated": self.evaluated, "candidates_pruned": self.skipped,
                "refused": list(self.refused), "prefix_end": self.prefix_end,
                "bound": self.bound(self.choice), "candidates_priced": self.priced,
                "stopped_by_time_limit": self.stopped,
                "time_frontier": [{"total_bytes": c.total, "cpu_instructions": c.instructions,
                                   "slowdown": round(c.slowdown, 4), "label": c.label,
                                   "regions": len(c.sequence)}
                                  for c in self.time_frontier()],
                "seconds": round(self.seconds, 3)}


def pareto(cands: list[Candidate]) -> list[Candidate]:
    """Candidates no other beats on total bytes, MACs and (where the runtime has a cost
    model) predicted instructions, by MACs, then patches: the choice is made from these under
    both budgets."""
    out: list[Candidate] = []
    for c in sorted(cands, key=lambda c: (c.total, c.macs, _ins(c), c.patches)):
        # every candidate kept so far totals no more than ``c``
        if not any(o.macs <= c.macs and _ins(o) <= _ins(c) for o in out):
            out.append(c)
    return sorted(out, key=lambda c: (c.macs, c.total, c.patches))


def time_frontier(cands) -> list[Candidate]:
    """The (total bytes, predicted instructions) frontier of ``cands`` (those with a
    prediction), by instructions: what a user trades RAM for time along."""
    out: list[Candidate] = []
    for c in sorted((c for c in cands if c.instructions is not None),
                    key=lambda c: (c.instructions, c.total, c.patches)):
        if not out or c.total < out[-1].total:
            out.append(c)
    return out


def _ins(c: Candidate) -> float:
    """Predicted instructions; unpriced (or no cost model): the most, so a candidate the
    model could not price never beats a priced one on time."""
    return c.instructions if c.instructions is not None else float("inf")


def within(c: Candidate, max_overhead: float, max_slowdown: float | None) -> bool:
    """Whether ``c`` is within ``max_overhead`` extra MACs and ``max_slowdown`` times the
    unpatched program's predicted instructions (None: no bound; a candidate the cost model
    could not price is not within one)."""
    return c.overhead <= max_overhead + 1e-12 and (
        max_slowdown is None or (c.slowdown is not None and c.slowdown <= max_slowdown + 1e-12))


def choose(frontier: list[Candidate], original: Candidate, max_overhead: float,
           max_slowdown: float | None = None, fast_memory: int | None = None
           ) -> Candidate | None:
    """Lowest total within the MAC budget (and the instruction budget, ``max_slowdown``),
    ties to fewer patches; None when nothing beats ``original`` (the unpatched model).
    ``fast_memory`` (the fastest bank of a memory map): a plan whose arena (``peak``) fits it
    beats every plan that does not, and among those the fewest instructions (MACs without a
    cost model) win: in the fast bank, bytes cost nothing more; None when ``original``
    fits. When none fits, the lowest arena wins here (the banks hold the arena, not the
    records); the search then places its best plans across the banks
    (`fast_bank.best_for_bank`)."""
    if fast_memory is not None:
        if original.peak <= fast_memory:
            return None
        ok = [c for c in frontier if within(c, max_overhead, max_slowdown)]
        fit = [c for c in ok if c.peak <= fast_memory]
        if fit:
            return min(fit, key=lambda c: (_ins(c), c.macs, c.total, c.patches))
        ok = [c for c in ok if c.peak < original.peak]
        return min(ok, key=lambda c: (c.peak, c.total, c.patches, c.macs, _ins(c))) \
            if ok else None
    ok = [c for c in frontier if within(c, max_overhead, max_slowdown) and
          c.total < original.total]
    if not ok:
        return None
    return min(ok, key=lambda c: (c.total, c.patches, c.macs, _ins(c)))

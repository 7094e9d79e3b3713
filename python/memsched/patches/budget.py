"""The patch search's budgets: work counts that decide, a wall-clock limit that only stops.

A compiler that writes different files for the same input cannot be cached, bisected or
reviewed (issue 46). So every decision of the search (`search.search_one`,
`sequence.search_sequence`) is bounded by the work it does, counted the same on every machine:

* **candidates priced**: a (region, grid) candidate whose patched graph is built and ordered
  by the heuristics (`evaluator.Evaluator.price`, ~10-30 ms each on MobileNetV2 @224): what
  the one-region search (``priced``), each search after a region (``extend_priced``) and the
  whole sequence search (``total_priced``) may spend;
* **steps** of the sequence search (sequences extended plus deferred candidates taken);
* **scheduler calls** (``refine``, ``certify``): the certified scheduler run with
  `SCHEDULE_OPTIONS`: no time limit, no CP-SAT, no interleaved turns, A* capped at
  ``states``, so its order depends on the graph alone (`memsched.schedulers.auto`).

``time_limit`` keeps its meaning as a safety net: past it the search stops where it is and
returns the best so far, and says so (`Clock.stopped`, ``SearchResult.stopped``, the adapters'
reports): only then can the same input give another file on a slower machine. The default
budgets finish well inside the adapters' default limits on a busy 2-core machine. One `Meter`
per search holds its budget, its clock and the candidates priced so far.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

# chosen on three table rows (benchmarks/search/patch_search_time.py; ExecuTorch MobileNetV2 @224,
# TVM mbv2-0.35-96, `memsched tile` mbv2-0.35-144): with 160 / 400 / 80 the sequence search
# never reached TVM's 3-region answers (103,104 B); with 120 / 1000 / 300 it does (92,160 B),
# ExecuTorch's row improves (1,444,480 -> 1,439,792 B in 15.7 s) and TFLite's keeps its
# answer. 600 steps: the Cortex-M MobileNetV2 sequence search (cheap steps, shallow regions)
# ran out of 300 before its three-region answer (692,920 -> 667,720 B). More budget is not
# always better (a greedy best-first): the tables are re-measured at each change
# (docs/patches*.md)
PRICED = 120  # candidates priced by the one-region search
EXTEND_PRICED = 40  # ... by each search after a region
TOTAL_PRICED = 1000  # ... by the whole sequence search, the one-region search included
STEPS = 600  # sequences extended + deferred candidates priced (dominated sequences: free)
REFINE = 6  # candidates whose patched prefix the scheduler re-orders (one-region search)
CERTIFY = 2  # frontier candidates (best total first) the scheduler orders whole
STATES = 2_000  # A* states per scheduler call
ENUMERATE = 20_000  # (region, grid) MAC counts per one-region search
# the written model (TFLite: `memsched.tflite.patch.tile`): its order and offline plan, once
FINAL_STATES = 200_000  # A* states per segment of the certified scheduler on the whole model
ARENA_NODES = 200_000  # nodes of the exact offline-plan packer (`memsched.arena.plan_exact`)


@dataclass
class Budget:
    """Work budgets of one patch search (defaults: the module constants)."""

    priced: int = PRICED
    extend_priced: int = EXTEND_PRICED
    total_priced: int = TOTAL_PRICED
    steps: int = STEPS
    refine: int = REFINE
    certify: int = CERTIFY
    states: int = STATES
    enumerate: int = ENUMERATE
    final_states: int = FINAL_STATES
    arena_nodes: int = ARENA_NODES

    def schedule_options(self) -> dict:
        """Options of `memsched.schedule` whose result depends on the graph alone: no time
        limit, A* capped at ``states``, no CP-SAT (its turns are timed), no HMCOS and no
        min-cut bounds (0.7-3 s each on a 500-op patched MobileNetV2 @224 graph, where they
        rarely beat the search's own heuristic order)."""
        return dict(time_limit=None, cpsat=False, interleave=False, hmcos=False,
                    strong_bounds=False, max_states=self.states)

    def final_options(self) -> dict:
        """Options of `memsched.schedule` for the written model's order, once per file: as
        `schedule_options` (no clock, no CP-SAT) but with HMCOS and the min-cut bounds (both
        bounded by work) and A* capped at ``final_states``."""
        return dict(time_limit=None, cpsat=False, interleave=False,
                    max_states=self.final_states)


class Clock:
    """The safety net: a wall-clock deadline over a whole search (``time_limit`` seconds,
    None: none). Read only to stop; ``stopped`` names the stage it stopped (None: it never
    did, and the result is the budgets' alone)."""

    __slots__ = ("start", "end", "stopped")

    def __init__(self, time_limit: float | None):
        self.start = time.perf_counter()
        self.end = None if time_limit is None else self.start + max(0.0, time_limit)
        self.stopped: str | None = None

    def elapsed(self) -> float:
        """Seconds since the clock started: for reports only, never for a decision."""
        return time.perf_counter() - self.start

    def out(self, stage: str) -> bool:
        """True (and ``stopped`` set to ``stage`` the first time) once the limit has passed."""
        if self.end is not None and time.perf_counter() > self.end:
            self.stopped = self.stopped or stage
            return True
        return False

    @staticmethod
    def note_of(stopped: str) -> str:
        """What a report says when the clock stopped the search in stage ``stopped``."""
        return (f"the time limit stopped the patch search ({stopped}) before its work "
                "budgets were spent: the result may differ on a faster or less loaded machine")


class Meter:
    """The work of one search (sequence search included): its ``budget``, its ``clock`` (the
    safety net, started when the meter is made) and the candidates ``priced`` so far
    (`Budget.total_priced` bounds them)."""

    __slots__ = ("budget", "clock", "priced")

    def __init__(self, budget: Budget, time_limit: float | None):
        self.budget = budget
        self.clock = Clock(time_limit)
        self.priced = 0

    def out(self, stage: str) -> bool:
        """The clock's `Clock.out`: True once the time limit has passed."""
        return self.clock.out(stage)

    def elapsed(self) -> float:
        """Seconds since the search started (`Clock.elapsed`: reports only)."""
        return self.clock.elapsed()

    @property
    def stopped(self) -> str | None:
        return self.clock.stopped

    def schedule_options(self) -> dict:
        return self.budget.schedule_options()

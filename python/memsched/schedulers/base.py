"""What every scheduler returns, and the registry that names them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..graph import OpGraph
from ..limits import Deadline, Expired, resolve_memory_limit
from ..memory import MemoryModel, Problem


@dataclass
class Schedule:
    """A topological order with its peak under the memory model it was computed for.

    ``lower_bound`` is a proven lower bound on the optimal peak; ``optimal`` is True when the
    peak equals it (the order is certified optimal).
    """

    order: list[int]
    peak: int
    lower_bound: int
    optimal: bool
    algorithm: str
    seconds: float = 0.0
    stats: dict = field(default_factory=dict)

    @property
    def gap(self) -> float:
        """Relative distance between peak and lower bound (0.0 when optimal)."""
        return 0.0 if self.peak == 0 else (self.peak - self.lower_bound) / self.peak


# name -> function(problem, **options) -> (order, lower_bound, optimal, stats)
SchedulerFn = Callable[..., "tuple[list[int], int, bool, dict]"]
_REGISTRY: dict[str, tuple[SchedulerFn, str]] = {}


def register(name: str, doc: str):
    def deco(fn):
        _REGISTRY[name] = (fn, doc)
        return fn
    return deco


def available() -> dict[str, str]:
    """Scheduler names and one-line descriptions."""
    return {k: v[1] for k, v in _REGISTRY.items()}


def trivial_bound(problem: Problem) -> int:
    """Max over ops of what the op itself must hold, and the memory live before/after all ops:
    every schedule's peak is at least this."""
    b = max((problem.static_bound(v) for v in range(problem.n)), default=0)
    return max(b, problem.live(0), problem.live(problem.full)) if problem.n else b


def bound_in_time(problem: Problem, deadline: Deadline | None) -> int:
    """`trivial_bound`, or 0 past the deadline (a linear pass; `schedule` adds it when there
    is time)."""
    return 0 if deadline is not None and deadline.expired() else trivial_bound(problem)


def run(problem: Problem, algorithm: str, **options) -> tuple[list[int], int, bool, dict]:
    try:
        fn = _REGISTRY[algorithm][0]
    except KeyError:
        raise ValueError(f"unknown scheduling algorithm {algorithm!r}; choose one of "
                         f"{sorted(_REGISTRY)}") from None
    return fn(problem, **options)


FINISH_SECONDS_PER_OP = 2e-5  # check_order + evaluate + trivial_bound: ~0.35 s for 20k ops


def _remember_last_evaluation(problem: Problem) -> None:
    """Make ``problem.evaluate`` remember its last result: algorithms usually end by evaluating
    the order they return, and `schedule` evaluates it again (one linear pass, ~0.2 s on 20k
    ops, after the deadline)."""
    evaluate = problem.evaluate
    last: list = [None, None]

    def remembered(order):
        key = tuple(order)
        if last[0] != key:
            last[1] = evaluate(key)
            last[0] = key
        return last[1]

    problem.evaluate = remembered


def check_time_limit(time_limit) -> float | None:
    """None or a finite number of seconds >= 0 (``inf`` means None); ValueError otherwise."""
    if time_limit is None:
        return None
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)):
        raise ValueError(f"time_limit must be a number of seconds or None, got {time_limit!r}")
    t = float(time_limit)
    if t != t or t < 0:
        raise ValueError(f"time_limit must be >= 0 seconds, got {time_limit!r}")
    return None if t == float("inf") else t


def schedule(graph: OpGraph, algorithm: str = "auto", memory_model: MemoryModel | str | None = None,
             time_limit: float | None = 10.0, progress: bool = False,
             memory_limit: int | None = None, **options) -> Schedule:
    """Schedule ``graph`` for minimum peak memory.

    ``algorithm``: one of `available()` (``auto``: fusion, divide-and-conquer, upper bounds,
    exact search and CP-SAT lower bounds, anytime under ``time_limit`` seconds; see
    `memsched.schedulers.auto`).

    ``time_limit`` bounds the whole call: one `memsched.limits.Deadline` is created here and
    shared by every stage (building the problem, fusion, heuristics, searches, CP-SAT); a stage
    the deadline interrupts falls back to the last completed result (at worst the input order).
    ``memory_limit``: bytes an exact search may hold (default: a quarter of physical memory);
    past it the search stops with the best order and its proven lower bound.

    Deterministic: the same graph and options give the same order whenever the same stages
    complete; a time limit can only cut a search for a proof (see `memsched.limits`).
    """
    import time

    t0 = time.perf_counter()
    deadline = Deadline(check_time_limit(time_limit))
    memory_limit = resolve_memory_limit(memory_limit)
    if algorithm not in _REGISTRY:
        run(None, algorithm)  # raises the clear error
    problem = Problem.from_graph(graph, memory_model)
    _remember_last_evaluation(problem)
    # the algorithm's deadline leaves room for checking and evaluating its order below: that
    # costs about 0.7x building the problem (both are linear passes; measuring the build adapts
    # the reserve to the machine's speed and load)
    inner = deadline
    if deadline.end is not None:
        build = time.perf_counter() - t0
        reserve = min(max(FINISH_SECONDS_PER_OP * problem.n, 0.7 * build),
                      0.5 * deadline.remaining())
        inner = Deadline(end=deadline.end - reserve)
    try:
        inner.check()  # building the problem took all the time: no algorithm runs
        order, lb, optimal, stats = run(problem, algorithm, time_limit=inner.remaining(),
                                        deadline=inner, memory_limit=memory_limit,
                                        progress=progress, **options)
    except Expired:  # the deadline hit before the algorithm had any order of its own
        order, lb, optimal = list(range(problem.n)), 0, False
        stats = {"timed_out": True, "fallback": "input"}
    graph.check_order(order)
    peak = problem.evaluate(order).peak
    if not deadline.expired():  # a linear pass; past the deadline the algorithm's bound stands
        lb = max(lb, trivial_bound(problem))
    lb = min(lb, peak)
    seconds = time.perf_counter() - t0
    return Schedule(order, peak, lb, optimal or lb == peak, algorithm, seconds, stats)

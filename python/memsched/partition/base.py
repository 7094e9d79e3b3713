"""What every partition solver returns, the registry that names the solvers, and `solve`.

A solver is ``fn(problem, stages, sram_bytes, time_limit, **options) -> (assignment,
lower_bounds, optimal, stats)``: ``lower_bounds`` maps ``"P"``, ``"O"``, ``"C"`` to proven
lower bounds on the lexicographic optimum's components; ``optimal`` is True only when the
solver proved the assignment lexicographically optimal. `solve` re-evaluates the answer with
`problem.evaluate`, so a solver cannot report a cost its assignment does not have. Solvers
register themselves (`register`, a decorator in each solver module); the package's
``__init__`` imports every solver module, and this module imports none of them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from .problem import DEFAULT_SRAM, Cost, PartitionError, PartitionProblem, evaluate


@dataclass
class PartitionResult:
    """A cut into pipeline stages with its cost, proven bounds and the param-balanced baseline."""

    assignment: list[int]
    P: int
    O: int
    C: int
    lower_bounds: dict
    optimal: bool
    method: str
    seconds: float
    baseline: Cost
    stages: int = 0
    m: list = field(default_factory=list)
    c: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.P, self.O, self.C)

    def to_json(self) -> dict:
        """The ``--json`` shape of ``memsched partition``."""
        return {
            "stages": self.stages,
            "assignment": list(self.assignment),
            "P": self.P, "O": self.O, "C": self.C,
            "m": list(self.m), "c": list(self.c),
            "lower_bounds": dict(self.lower_bounds),
            "optimal": bool(self.optimal),
            "method": self.method,
            "seconds": round(self.seconds, 4),
            "baseline": self.baseline.to_dict(),
            "closed_by": dict(self.stats.get("closed_by", {})) if self.stats else {},
        }


SolverFn = Callable[..., "tuple[list[int], dict, bool, dict]"]
_REGISTRY: dict[str, tuple[SolverFn, str]] = {}


def register(name: str, doc: str):
    def deco(fn):
        _REGISTRY[name] = (fn, doc)
        return fn
    return deco


def available() -> dict[str, str]:
    """Solver names and one-line descriptions."""
    return {k: v[1] for k, v in _REGISTRY.items()}


def trivial_bounds(problem: PartitionProblem, stages: int, sram_bytes: int) -> dict:
    """Bounds every assignment satisfies: each buffer is cached by at least one stage, so
    ``sum_j m_j >= total`` gives ``P >= ceil(total / k)`` and ``O >= total - k * SRAM``; every
    op's own buffers sit in one stage, so ``P >= max_v params(v)``."""
    total = problem.total_param_bytes
    p = max([-(-total // stages)] + [problem.op_param_bytes(v) for v in range(problem.n)])
    o = max(0, total - stages * sram_bytes, p - sram_bytes)
    return {"P": p, "O": o, "C": 0}


def solve(problem: PartitionProblem, stages: int, sram_bytes: int = DEFAULT_SRAM,
          method: str = "auto", time_limit: float | None = None, **options) -> PartitionResult:
    """Cut ``problem`` into ``stages`` pipeline stages, minimising ``(P, O, C)``
    lexicographically (see `memsched.partition.problem`).

    ``method``: ``auto`` (certified optimum: Inc-ILP from the param-balanced cut), ``exact``
    (CP-SAT, three lexicographic solves), ``inc-ilp`` (from the learned cut), ``learned`` (the
    learned cut alone) or ``param-balanced`` (the Edge TPU compiler's rule). ``time_limit``
    (seconds) bounds the exact solves; when it stops one, the result is the best found and
    ``optimal`` is False.
    The searching methods never return a cut worse than the param-balanced one.
    """
    problem.check_stages(stages)
    if isinstance(sram_bytes, bool) or not isinstance(sram_bytes, int) or sram_bytes < 0:
        raise PartitionError(f"sram_bytes must be a non-negative integer, got {sram_bytes!r}")
    if time_limit is not None and not time_limit > 0:
        raise PartitionError(f"time_limit must be positive, got {time_limit!r}")
    key = method.replace("_", "-")
    try:
        fn = _REGISTRY[key][0]
    except KeyError:
        raise PartitionError(f"unknown partition method {method!r}; choose one of "
                             f"{', '.join(sorted(_REGISTRY))}") from None
    if key not in ("param-balanced", "learned"):
        from ortools.sat.python import cp_model  # noqa: F401  (one-time import, not solve time)
    t0 = time.perf_counter()
    assignment, lbs, optimal, stats = fn(problem, stages, sram_bytes, time_limit, **options)
    seconds = time.perf_counter() - t0
    cost = evaluate(problem, assignment, sram_bytes, stages)
    # the baseline of every result, through the registry: the solver modules import this one
    # (to register), never the other way round
    base_cut = _REGISTRY["param-balanced"][0](problem, stages, sram_bytes)[0]
    base = evaluate(problem, base_cut, sram_bytes, stages)
    if key not in ("learned", "param-balanced") and base.key < cost.key:
        # a search stopped early from a poor start: never return worse than the baseline
        assignment, cost = base_cut, base
        stats = dict(stats, fallback="param-balanced")
    triv = trivial_bounds(problem, stages, sram_bytes)
    bounds = {}
    for name, val in zip("POC", cost.key):
        lb = max(int(lbs.get(name, 0)), triv[name])
        bounds[name] = min(lb, val)
    if optimal:
        bounds = {"P": cost.P, "O": cost.O, "C": cost.C}
    return PartitionResult(list(assignment), cost.P, cost.O, cost.C, bounds, bool(optimal),
                           key, seconds, base, stages, list(cost.m), list(cost.c), stats)

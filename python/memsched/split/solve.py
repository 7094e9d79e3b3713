"""`solve` / `compare`: run one method (or every method) and evaluate its answer once.

Methods: ``single``, ``uniform``, ``greedy`` (`memsched.split.baselines`) and ``ga``
(`memsched.split.ga`, seeded with the three baselines). Every result carries its chromosome and
the `Evaluation` of it by `memsched.split.evaluate.evaluate`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from . import baselines
from .cost import CostModel
from .encoding import Encoding
from .evaluate import Evaluation, evaluate
from .problem import SplitError, SplitProblem

METHODS = ("single", "uniform", "greedy", "ga")


@dataclass
class SplitResult:
    method: str
    encoding: Encoding
    X: np.ndarray  # (N, n+1)
    evaluation: Evaluation
    seconds: float
    stats: dict = field(default_factory=dict)

    @property
    def latency(self) -> float:
        return float(self.evaluation.latency[0])

    @property
    def feasible(self) -> bool:
        return bool(self.evaluation.feasible[0])

    def to_json(self) -> dict:
        out = {"method": self.method, "seconds": round(self.seconds, 3)}
        out.update(self.evaluation.row(0))
        out["dims"] = list(self.encoding.dims)
        out["X"] = [[int(v) for v in row] for row in self.X]
        return out


def _encoding(problem: SplitProblem, cost: CostModel, max_parts=None) -> Encoding:
    """The encoding for ``cost``'s devices: the k1/k2 rule sees the smallest device memory
    (when weights count)."""
    mem = float(np.min(cost.limits)) if cost.count_weights else None
    return Encoding(problem, cost.n, max_parts=max_parts, memory=mem)


def solve(problem: SplitProblem, cost: CostModel, method: str = "ga",
          encoding: Encoding | None = None, seeds=(), **options) -> SplitResult:
    if method not in METHODS:
        raise SplitError(f"unknown split method {method!r}; choose one of {', '.join(METHODS)}")
    enc = encoding or _encoding(problem, cost, options.pop("max_parts", None))
    if enc.n != cost.n:
        raise SplitError(f"encoding has {enc.n} devices, cost model {cost.n}")
    t0 = time.perf_counter()
    stats: dict = {}
    if method == "ga":
        from .ga import run_ga

        seeds = list(seeds) or [baselines.single(enc, cost), baselines.uniform(enc, cost),
                                baselines.greedy(enc, cost)]
        X, stats = run_ga(enc, cost, seeds=seeds, **options)
    else:
        X = getattr(baselines, method)(enc, cost)
    seconds = time.perf_counter() - t0
    return SplitResult(method, enc, X, evaluate(enc, cost, X), seconds, stats)


def compare(problem: SplitProblem, cost: CostModel, methods=METHODS, **ga_options) -> dict:
    """Every method on one encoding; the GA is seeded with the baselines' answers."""
    enc = _encoding(problem, cost, ga_options.pop("max_parts", None))
    out: dict[str, SplitResult] = {}
    for m in methods:
        if m == "ga":
            seeds = [r.X for k, r in out.items() if k in ("single", "uniform", "greedy")]
            out[m] = solve(problem, cost, "ga", encoding=enc, seeds=seeds, **ga_options)
        else:
            out[m] = solve(problem, cost, m, encoding=enc)
    return out

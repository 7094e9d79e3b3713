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
        # never worse than a seed (less violation first, then latency): the GA's elitism keeps
        # the best it saw, but the repair and polish steps may trade it away
        X, stats["from_seed"] = best_of(enc, cost, [X] + list(seeds))
    else:
        X = getattr(baselines, method)(enc, cost)
    seconds = time.perf_counter() - t0
    return SplitResult(method, enc, X, evaluate(enc, cost, X), seconds, stats)


def _worst_overflow(ev) -> np.ndarray:
    """(P,) the largest amount by which any device's footprint exceeds its memory (0: fits)."""
    cv7 = ev.cv.get("cv7")
    if cv7 is None:
        return np.zeros(ev.latency.shape[0])
    return np.maximum(cv7.reshape(cv7.shape[0], -1).max(axis=1), 0.0)


def best_of(enc: Encoding, cost: CostModel, candidates) -> tuple[np.ndarray, int | None]:
    """The best chromosome and the index of the winning seed (None when ``candidates[0]``
    wins or ties). Best: legal first; among illegal ones the least memory overflow on the worst
    device, then the least total violation; then the least latency."""
    Xs = np.stack([np.asarray(x, dtype=np.int64) for x in candidates])
    ev = evaluate(enc, cost, Xs)
    keys = np.stack([_worst_overflow(ev), ev.violation, ev.latency], axis=1)
    best = min(range(len(Xs)), key=lambda p: (tuple(keys[p]), p))
    if tuple(keys[best]) == tuple(keys[0]):
        best = 0
    return Xs[best], (None if best == 0 else best - 1)


def memory_lower_bound(enc: Encoding, cost: CostModel) -> int:
    """Bytes every split needs on all devices together: the largest footprint of the model on
    one device (its live tensors plus, when counted, its weights). Each live byte and each
    weight is on at least one device at that step, so if the devices' memories sum to less,
    no split exists."""
    ev = evaluate(enc, cost, enc.single(0)[None])
    return int(ev.peak[0].max())


def require_feasible(result: SplitResult, cost: CostModel) -> SplitResult:
    """``result`` if it fits every device's memory, else a `SplitError` in one line: the device
    that overflows most and by how much, what each device needs for the best split found, and,
    when the limits are provably too small, the bound that shows it."""
    if result.feasible:
        return result
    ev = result.evaluation
    limits = np.asarray(cost.limits)
    finite = np.isfinite(limits)
    cv7 = ev.cv.get("cv7")
    # what each device needs for this split: its largest footprint (cv7 = footprint - limit)
    need = [int(round(limits[k] + cv7[0, :, k].max())) if finite[k] and cv7 is not None
            else int(ev.peak[0, k]) for k in range(cost.n)]
    over = [(need[k] - int(limits[k]), k) for k in range(cost.n)
            if finite[k] and need[k] > limits[k]]
    if not over:
        raise SplitError(f"the best split found ({result.method}) violates a constraint other "
                         "than memory; no legal split was found")
    excess, k = max(over)
    msg = (f"no split fits the memory limits: the best split found ({result.method}) needs "
           f"{need} B per device, device {k} {excess:,} B over its {int(limits[k]):,} B")
    if finite.all():
        bound = memory_lower_bound(result.encoding, cost)
        if bound > limits.sum():
            msg += (f"; none exists: every split needs {bound:,} B on all devices together, "
                    f"they have {int(limits.sum()):,} B")
    raise SplitError(msg)


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

"""Exact partition: three lexicographic CP-SAT solves, each with a proof.

1. minimise ``P``; 2. minimise ``O`` subject to ``P <= P*``; 3. minimise ``C`` subject to
``P <= P*`` and ``O <= O*`` (model: `memsched.partition.cpsat`). Each solve looks only for cuts
strictly better than the best known one (the param-balanced cut, or the caller's hint) on its
objective: the cap ``P <= P_best - 1`` narrows every op's stage window further than the
incumbent's own value would, and INFEASIBLE (often found by the windows alone, before any
search) proves the incumbent optimal.

Bounds when a time limit stops a solve: the bound of solve 1 bounds ``P*``; the bound of solve 2
bounds the lexicographic optimum's ``O`` (that optimum satisfies ``P <= P_found``); the bound of
solve 3 is valid only when ``P`` was proven (then the optimum also satisfies ``O <= O_found``),
else ``C`` gets no bound beyond 0. ``O`` is 0 without a solve when ``P* <= SRAM``.
"""
from __future__ import annotations

import time
from typing import Sequence

from .base import register, trivial_bounds
from .cpsat import CutModel, Infeasible, closure_param_bytes, stage_domains
from .param_balanced import param_balanced_cut
from .problem import PartitionProblem, evaluate


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.perf_counter())


def lexicographic(problem: PartitionProblem, k: int, sram: int, hint: Sequence[int],
                  time_limit: float | None = None, window: tuple[list, list] | None = None,
                  workers: int = 1, seed: int = 0, closure=None,
                  objectives: str = "POC") -> tuple[list[int], dict, bool, dict]:
    """Lexicographic (P, O, C) minimum starting from the valid cut ``hint``.

    ``window``: per-op ``(lo, hi)`` stage limits (Inc-ILP fixes ops outside its window); the
    result is then optimal only within the window, and the bounds hold only there.
    ``objectives``: a prefix of ``"POC"`` to stop early (``"P"``: only the first solve).
    Returns ``(assignment, lower_bounds, optimal, stats)``.
    """
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    closure = closure if closure is not None else closure_param_bytes(problem)
    best = list(hint)
    cost = evaluate(problem, best, sram, k)
    triv = trivial_bounds(problem, k, sram)
    stats: dict = {"solves": []}
    lbs = {"P": triv["P"], "O": triv["O"], "C": 0}
    proven = {"P": False, "O": False, "C": False}

    def domains(p_max):
        d = stage_domains(problem, k, p_max, closure)
        if d is None:
            raise Infeasible
        lo, hi = d
        if window is not None:
            lo = [max(a, b) for a, b in zip(lo, window[0])]
            hi = [min(a, b) for a, b in zip(hi, window[1])]
        return lo, hi

    def run(objective, **caps):
        """Minimise ``objective`` among cuts strictly better than ``best`` on it (the caps
        carry the ``-1``): INFEASIBLE proves ``best`` optimal, OPTIMAL gives the optimum."""
        nonlocal best, cost
        t0 = time.perf_counter()
        status, bound = "INFEASIBLE", None
        nvars = 0
        try:
            lo, hi = domains(caps.get("p_max"))
            model = CutModel(problem, k, sram, lo, hi, objective, p_min=triv["P"], **caps)
            nvars = sum(len(y) for y in model.y)
            opt, s, val, bound = model.solve(_remaining(deadline), best, workers, seed)
            status = model.status
        except Infeasible:
            opt, s = True, None
        if s is not None:
            new = evaluate(problem, s, sram, k)
            if new.key < cost.key:
                best, cost = s, new
        stats["solves"].append({"objective": objective, "status": status, "vars": nvars,
                                "seconds": round(time.perf_counter() - t0, 4)})
        return opt, bound

    # 1. P
    if cost.P <= lbs["P"]:
        proven["P"] = True
    else:
        opt, bound = run("P", p_max=cost.P - 1)
        proven["P"] = opt
        if bound is not None:
            lbs["P"] = max(lbs["P"], min(bound, cost.P))
    if proven["P"]:
        lbs["P"] = cost.P
    if "O" not in objectives:
        return best, lbs, proven["P"], stats
    # 2. O (zero whenever every stage fits the SRAM)
    if cost.O <= lbs["O"]:
        proven["O"] = True
    elif _remaining(deadline) != 0.0:
        opt, bound = run("O", p_max=cost.P, o_max=cost.O - 1)
        proven["O"] = opt
        if bound is not None:
            lbs["O"] = max(lbs["O"], min(bound, cost.O))
    if proven["O"]:
        lbs["O"] = cost.O
    if "C" not in objectives:
        return best, lbs, proven["P"] and proven["O"], stats
    # 3. C
    if cost.C <= 0:
        proven["C"] = True
    elif _remaining(deadline) != 0.0:
        opt, bound = run("C", p_max=cost.P, o_max=cost.O, c_max=cost.C - 1)
        proven["C"] = opt
        if bound is not None and proven["P"]:
            lbs["C"] = max(lbs["C"], min(bound, cost.C))
    if proven["C"] and proven["P"] and proven["O"]:
        lbs["C"] = cost.C
    lbs = {n: min(lbs[n], v) for n, v in zip("POC", cost.key)}
    return best, lbs, all(proven.values()), stats


@register("exact", "CP-SAT: three lexicographic solves (P, then O, then C), each proven")
def exact(problem: PartitionProblem, stages: int, sram_bytes: int,
          time_limit: float | None = None, hint: Sequence[int] | None = None,
          workers: int = 1, seed: int = 0, **_):
    if stages == 1:
        return [0] * problem.n, {}, True, {}
    start = list(hint) if hint is not None else param_balanced_cut(problem, stages)
    return lexicographic(problem, stages, sram_bytes, start, time_limit, workers=workers,
                         seed=seed)

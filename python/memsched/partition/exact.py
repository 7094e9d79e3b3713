"""Exact partition: three lexicographic CP-SAT solves, each with a proof.

1. minimise ``P``; 2. minimise ``O`` subject to ``P <= P*``; 3. minimise ``C`` subject to
``P <= P*`` and ``O <= O*`` (model: `memsched.partition.cpsat`). Each solve looks only for cuts
strictly better than the best known one (the param-balanced cut, or the caller's hint) on its
objective: the cap ``P <= P_best - 1`` narrows every op's stage window further than the
incumbent's own value would, and INFEASIBLE (often found by the windows alone, before any
search) proves the incumbent optimal.

The ``P`` solve runs as descending decisions: CP-SAT gets a deterministic budget
(`P_DET_BUDGET`, doubled every turn); a better cut it finds lowers the cap to ``P_best - 1``
and the next turn re-tightens the windows and the prefix chain for that cap (warm-started
from the previous windows) before CP-SAT sees it. The loop ends only with a proof (a refuting
bound, INFEASIBLE or OPTIMAL) or at the caller's time limit; the budget only decides when to
re-tighten, and deterministic time keeps the run reproducible.

Bounds when a time limit stops a solve: the bound of solve 1 bounds ``P*``; the bound of solve 2
bounds the lexicographic optimum's ``O`` (that optimum satisfies ``P <= P_found``); the bound of
solve 3 is valid only when ``P`` was proven (then the optimum also satisfies ``O <= O_found``),
else ``C`` gets no bound beyond 0. ``O`` is 0 without a solve when ``P* <= SRAM``.

Before each CP-SAT solve the combinatorial bounds of `memsched.partition.bounds` get the first
turn: the tightened stage windows (head / tail / interval tests) and the prefix chain
(`bounds.prefix_chain`) often refute ``P <= P_best - 1`` outright, and otherwise narrow the
CP-SAT model and add the prefix weight limits to it;
``O >= (P* - SRAM)^+ + (S - P* - (k-1) SRAM)^+``
where ``S <= sum_j m_j`` counts every shared buffer once per stage its users' windows force
(the stage at ``P*`` overflows by ``P* - SRAM``, the other ``k-1`` stages hold at least
``S - P*`` bytes); and the minimum downset cut of every boundary inside the windows of
``P <= P*`` bounds ``C``. A bound that meets the incumbent proves it without a solve;
otherwise it is the solve's starting bound.
``stats["closed_by"]`` names what proved each component (``"incumbent"``: the trivial bound,
``"windows"``, ``"prefix chain"``, ``"O bound"``, ``"cut bound"``, ``"cpsat"``).
"""
from __future__ import annotations

import time
from typing import Sequence

from .base import register, trivial_bounds
import numpy as np

from .bounds import StageWindows, comm_lower_bound, prefix_chain, stab_count
from .cpsat import CutModel, Infeasible
from .param_balanced import param_balanced_cut
from .problem import PartitionProblem, evaluate


# CP-SAT's first deterministic budget in the P loop of `lexicographic` (doubles per turn)
P_DET_BUDGET = 0.25


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.perf_counter())


def stage_windows(problem: PartitionProblem) -> StageWindows:
    """The problem's `StageWindows` (built once, kept on the problem)."""
    sw = problem.__dict__.get("_stage_windows")
    if sw is None:
        sw = StageWindows(problem)
        problem.__dict__["_stage_windows"] = sw
    return sw


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
    best = list(hint)
    cost = evaluate(problem, best, sram, k)
    triv = trivial_bounds(problem, k, sram)
    stats: dict = {"solves": []}
    lbs = {"P": triv["P"], "O": triv["O"], "C": 0}
    proven = {"P": False, "O": False, "C": False}

    sw = stage_windows(problem)
    cache: dict = {}
    refuted: dict = {}  # p_max -> the bound that refuted it (when cache[p_max] is None)
    closed: dict = {}
    stats["closed_by"] = closed

    def domains(p_max):
        if p_max not in cache:
            t0 = time.perf_counter()
            wlo, whi = window if window is not None else (None, None)
            # warm start: the windows of a larger cap hold every cut with P <= p_max too
            # (the P loop asks for descending caps)
            warm = [q for q, d in cache.items() if q > p_max and d is not None]
            if warm:
                q = min(warm)
                wlo = cache[q][0] if wlo is None else np.maximum(wlo, cache[q][0])
                whi = cache[q][1] if whi is None else np.minimum(whi, cache[q][1])
            w = sw.tighten(k, p_max, wlo, whi)
            if w is None:
                cache[p_max], refuted[p_max] = None, "windows"
            else:
                cache[p_max] = prefix_chain(sw, k, p_max, *w)
                refuted[p_max] = "prefix chain"
            stats.setdefault("window_seconds", 0.0)
            stats["window_seconds"] = round(stats["window_seconds"] + time.perf_counter() - t0, 4)
        if cache[p_max] is None:
            raise Infeasible
        return cache[p_max]

    def run(objective, det_limit=None, **caps):
        """Minimise ``objective`` among cuts strictly better than ``best`` on it (the caps
        carry the ``-1``): INFEASIBLE proves ``best`` optimal, OPTIMAL gives the optimum."""
        nonlocal best, cost
        t0 = time.perf_counter()
        status, bound = "INFEASIBLE", None
        nvars = 0
        try:
            lo, hi, R, L = domains(caps.get("p_max"))
        except Infeasible:
            stats["solves"].append({"objective": objective, "status": "WINDOWS", "vars": 0,
                                    "seconds": round(time.perf_counter() - t0, 4)})
            return True, None, refuted[caps.get("p_max")]
        try:
            model = CutModel(problem, k, sram, lo, hi, objective, p_min=triv["P"],
                             prefix=(R, L), **caps)
            nvars = sum(len(y) for y in model.y)
            opt, s, val, bound = model.solve(_remaining(deadline), best, workers, seed,
                                             det_limit=det_limit)
            status = model.status
        except Infeasible:
            opt, s = True, None
        if s is not None:
            new = evaluate(problem, s, sram, k)
            if new.key < cost.key:
                best, cost = s, new
        rec = {"objective": objective, "status": status, "vars": nvars,
               "seconds": round(time.perf_counter() - t0, 4)}
        if "p_max" in caps and objective == "P":
            rec["p_max"] = caps["p_max"]
        if det_limit is not None:
            rec["det_limit"] = det_limit
        stats["solves"].append(rec)
        return opt, bound, "cpsat"

    # 1. P
    if cost.P <= lbs["P"]:
        proven["P"], closed["P"] = True, "incumbent"
    else:
        # descending decisions: each turn tightens the windows and the prefix chain for
        # P <= P_best - 1 and gives CP-SAT a deterministic budget; a better cut it finds
        # lowers the cap and the next turn starts from narrower windows (CP-SAT's own proof
        # of the optimum from the first, wider windows took 4.3 s on NASNetLarge k = 6, the
        # decision at P* - 1 with its own windows 0.03 s); the budget doubles every turn, so
        # the loop ends with a proof (INFEASIBLE, OPTIMAL or a refuting bound)
        budget = P_DET_BUDGET
        while True:
            opt, bound, closed["P"] = run("P", p_max=cost.P - 1, det_limit=budget)
            if bound is not None:
                lbs["P"] = max(lbs["P"], min(bound, cost.P))
            if opt or _remaining(deadline) == 0.0:
                break
            budget *= 2
        proven["P"] = opt
    if proven["P"]:
        lbs["P"] = cost.P
        # the stage at P* overflows by P* - SRAM; the other k-1 hold >= total - P* bytes
        # sum_j m_j >= own bytes + every shared buffer times the fewest stages its users'
        # windows can meet in (interval stabbing)
        try:
            lo, hi, _, _ = domains(cost.P)
            cached = int(sw.own.sum()) + sum(int(sw.sh_bytes[i]) * stab_count(
                [(lo[v], hi[v]) for v in np.flatnonzero(sw.sh_use[:, i])])
                for i in range(len(sw.sh_bytes)))
        except Infeasible:  # cannot happen: the incumbent satisfies P <= P*
            cached = sw.total
        o_lb = max(0, cost.P - sram) + max(0, cached - cost.P - (k - 1) * sram)
        if window is None and o_lb > lbs["O"]:
            lbs["O"], closed["O"] = o_lb, "O bound"
    if "O" not in objectives:
        return best, lbs, proven["P"], stats
    # 2. O (zero whenever every stage fits the SRAM)
    if cost.O <= lbs["O"]:
        proven["O"] = True
        closed.setdefault("O", "incumbent")
    elif _remaining(deadline) != 0.0:
        opt, bound, closed["O"] = run("O", p_max=cost.P, o_max=cost.O - 1)
        proven["O"] = opt
        if bound is not None:
            lbs["O"] = max(lbs["O"], min(bound, cost.O))
    if proven["O"]:
        lbs["O"] = cost.O
    if "C" not in objectives:
        return best, lbs, proven["P"] and proven["O"], stats
    # 3. C
    if cost.C > 0 and proven["P"]:
        try:
            t0 = time.perf_counter()
            lo, hi, _, _ = domains(cost.P)
            cuts = comm_lower_bound(problem, k, lo, hi)
            stats["cut_bound"] = {"c": cuts, "seconds": round(time.perf_counter() - t0, 4)}
            lbs["C"] = max(lbs["C"], min(max(cuts, default=0), cost.C))
        except Infeasible:  # cannot happen: the incumbent satisfies P <= P*
            pass
    if cost.C <= lbs["C"]:
        proven["C"] = True
        closed["C"] = "incumbent" if cost.C <= 0 else "cut bound"
    elif _remaining(deadline) != 0.0:
        opt, bound, closed["C"] = run("C", p_max=cost.P, o_max=cost.O, c_max=cost.C - 1,
                                      c_min=lbs["C"])
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

"""Inc-ILP: initial cut -> relaxation window -> exact solve inside it -> global certificate.

Yin & Yu, "Accelerating Exact Combinatorial Optimization via RL-based Initialization -- A Case
Study in Scheduling" (§III-C/D):

1. an initial cut (the learned pointer network's, `memsched.partition.learned`, or the
   param-balanced one);
2. ASAP levels (longest path from the sources); for every boundary ``j`` the cut edges
   ``u -> v`` with ``s(u) <= j < s(v)`` span levels ``[min level(u), max level(v)]``; the
   relaxation window widens that span by ``gamma`` levels on both sides;
3. ops inside a window may move between the stages of the boundaries whose windows hold them;
   every other op keeps its stage; the window problem is solved exactly (the lexicographic
   CP-SAT solves of `exact`, restricted);
4. unlike the paper, which compares with a full ILP offline, the answer is certified here: a
   global lexicographic solve that only looks for strictly better cuts (`exact.lexicographic`
   from the window's answer) must prove there are none. It is time-boxed; when the box runs
   out, ``gamma`` doubles and the loop repeats from the best cut so far. Once a window holds
   every op the window solve is the full exact solve.
"""
from __future__ import annotations

import time
from typing import Sequence

from .base import register
from .cpsat import closure_param_bytes
from .exact import lexicographic
from .param_balanced import param_balanced_cut
from .problem import PartitionProblem, check_assignment


def relaxation_window(problem: PartitionProblem, s: Sequence[int], levels: Sequence[int],
                      gamma: int) -> tuple[list[int], list[int], int]:
    """Per-op stage limits ``(lo, hi)`` of the window around the cut ``s``, and how many ops
    are free to move."""
    k = max(s) + 1
    spans = []
    for j in range(k - 1):
        srcs = [levels[u] for v in range(problem.n) for u in problem.preds[v]
                if s[u] <= j < s[v]]
        sinks = [levels[v] for v in range(problem.n) for u in problem.preds[v]
                 if s[u] <= j < s[v]]
        if not srcs:  # boundary without a cut edge (independent branches): its stages' ops
            inside = [levels[v] for v in range(problem.n) if s[v] in (j, j + 1)]
            srcs, sinks = [min(inside)], [max(inside)]
        spans.append((min(srcs) - gamma, max(sinks) + gamma))
    lo, hi = list(s), list(s)
    free = 0
    for v in range(problem.n):
        for j, (a, b) in enumerate(spans):
            if a <= levels[v] <= b:
                lo[v] = min(lo[v], j)
                hi[v] = max(hi[v], j + 1)
        free += hi[v] > lo[v]
    return lo, hi, free


def initial_cut(problem: PartitionProblem, stages: int, initial="learned",
                sram_bytes: int | None = None, samples: int | None = None) -> tuple[list, str]:
    """The starting cut and its name: ``"learned"`` (param-balanced when no weights are
    available), ``"param-balanced"``, ``"best"`` (the better of the two under the objective),
    or an explicit assignment."""
    from .problem import DEFAULT_SRAM, evaluate

    if isinstance(initial, str):
        if initial in ("learned", "best"):
            sram = DEFAULT_SRAM if sram_bytes is None else sram_bytes
            try:
                from .learned import SAMPLES, learned_cut

                learned = learned_cut(problem, stages, sram_bytes=sram,
                                      samples=SAMPLES if samples is None else samples)
            except (ImportError, FileNotFoundError):
                return param_balanced_cut(problem, stages), "param-balanced"
            if initial == "learned":
                return learned, "learned"
            pb = param_balanced_cut(problem, stages)
            if evaluate(problem, learned, sram).key < evaluate(problem, pb, sram).key:
                return learned, "learned"
            return pb, "param-balanced"
        if initial == "param-balanced":
            return param_balanced_cut(problem, stages), "param-balanced"
        raise ValueError(f"unknown initial cut {initial!r}")
    return check_assignment(problem, initial, stages), "given"


@register("inc-ilp", "Inc-ILP: learned initial cut, relaxation window of gamma ASAP levels, "
                     "exact window solve, certified by a global bound")
def inc_ilp(problem: PartitionProblem, stages: int, sram_bytes: int,
            time_limit: float | None = None, initial="learned", gamma: int = 10,
            certify_box: float = 1.0, workers: int = 1, seed: int = 0,
            samples: int | None = None, **_):
    if stages == 1:
        return [0] * problem.n, {}, True, {}
    t_start = time.perf_counter()
    deadline = None if time_limit is None else t_start + time_limit

    def remaining():
        return None if deadline is None else max(0.0, deadline - time.perf_counter())

    s, source = initial_cut(problem, stages, initial, sram_bytes, samples)
    stats: dict = {"initial": source, "initial_seconds": round(time.perf_counter() - t_start, 4),
                   "rounds": []}
    levels = problem.asap_levels()
    closure = closure_param_bytes(problem)
    g, box = gamma, certify_box
    while True:
        t0 = time.perf_counter()
        lo, hi, free = relaxation_window(problem, s, levels, g)
        s, _, _, wst = lexicographic(problem, stages, sram_bytes, s, remaining(),
                                     window=(lo, hi), workers=workers, seed=seed,
                                     closure=closure)
        t1 = time.perf_counter()
        whole = free == problem.n
        rem = remaining()
        limit = rem if whole else (box if rem is None else min(box, rem))
        s, lbs, optimal, cst = lexicographic(problem, stages, sram_bytes, s, limit,
                                             workers=workers, seed=seed, closure=closure)
        stats["rounds"].append({"gamma": g, "free_ops": free,
                                "window_seconds": round(t1 - t0, 4),
                                "certify_seconds": round(time.perf_counter() - t1, 4),
                                "certified": optimal, "window_solves": wst["solves"],
                                "certify_solves": cst["solves"],
                                "bound_seconds": cst.get("window_seconds", 0.0)})
        stats["closed_by"] = cst.get("closed_by", {})
        if optimal or whole or remaining() == 0.0:
            return s, lbs, optimal, stats
        g, box = 2 * g, 2 * box

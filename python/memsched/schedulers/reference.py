"""Reference solvers for cross-checking: exhaustive enumeration and SERENITY's plain DP.

* ``brute``: every topological order (O(V!)); refuses graphs over ``max_ops`` ops.
* ``dp``: SERENITY Algorithm 1 (Ahn et al., MLSys 2020): breadth-wise over search steps,
  memoising per executed set the partial schedule with the least peak; no bounds, no pruning,
  O(V * 2^V) in the worst case. Used as an independent check of the best-first search.

Both are exact or nothing: when the deadline passes (or ``dp``'s level outgrows
``memory_limit``), they return the best baseline order, not proven (``stats["stopped"]``).
"""
from __future__ import annotations

from ..limits import Checker, Deadline, Expired, python_state_bytes
from ..memory import Problem
from .base import bound_in_time, register
from .heuristics import best_heuristic


def _fallback(p: Problem, why: str, deadline: Deadline | None):
    order, _, name = best_heuristic(p, deadline)  # past the deadline: the input order
    return order, bound_in_time(p, deadline), False, {"stopped": why, "method": name}


@register("brute", "enumerate every topological order (tiny graphs only)")
def brute(p: Problem, max_ops: int = 12, deadline: Deadline | None = None, **_):
    if p.n > max_ops:
        raise ValueError(f"brute force refuses {p.n} ops (max_ops={max_ops})")
    best = [None, None]
    chk = Checker(deadline, 1024)

    def rec(mask, live, peak, order):
        chk.tick()
        if best[1] is not None and peak >= best[1]:
            return
        if mask == p.full:
            best[0], best[1] = list(order), peak
            return
        for v in range(p.n):
            if mask >> v & 1 or p.pred_mask[v] & ~mask:
                continue
            foot, after = p.step(mask, live, v)
            order.append(v)
            rec(mask | 1 << v, after, max(peak, foot), order)
            order.pop()

    try:
        rec(0, p.initial_live(), 0, [])
    except Expired:
        return _fallback(p, "time", deadline)
    return best[0], best[1], True, {}


@register("dp", "SERENITY's dynamic programming over zero-indegree sets (no pruning)")
def serenity_dp(p: Problem, deadline: Deadline | None = None, memory_limit: int | None = None,
                **_):
    level = {0: (p.initial_live(), 0, [])}  # mask -> (live, peak, schedule)
    chk = Checker(deadline, 4)  # a state costs O(n) steps
    # two levels are held at once; a state also holds its partial schedule (~n/2 slots)
    per_state = python_state_bytes(p.n) + 4 * p.n
    for _ in range(p.n):
        nxt: dict[int, tuple[int, int, list[int]]] = {}
        if memory_limit is not None and 2 * len(level) * per_state > memory_limit:
            return _fallback(p, "memory", deadline or Deadline())
        for mask, (live, peak, sched) in level.items():
            try:
                chk.tick()
            except Expired:
                return _fallback(p, "time", deadline)
            for v in range(p.n):
                if mask >> v & 1 or p.pred_mask[v] & ~mask:
                    continue
                foot, after = p.step(mask, live, v)
                child = mask | 1 << v
                pk = max(peak, foot)
                if child not in nxt or pk < nxt[child][1]:
                    nxt[child] = (after, pk, sched + [v])
        level = nxt
    (live, peak, sched), = level.values() if level else [(0, 0, [])]
    return sched, peak, True, {}

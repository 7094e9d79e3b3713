"""Reference solvers for cross-checking: exhaustive enumeration and SERENITY's plain DP.

* ``brute``: every topological order (O(V!)); refuses graphs over ``max_ops`` ops.
* ``dp``: SERENITY Algorithm 1 (Ahn et al., MLSys 2020): breadth-wise over search steps,
  memoising per executed set the partial schedule with the least peak; no bounds, no pruning,
  O(V * 2^V) in the worst case. Used as an independent check of the best-first search.
"""
from __future__ import annotations

from ..memory import Problem
from .base import register


@register("brute", "enumerate every topological order (tiny graphs only)")
def brute(p: Problem, max_ops: int = 12, **_):
    if p.n > max_ops:
        raise ValueError(f"brute force refuses {p.n} ops (max_ops={max_ops})")
    best = [None, None]

    def rec(mask, live, peak, order):
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

    rec(0, p.initial_live(), 0, [])
    return best[0], best[1], True, {}


@register("dp", "SERENITY's dynamic programming over zero-indegree sets (no pruning)")
def serenity_dp(p: Problem, **_):
    level = {0: (p.initial_live(), 0, [])}  # mask -> (live, peak, schedule)
    for _ in range(p.n):
        nxt: dict[int, tuple[int, int, list[int]]] = {}
        for mask, (live, peak, sched) in level.items():
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

"""``exact_native``: the exact scheduler (`memsched.schedulers.exact`) with its search kernel in
C++ (`memsched.native`, sources in ``passes/``).

Divide-and-conquer, the heuristic upper bounds and the lower-bound bookkeeping stay in Python
(they are cheap); every segment's best-first search runs natively. Same results as ``exact``:
same peak and, when optimal, the same lower bound (tests/test_native.py cross-checks both).

For other schedulers: `astar` has the signature of `memsched.schedulers.exact.astar` and can be
swapped in when `available()` is true.
"""
from __future__ import annotations

import time

from .. import native
from ..memory import Problem
from .base import register
from .exact import segment_problems


def available() -> bool:
    """True when libmemsched_native can be loaded."""
    return native.available()


def _remaining(deadline) -> float | None:
    end = getattr(deadline, "end", None)
    return None if end is None else max(0.0, end - time.perf_counter())


def astar(p: Problem, upper: tuple[list[int], int], target: int, deadline=None,
          on_progress=None, max_states: int | None = None):
    """Drop-in for `memsched.schedulers.exact.astar` (``deadline``: an object with ``end``, a
    `time.perf_counter` value or None). ``on_progress`` is not called (the kernel does not call
    back into Python). Returns ``(order, peak, lower_bound, states)``."""
    return native.astar(p, upper, target, _remaining(deadline), max_states)


def solve(p: Problem, time_limit: float | None = None, divide: bool = True,
          max_states: int | None = None, progress=False):
    """`memsched.schedulers.exact.solve` with the native kernel."""
    native.load()  # fail early and clearly
    end = None if time_limit is None else time.perf_counter() + max(0.0, time_limit)

    def left():
        return None if end is None else max(0.0, end - time.perf_counter())

    segs, subs, target = segment_problems(p, divide)
    total_states = 0
    for k in sorted(range(len(subs)), key=lambda k: -subs[k][3]):
        sub, ids, order, peak, lb = subs[k]
        if peak <= target:
            continue
        remaining = left()
        if remaining is not None and remaining <= 0:
            continue
        o, pk, lb2, st = native.astar(sub, (order, peak), target, remaining, max_states)
        total_states += st
        subs[k][2], subs[k][3], subs[k][4] = o, pk, max(lb, lb2)
        target = max(target, subs[k][4])
    order = [ids[v] for _, ids, o, *_ in subs for v in o]
    peak = max((s[3] for s in subs), default=0)
    lower = max((s[4] for s in subs), default=0)
    optimal = peak <= lower
    timed_out = end is not None and time.perf_counter() >= end and not optimal
    return order, min(lower, peak), optimal, {
        "segments": len(segs), "largest_segment": max((len(s) for s in segs), default=0),
        "states": total_states, "timed_out": timed_out, "native": True}


@register("exact_native", "exact search with the C++ kernel (libmemsched_native), anytime")
def exact_native(p: Problem, time_limit: float | None = None, progress=False, **opts):
    return solve(p, time_limit=time_limit, progress=progress, **opts)

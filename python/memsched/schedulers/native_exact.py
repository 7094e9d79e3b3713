"""``exact_native``: the exact scheduler (`memsched.schedulers.exact`) with its search kernel in
C++ (`memsched.native`, sources in ``passes/``).

Divide-and-conquer, the heuristic upper bounds and the lower-bound bookkeeping stay in Python
(they are cheap); every segment's best-first search runs natively, under the call's deadline,
its memory cap and Ctrl-C (`memsched.native.astar_full`). Same results as ``exact``: same peak
and, when optimal, the same lower bound (tests/test_native.py cross-checks both).

For other schedulers: `astar` has the signature of `memsched.schedulers.exact.astar` and can be
swapped in when `available()` is true.
"""
from __future__ import annotations

from .. import native
from ..limits import Deadline
from ..memory import Problem
from .base import register
from .exact import segment_problems


def available() -> bool:
    """True when libmemsched_native can be loaded."""
    return native.available()


def astar(p: Problem, upper: tuple[list[int], int], target: int, deadline=None,
          on_progress=None, max_states: int | None = None, memory_limit: int | None = None,
          info: dict | None = None, backward: bool = False):
    """Drop-in for `memsched.schedulers.exact.astar` (``deadline``: a
    `memsched.limits.Deadline` or None). ``on_progress`` is not called (the kernel does not call
    back into Python). Returns ``(order, peak, lower_bound, states)``; ``info["stopped"]`` says
    why it stopped. ``backward``: search from the schedule's end (`native.astar_full`)."""
    d = deadline if isinstance(deadline, Deadline) else Deadline(end=getattr(deadline, "end",
                                                                             None))
    r = native.astar_full(p, upper, target, d.remaining(), max_states, memory_limit,
                          deadline=d, backward=backward)
    if info is not None:
        info["stopped"] = r.reason
        info["memory_bytes"] = r.memory_bytes
    return r.order, r.peak, r.lower_bound, r.states


def solve(p: Problem, time_limit: float | None = None, divide: bool = True,
          max_states: int | None = None, progress=False, deadline: Deadline | None = None,
          memory_limit: int | None = None):
    """`memsched.schedulers.exact.solve` with the native kernel."""
    deadline = Deadline.of(deadline, time_limit)
    native.load()  # fail early and clearly
    segs, subs, target = segment_problems(p, divide, deadline)
    total_states = 0
    stopped: dict[str, int] = {}
    for k in sorted(range(len(subs)), key=lambda k: -subs[k][3]):
        sub, ids, order, peak, lb = subs[k]
        if peak <= target or deadline.expired():
            continue
        info: dict = {}
        o, pk, lb2, st = astar(sub, (order, peak), target, deadline, None, max_states,
                               memory_limit, info)
        stopped[info["stopped"]] = stopped.get(info["stopped"], 0) + 1
        total_states += st
        subs[k][2], subs[k][3], subs[k][4] = o, pk, max(lb, lb2)
        target = max(target, subs[k][4])
    order = [ids[v] for _, ids, o, *_ in subs for v in o]
    peak = max((s[3] for s in subs), default=0)
    lower = max((s[4] for s in subs), default=0)
    optimal = peak <= lower
    return order, min(lower, peak), optimal, {
        "segments": len(segs), "largest_segment": max((len(s) for s in segs), default=0),
        "states": total_states, "stopped": stopped,
        "timed_out": deadline.expired() and not optimal, "native": True}


@register("exact_native", "exact search with the C++ kernel (libmemsched_native), anytime")
def exact_native(p: Problem, time_limit: float | None = None, progress=False, **opts):
    return solve(p, time_limit=time_limit, progress=progress, **opts)

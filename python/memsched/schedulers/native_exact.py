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


QUICK_FIRST_STATES = 4_000  # first run of each direction in `astar_both`; doubles per round


def astar_both(p: Problem, upper: tuple[list[int], int], target: int, deadline: Deadline,
               max_states: int, memory_limit: int | None = None):
    """A capped A* from both ends of the schedule in alternating runs of doubling state caps
    (each direction resumed, never restarted; up to ``max_states`` each, ``memory_limit``
    halved between them), until one proves ``target`` or the peak. Which direction is the
    small one is not known in advance (NASNet-A CIFAR under ExecuTorch's model: 200k states
    forward without a proof, 8k backward), and running one to its cap first paid the whole
    cap whenever it was the wrong one. Returns ``(order, peak, lower_bound, states)``."""
    order, peak = upper
    lb, states = 0, 0
    if max_states <= 0:
        return order, peak, lb, states
    half = None if memory_limit is None else memory_limit // 2
    packed = native.pack(p)
    with native.AstarSession(p, upper, target, packed) as fwd, \
            native.AstarSession(p, upper, target, packed, backward=True) as bwd:
        searches, done = [fwd, bwd], [0, 0]
        cap = QUICK_FIRST_STATES
        while any(s is not None for s in searches) and not deadline.expired():
            for i, search in enumerate(searches):
                if search is None or deadline.expired():
                    continue
                r = search.run(time_limit=deadline.remaining(),
                               max_states=min(cap, max_states - done[i]), memory_limit=half,
                               target=max(target, min(lb, peak)), upper=(order, peak),
                               deadline=deadline)
                states += r.states - done[i]
                done[i] = r.states
                if r.peak < peak:
                    order, peak = r.order, r.peak
                lb = max(lb, r.lower_bound)
                if lb >= peak or peak <= target:  # proven, or at a bound proven elsewhere
                    return order, peak, lb, states
                if r.reason != "states" or done[i] >= max_states:
                    searches[i] = None
            cap *= 2
    return order, peak, lb, states


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

"""Exact minimum-peak scheduling by best-first search over executed sets.

Reference: Ahn et al., "Ordering Chaos: Memory-Aware Scheduling of Irregularly Wired Neural
Networks for Edge Devices" (SERENITY), MLSys 2020, §3.1-3.2; Held & Karp's subset DP.

Why it works: the live memory after executing a set ``I`` of ops does not depend on the order
that executed them (`memsched.memory`). A schedule is a path ``{} -> ... -> V`` in the lattice
of executed sets, its cost the *maximum* step footprint along the path. Minimising a maximum is
a bottleneck-path problem, so Dijkstra/A* apply with ``f = max(g, h)``:

* ``g``: peak of the best known path to ``I`` (SERENITY's memoised ``mu_peak``; SERENITY's
  signature, the zero-indegree set, is a function of ``I``);
* ``h``: an admissible, consistent bound: the largest ``static_bound`` (what an op reads,
  creates and needs as workspace) over the ops not yet run;
* an upper bound ``UB`` from the best heuristic order prunes every state with ``f >= UB``:
  SERENITY's soft budget at its tightest value, with no meta-search needed;
* **dominance** (exchange argument: moving such an op first never raises a later step, since
  what it frees at I it also frees at any superset of I): if a ready op ``v`` does not increase
  live memory (``live(I+v) <= live(I)``) and its step stays within ``max(g, target)``, some optimal
  completion from ``I`` starts with ``v``; we take it without branching;
* **divide and conquer**: an op with no op in parallel to it (every other op is an ancestor or a
  descendant) is a cut point every order passes through, so the segments between cut points
  are independent sub-problems (`Problem.restrict`) and the peak is the max over segments. A
  segment whose heuristic peak is already at most the best global lower bound needs no search.

Anytime: when ``time_limit`` expires, the state budget ``max_states`` is spent or the states
held reach ``memory_limit`` bytes (`memsched.limits`), the best order found is returned with
the smallest ``f`` still open as the proven lower bound. The search returns a new order only
when it completes, so a cut never makes the result depend on the clock.
"""
from __future__ import annotations

import heapq
from typing import Callable

from ..limits import Checker, Deadline, python_state_bytes
from ..memory import Problem
from .base import register, trivial_bound
from .heuristics import best_heuristic


def _popcount(x: int) -> int:
    return x.bit_count()


def cut_segments(p: Problem, deadline: Deadline | None = None) -> list[list[int]]:
    """Split the ops at cut points (ops comparable with every other op); returns the segments
    in execution order, each a list of op ids in a topological order. O(V^2 / 64) words:
    ``deadline`` aborts it (`memsched.limits.Expired`)."""
    n = p.n
    if n == 0:
        return []
    chk = Checker(deadline, 256)
    order = list(range(n))  # op ids are a topological order in every Problem we build
    anc = [0] * n
    for v in order:
        chk.tick()
        m = 0
        for u in p.preds[v]:
            m |= anc[u] | (1 << u)
        anc[v] = m
    desc = [0] * n
    succs: list[list[int]] = [[] for _ in range(n)]
    for v in order:
        for u in p.preds[v]:
            succs[u].append(v)
    for v in reversed(order):
        chk.tick()
        m = 0
        for s in succs[v]:
            m |= desc[s] | (1 << s)
        desc[v] = m
    full = p.full
    cuts_mask = 0
    for v in order:
        if (anc[v] | desc[v] | (1 << v)) == full:
            cuts_mask |= 1 << v
    segs: dict[int, list[int]] = {}
    for v in order:
        k = _popcount(anc[v] & cuts_mask)
        segs.setdefault(k, []).append(v)
    return [segs[k] for k in sorted(segs)]


_Deadline = Deadline  # the name other modules used before memsched.limits


def astar(p: Problem, upper: tuple[list[int], int], target: int, deadline: Deadline | None,
          on_progress: Callable[[int], None] | None = None, max_states: int | None = None,
          memory_limit: int | None = None, info: dict | None = None):
    """Best-first search on one (sub-)problem.

    ``target`` is a proven lower bound of the whole problem this one is part of: any order with
    peak <= target is as good as optimal. Returns ``(order, peak, lower_bound, states)`` where
    ``lower_bound`` bounds ``max(optimum of p, target)`` from below, i.e. the global optimum.
    ``memory_limit``: bytes the search may hold (None: no cap), counted as stored states times
    `memsched.limits.python_state_bytes`. ``info`` (a dict) receives ``stopped``: ``"done"``,
    ``"time"``, ``"states"`` or ``"memory"``.
    """
    n = p.n
    ub_order, ub = upper
    if info is not None:
        info["stopped"] = "done"
    if ub <= target or n == 0:
        return ub_order, ub, max(ub, target), 0
    if deadline is None:
        deadline = Deadline()
    max_held = None if memory_limit is None else max(1, memory_limit // python_state_bytes(n))
    static = [p.static_bound(v) for v in range(n)]
    by_static = sorted(range(n), key=lambda v: -static[v])

    def h(mask: int) -> int:
        for v in by_static:
            if not mask >> v & 1:
                return static[v]
        return 0

    live0 = p.initial_live()
    pred_mask = p.pred_mask
    full = p.full
    parent: dict[int, tuple[int, int]] = {}
    best_g = {0: 0}
    live_of = {0: live0}
    heap = [(max(h(0), target), 0, 0, 0)]  # (f, -depth, g, mask)
    states = 0
    lower = max(h(0), target)
    while heap:
        f, negd, g, mask = heapq.heappop(heap)
        if best_g.get(mask, g) < g:
            continue  # stale entry
        if f >= ub:
            lower = ub
            break
        lower = f  # f is non-decreasing over pops (consistent heuristic)
        if mask == full:
            order = []
            m = mask
            while m:
                pm, v = parent[m]
                order.append(v)
                m = pm
            order.reverse()
            return order, g, f, states
        states += 1
        if states & 63 == 0:  # an expansion costs O(n) Python steps: poll often
            why = None
            if max_states is not None and states >= max_states:
                why = "states"
            elif max_held is not None and len(best_g) + len(heap) // 2 >= max_held:
                why = "memory"
            elif deadline.expired():
                why = "time"
            if why:
                if info is not None:
                    info["stopped"] = why
                break
            if on_progress:
                on_progress(states)
        live = live_of[mask]
        limit = max(g, target)
        # Forced moves (dominance): run ops that never raise live memory and stay in budget.
        forced = True
        while forced and mask != full:
            forced = False
            for v in range(n):
                if mask >> v & 1 or pred_mask[v] & ~mask:
                    continue
                foot, after = p.step(mask, live, v)
                if after <= live and foot <= limit:
                    g = max(g, foot)
                    child = mask | (1 << v)
                    if child in best_g and best_g[child] <= g:
                        mask = -1  # already reached at least as cheaply
                        break
                    best_g[child] = g
                    parent[child] = (mask, v)
                    live_of[child] = after
                    mask, live = child, after
                    forced = True
                    break
            if mask == -1:
                break
        if mask == -1:
            continue
        if mask == full:
            heapq.heappush(heap, (max(g, target), -n, g, mask))
            continue
        hm_cache: dict[int, int] = {}
        for v in range(n):
            if mask >> v & 1 or pred_mask[v] & ~mask:
                continue
            foot, after = p.step(mask, live, v)
            g2 = foot if foot > g else g
            if g2 >= ub:
                continue
            child = mask | (1 << v)
            old = best_g.get(child)
            if old is not None and old <= g2:
                continue
            hv = hm_cache.get(child)
            if hv is None:
                hv = hm_cache[child] = h(child)
            f2 = max(g2, hv, target)
            if f2 >= ub:
                continue
            best_g[child] = g2
            parent[child] = (mask, v)
            live_of[child] = after
            heapq.heappush(heap, (f2, -_popcount(child), g2, child))
    else:
        lower = ub  # search space exhausted below ub: the heuristic order is optimal
    return ub_order, ub, min(lower, ub), states


def segment_problems(p: Problem, divide: bool = True, deadline: Deadline | None = None):
    """The sub-problems between cut points (`cut_segments`), in execution order, each as
    ``[sub, ids, order, peak, lower_bound]`` seeded with its best heuristic order, plus the
    largest of their lower bounds (a proven global lower bound). ``divide=False``: one segment.
    A passed ``deadline`` aborts it (`memsched.limits.Expired`)."""
    if deadline is not None:
        deadline.check()
    segs = cut_segments(p, deadline) if divide else [list(range(p.n))]
    subs = []
    before = 0
    for seg in segs:
        if deadline is not None:
            deadline.check()
        sub, ids = p.restrict(seg, before)
        before |= sum(1 << v for v in seg)
        order, peak, _ = best_heuristic(sub, deadline)
        subs.append([sub, ids, order, peak, trivial_bound(sub)])
    return segs, subs, max((s[4] for s in subs), default=0)


def solve(p: Problem, time_limit: float | None = None, progress: bool | Callable = False,
          divide: bool = True, max_states: int | None = None, deadline: Deadline | None = None,
          memory_limit: int | None = None):
    """Exact scheduling of a whole problem with divide-and-conquer; see module docstring."""
    deadline = Deadline.of(deadline, time_limit)
    segs, subs, target = segment_problems(p, divide, deadline)
    total_states = 0
    stopped: dict[str, int] = {}
    report = progress if callable(progress) else None
    # Hardest segments first: they set the global peak, after which easier ones need no search.
    for k in sorted(range(len(subs)), key=lambda k: -subs[k][3]):
        sub, ids, order, peak, lb = subs[k]
        if peak <= target:
            continue
        if deadline.expired():
            continue
        info: dict = {}
        o, pk, lb2, st = astar(sub, (order, peak), target, deadline,
                               (lambda s, k=k: report(k, len(subs), total_states + s))
                               if report else None, max_states, memory_limit, info)
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
        "timed_out": deadline.expired() and not optimal}


@register("exact", "best-first search over executed sets with divide-and-conquer (anytime)")
def exact(p: Problem, time_limit: float | None = None, progress=False, **opts):
    return solve(p, time_limit=time_limit, progress=progress, **opts)

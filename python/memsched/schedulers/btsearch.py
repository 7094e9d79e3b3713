"""BTSearch: depth-first backtracking over graph states with state marking and hashed parsing.

Reference: MemoriaNova (BTSearch + GenEFlow), §3.2: BTSearch.

* **graph state** (Def. 3.1-3.2): the Boolean "has run" of every op, here a bitmask;
* **backtracking**: from the current state try every executable op (in-degree zero among the
  ops not run), recurse, undo; a complete order updates the best result;
* **state marking** (§3.2.1): a dictionary from graph state to the best metric with which the
  search reached it; reaching it again with a metric no better is pruned (everything below it
  has been explored with a better prefix);
* **hashed parsing** (§3.2.2): the parse of a state (executable ops, memory held) is cached
  per state.

The metric is the registry's objective, the peak of the stable footprints (the paper sums the
free memory of every step; ``metric='sum'`` is not offered because every memsched scheduler
minimises the peak). Two standard additions, both exact: branch-and-bound against the best
order found (initially the best baseline) with the admissible bound of `exact` (the largest
footprint any remaining op needs on its own), and, with ``divide=True``, the cut-point
decomposition of `exact` (each segment is searched separately). Children are tried in order of
their step footprint, so the first complete order is the greedy one. A finished search proves
optimality. Anytime under deterministic budgets: when ``max_states`` states are visited or the
marks reach ``memory_limit`` bytes, the best order so far is returned with the trivial lower
bound. The clock (``time_limit``) only cuts the search: a segment it stops keeps its starting
order (its incumbent would depend on where the clock stopped it; see `memsched.limits`).
"""
from __future__ import annotations

from ..limits import Deadline, python_state_bytes
from ..memory import Problem
from .base import register
from .exact import segment_problems


def btsearch_problem(p: Problem, upper: tuple[list[int], int], target: int,
                     deadline: Deadline | None, max_states: int | None = None, bound: bool = True,
                     memory_limit: int | None = None):
    """Backtracking on one (sub-)problem. Returns ``(order, peak, finished, stats)``;
    ``finished`` means the search space was exhausted (the order is optimal, or at most
    ``target`` which is known to be a lower bound of the whole problem); ``stats["stopped"]``:
    ``done``, ``time`` (the order is then ``upper``'s), ``states`` or ``memory``."""
    n = p.n
    best_order, best = list(upper[0]), upper[1]
    if n == 0 or best <= target:
        return best_order, best, True, {"states": 0, "marks": 0, "stopped": "done"}
    deadline = deadline or Deadline()
    max_marks = None if memory_limit is None else max(1, memory_limit // python_state_bytes(n))
    static = [p.static_bound(v) for v in range(n)]
    by_static = sorted(range(n), key=lambda v: -static[v])

    def h(mask: int) -> int:
        for v in by_static:
            if not mask >> v & 1:
                return static[v]
        return 0

    pred_mask = p.pred_mask
    full = p.full
    parse: dict[int, tuple[int, ...]] = {}  # hashed parsing: state -> executable ops
    marks: dict[int, int] = {0: 0}  # state marking: state -> best peak reaching it

    def executable(mask: int) -> tuple[int, ...]:
        r = parse.get(mask)
        if r is None:
            r = tuple(v for v in range(n) if not mask >> v & 1 and not pred_mask[v] & ~mask)
            parse[mask] = r
        return r

    def children(mask: int, live: int, peak: int):
        out = []
        for v in executable(mask):
            foot, after = p.step(mask, live, v)
            g = peak if peak > foot else foot
            if g >= best:
                continue
            child = mask | (1 << v)
            old = marks.get(child)
            if old is not None and old <= g:
                continue
            if bound and h(child) >= best:
                continue
            out.append((g, after, v, child))
        out.sort()
        return out

    states = 0
    path: list[int] = []
    stack = [[0, p.initial_live(), 0, children(0, p.initial_live(), 0), 0]]
    finished = True
    stopped = "done"
    while stack:
        frame = stack[-1]
        mask, live, peak, kids, i = frame
        if i >= len(kids):
            stack.pop()
            if path:
                path.pop()
            continue
        frame[4] = i + 1
        g, after, v, child = kids[i]
        if g >= best:  # the bound improved since the children were listed
            continue
        old = marks.get(child)
        if old is not None and old <= g:
            continue
        marks[child] = g
        states += 1
        if states & 63 == 0:  # a state costs O(n) Python steps: poll often
            if max_states is not None and states >= max_states:
                stopped = "states"
            elif max_marks is not None and len(marks) + len(parse) >= max_marks:
                stopped = "memory"
            elif deadline.expired():
                stopped = "time"
                best_order, best = list(upper[0]), upper[1]
            if stopped != "done":
                finished = False
                break
        path.append(v)
        if child == full:
            best, best_order = g, list(path)
            path.pop()
            if best <= target:
                break
            continue
        stack.append([child, after, g, children(child, after, g), 0])
    return best_order, best, finished, {"states": states, "marks": len(marks), "stopped": stopped}


@register("btsearch", "BTSearch (MemoriaNova §3.2): backtracking with state marking and hashed "
                      "parsing, branch-and-bound, anytime")
def btsearch(p: Problem, time_limit: float | None = 10.0, progress=False, divide: bool = True,
             max_states: int | None = None, bound: bool = True, deadline: Deadline | None = None,
             memory_limit: int | None = None, **_):
    deadline = Deadline.of(deadline, time_limit)
    segs, subs, target = segment_problems(p, divide, deadline)
    states = 0
    stopped: dict[str, int] = {}
    for k in sorted(range(len(subs)), key=lambda k: -subs[k][3]):
        sub, ids, o, pk, lb = subs[k]
        if pk <= target:
            continue
        if deadline.expired():
            continue
        o2, pk2, finished, st = btsearch_problem(sub, (o, pk), target, deadline, max_states,
                                                 bound, memory_limit)
        states += st["states"]
        stopped[st["stopped"]] = stopped.get(st["stopped"], 0) + 1
        subs[k][2], subs[k][3] = o2, pk2
        if finished:
            subs[k][4] = max(lb, pk2)  # exhausted: pk2 is optimal (or <= target)
            target = max(target, subs[k][4])
    order = [ids[v] for _, ids, o, *_ in subs for v in o]
    peak = max((s[3] for s in subs), default=0)
    lower = max((s[4] for s in subs), default=0)
    return order, min(lower, peak), peak <= lower, {
        "segments": len(segs), "states": states, "stopped": stopped,
        "timed_out": peak > lower and (deadline.expired() or "time" in stopped)}

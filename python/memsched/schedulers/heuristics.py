"""Fast baseline orders: what compilers do today, and cheap upper bounds for the exact search.

* ``input``: the order the frontend emitted (op ids are in binding order).
* ``rpo``: reverse post-order of a depth-first search from the inputs (HMCOS's baseline).
* ``bfs`` / ``dfs``: Kahn's algorithm with a FIFO queue / a LIFO stack (TVM's
  ``TopologicalSort("breadth-first"|"depth-first")``, Inductor's bfs/dfs).
* ``list``: XLA-style greedy list scheduling: among ready ops take the one that frees the most
  bytes net of what it allocates.
* ``lpmf``: PyTorch Inductor's "least peak memory first": take the ready op whose step
  footprint is smallest (ties: lowest live memory after it).
* ``heuristic``: the best of all of the above (Inductor's ``reorder_for_peak_memory`` idea).

All run in O((V + E) log V) or O(V * ready) time and return a valid topological order. They
are deterministic and have no time budget; a `memsched.limits.Deadline` can only abort them
(`Expired`), and `best_heuristic` then returns the best of the baselines that completed (the
input order always does).
"""
from __future__ import annotations

import heapq

from ..limits import Checker, Deadline, Expired
from ..memory import Problem
from .base import bound_in_time, register


def _succs(p: Problem) -> list[list[int]]:
    s: list[list[int]] = [[] for _ in range(p.n)]
    for v, ps in enumerate(p.preds):
        for u in dict.fromkeys(ps):
            s[u].append(v)
    return s


def _result(p: Problem, order, name, deadline: Deadline | None = None):
    return order, bound_in_time(p, deadline), False, {"method": name}


@register("input", "the input (frontend) order")
def input_order(p: Problem, **_):
    return _result(p, list(range(p.n)), "input")


@register("rpo", "reverse post-order of a DFS from the inputs")
def rpo(p: Problem, deadline: Deadline | None = None, **_):
    return _result(p, _rpo(p, deadline), "rpo", deadline)


def _rpo(p: Problem, deadline: Deadline | None = None) -> list[int]:
    chk = Checker(deadline, 1024)
    succs = _succs(p)
    seen = [False] * p.n
    post: list[int] = []
    roots = [v for v in range(p.n) if not p.preds[v]]
    for r in roots:
        if seen[r]:
            continue
        seen[r] = True
        stack = [(r, iter(succs[r]))]
        while stack:
            chk.tick()
            v, it = stack[-1]
            for s in it:
                if not seen[s]:
                    seen[s] = True
                    stack.append((s, iter(succs[s])))
                    break
            else:
                stack.pop()
                post.append(v)
    return post[::-1]


def _kahn(p: Problem, pick, deadline: Deadline | None = None) -> list[int]:
    """Generic Kahn's algorithm; ``pick(ready)`` removes and returns the next op (tests draw
    random topological orders with it)."""
    succs = _succs(p)
    indeg = [len(set(ps)) for ps in p.preds]
    ready = [v for v in range(p.n) if indeg[v] == 0]
    order = []
    chk = Checker(deadline, 1024)
    while ready:
        chk.tick()
        v = pick(ready)
        order.append(v)
        for s in succs[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return order


def _bfs(p: Problem, deadline: Deadline | None = None) -> list[int]:
    from collections import deque

    succs = _succs(p)
    indeg = [len(set(ps)) for ps in p.preds]
    ready = deque(v for v in range(p.n) if indeg[v] == 0)
    order = []
    chk = Checker(deadline, 1024)
    while ready:
        chk.tick()
        v = ready.popleft()
        order.append(v)
        for s in succs[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return order


@register("bfs", "Kahn's algorithm, FIFO (breadth-first)")
def bfs(p: Problem, deadline: Deadline | None = None, **_):
    return _result(p, _bfs(p, deadline), "bfs", deadline)


def _dfs(p: Problem, deadline: Deadline | None = None) -> list[int]:
    # Push successors so the lowest id is taken first among the newly ready ones.
    succs = _succs(p)
    indeg = [len(set(ps)) for ps in p.preds]
    stack = sorted((v for v in range(p.n) if indeg[v] == 0), reverse=True)
    order = []
    chk = Checker(deadline, 1024)
    while stack:
        chk.tick()
        v = stack.pop()
        order.append(v)
        new = []
        for s in succs[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                new.append(s)
        stack.extend(sorted(new, reverse=True))
    return order


@register("dfs", "Kahn's algorithm, LIFO (depth-first)")
def dfs(p: Problem, deadline: Deadline | None = None, **_):
    return _result(p, _dfs(p, deadline), "dfs", deadline)


def _greedy(p: Problem, lpmf: bool, deadline: Deadline | None = None):
    """Greedy simulation: at each step take the ready op with the smallest key -- list
    scheduling: (live after - live before, footprint); ``lpmf``: (footprint, live after) --
    ties to the lowest op id. Footprints are `Problem.step`'s, from counts of each tensor's
    readers still to run (the executed-set masks cost O(V) per step on large graphs). Every
    ready op's key is its step's bytes over the live bytes, which all share: kept in a heap,
    an op's key recomputed only when a tensor it reads loses a reader."""
    succs = _succs(p)
    indeg = [len(set(ps)) for ps in p.preds]
    size, pinned, creates, reads, inplace, ws = (p.size, p.pinned, p.creates, p.reads,
                                                 p.inplace, p.workspace)
    readers = [set(cs) for cs in p.consumers]
    waiting = [len(r) for r in readers]  # readers not yet run
    read_by: list[list[int]] = [[] for _ in range(p.n)]  # the tensors each op is a reader of
    for t, r in enumerate(readers):
        for c in r:
            read_by[c].append(t)
    touch: list[set] = [set() for _ in size]  # the ops whose step looks at t's readers
    for v in range(p.n):
        for t in reads[v]:
            touch[t].add(v)
        for t in inplace[v]:
            touch[t].add(v)

    def key(v: int) -> tuple[int, int]:
        created = freed = 0
        for t in creates[v]:
            created += size[t]
            if not pinned[t] and not readers[t]:
                freed += size[t]
        for t in reads[v]:  # dead once v ran: every reader of t has run
            if not pinned[t] and waiting[t] == (v in readers[t]):
                freed += size[t]
        foot = created + ws[v]
        for t in inplace[v]:
            if not pinned[t] and waiting[t] == (v in readers[t]):
                foot -= min(size[t], created)
                break
        return (foot, created - freed) if lpmf else (created - freed, foot)

    keys: dict[int, tuple[int, int]] = {}  # ready op -> its key now
    heap: list = []

    def push(v: int) -> None:
        k = keys[v] = key(v)
        heapq.heappush(heap, (k, v))

    for v in range(p.n):
        if indeg[v] == 0:
            push(v)
    order = []
    chk = Checker(deadline, 64)
    while keys:
        k, v = heapq.heappop(heap)
        if keys.get(v) != k:
            continue  # an older key of an op since re-keyed or run
        chk.tick()
        del keys[v]
        stale = set()
        for t in read_by[v]:
            waiting[t] -= 1
            stale |= touch[t]
        order.append(v)
        for u in stale:
            if u in keys:
                push(u)
        for s_ in succs[v]:
            indeg[s_] -= 1
            if indeg[s_] == 0:
                push(s_)
    return order


def _list(p: Problem, deadline: Deadline | None = None) -> list[int]:
    return _greedy(p, False, deadline)


def _lpmf(p: Problem, deadline: Deadline | None = None) -> list[int]:
    return _greedy(p, True, deadline)


@register("list", "XLA-style list scheduling: most bytes freed net of allocated first")
def list_schedule(p: Problem, deadline: Deadline | None = None, **_):
    return _result(p, _list(p, deadline), "list", deadline)


@register("lpmf", "Inductor-style least peak memory first")
def lpmf(p: Problem, deadline: Deadline | None = None, **_):
    return _result(p, _lpmf(p, deadline), "lpmf", deadline)


BASELINES = ("input", "rpo", "bfs", "dfs", "list", "lpmf")
_ORDERS = {"input": lambda p, d: list(range(p.n)), "rpo": _rpo, "bfs": _bfs, "dfs": _dfs,
           "list": _list, "lpmf": _lpmf}


def best_heuristic(p: Problem, deadline: Deadline | None = None,
                   partial: bool = True) -> tuple[list[int], int, str]:
    """(order, peak, name) of the best baseline; ties go to the earlier name in BASELINES.
    When ``deadline`` passes, the best of the baselines completed so far (at least the input
    order): a prefix of a fixed list, so the answer depends on the clock only through how many
    completed; ``partial=False`` raises `Expired` instead."""
    best = None
    for name in BASELINES:
        try:
            if best is not None and deadline is not None:
                deadline.check()
            order = _ORDERS[name](p, deadline)
            peak = p.evaluate(order).peak
        except Expired:
            if not partial:
                raise
            if best is None:
                order = list(range(p.n))
                best = (order, p.evaluate(order).peak, "input")
            break
        if best is None or peak < best[1]:
            best = (order, peak, name)
    return best


@register("heuristic", "best of the baseline orders")
def heuristic(p: Problem, deadline: Deadline | None = None, **_):
    order, peak, name = best_heuristic(p, deadline)
    return order, bound_in_time(p, deadline), False, {"method": name}

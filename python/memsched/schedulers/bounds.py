"""Lower bounds on the optimal peak that need no search.

* `trivial_bound` (`memsched.schedulers.base`): what each op reads, creates and needs as
  workspace, and the memory live before the first and after the last op.
* `ancestry_bounds` (this module, the **ancestry bound**): when op ``v`` runs, every tensor
  produced by an *ancestor* of ``v`` (or a graph input) that is read by ``v`` or by a
  *descendant* of ``v`` (or kept to the end) is necessarily live, whatever the order: its
  producer has run and one of its readers has not. So the footprint of ``v`` in *every*
  topological order is at least ``base + forced(v) + created(v) + workspace(v) - credit(v)``.
  The bound per op is admissible for best-first search (a completion from any executed set
  still runs every unexecuted ``v``), and its maximum is a global lower bound.

Why it matters: on residual and dense networks the peak usually sits inside a block while a
skip tensor waits for the merge; the trivial bound ignores that tensor, the ancestry bound
counts it, and meets the heuristic's peak without any search (`memsched.schedulers.auto`
then stops at once).

Cost: an ``n x n`` reachability matrix (numpy, bit-packed rows not needed below ~4k ops) and one
vectorised pass per tensor: ~1 ms for 100 ops, ~0.1 s for 2,000. Above ``MAX_OPS`` the
trivial bound per op is returned instead (the matrix would not fit comfortably).
"""
from __future__ import annotations

import sys

import numpy as np

from ..limits import Checker, Deadline
from ..memory import Problem

MAX_OPS = 6000  # n x n bool matrix: 36 MB at this size


def reachability(p: Problem, deadline: Deadline | None = None) -> np.ndarray:
    """``R[u, v]`` is True when ``u`` is a strict ancestor of ``v`` (op ids are topological)."""
    return _ancestors(p, deadline).T.copy()


def _ancestors(p: Problem, deadline: Deadline | None = None) -> np.ndarray:
    """``A[v, u]`` is True when ``u`` is a strict ancestor of ``v`` (rows: contiguous ORs)."""
    n = p.n
    chk = Checker(deadline, 256)
    a = np.zeros((n, n), dtype=bool)
    for v in range(n):
        chk.tick()
        row = a[v]
        for u in set(p.preds[v]):
            row |= a[u]
            row[u] = True
    return a


def _credit(p: Problem, v: int) -> int:
    created = sum(p.size[t] for t in p.creates[v])
    return max([min(p.size[t], created) for t in p.inplace[v] if not p.pinned[t]], default=0)


def ancestry_bounds(p: Problem, deadline: Deadline | None = None) -> list[int]:
    """Per op, a lower bound on its footprint in every topological order (see module
    docstring); each is at least `Problem.static_bound`. ``deadline`` aborts it
    (`memsched.limits.Expired`)."""
    n = p.n
    if n == 0:
        return []
    if n > MAX_OPS:
        return [p.static_bound(v) for v in range(n)]
    chk = Checker(deadline, 64)
    anc = _ancestors(p, deadline)  # anc[v]: ancestors of v
    desc = anc.T.copy()  # desc[u]: descendants of u
    prod = [-1] * len(p.size)
    for v, ts in enumerate(p.creates):
        for t in ts:
            prod[t] = v
    forced = np.zeros(n, dtype=np.int64)
    for t, size in enumerate(p.size):
        chk.tick()
        if not size:
            continue
        u = prod[t]
        if u < 0 and not p.initial[t]:
            continue  # never exists
        if p.pinned[t]:
            readers = np.ones(n, dtype=bool)
        else:
            cons = p.consumers[t]
            if not cons:
                continue  # dies with its producer's step (counted in created)
            readers = np.zeros(n, dtype=bool)
            for c in cons:
                readers |= anc[c]  # ops before a reader: the reader is a descendant
                readers[c] = True
        if u >= 0:
            readers &= desc[u]  # ... and after the producer
        forced[readers] += size
    out = []
    for v in range(n):
        created = sum(p.size[t] for t in p.creates[v])
        # tensors v reads are in ``forced`` already (v is one of their readers); those it
        # creates are not (v is not its own descendant)
        b = p.base + int(forced[v]) + created + p.workspace[v] - _credit(p, v)
        out.append(max(b, p.static_bound(v)))
    return out


def ancestry_bound(p: Problem, deadline: Deadline | None = None) -> int:
    """The largest `ancestry_bounds` entry, and the memory live before/after all ops."""
    if p.n == 0:
        return 0
    return max(max(ancestry_bounds(p, deadline)), p.live(0), p.live(p.full))


# ----------------------------------------------------------------------------- min-cut bound
INT32_CAP = 1 << 29  # finite capacities are scaled under this (scipy's flows are int32)


def _cut_network(p: Problem):
    """The part of the flow network shared by every op (see `mincut_bounds`): a list of
    ``(tail, head, capacity)`` with capacities in units of ``quantum`` bytes (rounded down:
    the cut only gets smaller, the bound stays valid), the node count, and the quantum."""
    import math

    n, tcount = p.n, len(p.size)
    src, sink = n + tcount, n + tcount + 1
    prod = [-1] * tcount
    for v, ts in enumerate(p.creates):
        for t in ts:
            prod[t] = v
    live_ts = [t for t in range(tcount) if p.size[t] and (p.pinned[t] or p.consumers[t])
               and (prod[t] >= 0 or p.initial[t])]
    total = sum(p.size[t] for t in live_ts)
    quantum = 0
    for t in live_ts:
        quantum = math.gcd(quantum, p.size[t])
    quantum = max(quantum, 1, -(-total // INT32_CAP))
    inf = total // quantum + 1
    edges = []
    for t in live_ts:
        x = n + t
        edges.append((prod[t] if prod[t] >= 0 else src, x, p.size[t] // quantum))
        for r in p.consumers[t]:
            edges.append((x, r, inf))
        if p.pinned[t]:
            edges.append((x, sink, inf))
    for w in range(n):  # w before v needs its predecessors before v: w in S => pred in S
        for u in set(p.preds[w]):
            edges.append((w, u, inf))
    return edges, n + tcount + 2, src, sink, inf, quantum


def mincut_bounds(p: Problem, ops=None, deadline: Deadline | None = None,
                  goal: int | None = None) -> list[int] | None:
    """Per op ``v`` (all, or those in ``ops``, in that order; others get 0), the *smallest
    footprint ``v`` can have in any topological order*: the executed set ``I`` before ``v`` is
    any down-closed set holding the ancestors of ``v`` and none of its descendants, and the
    memory live at ``I`` (tensors produced in ``I`` with a reader outside it, or kept) is a
    minimum cut of a flow network: op nodes, one node per tensor (producer -> tensor: its
    size; tensor -> each reader and, if kept, -> sink: infinite), ``w -> pred`` infinite (a
    closed set), ``source -> preds(v)`` and ``v -> sink`` infinite. So the bound is at least
    `ancestry_bounds` (which counts only the tensors every such ``I`` holds). One max-flow per
    op (scipy's Dinic, ~0.5 ms at 100 ops). Stops after the first op whose bound reaches
    ``goal``. None when scipy is missing."""
    n = p.n
    if n == 0:
        return []
    chk = Checker(deadline, 1)
    edges, nodes, src, sink, inf, quantum = _cut_network(p)
    todo = list(range(n) if ops is None else ops)
    if "scipy.sparse.csgraph" not in sys.modules and \
            len(todo) * (len(edges) + n) <= SMALL_FLOW_WORK:
        return _mincut_bounds_small(p, todo, chk, goal, edges, nodes, src, sink, inf, quantum)
    try:
        import scipy.sparse as sp
        from scipy.sparse.csgraph import maximum_flow
    except ImportError:  # pragma: no cover - scipy comes with the install
        return None
    # one matrix for every op: source -> u and u -> sink for every op u, at capacity 0 except
    # for the op being bounded (set in place, then reset)
    ids = np.arange(n, dtype=np.int32)
    tails = np.concatenate([np.array([e[0] for e in edges], dtype=np.int32),
                            np.full(n, src, dtype=np.int32), ids])
    heads = np.concatenate([np.array([e[1] for e in edges], dtype=np.int32), ids,
                            np.full(n, sink, dtype=np.int32)])
    caps = np.concatenate([np.array([e[2] for e in edges], dtype=np.int32),
                           np.zeros(2 * n, dtype=np.int32)])
    keep = tails != heads
    g = sp.csr_matrix((caps[keep], (tails[keep], heads[keep])), shape=(nodes, nodes))
    g.sum_duplicates()
    g.sort_indices()

    def slot(r: int, c: int) -> int:
        lo, hi = g.indptr[r], g.indptr[r + 1]
        return int(lo + np.searchsorted(g.indices[lo:hi], c))

    from_src = [slot(src, u) for u in range(n)]
    to_sink = [slot(u, sink) for u in range(n)]
    out = [0] * n
    for v in (range(n) if ops is None else ops):
        chk.tick()
        opened = [from_src[u] for u in set(p.preds[v])] + [to_sink[v]]
        saved = g.data[opened].copy()
        g.data[opened] = inf
        try:
            flow = int(maximum_flow(g, src, sink).flow_value)
        finally:
            g.data[opened] = saved
        out[v] = _footprint_bound(p, v, flow, quantum, inf)
        if goal is not None and out[v] >= goal:
            break
    return out


def _footprint_bound(p: Problem, v: int, flow: int, quantum: int, inf: int) -> int:
    """Op ``v``'s footprint bound from the min cut ``flow`` (in quanta) of what stays live."""
    created = sum(p.size[tt] for tt in p.creates[v])
    live = min(flow, inf - 1) * quantum
    return p.base + live + created + p.workspace[v] - _credit(p, v)


# Below this many (ops bounded) x (edges), a max-flow in Python costs less than importing
# scipy.sparse.csgraph (~0.25 s): small graphs are bounded without it (start-up of the CLI).
SMALL_FLOW_WORK = 20_000


def _max_flow_small(nodes: int, edges, src: int, sink: int) -> int:
    """Max-flow value (Dinic) of a small network of ``(tail, head, capacity)`` triples; the
    value is unique, so it equals scipy's."""
    head: list[int] = []
    cap: list[int] = []
    adj: list[list[int]] = [[] for _ in range(nodes)]
    for u, v, c in edges:
        if u != v and c > 0:
            adj[u].append(len(head))
            head.append(v)
            cap.append(c)
            adj[v].append(len(head))
            head.append(u)
            cap.append(0)
    top = sum(cap) + 1
    flow = 0
    while True:
        level = [-1] * nodes
        level[src] = 0
        queue = [src]
        for u in queue:
            for e in adj[u]:
                if cap[e] > 0 and level[head[e]] < 0:
                    level[head[e]] = level[u] + 1
                    queue.append(head[e])
        if level[sink] < 0:
            return flow
        nxt = [0] * nodes

        def push(u: int, f: int) -> int:
            if u == sink:
                return f
            while nxt[u] < len(adj[u]):
                e = adj[u][nxt[u]]
                v = head[e]
                if cap[e] > 0 and level[v] == level[u] + 1:
                    d = push(v, min(f, cap[e]))
                    if d:
                        cap[e] -= d
                        cap[e ^ 1] += d
                        return d
                nxt[u] += 1
            return 0

        while True:
            f = push(src, top)
            if not f:
                break
            flow += f


def _mincut_bounds_small(p: Problem, todo, chk, goal, edges, nodes, src, sink, inf,
                         quantum) -> list[int]:
    """`mincut_bounds` on a small network with `_max_flow_small` (same values)."""
    out = [0] * p.n
    for v in todo:
        chk.tick()
        extra = [(src, u, inf) for u in set(p.preds[v])] + [(v, sink, inf)]
        flow = _max_flow_small(nodes, edges + extra, src, sink)
        out[v] = _footprint_bound(p, v, flow, quantum, inf)
        if goal is not None and out[v] >= goal:
            break
    return out


MINCUT_MAX_OPS = 1500  # one max-flow per op: ~1 s at this size


def mincut_bound(p: Problem, deadline: Deadline | None = None, goal: int | None = None,
                 top: int | None = None) -> int:
    """The largest `mincut_bounds` entry and `ancestry_bound` (ops with the largest ancestry
    bound first; stops once ``goal`` is reached; ``top``: only that many ops, a weaker but
    still valid bound). Above ``MINCUT_MAX_OPS`` ops (or without scipy): `ancestry_bound`."""
    if p.n == 0:
        return 0
    per_op = ancestry_bounds(p, deadline)
    a = max(max(per_op), p.live(0), p.live(p.full))
    if p.n > MINCUT_MAX_OPS or (goal is not None and a >= goal):
        return a
    ops = sorted(range(p.n), key=lambda v: -per_op[v])[:top]
    b = mincut_bounds(p, ops, deadline, goal)
    return a if b is None else max(a, max(b))


# ----------------------------------------------------------------------------- branching
def _with_edges(p: Problem, extra) -> tuple[Problem, list[int]] | None:
    """``p`` with the precedence edges ``extra`` (pairs ``(a, b)``: ``a`` runs before ``b``)
    added, and the ancestor bitmask of every op; None when they close a cycle."""
    import dataclasses

    preds = [list(ps) for ps in p.preds]
    for a, b in extra:
        preds[b].append(a)
    indeg = [len(set(ps)) for ps in preds]
    succs: list[list[int]] = [[] for _ in range(p.n)]
    for v, ps in enumerate(preds):
        for u in set(ps):
            succs[u].append(v)
    ready = [v for v in range(p.n) if not indeg[v]]
    anc = [0] * p.n
    seen = 0
    while ready:
        v = ready.pop()
        seen += 1
        for w in succs[v]:
            anc[w] |= anc[v] | (1 << v)
            indeg[w] -= 1
            if not indeg[w]:
                ready.append(w)
    if seen < p.n:
        return None
    return dataclasses.replace(p, preds=preds), anc


STALL_NODES = 24  # branching stops when the bound has not risen over this many expansions


def branch_cut_bound(p: Problem, goal: int, deadline: Deadline | None = None,
                     max_nodes: int | None = None,
                     stall: int | None = STALL_NODES) -> tuple[int, bool, int]:
    """A lower bound from branching on precedences, each node bounded by `mincut_bounds`.

    The min-cut bound is the best bound *per step*; the optimum is higher when the orders that
    make one step small make another large. Branching fixes that: take the op ``v`` with the
    largest min-cut bound and the op ``w`` in parallel to it with the next largest; every
    order runs ``v`` before ``w`` or ``w`` before ``v``, so the bound of the problem is the
    smaller of the bounds of the two problems with that edge added (each at least the
    parent's). Best-first over the open nodes: the smallest open bound is always a valid lower
    bound, and the search stops as soon as it reaches ``goal`` (a known peak: then proven
    optimal), when the deadline passes or after ``max_nodes`` nodes. Returns ``(bound,
    proved, nodes)``. ``deadline`` expiring returns the bound reached (never raises);
    ``stall``: stop after that many expansions without a higher bound (None: never).
    """
    import heapq

    from ..limits import Expired

    if p.n == 0:
        return 0, goal <= 0, 0

    def node(extra, floor):
        """(value, cuts, ancestors) of the problem with ``extra``; None if cyclic."""
        r = _with_edges(p, extra)
        if r is None:
            return None
        q, anc = r
        cuts = mincut_bounds(q, order_hint, deadline, goal)
        if cuts is None:
            raise ImportError("scipy")
        return max(floor, max(cuts)), cuts, anc

    try:
        order_hint = None
        root = node((), 0)
    except (Expired, ImportError):
        return 0, False, 0
    nodes = 1
    heap = [(root[0], 0, (), root)]
    tick = 1
    best, since = root[0], 0
    while heap:
        val, _, extra, (_, cuts, anc) = heap[0]
        if val >= goal:
            return goal, True, nodes
        if val > best:
            best, since = val, 0
        since += 1
        if (max_nodes is not None and nodes >= max_nodes) or \
                (stall is not None and since > stall) or \
                (deadline is not None and deadline.expired()):
            break
        heapq.heappop(heap)
        ranked = sorted(range(p.n), key=lambda v: (-cuts[v], v))
        pair = None
        for i, v in enumerate(ranked[:32]):
            w = next((w for w in ranked[i + 1:] if not (anc[v] >> w & 1 or anc[w] >> v & 1)),
                     None)
            if w is not None:
                pair = (v, w)
                break
        if pair is None:  # (nearly) a total order: the bound is what it is
            heapq.heappush(heap, (val, tick, extra, (val, cuts, anc)))
            return val, val >= goal, nodes
        order_hint = ranked  # likely large cuts first: an early stop at ``goal`` comes sooner
        v, w = pair
        try:
            for a, b in ((v, w), (w, v)):
                child = node(extra + ((a, b),), val)
                nodes += 1
                if child is not None:
                    heapq.heappush(heap, (child[0], tick, extra + ((a, b),), child))
                    tick += 1
        except Expired:
            heapq.heappush(heap, (val, tick, extra, (val, cuts, anc)))
            break
    bound = min((h[0] for h in heap), default=goal)
    return min(bound, goal), bound >= goal, nodes

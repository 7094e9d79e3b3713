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

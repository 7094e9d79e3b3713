"""Reference splits every table compares the GA with: one device, equal shares, greedy.

* ``single``: every operator whole on the fastest device (``None`` in tables when it does not
  fit that device's memory);
* ``uniform``: equal shares of every operator over every device (``whole`` ones on device 0);
* ``greedy``: operators in execution order, each given the candidate split (`candidates`) that
  is fastest *in isolation* (its transfers plus its slowest device's compute, given the splits
  already chosen for its producers) among those whose weights and working set fit what the
  devices have left; when none fits, the one overflowing least.
"""
from __future__ import annotations

import numpy as np

from .cost import CostModel
from .encoding import Encoding, even_split, proportional_split
from .evaluate import op_terms


def single(enc: Encoding, cost: CostModel) -> np.ndarray:
    return enc.single(int(np.argmax(cost.speeds)))


def uniform(enc: Encoding, cost: CostModel) -> np.ndarray:
    return enc.uniform()


def candidates(enc: Encoding, cost: CostModel, i: int, X=None) -> list[np.ndarray]:
    """Split vectors worth trying for op ``i``: whole on each device, even splits over the
    ``m`` fastest devices (m = 2..n), a speed-proportional split, and, when ``X`` is given,
    the split of a producer with the same dimension and length (aligned slices move nothing)."""
    n = enc.n
    L = int(enc.lengths[i])
    order = list(np.argsort(-cost.speeds, kind="stable"))
    out = [even_split(L, n, [d]) for d in range(n)]
    if enc.dims[i] != "whole":
        for m in range(2, min(n, L) + 1):
            out.append(even_split(L, n, sorted(order[:m])))
        if L >= n and len(set(cost.speeds)) > 1:
            out.append(proportional_split(L, cost.speeds))
        if X is not None:
            prob = enc.problem
            for r in prob.ops[i].inputs:
                j = prob.tensors[r.tensor].producer
                if j >= 0 and enc.dims[j] == enc.dims[i] and enc.lengths[j] == L:
                    out.append(np.asarray(X[j], dtype=np.int64))
    uniq = {tuple(int(v) for v in x): x for x in out}
    return [np.asarray(x, dtype=np.int64) for x in uniq.values()]


def greedy(enc: Encoding, cost: CostModel) -> np.ndarray:
    X = single(enc, cost).copy()
    limits = cost.limits
    resident = np.zeros(enc.n)
    call = cost.link.call_overhead
    for i in range(enc.problem.n):
        cands = candidates(enc, cost, i, X)
        Xc = np.repeat(X[None], len(cands), axis=0)
        Xc[:, i, :] = np.stack(cands)
        t = op_terms(enc, cost, Xc, i)
        time = t.t_comm + np.max(np.where(t.on, t.comp + call, 0.0), axis=1)
        mem = t.extra + t.out_held
        if cost.count_weights:
            mem = mem + resident[None, :] + t.w_add
        over = np.maximum(mem - limits[None, :], 0).sum(axis=1)
        key = np.lexsort((time, over))  # least overflow first, then fastest
        best = int(key[0])
        X[i] = cands[best]
        resident += t.w_add[best]
    return X

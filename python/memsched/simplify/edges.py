"""Dropping ordering edges that other edges imply: the same partial order, a sparser graph.

A `Problem`'s ``preds`` mix data edges (the producer of a tensor the op reads) with ordering
edges (side effects, a pseudo op every op follows, a region's entry). An ordering edge
``u -> v`` is *implied* when ``u`` is an ancestor of another predecessor of ``v``. Dropping
implied ordering edges keeps the ancestor relation, hence the set of valid orders, every
live set and every peak: the optimum and any certificate are those of the input. What changes
is the shape fusion sees: its candidates (maximal chains: one predecessor, one successor;
dominator regions) are read from the direct edges, and an op with a redundant extra
predecessor is neither. ExecuTorch's graphs have one on almost every op (the placeholder of
each weight is op 0's), which left NASNet-A CIFAR at 424 fused ops instead of 337.

Data edges stay even when implied: a reader keeps its producer as a direct predecessor, as
every graph memsched builds has it.
"""
from __future__ import annotations

from ..memory import Problem


def drop_implied_edges(p: Problem) -> Problem:
    """``p`` without its implied ordering edges (see module docstring); ``p`` itself when it
    has none. Op and tensor ids are unchanged, so orders carry over as they are."""
    n = p.n
    producer = {t: v for v, ts in enumerate(p.creates) for t in ts}
    anc = [0] * n  # op ids are topological in every Problem
    changed = False
    preds: list[list[int]] = []
    for v in range(n):
        ps = list(dict.fromkeys(p.preds[v]))
        m = 0
        for u in ps:
            m |= anc[u] | (1 << u)
        anc[v] = m
        if len(ps) > 1:
            data = {producer.get(t) for t in p.reads[v]}
            # implied: an ancestor of another direct predecessor (never of itself: acyclic)
            above = 0
            for w in ps:
                above |= anc[w]
            keep = [u for u in ps if u in data or not above >> u & 1]
            if len(keep) != len(ps):
                changed = True
                ps = keep
        preds.append(ps)
    if not changed:
        return p
    return Problem(n=n, preds=preds, creates=p.creates, reads=p.reads, workspace=p.workspace,
                   inplace=p.inplace, size=p.size, initial=p.initial, pinned=p.pinned,
                   consumers=p.consumers, base=p.base, names=p.names)

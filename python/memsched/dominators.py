"""Immediate dominators without networkx (whose import, 0.1-0.2 s, would be most of the CLI's
start-up on small models): Cooper, Harvey & Kennedy, "A Simple, Fast Dominance Algorithm"
(2001), iterating over reverse post-order until nothing changes."""
from __future__ import annotations

from typing import Sequence


def immediate_dominators(succs: Sequence[Sequence[int]], start: int) -> dict[int, int]:
    """``{node: its immediate dominator}`` for every node reachable from ``start`` in the graph
    ``succs`` (nodes ``0..len(succs)-1``, ``succs[v]`` = heads of the edges leaving ``v``),
    ``start`` itself left out: what ``networkx.immediate_dominators`` (3.6) returns. The
    immediate dominator is unique, so any correct algorithm gives the same map."""
    n = len(succs)
    seen = [False] * n
    seen[start] = True
    post: list[int] = []
    stack = [(start, iter(succs[start]))]
    while stack:
        v, it = stack[-1]
        for w in it:
            if not seen[w]:
                seen[w] = True
                stack.append((w, iter(succs[w])))
                break
        else:
            stack.pop()
            post.append(v)
    rpo = post[::-1]
    index = {v: i for i, v in enumerate(rpo)}
    preds: list[list[int]] = [[] for _ in range(n)]
    for v in rpo:
        for w in succs[v]:
            preds[w].append(v)
    idom = {start: start}
    changed = True
    while changed:
        changed = False
        for v in rpo[1:]:
            new = None
            for u in preds[v]:
                if u not in idom:
                    continue
                if new is None:
                    new = u
                    continue
                a, b = u, new
                while a != b:
                    while index[a] > index[b]:
                        a = idom[a]
                    while index[b] > index[a]:
                        b = idom[b]
                new = a
            if idom.get(v) != new:
                idom[v] = new
                changed = True
    del idom[start]
    return idom

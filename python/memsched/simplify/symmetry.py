"""Symmetry breaking between interchangeable chains: fewer states for the same optimum.

Patch-based programs run a grid of patches, and the interior patches of one row are identical
chains (slice, convolutions, into the same ``cat``): an order that runs patch B ahead of patch
A has a mirror image running A ahead of B with the same memory at every step, and an exact
search pays for both. Two chains ``A = a1..am`` and ``B = b1..bm`` are *twins* when swapping
them (``ai <-> bi`` and the tensors they create) maps the problem onto itself: equal
workspaces and in-place sets, created tensors of equal size with the same readers outside
the chain (and the same position inside it), the same tensors read from outside, the same
predecessors of ``a1``/``b1`` and successors of ``am``/``bm``; inner ops have no other
neighbours (a chain link is one predecessor and one successor, as fusion's chains).

For a class of twins ``C1..Ck`` (ordered by first op) `break_symmetry` adds the edges
``Cj[i] -> Cj+1[i]`` for every position ``i`` (those that go with the op numbering): ``Cj``
is never behind ``Cj+1``. Any order
maps to one that obeys them with the same peak (`Symmetry.canonical`): run it, and whenever
it advances a chain of the class that is at progress ``x``, advance instead the first chain
(in class order) at progress ``x``. The state reached is always a permutation of twins applied
to the original order's state, and the op run is the image of the original one under a
permutation fixing that state, so every step footprint is the same. Classes are disjoint
and each permutation only moves its own class's ops, so all classes are canonicalised one
after the other. The constrained problem's optimum is therefore the original's, its orders
are orders of the original, and its lower bounds are the original's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..memory import Problem


@dataclass
class Symmetry:
    """The twin classes found: each a list of chains (op id lists of equal length)."""

    classes: list = field(default_factory=list)

    def canonical(self, order: Sequence[int]) -> list[int]:
        """``order`` (of the unconstrained problem) rewritten to obey the added edges at the
        same peak (see module docstring)."""
        if not self.classes:
            return list(order)
        where = {}  # op -> (class, chain, position)
        for c, chains in enumerate(self.classes):
            for j, ch in enumerate(chains):
                for i, v in enumerate(ch):
                    where[v] = (c, j, i)
        progress = [[0] * len(chains) for chains in self.classes]
        out = []
        for v in order:
            if v not in where:
                out.append(v)
                continue
            c, j, i = where[v]
            prog = progress[c]
            # the first chain of the class at the progress the moved one had
            k = prog.index(i)
            prog[k] += 1
            out.append(self.classes[c][k][i])
        return out


def _chains(p: Problem, succs: list[list[int]]) -> list[list[int]]:
    """Maximal chains (single ops included): links of one predecessor and one successor."""
    nxt = [-1] * p.n
    has_prev = [False] * p.n
    for v in range(p.n):
        ps = set(p.preds[v])
        if len(ps) == 1:
            u = next(iter(ps))
            if len(succs[u]) == 1:
                nxt[u], has_prev[v] = v, True
    out = []
    for v in range(p.n):
        if not has_prev[v]:
            c = [v]
            while nxt[c[-1]] >= 0:
                c.append(nxt[c[-1]])
            out.append(c)
    return out


def _signature(p: Problem, chain: list[int], producer: dict, succs) -> tuple:
    pos = {v: i for i, v in enumerate(chain)}
    sig = [tuple(sorted(set(p.preds[chain[0]]))), tuple(sorted(succs[chain[-1]]))]
    for v in chain:
        def tensor(t):  # a created tensor by position, an outside one by id
            u = producer.get(t)
            return ("in", pos[u], p.creates[u].index(t)) if u in pos else ("out", t)

        made = []
        for t in p.creates[v]:
            inner = tuple(sorted(pos[c] for c in p.consumers[t] if c in pos))
            outer = tuple(sorted(c for c in p.consumers[t] if c not in pos))
            made.append((p.size[t], p.pinned[t], p.initial[t], inner, outer))
        sig.append((p.workspace[v], tuple(made), tuple(sorted(map(tensor, p.reads[v]))),
                    tuple(sorted(map(tensor, p.inplace[v])))))
    return tuple(sig)


def break_symmetry(p: Problem) -> tuple[Problem, Symmetry]:
    """``p`` with the twin-ordering edges (module docstring) and the `Symmetry` that maps
    its orders; ``p`` itself and an empty `Symmetry` when it has no twins."""
    succs: list[list[int]] = [[] for _ in range(p.n)]
    for v in range(p.n):
        for u in set(p.preds[v]):
            succs[u].append(v)
    producer = {t: v for v, ts in enumerate(p.creates) for t in ts}
    by_sig: dict = {}
    for ch in _chains(p, succs):
        by_sig.setdefault(_signature(p, ch, producer, succs), []).append(ch)
    classes = [sorted(chs) for chs in by_sig.values() if len(chs) > 1]
    if not classes:
        return p, Symmetry()
    preds = [list(ps) for ps in p.preds]
    added = 0
    for chains in classes:
        for a, b in zip(chains, chains[1:]):
            for u, v in zip(a, b):
                # op ids stay topological (every Problem's invariant): an edge against the
                # numbering is left out, and any subset of the edges keeps the optimum
                if u < v:
                    preds[v].append(u)
                    added += 1
    if not added:
        return p, Symmetry()
    q = Problem(n=p.n, preds=preds, creates=p.creates, reads=p.reads, workspace=p.workspace,
                inplace=p.inplace, size=p.size, initial=p.initial, pinned=p.pinned,
                consumers=p.consumers, base=p.base, names=p.names)
    return q, Symmetry(classes)

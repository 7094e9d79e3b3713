"""Optimality-preserving graph fusion: contract groups of ops into single ops without changing
the optimal peak (Zhong et al., "Memory-aware Scheduling for Complex Wired Networks with
Iterative Graph Optimization", ICCAD 2023, §IV-B: Theorem IV.1, Theorem IV.2, Algorithm 1).

A group ``U`` with a fixed internal order ``pi`` is *fused* into one op ``H`` of a new `Problem`:
``H`` reads what ``U`` reads from outside, creates what ``U`` creates for outside readers (or
the graph outputs), and its workspace is chosen so that its step footprint equals the peak of
running ``pi`` (the workspace may be negative: what matters is ``live + created + workspace``).
Every schedule of the fused problem expands to a schedule of the original with the same peak,
and the fusion rules below guarantee that some optimal schedule of the original runs ``U``
contiguously in the order ``pi``: so the fused optimum is the original optimum.

Notation (for a group ``U``): ``A`` = ancestors of ``U`` outside it, ``D`` = descendants, ``Q``
= the ops parallel to ``U``. ``g(K)`` is the memory of the tensors ``U`` touches after the ops
``K`` of ``U`` ran (``K`` a down-closed subset: an *ideal*), ``s_pi(k)`` the stable footprint of
the k-th op of ``pi`` counted over the same tensors.

Preconditions (checked):

* **entry**: every external predecessor of ``U`` is an ancestor of every source of ``U``, so all
  of ``A`` has run before any op of ``U`` can; **exit**: every external successor of ``U``
  descends from every sink of ``U``, so no op of ``D`` runs before ``U`` finished. (Together
  they imply ``U`` is convex.) While ``U`` is partly executed only ops of ``Q`` interleave.
* **no coupling**: a tensor ``x`` read by ``U`` from outside and also read by an op of ``Q`` makes
  the memory of ``U`` and of ``Q`` interact (``x`` is freed by whichever finishes last). Such
  *coupled* tensors are allowed only by the chain rules below, and only when no op overwrites
  ``x`` in place. Tensors kept alive anyway (graph outputs, tensors ``D`` reads) never couple.

Rules (each proven by an exchange argument: take any schedule ``sigma``, move the ``Q`` ops that
run between the first and the last op of ``U`` out of that window, run ``U`` contiguously in
``pi``, and check no step footprint grows):

* ``isolated`` (Theorem IV.2, generalised to any number of input/output tensors): no coupling,
  ``pi`` optimal for ``U`` alone, and every proper non-empty ideal ``K`` has
  ``g(K) >= max(g({}), g(U))`` ("the middle of the group holds at least as much as its ends").
  Place ``U`` at the ``Q``-state of least ``Q`` memory inside the window: ``U``'s steps do not
  grow because ``pi`` is optimal; moved ``Q`` ops see ``g({})`` or ``g(U)`` instead of a
  middle ``g(K)``. All ideals are enumerated (bounded by ``max_ideals``); the same pass computes
  ``pi`` by dynamic programming over the ideals.
* ``chain-down`` (Theorem IV.1, non-increasing case; HMCOS's sequence conditions): a linear
  sequence ``v1..vn`` with ``s(k) <= s(1)`` for all k and ``g(n) <= g(k)`` for ``1 <= k < n``.
  Run the chain at ``v1``'s place, pushing interleaved ``Q`` ops after it. With coupled tensors
  it must hold both when they are freed inside the chain and when they are not.
* ``chain-up`` (Theorem IV.1, non-decreasing case): ``s(k) <= s(n)`` and ``g(0) <= g(k)``;
  run the chain at ``vn``'s place. Coupled tensors must all be read by ``vn`` (else the fused
  op's peak would depend on the parallel ops, which a single op cannot express).

Groups found in one round are disjoint and stay valid when the others are contracted
(contraction only adds ancestor relations: entry/exit and the tensor classification of an
uncoupled group do not change, and coupled chains are checked under both interpretations),
so a round fuses all of them; rounds repeat until nothing fuses (Algorithm 1's fixed point).

Candidates: maximal linear sequences (split greedily into the longest fusable pieces) and
single-entry regions between an op and its immediate post-dominator or dominator (the paper's
BFS from each tensor's consumers until the frontier closes, found with dominator trees), at
most ``max_group`` ops each.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Sequence

from ..limits import Checker, Deadline, Expired
from ..memory import Problem
from .edges import drop_implied_edges


# ---------------------------------------------------------------------------- results
@dataclass
class FusedGroup:
    """One fused op: ``ops`` are op ids of the original problem in their internal order.

    ``peak`` is the group's peak above the memory live before it starts (its contribution to
    the step footprint: ``step = live + peak``), ``delta`` the change of live memory it causes,
    ``rule`` the theorem that allowed it (``isolated``, ``chain-down``, ``chain-up``; nested
    groups report the outermost rule)."""

    ops: list[int]
    rule: str
    peak: int
    delta: int


@dataclass
class Simplified:
    """A problem and its fused version.

    ``problem`` is the fused `Problem` (op ids topological); ``members[v]`` lists the original
    op ids fused op ``v`` runs, in order. `expand` maps a fused order to an original order of
    the same peak. ``groups`` are the fused ops with more than one member."""

    original: Problem
    problem: Problem
    members: list[list[int]]
    groups: list[FusedGroup]
    rounds: int = 0
    seconds: float = 0.0
    stats: dict = field(default_factory=dict)
    # per round: (original op ids in internal order, rule) of each group fused in that round
    history: list[list[tuple[list[int], str]]] = field(default_factory=list)

    def expand(self, order: Sequence[int]) -> list[int]:
        return [v for u in order for v in self.members[u]]

    def canonicalize(self, order: Sequence[int], deadline: Deadline | None = None) -> list[int]:
        """``order`` (of the original problem) with every fused group contiguous in its
        internal order and a peak no higher: the exchange argument of each group's rule,
        applied round by round (chain-down: at its first op; chain-up: at its last op;
        isolated: where the memory of the ops running alongside is least). ``deadline``
        aborts it (`memsched.limits.Expired`)."""
        p = self.original
        blocks: list[list[int]] = [[v] for v in order]
        for groups in self.history:
            for ops, rule in groups:
                if deadline is not None:
                    deadline.check()
                blocks = _place_group(p, blocks, ops, rule)
        return [v for b in blocks for v in b]

    @property
    def reduction(self) -> float:
        return self.original.n / max(1, self.problem.n)


# ---------------------------------------------------------------------------- helpers
def closure(p: Problem, deadline: Deadline | None = None
            ) -> tuple[list[int], list[int], list[list[int]]]:
    """(ancestor masks, descendant masks, successor lists); op ids must be topological.
    O(V^2 / 64) words: ``deadline`` aborts it on large graphs (`memsched.limits.Expired`)."""
    chk = Checker(deadline, 256)
    n = p.n
    succs: list[list[int]] = [[] for _ in range(n)]
    anc = [0] * n
    for v in range(n):
        chk.tick()
        m = 0
        for u in dict.fromkeys(p.preds[v]):
            m |= anc[u] | (1 << u)
            succs[u].append(v)
        anc[v] = m
    desc = [0] * n
    for v in range(n - 1, -1, -1):
        chk.tick()
        m = 0
        for s in succs[v]:
            m |= desc[s] | (1 << s)
        desc[v] = m
    return anc, desc, succs


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _producers(p: Problem) -> list[int]:
    prod = [-1] * len(p.size)
    for v, ts in enumerate(p.creates):
        for t in ts:
            prod[t] = v
    return prod


class _Ctx:
    """Per-round analysis of a problem shared by all candidate checks."""

    def __init__(self, p: Problem, deadline: Deadline | None = None):
        self.p = p
        self.anc, self.desc, self.succs = closure(p, deadline)
        self.prod = _producers(p)
        self.inplace_targets = set(t for ts in p.inplace for t in ts)


@dataclass
class _Check:
    order: list[int]
    workspace: int
    rule: str
    peak: int  # relative peak (above live before)
    delta: int


def group_problem(p: Problem, ops: Sequence[int], ctx: _Ctx, coupled: str = "hi"):
    """The problem of running ``ops`` (topological) alone, right after all of their ancestors.

    Tensors read from outside are initial; they stay alive to the end when an op that is not
    an ancestor also reads them (``coupled='hi'``) or only when a descendant does / they are
    graph outputs (``coupled='lo'``: parallel readers assumed done). Tensors created for
    outside readers stay alive. Returns ``(problem, coupled tensor ids, created-for-outside)``.
    """
    ops = list(ops)
    local = {v: i for i, v in enumerate(ops)}
    umask = sum(1 << v for v in ops)
    amask = 0
    dmask = 0
    for v in ops:
        amask |= ctx.anc[v]
        dmask |= ctx.desc[v]
    amask &= ~umask
    dmask &= ~umask
    touched: dict[int, int] = {}
    for v in ops:
        for t in p.reads[v] + p.creates[v]:
            touched.setdefault(t, len(touched))
    size, initial, pinned, consumers = [], [], [], []
    coupled_ts, outs = [], []
    for t in touched:
        inside = [local[c] for c in p.consumers[t] if c in local]
        outside = p.cons_mask[t] & ~umask
        prod = ctx.prod[t]
        if prod >= 0 and prod in local:
            keep = p.pinned[t] or bool(outside)
            if keep:
                outs.append(t)
            init = False
        else:
            init = True
            par = outside & ~amask & ~dmask
            keep = p.pinned[t] or bool(outside & dmask)
            if par and not keep:
                coupled_ts.append(t)
                keep = coupled == "hi"
        size.append(p.size[t])
        initial.append(init)
        pinned.append(keep)
        consumers.append(inside)
    sub = Problem(
        n=len(ops),
        preds=[[local[u] for u in p.preds[v] if u in local] for v in ops],
        creates=[[touched[t] for t in p.creates[v]] for v in ops],
        reads=[[touched[t] for t in p.reads[v]] for v in ops],
        workspace=[p.workspace[v] for v in ops],
        inplace=[[touched[t] for t in p.inplace[v]] for v in ops],
        size=size, initial=initial, pinned=pinned, consumers=consumers, base=0,
        names=[p.names[v] if p.names else str(v) for v in ops],
    )
    return sub, coupled_ts, outs


def _entry_exit_ok(p: Problem, ops: Sequence[int], ctx: _Ctx) -> bool:
    umask = sum(1 << v for v in ops)
    ext_pred = 0
    ext_succ = 0
    sources_anc = -1
    sinks = 0
    for v in ops:
        pm = p.pred_mask[v]
        ext_pred |= pm & ~umask
        if not pm & umask:
            sources_anc &= ctx.anc[v]
        sm = 0
        for s in ctx.succs[v]:
            sm |= 1 << s
        ext_succ |= sm & ~umask
        if not sm & umask:
            sinks |= 1 << v
    if ext_pred & ~sources_anc:
        return False
    for f in _bits(ext_succ):
        if sinks & ~ctx.anc[f]:
            return False
    return True


def _ideal_dp(sub: Problem, max_ideals: int):
    """Optimal order of ``sub`` by DP over its ideals, checking the isolated-group condition.

    Returns ``(order, peak)`` or None when some proper non-empty ideal holds less memory than
    an end of the group, or there are more than ``max_ideals`` ideals."""
    n = sub.n
    full = sub.full
    g0 = sub.live(0)
    gu = sub.live(full)
    need = max(g0, gu)
    level = {0: (0, g0)}  # mask -> (peak, live)
    parent: dict[int, tuple[int, int]] = {}
    seen = 1
    for _ in range(n):
        nxt: dict[int, tuple[int, int]] = {}
        for mask, (peak, live) in level.items():
            for v in range(n):
                if mask >> v & 1 or sub.pred_mask[v] & ~mask:
                    continue
                foot, after = sub.step(mask, live, v)
                child = mask | (1 << v)
                if child != full and after < need:
                    return None
                pk = peak if peak > foot else foot
                old = nxt.get(child)
                if old is None:
                    seen += 1
                    if seen > max_ideals:
                        return None
                if old is None or pk < old[0]:
                    nxt[child] = (pk, after)
                    parent[child] = (mask, v)
        level = nxt
    order = []
    m = full
    while m:
        pm, v = parent[m]
        order.append(v)
        m = pm
    order.reverse()
    return order, level[full][0]


def check_isolated(p: Problem, ops: Sequence[int], ctx: _Ctx, max_ideals: int = 20000):
    """Theorem IV.2 (generalised): see module docstring. ``ops`` topological."""
    if len(ops) < 2 or not _entry_exit_ok(p, ops, ctx):
        return None
    sub, coupled, outs = group_problem(p, ops, ctx)
    if coupled:
        return None
    res = _ideal_dp(sub, max_ideals)
    if res is None:
        return None
    order, peak = res
    g0 = sub.live(0)
    created = sum(p.size[t] for t in outs)
    return _Check([ops[i] for i in order], peak - g0 - created, "isolated", peak - g0,
                  sub.live(sub.full) - g0)


def check_chain(p: Problem, chain: Sequence[int], ctx: _Ctx):
    """Theorem IV.1 on a linear sequence (each op's only predecessor is the previous op, whose
    only successor it is); the isolated rule is tried too. See module docstring."""
    n = len(chain)
    if n < 2:
        return None
    hi, coupled, outs = group_problem(p, chain, ctx, "hi")
    created = sum(p.size[t] for t in outs)
    local = list(range(n))
    prof_hi = hi.evaluate(local)
    g0 = prof_hi.lives[0]
    if coupled and any(t in ctx.inplace_targets for t in coupled):
        return None
    profs = [prof_hi]
    if coupled:
        lo, _, _ = group_problem(p, chain, ctx, "lo")
        profs.append(lo.evaluate(local))

    def down(pr):
        s, t = pr.steps, pr.lives
        return all(x <= s[0] for x in s) and all(t[n] <= t[k] for k in range(1, n))

    def up(pr):
        s, t = pr.steps, pr.lives
        return all(x <= s[-1] for x in s) and all(t[0] <= t[k] for k in range(1, n))

    if all(down(pr) for pr in profs):
        return _Check(list(chain), prof_hi.steps[0] - g0 - created, "chain-down",
                      prof_hi.steps[0] - g0, prof_hi.lives[-1] - g0)
    last_reads = set(p.reads[chain[-1]])
    if all(t in last_reads for t in coupled) and up(prof_hi):
        return _Check(list(chain), prof_hi.steps[-1] - g0 - created, "chain-up",
                      prof_hi.steps[-1] - g0, prof_hi.lives[-1] - g0)
    if not coupled:
        s, t = prof_hi.steps, prof_hi.lives
        if all(t[k] >= max(t[0], t[n]) for k in range(1, n)):
            pk = max(s)
            return _Check(list(chain), pk - g0 - created, "isolated", pk - g0, t[n] - g0)
    return None


# ---------------------------------------------------------------------------- candidates
def maximal_chains(p: Problem, ctx: _Ctx) -> list[list[int]]:
    """Maximal linear sequences: consecutive ops where each is the only successor of the
    previous and the previous its only predecessor."""
    n = p.n
    npred = [len(set(ps)) for ps in p.preds]
    nxt = [-1] * n
    has_prev = [False] * n
    for v in range(n):
        if npred[v] == 1:
            u = p.preds[v][0]
            if len(ctx.succs[u]) == 1:
                nxt[u] = v
                has_prev[v] = True
    chains = []
    for v in range(n):
        if has_prev[v] or nxt[v] < 0:
            continue
        c = [v]
        while nxt[c[-1]] >= 0:
            c.append(nxt[c[-1]])
        chains.append(c)
    return chains


def _dominator_regions(p: Problem, ctx: _Ctx, max_group: int) -> list[list[int]]:
    """Regions between an op and its immediate post-dominator (and dominator), with and
    without the op itself: single-entry, single-exit candidates for the isolated rule."""
    from ..dominators import immediate_dominators

    n = p.n
    src, snk = n, n + 1
    succ: list[list[int]] = [[] for _ in range(n + 2)]
    pred: list[list[int]] = [[] for _ in range(n + 2)]
    for v in range(n):
        for u in dict.fromkeys(p.preds[v]):
            succ[u].append(v)
            pred[v].append(u)
        if not p.preds[v]:
            succ[src].append(v)
            pred[v].append(src)
        if not ctx.succs[v]:
            succ[v].append(snk)
            pred[snk].append(v)
    regions: dict[int, None] = {}
    ipdom = immediate_dominators(pred, snk)
    idom = immediate_dominators(succ, src)
    pairs = []
    for v in range(n):
        j = ipdom.get(v)
        if j is not None and j < n:
            pairs.append((v, j))
        d = idom.get(v)
        if d is not None and d < n:
            pairs.append((d, v))
    for v, j in pairs:
        between = ctx.desc[v] & ctx.anc[j]
        if between.bit_count() + 1 > max_group:
            continue
        base = between | (1 << j)
        for m in (base, base | (1 << v)):
            if 2 <= m.bit_count() <= max_group:
                regions[m] = None
    return [_bits(m) for m in regions]


def find_groups(p: Problem, max_group: int = 32, max_ideals: int = 20000,
                chains: bool = True, isolated: bool = True, deadline: Deadline | None = None):
    """One round of Algorithm 1: disjoint fusable groups of ``p`` (largest first).
    ``deadline`` aborts it (`memsched.limits.Expired`)."""
    deadline = deadline or Deadline()
    deadline.check()
    ctx = _Ctx(p, deadline)
    deadline.check()
    found: list[_Check] = []
    if chains:
        for chain in maximal_chains(p, ctx):
            deadline.check()
            i = 0
            L = len(chain)
            while i < L - 1:
                got = None
                for j in range(min(L, i + max_group), i + 1, -1):
                    got = check_chain(p, chain[i:j], ctx)
                    if got is not None:
                        break
                if got is not None:
                    found.append(got)
                    i += len(got.order)
                else:
                    i += 1
    if isolated:
        regions = _dominator_regions(p, ctx, max_group)
        deadline.check()
        for region in regions:
            deadline.check()
            got = check_isolated(p, region, ctx, max_ideals)
            if got is not None:
                found.append(got)
    found.sort(key=lambda c: (-len(c.order), min(c.order)))
    used = 0
    chosen = []
    for c in found:
        m = sum(1 << v for v in c.order)
        if m & used:
            continue
        used |= m
        chosen.append(c)
    return chosen


def _place_group(p: Problem, blocks: list[list[int]], ops: list[int], rule: str):
    """One exchange step of `Simplified.canonicalize`: ``ops`` (a union of whole blocks)
    becomes one block, placed as its rule's proof places it."""
    inside = set(ops)
    idx = [k for k, b in enumerate(blocks) if b[0] in inside]
    lo, hi = idx[0], idx[-1]
    window = blocks[lo:hi + 1]
    qs = [b for b in window if b[0] not in inside]
    if rule == "chain-down":
        split = 0
    elif rule == "chain-up":
        split = len(qs)
    else:  # isolated: the Q-state of least Q memory inside the window
        touched = set(t for v in ops for t in p.reads[v] + p.creates[v])
        mask = 0
        for b in blocks[:lo]:
            for v in b:
                mask |= 1 << v
        live = p.live(mask)

        def q_mem(mask, live):
            return live - sum(p.size[t] for t in touched
                              if p._exists(t, mask) and p._live_after(t, mask))

        best, split, j = q_mem(mask, live), 0, 0
        for b in window:
            for v in b:
                _, live = p.step(mask, live, v)
                mask |= 1 << v
            if b[0] not in inside:
                j += 1
                f = q_mem(mask, live)
                if f < best:
                    best, split = f, j
    return blocks[:lo] + qs[:split] + [list(ops)] + qs[split:] + blocks[hi + 1:]


def contract(p: Problem, groups: Sequence[_Check]) -> tuple[Problem, list[list[int]]]:
    """The problem with each group replaced by one op. Returns it and, per new op, the ops of
    ``p`` it runs (in order)."""
    n = p.n
    node_ops: list[list[int]] = []
    node_ws: list[int | None] = []
    node_of = [-1] * n
    for c in groups:
        k = len(node_ops)
        node_ops.append(list(c.order))
        node_ws.append(c.workspace)
        for v in c.order:
            node_of[v] = k
    for v in range(n):
        if node_of[v] < 0:
            node_of[v] = len(node_ops)
            node_ops.append([v])
            node_ws.append(None)
    m = len(node_ops)
    # topological renumbering, smallest original op id first
    npreds: list[set[int]] = [set() for _ in range(m)]
    for k, ops in enumerate(node_ops):
        for v in ops:
            for u in p.preds[v]:
                if node_of[u] != k:
                    npreds[k].add(node_of[u])
    succ: list[list[int]] = [[] for _ in range(m)]
    for k in range(m):
        for u in npreds[k]:
            succ[u].append(k)
    indeg = [len(s) for s in npreds]
    key = [min(ops) for ops in node_ops]
    heap = [(key[k], k) for k in range(m) if indeg[k] == 0]
    heapq.heapify(heap)
    topo = []
    while heap:
        _, k = heapq.heappop(heap)
        topo.append(k)
        for s in succ[k]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (key[s], s))
    if len(topo) != m:
        raise AssertionError("contraction created a cycle (non-convex group)")
    new_id = [0] * m
    for i, k in enumerate(topo):
        new_id[k] = i
    prod = _producers(p)
    # tensors: drop those produced and entirely consumed inside one group
    keep_t = []
    for t in range(len(p.size)):
        pr = prod[t]
        if pr >= 0 and len(node_ops[node_of[pr]]) > 1 and not p.pinned[t] and \
                all(node_of[c] == node_of[pr] for c in p.consumers[t]):
            keep_t.append(False)
        else:
            keep_t.append(True)
    tid = {}
    for t, k in enumerate(keep_t):
        if k:
            tid[t] = len(tid)
    preds, creates, reads, ws, inplace, names = [], [], [], [], [], []
    for k in topo:
        ops = node_ops[k]
        preds.append(sorted(new_id[u] for u in npreds[k]))
        if len(ops) == 1:
            v = ops[0]
            creates.append([tid[t] for t in p.creates[v]])
            reads.append([tid[t] for t in p.reads[v]])
            ws.append(p.workspace[v])
            inplace.append([tid[t] for t in p.inplace[v]])
            names.append(p.names[v] if p.names else str(v))
        else:
            inside = set(ops)
            cr, rd = [], []
            for v in ops:
                cr += [tid[t] for t in p.creates[v] if keep_t[t]]
                rd += [tid[t] for t in p.reads[v] if prod[t] not in inside]
            creates.append(list(dict.fromkeys(cr)))
            reads.append(list(dict.fromkeys(rd)))
            ws.append(node_ws[k])
            inplace.append([])
            first = p.names[ops[0]] if p.names else str(ops[0])
            names.append(f"fused[{first}+{len(ops) - 1}]")
    size, initial, pinned, consumers = [], [], [], []
    for t in tid:
        size.append(p.size[t])
        initial.append(p.initial[t])
        pinned.append(p.pinned[t])
        pk = node_of[prod[t]] if prod[t] >= 0 else -1
        cons = [new_id[node_of[c]] for c in p.consumers[t] if node_of[c] != pk]
        consumers.append(list(dict.fromkeys(cons)))
    q = Problem(n=m, preds=preds, creates=creates, reads=reads, workspace=ws,
                inplace=inplace, size=size, initial=initial, pinned=pinned,
                consumers=consumers, base=p.base, names=names)
    return q, [node_ops[k] for k in topo]


# ---------------------------------------------------------------------------- driver
def simplify(p: Problem, max_group: int = 32, max_rounds: int = 50, max_ideals: int = 20000,
             chains: bool = True, isolated: bool = True,
             time_limit: float | None = None, deadline: Deadline | None = None) -> Simplified:
    """Fuse groups of ``p`` to a fixed point (Algorithm 1); the optimum is unchanged.

    Bounded by work (``max_rounds``, ``max_group``, ``max_ideals``), not by the clock: the
    result never depends on timing. ``time_limit`` / ``deadline`` abort it, and the result is
    then ``p`` unfused (``stats["aborted"]``): a partial fixed point would depend on where the
    clock stopped it."""
    t0 = time.perf_counter()
    deadline = Deadline.of(deadline, time_limit)
    try:
        return _simplify(p, max_group, max_rounds, max_ideals, chains, isolated, deadline, t0)
    except Expired:
        return Simplified(p, p, [[v] for v in range(p.n)], [], 0, time.perf_counter() - t0,
                          {"ops": p.n, "fused_ops": p.n, "rounds": 0, "fusions": {},
                           "aborted": True}, [])


def _simplify(p, max_group, max_rounds, max_ideals, chains, isolated, deadline, t0):
    # candidates are read from direct edges: implied ordering edges hide chains and regions
    cur = drop_implied_edges(p)
    members = [[v] for v in range(p.n)]
    rules = [""] * p.n
    peaks = [0] * p.n
    deltas = [0] * p.n
    rounds = 0
    fused_by_rule: dict[str, int] = {}
    history: list = []
    while rounds < max_rounds:
        groups = find_groups(cur, max_group, max_ideals, chains, isolated, deadline)
        if not groups:
            break
        rounds += 1
        for c in groups:
            fused_by_rule[c.rule] = fused_by_rule.get(c.rule, 0) + 1
        nxt, node_ops = contract(cur, groups)
        nxt = drop_implied_edges(nxt)  # contraction adds some
        deadline.check()
        history.append([([v for u in c.order for v in members[u]], c.rule) for c in groups])
        by_first = {c.order[0]: c for c in groups}
        new_members, new_rules, new_peaks, new_deltas = [], [], [], []
        for ops in node_ops:
            new_members.append([v for u in ops for v in members[u]])
            if len(ops) > 1:
                c = by_first[ops[0]]
                new_rules.append(c.rule)
                new_peaks.append(c.peak)
                new_deltas.append(c.delta)
            else:
                u = ops[0]
                new_rules.append(rules[u])
                new_peaks.append(peaks[u])
                new_deltas.append(deltas[u])
        cur, members, rules, peaks, deltas = nxt, new_members, new_rules, new_peaks, new_deltas
    groups = [FusedGroup(list(ms), rules[k], peaks[k], deltas[k])
              for k, ms in enumerate(members) if len(ms) > 1]
    return Simplified(p, cur, members, groups, rounds, time.perf_counter() - t0,
                      {"ops": p.n, "fused_ops": cur.n, "rounds": rounds,
                       "fusions": fused_by_rule}, history)

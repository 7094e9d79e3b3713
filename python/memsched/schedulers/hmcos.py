"""HMCOS: hierarchical memory-constrained operator scheduling (a fast upper bound).

Reference: Wang et al., "Hierarchical Memory-Constrained Operator Scheduling of Neural
Architecture Search Networks", DAC 2022, §3.

* **Sequences** (§3.1.1): linear runs of ops (one predecessor, one successor) cut into pieces
  whose first op has the highest stable footprint (Condition 1) and whose transient footprints
  never increase (Condition 2); a sequence is scheduled as a whole.
* **Groups** (§3.1.2): without NAS cell scopes we take the memory-aware part of the recipe:
  the ops strictly post-dominated by an op ``o`` (computed with `memsched.dominators` on the
  reversed graph) only produce values that end up in ``o``, so the group's outgoing values are
  exactly ``o``'s (condition (b) with equality); the largest such sets of at most
  ``group_size`` ops, top-down in the post-dominator tree, become groups (``o`` excluded).
* **Scheduling** (Algorithm 2): a DP over the hierarchical graph as in SERENITY, one vertex
  per transition, memoised per executed set, here with a beam of ``beam`` partial schedules
  per step (HMCOS keeps all of them; the beam bounds the time on 1000-op networks; a small
  portfolio of beams and group sizes is tried, see `hmcos_schedule`) and
  *adaptive soft budgeting* (Optimisation 1: partial schedules at or above the best peak so
  far are dropped).
* **Group schedules** are computed for the value context of the group (Optimisation 3: which
  values defined outside are terminally used inside) and memoised on it; the cheap order is
  kept when it does not lift the peak (Optimisation 2), else a bounded best-first search.
* **Iterative disassembly** (Algorithm 1): the values alive at the peak step point to their
  defining ops; the groups holding them are dissolved into their sequences and the graph is
  rescheduled, until no group is dissolved.

It is a heuristic (the orders are valid; ``lower_bound`` is only the trivial bound). Its effort
is bounded by a deterministic work budget (``max_work``: vertex evaluations plus group-search
states), never by the clock, so the same graph always gives the same order. A deadline
(`memsched.limits.Deadline`) can still abort it; the result is then the best baseline order
(what it started from: a partial HMCOS result would depend on where the clock stopped it).
"""
from __future__ import annotations

import time


from ..dominators import immediate_dominators
from ..limits import Deadline, Expired
from ..memory import Problem
from .base import bound_in_time, register
from .exact import astar
from .heuristics import best_heuristic

MAX_WORK = 100_000  # default work budget: vertex evaluations + group-search states
# (~1-3 s on 800-1400-op NAS/RandWire networks on one core)


class _OutOfWork(Exception):
    """The work budget is spent: stop after the last completed iteration."""


def _spend(stats, amount: int, deadline: Deadline) -> None:
    """Count work; raise `_OutOfWork` past the budget, `Expired` past the deadline (the clock
    is read every 256 units)."""
    before = stats["work"]
    stats["work"] = now = before + amount
    if now > stats["max_work"]:
        raise _OutOfWork()
    if now >> 8 != before >> 8:
        deadline.check()


class _Vertex:
    __slots__ = ("ops", "mask", "group", "ext_reads", "members", "memo")

    def __init__(self, ops, group, p: Problem):
        self.ops = list(ops)  # fixed order for sequences; topological for groups
        self.mask = sum(1 << v for v in ops)
        self.group = group
        self.members: list[_Vertex] = []
        seen: dict[int, None] = {}
        prod_inside = set(t for v in ops for t in p.creates[v])
        for v in ops:
            for t in p.reads[v]:
                if t not in prod_inside:
                    seen[t] = None
        self.ext_reads = list(seen)
        self.memo: dict[int, tuple[list[int], int, int, bool]] = {}


def _sequences(p: Problem, succs, region_of) -> list[list[int]]:
    """Linear runs cut at group boundaries and where HMCOS's conditions fail."""
    n = p.n
    npred = [len(set(ps)) for ps in p.preds]
    nxt = [-1] * n
    has_prev = [False] * n
    for v in range(n):
        if npred[v] == 1:
            u = p.preds[v][0]
            if len(succs[u]) == 1 and region_of[u] == region_of[v]:
                nxt[u] = v
                has_prev[v] = True
    seqs = []
    for v in range(n):
        if has_prev[v]:
            continue
        run = [v]
        while nxt[run[-1]] >= 0:
            run.append(nxt[run[-1]])
        # cut into pieces satisfying Conditions 1 and 2 (footprints of the piece alone,
        # relative to the memory live before it)
        piece: list[int] = []
        mask = live = first_s = 0
        for u in run:
            foot, after = p.step(mask, live, u)
            if piece and (foot > first_s or after > live):
                seqs.append(piece)
                piece, mask, live = [], 0, 0
                foot, after = p.step(0, 0, u)
            if not piece:
                first_s = foot
            piece.append(u)
            mask |= 1 << u
            live = after
        if piece:
            seqs.append(piece)
    return seqs


def _groups(p: Problem, succs, group_size: int) -> list[int]:
    """region id per op (-1: top level) from post-dominator subtrees."""

    n = p.n
    snk = n
    rev: list[list[int]] = [list(dict.fromkeys(p.preds[v])) for v in range(n)]  # reversed
    rev.append([v for v in range(n) if not succs[v]])
    ipdom = immediate_dominators(rev, snk)
    children: list[list[int]] = [[] for _ in range(n + 1)]
    for v in range(n):
        d = ipdom.get(v)
        if d is not None and d != v:
            children[d].append(v)
    size = [1] * (n + 1)
    order = []
    stack = [snk]
    while stack:
        v = stack.pop()
        order.append(v)
        stack.extend(children[v])
    for v in reversed(order):
        for c in children[v]:
            size[v] += size[c]
    region = [-1] * n
    rid = 0
    stack = [snk]
    while stack:
        o = stack.pop()
        inner = size[o] - 1
        if o != snk and 2 <= inner <= group_size:
            sub = [c for c in children[o]]
            while sub:
                v = sub.pop()
                region[v] = rid
                sub.extend(children[v])
            rid += 1
            continue
        stack.extend(sorted(children[o], reverse=True))
    return region


class _Hierarchy:
    def __init__(self, p: Problem, group_size: int, deadline: Deadline | None = None):
        self.p = p
        self.deadline = deadline or Deadline()
        n = p.n
        succs: list[list[int]] = [[] for _ in range(n)]
        for v in range(n):
            for u in dict.fromkeys(p.preds[v]):
                succs[u].append(v)
        region = _groups(p, succs, group_size) if group_size >= 2 else [-1] * n
        self.deadline.check()
        seqs = _sequences(p, succs, region)
        self.deadline.check()
        by_region: dict[int, list[_Vertex]] = {}
        self.top: list[_Vertex] = []
        for s in seqs:
            vx = _Vertex(s, False, p)
            r = region[s[0]]
            if r < 0:
                self.top.append(vx)
            else:
                by_region.setdefault(r, []).append(vx)
        for r, members in sorted(by_region.items()):
            ops = sorted(v for m in members for v in m.ops)
            if len(members) == 1:
                self.top.append(members[0])
                continue
            gv = _Vertex(ops, True, p)
            gv.members = members
            self.top.append(gv)
        self._fix_cycles()

    def _fix_cycles(self):
        """Dissolve groups until the vertex graph is acyclic (disjoint convex groups can
        still form a cycle together)."""
        while True:
            self.deadline.check()
            cyc = self._cycle_group()
            if cyc is None:
                return
            self.dissolve([cyc])

    def _cycle_group(self):
        p = self.p
        owner = {}
        for k, vx in enumerate(self.top):
            for v in vx.ops:
                owner[v] = k
        m = len(self.top)
        preds = [set() for _ in range(m)]
        for k, vx in enumerate(self.top):
            for v in vx.ops:
                for u in p.preds[v]:
                    if owner[u] != k:
                        preds[k].add(owner[u])
        indeg = [len(s) for s in preds]
        succ = [[] for _ in range(m)]
        for k in range(m):
            for u in preds[k]:
                succ[u].append(k)
        ready = [k for k in range(m) if indeg[k] == 0]
        seen = 0
        while ready:
            k = ready.pop()
            seen += 1
            for s in succ[k]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    ready.append(s)
        if seen == m:
            return None
        stuck = [self.top[k] for k in range(m) if indeg[k] > 0 and self.top[k].group]
        return max(stuck, key=lambda vx: len(vx.ops)) if stuck else None

    def dissolve(self, groups) -> int:
        ids = set(id(g) for g in groups)
        out, k = [], 0
        for vx in self.top:
            if id(vx) in ids and vx.group:
                out.extend(vx.members)
                k += 1
            else:
                out.append(vx)
        self.top = out
        return k


def _context(p: Problem, vx: _Vertex, mask: int) -> int:
    """Bitmask over ``vx.ext_reads``: which values are terminally used inside ``vx``."""
    key = 0
    after = mask | vx.mask
    for k, t in enumerate(vx.ext_reads):
        if not p.pinned[t] and not (p.cons_mask[t] & ~after):
            key |= 1 << k
    return key


def _run_vertex(p: Problem, vx: _Vertex, mask: int, live: int, peak_so_far: int, deadline,
                stats) -> tuple[list[int], int, int]:
    """(order, peak, live after) of running ``vx`` from ``(mask, live)``; ``peak_so_far`` is
    the peak of the partial schedule (a group order that stays below it is good enough)."""
    _spend(stats, 1, deadline)
    key = _context(p, vx, mask)
    hit = vx.memo.get(key)
    if hit is not None and (hit[3] or live + hit[1] <= peak_so_far):
        stats["memo_hits"] += 1
        return hit[0], live + hit[1], live + hit[2]
    if not vx.group:
        order, optimal = vx.ops, True
    else:
        sub, ids = p.restrict(vx.ops, mask)
        base_live = sub.initial_live()
        if hit is not None:
            local = {v: i for i, v in enumerate(ids)}
            o, pk = [local[v] for v in hit[0]], hit[1] + base_live
        else:
            o, pk, _ = best_heuristic(sub)  # Optimisation 2: the cheap order first
        optimal = False
        target = peak_so_far - (live - base_live)
        if pk > target:
            stats["group_searches"] += 1
            info: dict = {}
            o, pk, lb, st = astar(sub, (o, pk), max(0, target), deadline,
                                  max_states=stats["group_states"], info=info)
            if info["stopped"] == "time":
                raise Expired()
            _spend(stats, st, deadline)
            optimal = lb >= pk
        order = [ids[v] for v in o]
    m, lv, peak = mask, live, live
    for v in order:
        foot, lv = p.step(m, lv, v)
        m |= 1 << v
        if foot > peak:
            peak = foot
    vx.memo[key] = (order, peak - live, lv - live, optimal)
    return order, peak, lv


def _schedule_graph(p: Problem, h: _Hierarchy, beam: int, budget: int, deadline, stats):
    """Algorithm 2's ScheduleGraph with a beam; returns (order, peak) or None."""
    verts = h.top
    m = len(verts)
    owner = {}
    for k, vx in enumerate(verts):
        for v in vx.ops:
            owner[v] = k
    need = [0] * m  # vertex -> mask of vertices it waits for
    for k, vx in enumerate(verts):
        for v in vx.ops:
            for u in p.preds[v]:
                if owner[u] != k:
                    need[k] |= 1 << owner[u]
    live0 = p.initial_live()
    # state: vmask -> (peak, live, opmask, parent vmask, vertex, order)
    level = {0: (live0 if p.n == 0 else 0, live0, 0, None, -1, None)}
    history = []
    for _ in range(m):
        deadline.check()
        nxt: dict[int, tuple] = {}
        for vm, (peak, live, om, _, _, _) in level.items():
            for k in range(m):
                if vm >> k & 1 or need[k] & ~vm:
                    continue
                order, pk, after = _run_vertex(p, verts[k], om, live, peak, deadline, stats)
                pk = max(peak, pk)
                if pk >= budget and budget > 0:
                    continue
                child = vm | (1 << k)
                old = nxt.get(child)
                if old is None or (pk, after) < (old[0], old[1]):
                    nxt[child] = (pk, after, om | verts[k].mask, vm, k, order)
        if not nxt:
            return None
        if len(nxt) > beam:
            keep = sorted(nxt.items(), key=lambda kv: (kv[1][0], kv[1][1]))[:beam]
            nxt = dict(keep)
        history.append(nxt)
        level = nxt
        stats["states"] += len(nxt)
    (vm, st), = level.items()
    peak = st[0]
    orders = []
    for lvl in reversed(history):
        st = lvl[vm]
        orders.append(st[5])
        vm = st[3]
    out = [v for o in reversed(orders) for v in o]
    return out, peak


def _iterate(p: Problem, h: _Hierarchy, beam: int, done: list, deadline, stats,
             max_iterations: int):
    """Algorithm 1 on one hierarchy: schedule, dissolve the groups at the peak, repeat.
    ``done`` = [order, peak], the best result of a completed iteration, updated in place."""
    for _ in range(max_iterations):
        deadline.check()
        stats["iterations"] += 1
        res = _schedule_graph(p, h, beam, done[1], deadline, stats)
        if res is not None and res[1] < done[1]:
            done[0], done[1] = res
        best_o = done[0]
        # disassemble the groups holding values alive at the peak of the best order
        k = p.evaluate(best_o).peak_step
        mask = 0
        for v in best_o[:k]:
            mask |= 1 << v
        v = best_o[k]
        alive_prod = set(best_o[:k + 1])
        owner = {}
        for vx in h.top:
            for u in vx.ops:
                owner[u] = vx
        hit = []
        prod = p._producer()
        for t in range(len(p.size)):
            pr = prod[t]
            if pr < 0 or pr not in alive_prod:
                continue
            if p.pinned[t] or (p.cons_mask[t] & ~mask) or pr == v:
                vx = owner.get(pr)
                if vx is not None and vx.group and vx not in hit:
                    hit.append(vx)
        vx = owner.get(v)
        if vx is not None and vx.group and vx not in hit:
            hit.append(vx)
        if not hit:
            break
        stats["dissolved"] += h.dissolve(hit)
        h._fix_cycles()


def hmcos_schedule(p: Problem, time_limit: float | None = None,
                   beam: int | tuple[int, ...] = (32, 256),
                   group_size: int | tuple[int, ...] = (16, 48, 8, 24, 32),
                   group_states: int = 20000, max_iterations: int = 20,
                   max_work: int = MAX_WORK, deadline: Deadline | None = None,
                   start: tuple[list[int], int, str] | None = None):
    """HMCOS (see module docstring). Returns ``(order, peak, stats)``.

    ``beam`` and ``group_size`` may be sequences: a small portfolio, every beam with every
    group size (narrow beams first), each run budgeted by the best peak so far (adaptive soft
    budgeting across runs), until ``max_work`` is spent. Which grouping suits a network varies
    (on RandWire stages 16 or 48 ops per group beat the others by up to 20%).
    ``time_limit`` / ``deadline`` only abort (see module docstring). ``start``: the
    ``best_heuristic(p)`` result when the caller has it."""
    t0 = time.perf_counter()
    deadline = Deadline.of(deadline, time_limit)
    best_o, best, name = start if start is not None else best_heuristic(p, deadline)
    stats = {"memo_hits": 0, "group_searches": 0, "group_states": group_states, "states": 0,
             "iterations": 0, "dissolved": 0, "start": name, "start_peak": best, "runs": 0,
             "work": 0, "max_work": max_work, "stopped": "done"}
    if p.n == 0:
        return best_o, best, stats
    beams = (beam,) if isinstance(beam, int) else tuple(beam)
    sizes = (group_size,) if isinstance(group_size, int) else tuple(group_size)
    done = [best_o, best]  # the best result of a completed iteration

    try:
        for b in beams:
            for gs in sizes:
                h = _Hierarchy(p, gs, deadline)
                deadline.check()
                stats["runs"] += 1
                stats.setdefault("vertices", len(h.top))
                stats.setdefault("groups", sum(1 for vx in h.top if vx.group))
                before = done[1]
                _iterate(p, h, b, done, deadline, stats, max_iterations)
                if done[1] < before:
                    stats["best_run"] = {"beam": b, "group_size": gs}
    except _OutOfWork:
        stats["stopped"] = "work"
    except Expired:
        stats["stopped"] = "time"
        done = [best_o, best]
    stats["seconds"] = round(time.perf_counter() - t0, 3)
    return done[0], done[1], stats


@register("hmcos", "HMCOS hierarchical scheduling: sequences, dominator groups, iterative "
                   "disassembly, memoised group schedules (heuristic upper bound)")
def hmcos(p: Problem, time_limit: float | None = 10.0, progress=False,
          beam: int | tuple[int, ...] = (32, 256),
          group_size: int | tuple[int, ...] = (16, 48, 8, 24, 32), max_work: int = MAX_WORK,
          deadline: Deadline | None = None, **_):
    order, peak, stats = hmcos_schedule(p, time_limit, beam, group_size, max_work=max_work,
                                        deadline=deadline)
    return order, bound_in_time(p, deadline), False, stats

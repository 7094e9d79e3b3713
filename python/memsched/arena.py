"""Arena offset assignment: place tensors with known lifetimes in one memory arena.

The problem (the "arena size" metric of HMCOS §5, the static memory planners of TFLite/TFLM):
given tensors ``i`` with a byte size and a lifetime ``[start, end]`` (inclusive steps of a fixed
schedule), choose byte offsets so that two tensors whose lifetimes overlap never overlap in
memory, minimising the arena size ``max(offset + size)``. It is a 2-D strip-packing problem
with fixed x-positions (dynamic storage allocation, NP-hard); its lower bound is the maximum
over time of the live bytes, which token-reuse planners such as TVM's StaticPlanBlockMemory
often miss because they never place a tensor at a non-zero offset inside another's storage.

Pure Python (OR-Tools only for the exact method); no TVM.

* `plan_greedy`: greedy by size with best-fit gaps: take tensors largest first; put each in the
  smallest gap between the already placed tensors that overlap it in time (lowest offset on
  ties), else on top of them. Tried with several orderings (size with three tie-breaks, area,
  duration, start, greedy by breadth) and at the bottom or the top of the chosen gap, until
  one reaches the lower bound; best kept. Reached the bound on most networks measured.
* `plan_cpsat`: exact CP-SAT (NoOverlap2D over (time, memory) rectangles, greedy as hint) with a
  time limit. The instance is first split where no lifetime crosses a time step (the parts are
  independent; the arena is the largest part), and parts whose greedy arena is already within
  the global lower bound are not solved. Proves the minimum arena for the given lifetimes when
  it finishes in time.
* exact (`plan_exact` over `memsched.packing.pack`, native): a MiniMalloc-class canonical search
  (ASPLOS'23 ideas) that proves the liveness peak where it can be packed, anytime otherwise.
* `plan`: ``method="greedy" | "exact" | "cpsat" | "auto"`` (exact, cpsat and auto: greedy,
  then the search only when greedy is above the lower bound; auto = exact, or CP-SAT when the
  native core is not built).

All sizes are rounded up to ``alignment`` and every offset is a multiple of it (TVM's VM only
hands a kernel a zero-copy tensor at an offset that is a multiple of 64 bytes).
"""
from __future__ import annotations

import math
import time
from typing import Iterable, Sequence

from .arena_greedy import (GREEDY_ORDERS, _breadth_order, _conflicts,  # noqa: F401
                           _greedy_place, plan_greedy)
from .arena_problem import ArenaPlan, Lifetime, align_up, max_live, verify  # noqa: F401
from .arena_problem import check_alignment as _check_alignment
from .arena_problem import normalise as _normalise

__all__ = ["Lifetime", "ArenaPlan", "plan", "plan_greedy", "plan_cpsat", "max_live",
           "verify", "align_up", "stacked_offsets", "align_equal", "METHODS", "GREEDY_ORDERS"]

METHODS = ("greedy", "exact", "cpsat", "auto")


# --------------------------------------------------------------------------------------------
# exact (CP-SAT)


def _components(lts: list[Lifetime]) -> list[list[int]]:
    """Split into groups of tensors separable in time: no lifetime crosses from one group into
    the next, so each group can be packed on its own from offset 0."""
    order = sorted(range(len(lts)), key=lambda i: (lts[i].start, lts[i].end))
    groups: list[list[int]] = []
    reach = None
    for i in order:
        if reach is None or lts[i].start > reach:
            groups.append([])
            reach = lts[i].end
        groups[-1].append(i)
        reach = max(reach, lts[i].end)
    return groups


def _solve_group(lts, units, idx, hint, upper, target, time_limit, workers, seed):
    """CP-SAT on one group (sizes in alignment units). Returns (arena, offsets by idx order,
    proven bound, status name)."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    ub = upper
    arena = m.NewIntVar(max(target, max(units[i] for i in idx)), ub, "arena")
    # time compressed to the group's event points (same overlaps, small domains)
    rank = {t: k for k, t in enumerate(sorted({lts[i].start for i in idx} |
                                              {lts[i].end + 1 for i in idx}))}
    xs, ys, offs = [], [], []
    for i in idx:
        lt, s = lts[i], units[i]
        o = m.NewIntVar(0, ub - s, f"o{i}")
        offs.append(o)
        x0 = rank[lt.start]
        xs.append(m.NewFixedSizeIntervalVar(x0, rank[lt.end + 1] - x0, f"t{i}"))
        ys.append(m.NewFixedSizeIntervalVar(o, s, f"m{i}"))
        m.Add(o + s <= arena)
        m.AddHint(o, hint[i])
    m.AddNoOverlap2D(xs, ys)
    m.Minimize(arena)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, float(time_limit))
    solver.parameters.num_search_workers = max(1, int(workers))
    solver.parameters.random_seed = int(seed)
    status = solver.Solve(m)
    name = solver.StatusName(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, None, target, name
    bound = int(solver.BestObjectiveBound())
    return (int(solver.Value(arena)), [int(solver.Value(o)) for o in offs],
            bound if status != cp_model.OPTIMAL else int(solver.Value(arena)), name)


def plan_cpsat(lifetimes: Iterable, alignment: int = 64, time_limit: float = 10.0,
               workers: int = 1, seed: int = 0, initial: ArenaPlan | None = None) -> ArenaPlan:
    """Exact packing with CP-SAT under ``time_limit`` seconds (whole instance), warm-started
    from the greedy plan (or ``initial``). Never worse than the warm start; ``optimal`` is True
    when the arena is proven minimal for these lifetimes and alignment."""
    t0 = time.perf_counter()
    lts = _normalise(lifetimes)
    _check_alignment(alignment)
    start = initial if initial is not None else plan_greedy(lts, alignment)
    if start.alignment != alignment and lts:
        raise ValueError("initial plan has a different alignment")
    # the model counts in units of the common divisor of the aligned sizes and the warm start's
    # offsets (CP-SAT's results depend strongly on the scale it is given)
    a = alignment
    offsets = list(start.offsets)
    g = 0
    for v in [align_up(lt.size, a) for lt in lts] + offsets:
        g = math.gcd(g, int(v))
    u = max(a, g)  # a multiple of a (every aligned size and offset is)
    units = [align_up(lt.size, a) // u for lt in lts]
    lb_global = max_live(lts, a)
    stats = {"greedy": start.arena, "groups": 0, "solved": 0, "status": []}
    if start.arena <= lb_global or not lts:
        return ArenaPlan(start.arena, offsets, lb_global, True, "cpsat", a, max_live(lts),
                         time.perf_counter() - t0, {**stats, "skipped": "greedy optimal"})
    target = -(-lb_global // u)
    groups = _components([lt for lt in lts])
    stats["groups"] = len(groups)
    # per group: arena from the warm start (offsets rebased: a group starts at 0 anyway since
    # greedy never stacks on tensors of another group) and its own lower bound
    info = []
    for g in groups:
        g_arena = max((offsets[i] // u + units[i] for i in g), default=0)
        info.append((g_arena, g))
    deadline = t0 + time_limit
    proven = target
    open_groups = sorted((x for x in info if x[0] > target), key=lambda x: -x[0])
    for k, (g_arena, g) in enumerate(open_groups):
        left = deadline - time.perf_counter()
        if left <= 0.01:
            proven = max(proven, -(-max_live([lts[i] for i in g], a) // u))
            stats["status"].append("NOT_RUN")
            continue
        share = left / (len(open_groups) - k)
        hint = {i: offsets[i] // u for i in g}
        res_arena, res_offs, bound, status = _solve_group(
            lts, units, g, hint, g_arena, target, share, workers, seed)
        stats["solved"] += 1
        stats["status"].append(status)
        if res_arena is not None and res_arena <= g_arena:
            for i, o in zip(g, res_offs):
                offsets[i] = o * u
            g_arena = res_arena
        proven = max(proven, min(bound, g_arena))
    arena = max((o + align_up(lt.size, a) for o, lt in zip(offsets, lts)), default=0)
    lower = max(lb_global, proven * u)
    lower = min(lower, arena)
    return ArenaPlan(arena, offsets, lower, arena <= lower, "cpsat", a, max_live(lts),
                     time.perf_counter() - t0, stats)


def plan_exact(lifetimes: Iterable, alignment: int = 64, time_limit: float = 10.0,
               initial=None, max_nodes: int | None = None, workers: int = 1, seed: int = 0):
    """`memsched.arena` front: lifetimes with inclusive ends -> `memsched.arena.ArenaPlan`
    (method "exact"). ``initial``: an `ArenaPlan` (default: the greedy plan); the result is
    never worse than it. Without the native core: CP-SAT (`plan_cpsat`, which alone uses
    ``workers`` and ``seed``)."""
    from .packing import native_available, pack, too_large

    t0 = time.perf_counter()
    lts = _normalise(lifetimes)
    start = initial if initial is not None else plan_greedy(lts, alignment)
    lb0 = max_live(lts, alignment)
    if start.arena <= lb0 or not lts:
        return ArenaPlan(start.arena, list(start.offsets), lb0, True, "exact", alignment,
                         max_live(lts), time.perf_counter() - t0,
                         {"greedy": start.arena, "skipped": "greedy optimal"})
    why = too_large([(lt.start, lt.end + 1) for lt in lts if lt.size])
    if why is not None:  # left to greedy (the search's memory grows with these)
        return ArenaPlan(start.arena, list(start.offsets), lb0, False, "exact", alignment,
                         max_live(lts), time.perf_counter() - t0,
                         {"greedy": start.arena, "skipped": why})
    if not native_available():
        p = plan_cpsat(lts, alignment, time_limit=time_limit, workers=workers, seed=seed,
                       initial=start)
        p.stats["fallback"] = "native packer unavailable: CP-SAT"
        return p
    r = pack([(lt.start, lt.end + 1, lt.size) for lt in lts], None, time_limit, alignment,
             initial=start.offsets, max_nodes=max_nodes)
    if r.arena < 0 or r.arena > start.arena:  # cannot happen: the search starts from it
        offsets, arena_b = list(start.offsets), start.arena
    else:
        offsets, arena_b = r.offsets, r.arena
    lower = max(lb0, r.lower_bound)
    lower = min(lower, arena_b)
    return ArenaPlan(arena_b, offsets, lower, arena_b <= lower, "exact", alignment,
                     max_live(lts), time.perf_counter() - t0,
                     {"greedy": start.arena, "nodes": r.nodes, "stop": r.stop,
                      "unit": r.stats.get("unit")})




def plan(lifetimes: Iterable, method: str = "greedy", alignment: int = 64,
         time_limit: float = 10.0, **options) -> ArenaPlan:
    """Offsets for ``lifetimes`` (iterable of `Lifetime` or (size, start, end) tuples).

    ``method``: ``"greedy"`` (fast default), ``"exact"`` (`plan_exact`: `memsched.packing`'s
    MiniMalloc-class canonical search, anytime under ``time_limit``, greedy warm start),
    ``"cpsat"`` (CP-SAT under ``time_limit``, greedy warm start) or ``"auto"`` (greedy; when
    it is above the lower bound, the exact packer - CP-SAT when the native core is missing).
    """
    if method not in METHODS:
        raise ValueError(f"unknown arena method {method!r}; choose one of {METHODS}")
    lts = _normalise(lifetimes)
    if method == "greedy":
        return plan_greedy(lts, alignment, **options)
    if method == "cpsat":
        return plan_cpsat(lts, alignment, time_limit=time_limit, **options)
    p = plan_exact(lts, alignment, time_limit=time_limit, **options)
    if method == "auto":
        p.stats["method"] = p.method
        p.method = "auto"
    return p


def stacked_offsets(groups: Sequence[Sequence[int]], group_sizes: Sequence[int],
                    n: int, alignment: int = 64) -> tuple[int, list[int]]:
    """Offsets that stack whole storages on top of each other (what a token-reuse plan such
    as StaticPlanBlockMemory's amounts to): tensor ``i`` of group ``k`` at the group's base."""
    offsets = [0] * n
    base = 0
    for members, size in zip(groups, group_sizes):
        for i in members:
            offsets[i] = base
        base += align_up(size, alignment)
    return base, offsets



def align_equal(lifetimes: Sequence[Lifetime], offsets: Sequence[int], keys: Sequence,
                arena: int, fixed: Iterable[int] = (), rounds: int = 3,
                tries: int = 16) -> list[int]:
    """A packing in which buffers of equal ``keys`` share offsets where they can, the arena
    no larger: each buffer (earliest first; not those in ``fixed``) moves to the offset of an
    earlier buffer with its key (the most shared offset first) when the buffers it overlaps
    in time there can move out of its way (each to an offset of an earlier buffer with its own
    key, else the lowest of ``tries`` candidate offsets where it fits); up to ``rounds``
    passes, until nothing moves. Every step keeps the packing valid (`verify`), so the result
    is.

    Why: a runtime that describes each buffer by a record (ExecuTorch: one tensor value per
    buffer) can share one record between buffers that are equal and at the same place at
    disjoint times (`memsched.executorch.plan.share`); the copies of an operator that a
    patch-based schedule runs once per patch are such buffers, at whatever offsets the
    packer left them. ``keys[i]``: what must be equal (None: never moved to share, but it
    may move out of another buffer's way); ``fixed``: buffers that stay where they are."""

    lts = list(lifetimes)
    out = list(offsets)
    fixed = set(fixed)
    adj = _conflicts(lts)
    order = sorted(range(len(lts)), key=lambda i: (lts[i].start, lts[i].end, i))

    def in_way(k: int, off: int) -> list[int] | None:
        """Buffers in the way of ``k`` at ``off`` (None: off the arena)."""
        size = lts[k].size
        if off < 0 or off + size > arena:
            return None
        return [j for j in adj[k] if off < out[j] + lts[j].size and out[j] < off + size]

    where: dict = {}  # (key, offset) -> buffers there, all of them
    for i, k in enumerate(keys):
        if k is not None:
            where[k, out[i]] = where.get((k, out[i]), 0) + 1

    def put(x: int, off: int) -> None:
        if keys[x] is not None:
            where[keys[x], out[x]] -= 1
            where[keys[x], off] = where.get((keys[x], off), 0) + 1
        out[x] = off

    def relocate(x: int, places: dict) -> bool:
        """Move blocker ``x`` where it fits (an offset of its key first, then the lowest),
        unless it shares its place with an equal buffer (moving it would undo that)."""
        if x in fixed or (keys[x] is not None and where[keys[x], out[x]] > 1):
            return False
        ends = sorted({0} | {out[j] + lts[j].size for j in adj[x]})
        for off in [*sorted(places.get(keys[x], {}), key=lambda o: -places[keys[x]][o]),
                    *ends[:tries]]:
            if off != out[x] and in_way(x, off) == []:
                put(x, off)
                return True
        return False

    for _ in range(rounds):
        moved = 0
        seen: dict = {}  # key -> {offset: buffers there}
        for k in order:
            key = keys[k]
            if key is None:
                continue
            places = seen.setdefault(key, {})
            if k not in fixed and out[k] not in places:
                for off in sorted(places, key=lambda o: (-places[o], o))[:3]:
                    got = in_way(k, off)
                    if got is None or any(j in fixed for j in got):
                        continue
                    old = {j: out[j] for j in got}
                    was = out[k]
                    put(k, off)
                    if all(relocate(j, seen) for j in got) and in_way(k, off) == []:
                        moved += 1
                        break
                    put(k, was)  # undo
                    for j, o in old.items():
                        put(j, o)
            places[out[k]] = places.get(out[k], 0) + 1
        if not moved:
            break
    return out

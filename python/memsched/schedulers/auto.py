"""``auto``: the cheapest route to a proof of optimality for each part of the graph.

Pipeline (each stage optional, for ablations):

1. **fuse** (`memsched.simplify`, ILP-fusion §IV-B): contract fusable groups; the optimum is
   unchanged, every fused order expands to an original order of the same peak.
2. **divide** at cut points (`exact.cut_segments`): the peak is the maximum over segments,
   each segment is an independent sub-problem; the largest trivial bound over segments is a
   global lower bound (the *target*): a segment whose order stays at or below it is done.
3. per segment, hardest first, until its peak meets the target or its own proven bound:
   a **quick A\\*** (``QUICK_ASTAR_STATES`` states with the C++ kernel, forward and then
   backward from the schedule's end; ``QUICK_ASTAR_PY_STATES`` with Python, forward; the C++
   kernel is loaded for it when that is cheap, `memsched.native.cheap_to_load`, and always
   without a time limit) on the open
   segments, which proves NAS cells and RandWire-WS-1/2/3's random stages before the min-cut
   bound or HMCOS would have started (run again after the min-cut bound where that raised a
   segment's bound); the best baseline order, of the segment and of the whole original
   problem (mapped into the fused problem by `Simplified.canonicalize`); **HMCOS** on the
   original problem and on large segments for better upper bounds; then the proof: with the
   C++ kernel (loaded when TVM is, or when at least ``NATIVE_LOAD_MIN_LIMIT`` s are left) the
   best-first **A\\*** searches from both ends, resumed turn after turn, and **CP-SAT**
   (`ilp`) in alternating turns that double (`_interleave`: the time to a proof depends on the
   segment, not on the time limit); with the Python kernel (`exact.astar`), or
   ``interleave=False`` (ablation), A* for ``astar_share`` of the segment's time, then CP-SAT
   for the rest. Every proven segment bound raises the target for the others.
4. the order is expanded back to the original ops and compared with the baselines on the
   original problem (which see orders the fused problem cannot express).

Cheap bounds first (`memsched.schedulers.bounds`): right after the baselines of the original
problem, the trivial bound and then the ancestry bound; when the best baseline meets one, the
call returns at once (``early_stop``: no fusion, no search). Each segment gets both too, and
the segments whose peak is still above the global target the **min-cut** bound (one max-flow
per op, ops with the largest ancestry bound first, stopping when it meets the segment's
peak) after the quick A* and before HMCOS or the full search, then **branching** on
precedences under min-cut bounds (`bounds.branch_cut_bound` on segments of at most
``BRANCH_MAX_OPS`` ops, ``branch_share`` of the time left, at most ``BRANCH_MAX_NODES`` nodes per
segment): a segment whose order is already proven is never searched, and the A* of
an open segment gets its proven bound as target. ``strong_bounds=False`` keeps the trivial
bound only (ablation).

``stats``: ``proof`` names the technique that proved the segment holding the peak
(``bound``: the heuristic met the trivial bound, ``ancestry`` / ``mincut`` / ``branchcut``:
those bounds, ``hmcos``, ``astar``, ``cpsat``), or ``None`` with ``gap`` > 0;
``lower_bounds``: the bound of the original problem and the best segment bound, each with its
technique; ``mincut_seconds``, ``branchcut_seconds``, ``branchcut_nodes``; ``proved_by`` counts
segments per technique; ``fused_ops``, ``segments``,
``largest_segment``, ``states`` (A*), ``cpsat_variables`` and the time of each stage.

Limits (`memsched.limits`): one `Deadline` for the whole call; stages get shares of what is
left (HMCOS on the whole problem half, each segment's HMCOS a third, the proof the rest;
without interleaving A* ``astar_share`` of the segment's time, CP-SAT the rest). Fusion,
baselines and HMCOS are bounded by work, never by
the clock; a stage the deadline aborts contributes nothing (the result falls back to the last
completed stage, at worst the best baseline of the original problem). A* returns a new order
only when it completes; CP-SAT keeps its order only when it proves it (or stops on
``deterministic_time``). So the order is a function of the input and of which stages
completed, and runs whose searches were all cut give the same heuristic order whatever their
time limits. ``memory_limit`` caps what each A* may hold (bytes). CP-SAT runs one worker with a
fixed ``seed``. ``max_states`` caps each segment's A* (states): with ``time_limit=None``,
``cpsat=False`` and ``interleave=False`` every stage is then bounded by work alone, and the
result is the same on an idle and on a loaded machine (how the patch search prices candidates,
`memsched.patches.budget`).

``segment_optimal=True`` proves every segment's own optimum (a per-segment memory profile that
is optimal everywhere, and a harder benchmark than the global peak, which on ImageNet networks
usually sits in the stem and is proven by the trivial bound alone).
"""
from __future__ import annotations

import time

from ..limits import Deadline, Expired
from ..memory import Problem
from ..simplify.symmetry import break_symmetry
from .base import register, trivial_bound
from .bounds import (MAX_OPS as ANCESTRY_MAX_OPS, MINCUT_MAX_OPS, ancestry_bound,
                     branch_cut_bound, mincut_bound)
from .exact import astar, cut_segments
from .heuristics import best_heuristic
from .hmcos import MAX_WORK

HMCOS_MIN_OPS = 24  # smaller segments: baselines + A* are cheaper than building a hierarchy
CPSAT_MAX_VARS = 400_000  # estimated Booleans above which CP-SAT is not attempted
SEGMENT_HMCOS_WORK = MAX_WORK // 2  # HMCOS work budget per fused segment
# Branching min-cut bounds run before HMCOS and the searches, so they must be cheap when they
# fail: at most BRANCH_SHARE of the time left, BRANCH_MAX_NODES nodes (n max-flows each) and
# BRANCH_STALL expansions without progress per segment, and only on segments of at most
# BRANCH_MAX_OPS fused ops. Measured: the proofs they find take 5-9 nodes (DenseNet blocks
# rewritten by RewriteConcatConv, random cells); on RandWire stages they found nothing in
# hundreds of nodes.
# The quick A* before the min-cut bound and HMCOS: ~0.2 s with either kernel (the C++ one
# expands ~1M states/s, Python ~20k/s). RandWire-WS-2's random stage needs 57k states, where
# the min-cut and branching bounds and HMCOS then spend 1.5 s without a proof.
QUICK_ASTAR_STATES = 200_000  # C++ kernel
QUICK_ASTAR_PY_STATES = 5_000  # Python kernel
# From this many fused ops a segment's quick A* loads the C++ kernel first when that is cheap:
# the Python kernel's 5k states on AmoebaNet-A CIFAR's 366-op segment (ExecuTorch's model) took
# 0.6 s and proved nothing, loading the C++ kernel with torch hidden 0.16 s
QUICK_NATIVE_MIN_OPS = 64
BRANCH_SHARE = 0.15
BRANCH_MIN_SECONDS = 0.5  # ... but at least this much when the limit allows
MINCUT_TOP = 96  # min-cut bound per segment: the ops with the largest ancestry bounds only
BRANCH_MAX_NODES = 24
BRANCH_STALL = 8
BRANCH_MAX_OPS = 160


def _estimate_vars(p: Problem) -> int:
    from .ilp import windows

    lo, hi = windows(p)
    return 2 * sum(h - lo_v + 1 for lo_v, h in zip(lo, hi))


# The interleaved proof (`_interleave`): A*'s first turn, doubled every round, and CP-SAT's turn
# as a share of A*'s.
TURN_SECONDS = 0.25
CPSAT_TURN_SHARE = 1.0
CPSAT_BUILD_SECONDS_PER_VAR = 30e-6  # building the model: 0.54 s for 20k Booleans (measured)

NATIVE_LOAD_MIN_LIMIT = 5.0  # seconds left from which loading the native kernel (~1.2 s) pays off


def _native_astar(load: bool):
    """The C++ A* kernel when it is loaded cheaply (TVM already imported, as inside a pass)
    or ``load`` is set; None when unavailable."""
    import sys

    if not load and "tvm_ffi" not in sys.modules:
        return None
    from . import native_exact

    return native_exact.astar if native_exact.available() else None


class _Kernel:
    """Which A* runs: the C++ kernel when loaded (or worth loading: its library imports
    tvm_ffi, which imports torch unless torch is hidden, `memsched.native.cheap_to_load`: ~1.2 s
    or ~0.16 s once per process), else the Python reference. ``cheap``: loading costs a fraction
    of a second, so a search that is not quick loads it right away."""

    def __init__(self, native: bool | None, deadline: Deadline):
        from .. import native as native_lib

        self.fast = None
        self.may_load = False
        self.cheap = False
        if native:
            self.fast = _native_astar(True)
            if self.fast is None:
                raise RuntimeError("native=True but libmemsched_native is not available")
        elif native is None:
            left = deadline.remaining()
            # no clock (a call bounded by work alone): the C++ kernel whenever it is built, so
            # the order does not depend on what the process imported or loaded before
            self.fast = _native_astar(left is None)
            self.cheap = native_lib.cheap_to_load()
            self.may_load = self.fast is None and (left is None or self.cheap or
                                                   left >= NATIVE_LOAD_MIN_LIMIT)

    @property
    def strong(self) -> bool:
        return self.fast is not None or self.may_load


def _astar_stage(sub: Problem, upper, target: int, deadline: Deadline, kernel: _Kernel,
                 on_progress, memory_limit, max_states: int | None = None):
    """A* on one segment: the native kernel if available; else the Python search, and if that
    has not finished after a tenth of the budget, the native kernel when it may be loaded (and
    enough time is left to pay for loading it). ``max_states``: a work cap (None: none)."""
    if kernel.fast is not None:
        return kernel.fast(sub, upper, target, deadline, max_states=max_states,
                           memory_limit=memory_limit)
    if kernel.may_load and kernel.cheap:
        kernel.fast = _native_astar(True)
        kernel.may_load = False
        if kernel.fast is not None:
            return kernel.fast(sub, upper, target, deadline, max_states=max_states,
                               memory_limit=memory_limit)
    first = deadline
    left = deadline.remaining()
    if kernel.may_load and left is not None:
        first = deadline.cap(max(0.5, 0.1 * left))
    info: dict = {}
    o, pk, lb, st = astar(sub, upper, target, first, on_progress, max_states=max_states,
                          memory_limit=memory_limit, info=info)
    if lb >= pk or first is deadline or info["stopped"] != "time":
        return o, pk, lb, st
    left = deadline.remaining()
    if left is not None and left < NATIVE_LOAD_MIN_LIMIT / 2:
        kernel.may_load = False
    if kernel.may_load:
        kernel.fast = _native_astar(True)
        kernel.may_load = False
    if deadline.remaining() is not None and deadline.remaining() <= 0.05:
        return o, pk, lb, st
    if kernel.fast is not None:
        o2, pk2, lb2, st2 = kernel.fast(sub, (o, pk), target, deadline, max_states=max_states,
                                        memory_limit=memory_limit)
    else:
        o2, pk2, lb2, st2 = astar(sub, (o, pk), target, deadline, on_progress,
                                  max_states=max_states, memory_limit=memory_limit)
    return o2, pk2, max(lb, lb2), st + st2


def _native_session(kernel: _Kernel) -> bool:
    """True when the resumable C++ A* can run (loading the kernel now when `_Kernel` found
    that worth it: cheap, or enough time left)."""
    if kernel.fast is None and kernel.may_load:
        kernel.fast = _native_astar(True)
        kernel.may_load = False
    return kernel.fast is not None


def _interleave(s: dict, sub: Problem, target: int, deadline: Deadline, memory_limit,
                cp_opts: dict) -> dict:
    """Prove segment ``s``: the C++ A* from both ends of the schedule (two resumable searches,
    never restarted: forward over the sets of ops run, backward over the sets not yet run) and
    CP-SAT, in alternating turns. Each A* direction's turn is ``TURN_SECONDS``, doubling every
    round; CP-SAT (which restarts each turn from the best order) gets a turn of
    ``CPSAT_TURN_SHARE`` of one A* turn whenever its time so far, its model's build (estimated
    before it exists) and that turn fit in that share of A*'s time so far: a large model is not
    built before A* has had several times its cost. So whichever technique proves the segment
    does so after a time that depends on the segment, not on the time limit: with the earlier
    fixed split a larger limit gave A* a larger first share, and an Inception-style graph took
    44.6 s at a 60 s limit for a proof CP-SAT finds in 1.7 s. The two directions' state spaces
    can differ by orders of magnitude (RandWire-WS-1's first stage: 22.8M states forward, 132k
    backward), and which is smaller is not known in advance. An A* direction leaves the
    rotation when it stops for memory (each gets half of ``memory_limit``); each result
    tightens the others (bound as target, order as upper bound and CP-SAT's hint). Returns the
    time spent."""
    from .. import native
    from .ilp import CpsatTurns

    took = {"astar": 0.0, "cpsat": 0.0, "states": 0, "variables": 0, "turns": 0}
    cp = CpsatTurns(sub, (s["order"], s["peak"]), max(target, s["lb"]), **cp_opts)
    build_guess = CPSAT_BUILD_SECONDS_PER_VAR * _estimate_vars(sub)
    turn = TURN_SECONDS
    half = None if memory_limit is None else memory_limit // 2
    upper = (s["order"], s["peak"])
    with native.AstarSession(sub, upper, target) as fwd, \
            native.AstarSession(sub, upper, target, backward=True) as bwd:
        searches = [fwd, bwd]
        states = [0, 0]
        while s["by"] is None and not deadline.expired():
            took["turns"] += 1
            for i, search in enumerate(searches):
                if search is None or s["by"] is not None or deadline.expired():
                    continue
                t = time.perf_counter()
                left = deadline.remaining()
                r = search.run(time_limit=turn if left is None else min(turn, left),
                               memory_limit=half,
                               target=max(target, min(s["lb"], s["peak"])),
                               upper=(s["order"], s["peak"]), deadline=deadline)
                took["astar"] += time.perf_counter() - t
                states[i] = r.states
                _record(s, r.order, r.peak, r.lower_bound, "astar")
                if r.reason != "time":
                    searches[i] = None
            took["states"] = sum(states)
            if s["by"] is not None or deadline.expired():
                break
            astar_on = any(x is not None for x in searches)
            cp_turn = turn * CPSAT_TURN_SHARE
            cost = cp_turn + (build_guess if cp.model is None else 0.0)
            if astar_on and took["cpsat"] + cost > CPSAT_TURN_SHARE * took["astar"]:
                turn *= 2  # CP-SAT's turn waits until A* has had its share
                continue
            t = time.perf_counter()
            o, pk, lb, st = cp.turn(deadline.cap(cost) if astar_on else deadline)
            took["cpsat"] += time.perf_counter() - t
            took["variables"] = st.get("variables", 0)
            _record(s, o, pk, lb, "cpsat")
            if not astar_on and not str(st.get("status", "")).endswith("(clock)"):
                break  # CP-SAT alone, and it stopped for another reason than its clock
            turn *= 2
    return took


def _seed_segments(order, simp, subs, deadline: Deadline) -> None:
    """Improve each segment's order with the corresponding piece of ``order`` (an order of
    the original problem): made fusion-compatible by `Simplified.canonicalize` (peak no
    higher), mapped to fused ops, cut into segments (every topological order runs each segment
    contiguously). All or nothing: the deadline may abort it before any segment changes."""
    if simp is not None:
        node_of = {}
        for k, ms in enumerate(simp.members):
            for v in ms:
                node_of[v] = k
        fused = []
        for v in simp.canonicalize(order, deadline):
            k = node_of[v]
            if not fused or fused[-1] != k:
                fused.append(k)
        order = fused
    pos = {v: i for i, v in enumerate(order)}
    better = []
    for s in subs:
        deadline.check()
        local = s["sym"].canonical(sorted(range(len(s["ids"])),
                                          key=lambda i: pos[s["ids"][i]]))
        pk = s["sub"].evaluate(local).peak
        if pk < s["peak"]:
            better.append((s, local, pk))
    for s, local, pk in better:
        s["order"], s["peak"] = local, pk


def _record(s: dict, order, peak: int, lower: int, by: str) -> None:
    """A search's result on segment ``s``: a better order, a better bound (credited to ``by``),
    and ``by`` as its proof when the two meet."""
    if peak < s["peak"]:
        s["order"], s["peak"] = order, peak
    if lower > s["lb"]:
        s["lb"], s["lb_by"] = lower, by
    if s["lb"] >= s["peak"]:
        s["by"] = by


def _segments(p: Problem, fuse: bool, divide: bool, deadline: Deadline, stats: dict,
              strong_bounds: bool = True):
    """Stage 1-2: fuse, cut, seed each segment with its best baseline. Returns ``(simp, q,
    segs, subs)``; raises `Expired` (nothing partial survives)."""
    simp = None
    q = p
    deadline.check()
    if fuse and p.n > 2:
        from ..simplify import simplify

        simp = simplify(p, deadline=deadline)
        deadline.check()  # an aborted fusion returns p unfused: treat as aborted
        q = simp.problem
        stats["fusion_seconds"] = round(simp.seconds, 3)
    segs = cut_segments(q, deadline) if divide else ([list(range(q.n))] if q.n else [])
    subs = []
    before = 0
    for seg in segs:
        deadline.check()
        sub, ids = q.restrict(seg, before)
        before |= sum(1 << v for v in seg)
        # interchangeable chains (a patch grid's interior patches) ordered: the same optimum,
        # a fraction of the search's states; orders from outside go through `canonical`
        sub, sym = break_symmetry(sub)
        o, pk, _ = best_heuristic(sub, deadline, partial=False)
        lb, lb_by = (_cheap_bound(sub, pk, deadline, mincut=False) if strong_bounds
                     else (trivial_bound(sub), "bound"))
        subs.append({"sub": sub, "ids": ids, "order": o, "peak": pk, "lb": lb, "lb_by": lb_by,
                     "by": None, "sym": sym})
    return simp, q, segs, subs


def _cheap_bound(p: Problem, peak: int, deadline: Deadline,
                 mincut: bool = True) -> tuple[int, str]:
    """The best of the search-free lower bounds, cheapest first, stopping as soon as one
    meets ``peak``: ``(bound, "bound")`` for the trivial bound, ``"ancestry"`` for
    `bounds.ancestry_bound` (O(n^2) bits), ``"mincut"`` for `bounds.mincut_bound` (one
    max-flow per op; with ``mincut``, up to ``MINCUT_MAX_OPS`` ops)."""
    lb = trivial_bound(p)
    if lb >= peak or p.n > ANCESTRY_MAX_OPS:
        return lb, "bound"
    a = ancestry_bound(p, deadline)
    if a > lb:
        lb, by = a, "ancestry"
    else:
        by = "bound"
    if lb >= peak or not mincut or p.n > MINCUT_MAX_OPS:
        return lb, by
    m = mincut_bound(p, deadline, goal=peak)
    return (m, "mincut") if m > lb else (lb, by)


def solve_auto(p: Problem, time_limit: float | None = 10.0, progress=False, fuse: bool = True,
               divide: bool = True, hmcos: bool = True, astar_search: bool = True,
               cpsat: bool = True, astar_share: float | None = None, workers: int = 1,
               seed: int = 0,
               native: bool | None = None, segment_optimal: bool = False,
               deterministic_time: float | None = None, deadline: Deadline | None = None,
               memory_limit: int | None = None, hmcos_work: int = MAX_WORK,
               segment_hmcos_work: int = SEGMENT_HMCOS_WORK,
               branch_share: float = BRANCH_SHARE, strong_bounds: bool = True,
               interleave: bool = True, max_states: int | None = None):
    t0 = time.perf_counter()
    deadline = Deadline.of(deadline, time_limit)
    stats: dict = {"ops": p.n}
    if deadline.expired():  # nothing fits: the input order (`schedule` evaluates it)
        stats.update(stages_cut=["all"], timed_out=True)
        return list(range(p.n)), 0, False, stats
    # 0. the best baseline of the original problem: the answer if everything else is cut
    base_o, base_pk, base_name = best_heuristic(p, deadline)
    stats["baseline"] = base_name
    # 0b. stop at once when a search-free bound proves the baseline (cheapest bound first)
    try:
        p_lb, p_by = (_cheap_bound(p, base_pk, deadline, mincut=False) if strong_bounds
                      else (trivial_bound(p), "bound"))
    except Expired:
        p_lb, p_by = trivial_bound(p), "bound"
    stats["lower_bounds"] = {"whole": p_lb, "whole_by": p_by}
    if base_pk <= p_lb:
        stats.update(early_stop=True, fused_ops=None, segments=None, largest_segment=None,
                     proof=p_by, proved_by={p_by: 1}, states=0, cpsat_variables=0, gap=0.0,
                     timed_out=False, seconds=round(time.perf_counter() - t0, 3))
        return base_o, base_pk, True, stats
    kernel = _Kernel(native, deadline) if astar_search else None
    if astar_share is None:  # the C++ A* is 10-20x faster: give it more of the budget
        astar_share = 0.7 if kernel is not None and kernel.strong else 0.25
    # 1-2. fuse and divide (all or nothing)
    try:
        simp, q, segs, subs = _segments(p, fuse, divide, deadline, stats, strong_bounds)
    except Expired:
        simp, q, segs, subs = None, p, [], []
        stats["stages_cut"] = ["segments"]
    stats["fused_ops"] = q.n
    # the global target: the best bound of the original problem or of any segment (the fused
    # problem has the same optimum), and the technique that gave it
    target, target_by = p_lb, p_by
    for s in subs:
        if s["lb"] > target:
            target, target_by = s["lb"], s["lb_by"]
    # the best baseline of the original problem, mapped into the segments (cheap, and the
    # bounds below stop as soon as they meet a segment's peak)
    if subs and any(s["peak"] > target for s in subs):
        try:
            _seed_segments(base_o, simp, subs, deadline)
        except Expired:
            stats.setdefault("stages_cut", []).append("seed")
    # a quick A* (a few states) on the open segments before the min-cut bound and HMCOS: on NAS
    # cells it proves the baseline-seeded segments in ~1k states, where HMCOS would cost seconds
    # and the min-cut bound, which proves none of them, ~0.3 s (scipy's import included)
    quick = {"seconds": 0.0, "states": 0}

    def quick_astar(target: int, target_by: str, only=None):
        t = time.perf_counter()
        if astar_search and hmcos and subs:
            for s in sorted(subs, key=lambda s: -s["peak"]):
                for attempt in range(2):
                    # the Python kernel first when the C++ one is not loaded; if that does not
                    # prove the segment and loading is cheap, the C++ one with its larger cap
                    # (on a large segment right away)
                    if s["by"] is not None or s["peak"] <= max(target, s["lb"]) or \
                            (only is not None and id(s) not in only) or deadline.expired():
                        break
                    loadable = kernel.fast is None and kernel.may_load and kernel.cheap
                    if attempt == 1 and not loadable:
                        break
                    if loadable and (attempt == 1 or s["sub"].n >= QUICK_NATIVE_MIN_OPS):
                        kernel.fast = _native_astar(True)
                        kernel.may_load = False
                        if kernel.fast is None and attempt == 1:
                            break
                    goal = max(target, min(s["lb"], s["peak"]))
                    if kernel.fast is not None:
                        # the C++ kernel also searches from the schedule's end, the two in
                        # turns: RandWire-WS-1's first stage takes 22.8M states forward, 132k
                        # backward; NASNet-A CIFAR under ExecuTorch's model 8k backward
                        from .native_exact import astar_both

                        o, pk, lb, st = astar_both(s["sub"], (s["order"], s["peak"]), goal,
                                                   deadline.share(0.5), QUICK_ASTAR_STATES,
                                                   memory_limit)
                    else:
                        o, pk, lb, st = astar(s["sub"], (s["order"], s["peak"]), goal,
                                              deadline.share(0.25), None,
                                              QUICK_ASTAR_PY_STATES, memory_limit)
                    quick["states"] += st
                    _record(s, o, pk, lb, "astar")
                if min(s["lb"], s["peak"]) > target:
                    target, target_by = min(s["lb"], s["peak"]), s["by"] or s["lb_by"]
        quick["seconds"] += time.perf_counter() - t
        return target, target_by

    target, target_by = quick_astar(target, target_by)
    # the min-cut bound on the segments still above the target, highest peak first; the quick
    # A* again where it raised a bound (a higher target is what proves NASNet-A CIFAR's cells)
    t_cut = time.perf_counter()
    raised = set()
    for s in sorted(subs, key=lambda s: -s["peak"]):
        if not strong_bounds or s["peak"] <= max(target, s["lb"]) or \
                s["sub"].n > MINCUT_MAX_OPS or deadline.expired():
            continue
        try:
            m = mincut_bound(s["sub"], deadline, goal=s["peak"], top=MINCUT_TOP)
        except Expired:
            break
        if m > s["lb"]:
            s["lb"], s["lb_by"] = m, "mincut"
            raised.add(id(s))
            if m > target:
                target, target_by = m, "mincut"
    stats["mincut_seconds"] = round(time.perf_counter() - t_cut, 3)
    if raised:
        target, target_by = quick_astar(target, target_by, raised)
    stats.update(quick_astar_seconds=round(quick["seconds"], 3),
                 quick_astar_states=quick["states"])
    # branching on precedences under min-cut bounds, a share of the time, hardest first
    # (after the quick A*: NAS cells it proves would pay for nothing here). Only small
    # segments: on NASNet-A CIFAR's 448-op segment branching reaches the optimum, but towards
    # the baseline's higher peak it cannot stop early and cost more than HMCOS + A* (measured)
    branch = {"seconds": 0.0, "nodes": 0}

    def branch_stage(lo: int, hi: int, target: int, target_by: str):
        if branch_share <= 0 or not strong_bounds:
            return target, target_by
        t = time.perf_counter()
        left_s = deadline.remaining()
        b_deadline = deadline.cap(None if left_s is None else
                                  max(BRANCH_MIN_SECONDS, branch_share * left_s))
        left = [s for s in sorted(subs, key=lambda s: -s["peak"])
                if s["by"] is None and s["peak"] > max(target, s["lb"]) and
                lo < s["sub"].n <= hi]
        for i, s in enumerate(left):
            if b_deadline.expired() or s["peak"] <= max(target, s["lb"]):
                continue
            lb, proved, nodes = branch_cut_bound(
                s["sub"], s["peak"], b_deadline.share(1 / (len(left) - i)),
                max_nodes=BRANCH_MAX_NODES, stall=BRANCH_STALL)
            branch["nodes"] += nodes
            if lb > s["lb"]:
                s["lb"], s["lb_by"] = lb, "branchcut"
                if lb > target:
                    target, target_by = lb, "branchcut"
            if proved:
                s["by"] = "branchcut"
        branch["seconds"] += time.perf_counter() - t
        return target, target_by

    target, target_by = branch_stage(1, BRANCH_MAX_OPS, target, target_by)
    # upper bounds from orders of the *original* problem (baselines, HMCOS): they can express
    # orders the fused problem cannot, and `canonicalize` maps them into it at no higher peak
    t_hmcos = 0.0
    if subs and any(s["peak"] > target and s["by"] is None for s in subs):
        seeds = []
        if hmcos and p.n >= HMCOS_MIN_OPS:
            from .hmcos import hmcos_schedule

            t = time.perf_counter()
            o, pk, hst = hmcos_schedule(p, max_work=hmcos_work, deadline=deadline.share(0.5),
                                        start=(base_o, base_pk, base_name))
            t_hmcos += time.perf_counter() - t
            stats["hmcos_stopped"] = hst["stopped"]
            if pk < base_pk:
                seeds.append(o)
        for o in seeds:
            try:
                _seed_segments(o, simp, subs, deadline)
            except Expired:
                stats.setdefault("stages_cut", []).append("seed")
                break
    stats.update(branchcut_seconds=round(branch["seconds"], 3), branchcut_nodes=branch["nodes"])
    stats["lower_bounds"].update(segments=target, segments_by=target_by)
    stats.update(segments=len(segs), largest_segment=max((len(s) for s in segs), default=0))
    states = quick["states"]
    cp_vars = 0
    t_astar = t_cpsat = 0.0
    turns = 0
    report = progress if callable(progress) else None
    # 3. hardest segments first
    glob, glob_by = target, target_by

    def goal(s):  # the bound that makes a segment done
        return s["lb"] if segment_optimal else glob

    by_peak = sorted(range(len(subs)), key=lambda k: -subs[k]["peak"])
    for passno in range(3):  # later passes get the time earlier segments did not use
        todo = [k for k in by_peak if subs[k]["by"] is None and subs[k]["peak"] > goal(subs[k])]
        if not todo or deadline.expired():
            break
        for idx, k in enumerate(todo):
            s = subs[k]
            sub = s["sub"]
            if s["peak"] <= goal(s) or deadline.expired():
                continue
            others = any(subs[j]["peak"] > goal(subs[j]) for j in todo[idx + 1:])
            seg_deadline = deadline.share(0.7) if others else deadline
            if passno == 0 and hmcos and sub.n >= HMCOS_MIN_OPS:
                from .hmcos import hmcos_schedule

                t = time.perf_counter()
                o, pk, _ = hmcos_schedule(sub, max_work=segment_hmcos_work,
                                          deadline=seg_deadline.share(1 / 3))
                t_hmcos += time.perf_counter() - t
                if pk < s["peak"]:
                    s["order"], s["peak"] = o, pk
                if s["peak"] <= goal(s):
                    s["by"] = "hmcos"
                    continue
            use_cp = cpsat and _estimate_vars(sub) <= CPSAT_MAX_VARS
            turned = astar_search and use_cp and interleave and _native_session(kernel)
            if turned:
                took = _interleave(s, sub, max(goal(s), min(s["lb"], s["peak"])),
                                   seg_deadline, memory_limit,
                                   dict(workers=workers, seed=seed,
                                        deterministic_time=deterministic_time))
                t_astar += took["astar"]
                t_cpsat += took["cpsat"]
                states += took["states"]
                cp_vars += took["variables"]
                turns = max(turns, took["turns"])
            elif astar_search:
                t = time.perf_counter()
                a_deadline = seg_deadline.share(astar_share) if cpsat else seg_deadline
                o, pk, lb, st = _astar_stage(sub, (s["order"], s["peak"]),
                                             max(goal(s), min(s["lb"], s["peak"])), a_deadline,
                                             kernel, (lambda n, k=k: report(k, len(subs),
                                                                             states + n))
                                             if report else None, memory_limit, max_states)
                t_astar += time.perf_counter() - t
                states += st
                _record(s, o, pk, lb, "astar")
            if s["by"] is None and use_cp and not seg_deadline.expired() and not turned:
                from .ilp import solve_problem

                t = time.perf_counter()
                o, pk, lb, st = solve_problem(sub, (s["order"], s["peak"]),
                                              max(goal(s), s["lb"]), None,
                                              deadline=seg_deadline, workers=workers,
                                              seed=seed, deterministic_time=deterministic_time)
                t_cpsat += time.perf_counter() - t
                cp_vars += st.get("variables", 0)
                _record(s, o, pk, lb, "cpsat")
            if min(s["lb"], s["peak"]) > glob:
                glob, glob_by = min(s["lb"], s["peak"]), s["by"] or s["lb_by"]
    target = glob
    for s in subs:
        if s["by"] is None and s["peak"] <= goal(s):
            s["by"] = s["lb_by"] if segment_optimal or s["lb"] >= s["peak"] else glob_by
    # 4. the segments' orders, or the best baseline of the original problem (which can express
    # orders the fused one cannot) when that is better
    peak = max((s["peak"] for s in subs), default=0)
    lower = min(peak, max([target] + [s["lb"] for s in subs]))
    if subs and peak <= base_pk:
        order_q = [s["ids"][v] for s in subs for v in s["order"]]
        order = simp.expand(order_q) if simp else order_q
    else:
        order, peak = base_o, base_pk
        lower = min(lower, peak) if subs else 0
    optimal = bool(subs) and peak <= lower
    if segment_optimal:
        stats["segments_proven"] = sum(1 for s in subs if s["by"] is not None)
    proof = None
    if optimal:
        top = [s for s in subs if s["peak"] == peak]
        proof = next((s["by"] for s in top
                      if s["by"] not in (None, "bound", "ancestry", "mincut")),
                     None) or (top[0]["by"] if top else "bound")
    proved: dict[str, int] = {}
    for s in subs:
        if s["by"]:
            proved[s["by"]] = proved.get(s["by"], 0) + 1
    stats["astar_kernel"] = None if kernel is None else ("native" if kernel.fast else "python")
    stats.update(proof=proof, proved_by=proved, states=states, cpsat_variables=cp_vars,
                 hmcos_seconds=round(t_hmcos, 3), astar_seconds=round(t_astar, 3),
                 cpsat_seconds=round(t_cpsat, 3), turns=turns,
                 gap=None if not subs else 0.0 if peak == 0
                 else round((peak - min(lower, peak)) / peak, 6),
                 timed_out=deadline.expired() and not optimal,
                 seconds=round(time.perf_counter() - t0, 3))
    return order, min(lower, peak), optimal, stats


@register("auto", "fuse, divide at cut points, HMCOS/baseline upper bounds, A* per segment, "
                  "CP-SAT lower bounds when A* times out (default)")
def auto(p: Problem, time_limit: float | None = 10.0, progress=False, **opts):
    return solve_auto(p, time_limit=time_limit, progress=progress, **opts)

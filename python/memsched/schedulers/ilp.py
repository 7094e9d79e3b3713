"""The scheduling ILP solved with CP-SAT (OR-Tools), with topology-aware variable pruning, and
memory-aware partitioning.

Reference: Zhong et al., "Memory-aware Scheduling for Complex Wired Networks with Iterative
Graph Optimization", ICCAD 2023: §IV-A (ILP Eq. 1-10) and §IV-C (Algorithm 2).

Formulation (time-indexed, steps ``1..n``), in the memory model of `memsched.memory`:

* ``D[i,j]`` (Boolean): op ``i`` has run by the end of step ``j``; the paper's ``O[i,j]`` is
  ``D[i,j] - D[i,j-1]``. ``D`` is non-decreasing in ``j`` and ``sum_i D[i,j] = j``: one op per
  step, each op once (Eq. 1-2). A dependency ``u -> v`` is ``D[v,j] <= D[u,j-1]`` (Eq. 3-5).
* ``T[t,j]`` (Boolean): tensor ``t`` occupies memory during step ``j``:
  ``T[t,j] >= D[producer,j] - D[c,j-1]`` for every consumer ``c`` (graph outputs:
  ``T[t,j] >= D[producer,j]``; unread tensors only during their producer's step).
* ``mem >= base + sum_t size[t] T[t,j] + sum_i workspace[i] O[i,j] - credits`` for every step
  (Eq. 6), where an op that overwrites an input in place, at the step the input dies, gets
  ``R[i,j] <= O[i,j]``, ``R[i,j] <= D[c,j-1]`` (every other reader done) worth
  ``min(size(input), size(outputs))``. Objective ``min mem``.
* **pruning** (Eq. 7-10): op ``i`` runs in steps ``[|anc(i)|+1, n-|desc(i)|]``, so ``D[i,j]`` is
  the constant 0 before and 1 after that window; a tensor can be in memory only from its
  producer's earliest step to its last reader's latest step, and *must* be from its producer's
  latest step to its readers' earliest one (constants too). Constants are substituted, never
  created as variables.

The solution is re-evaluated with `Problem.evaluate`; ``BestObjectiveBound`` is a proven lower
bound. Problems are split at cut points first (`exact.cut_segments`); a heuristic order (the
best baseline, or HMCOS when given) is the solution hint and the upper bound.

Determinism: one worker and a fixed seed (defaults) make CP-SAT deterministic as long as the
time limit does not stop it. A solve stopped by the clock contributes its proven lower bound
only; its incumbent order is dropped (it depends on where the clock stopped the search, see
`memsched.limits`). Pass ``deterministic_time`` (CP-SAT's deterministic time units): a solve it
stops keeps its incumbent, reproducibly across runs and machines.

Limits: the model is built and solved against the call's `memsched.limits.Deadline`
(``max_time_in_seconds`` = what is left; presolve overruns are stopped with ``stop_search``);
the solve runs through `memsched.limits.run_interruptible`, so Ctrl-C stops it at once
(CP-SAT's own SIGINT handler is switched off).
With several in-place candidates per op the credit may pick any dying input (the model in
`memory` takes the first): the bound stays valid, the order is re-evaluated exactly.
"""
from __future__ import annotations

import time
from typing import Sequence

from ..limits import Checker, Deadline, run_interruptible
from ..memory import Problem
from .base import bound_in_time, register, trivial_bound
from .exact import segment_problems
from .heuristics import best_heuristic


CPSAT_IMPORT_SECONDS = 1.5  # importing OR-Tools' CP-SAT: 0.5 s idle, 1.5 s on a loaded machine


def windows(p: Problem) -> tuple[list[int], list[int]]:
    """(earliest, latest) step of every op, 1-based: ``|anc|+1`` and ``n-|desc|``."""
    from ..simplify.fusion import closure

    anc, desc, _ = closure(p)
    return [a.bit_count() + 1 for a in anc], [p.n - d.bit_count() for d in desc]


class Model:
    """The pruned CP-SAT model of one problem (see module docstring)."""

    def __init__(self, p: Problem, upper: int | None = None, lower: int = 0,
                 prune: bool = True, deadline: Deadline | None = None):
        from ortools.sat.python import cp_model

        chk = Checker(deadline, 8)  # building a large model takes seconds: abortable
        self.p = p
        n = p.n
        self.n = n
        m = cp_model.CpModel()
        self.m = m
        if prune:
            lo, hi = windows(p)
        else:
            lo, hi = [1] * n, [n] * n
        self.lo, self.hi = lo, hi
        self.n_bool = 0
        # D[i][j] for j in 0..n: int constant or BoolVar
        D: list[list] = []
        for i in range(n):
            chk.tick()
            row: list = []
            for j in range(n + 1):
                if j < lo[i]:
                    row.append(0)
                elif j >= hi[i]:
                    row.append(1)
                else:
                    row.append(m.NewBoolVar(f"D{i}_{j}"))
                    self.n_bool += 1
            D.append(row)
        self.D = D
        for i in range(n):
            chk.tick()
            for j in range(lo[i] + 1, hi[i]):
                m.AddImplication(D[i][j - 1], D[i][j])
        for j in range(1, n):
            chk.tick()
            m.Add(sum(D[i][j] for i in range(n)) == j)
        for v in range(n):
            chk.tick()
            for u in set(p.preds[v]):
                for j in range(lo[v], hi[v]):
                    a, b = D[v][j], D[u][j - 1]
                    if isinstance(b, int):
                        if b == 0 and not isinstance(a, int):
                            m.Add(a == 0)
                        continue
                    if isinstance(a, int):
                        if a == 1:
                            m.Add(b == 1)
                        continue
                    m.AddImplication(a, b)
        prod = [-1] * len(p.size)
        for v, ts in enumerate(p.creates):
            for t in ts:
                prod[t] = v

        def done(i: int, j: int):
            if j <= 0:
                return 0
            return D[i][min(j, n)]

        # tensor occupancy per step: list of (size, term) with term int or BoolVar
        occ: list[list] = [[] for _ in range(n + 1)]
        for t in range(len(p.size)):
            chk.tick()
            size = p.size[t]
            if size == 0:
                continue
            pr = prod[t]
            if pr < 0 and not p.initial[t]:
                continue  # never exists
            cons = list(dict.fromkeys(p.consumers[t]))
            start = 1 if pr < 0 else lo[pr]
            if p.pinned[t]:
                end = n
            elif cons:
                end = max(hi[c] for c in cons)
            elif pr >= 0:
                end = hi[pr]
            else:
                continue  # an unread, unpinned input: never counted
            for j in range(start, end + 1):
                made = 1 if pr < 0 else done(pr, j)
                if p.pinned[t]:
                    terms = [made]
                    negs = [0]
                elif cons:
                    terms = [made] * len(cons)
                    negs = [done(c, j - 1) for c in cons]
                else:
                    terms = [made]
                    negs = [done(pr, j - 1)]
                # T >= made - neg for each pair; constant cases first
                need = []
                forced = False
                for a, b in zip(terms, negs):
                    if isinstance(a, int) and isinstance(b, int):
                        if a - b >= 1:
                            forced = True
                        continue
                    if isinstance(a, int) and a == 0:
                        continue
                    if isinstance(b, int) and b == 1:
                        continue
                    need.append((a, b))
                if forced:
                    occ[j].append((size, 1))
                    continue
                if not need:
                    continue
                if len(need) == 1 and isinstance(need[0][1], int):
                    occ[j].append((size, need[0][0]))  # T == made (b == 0)
                    continue
                T = m.NewBoolVar(f"T{t}_{j}")
                self.n_bool += 1
                for a, b in need:
                    m.Add(T >= a - b)
                occ[j].append((size, T))
        # workspace and in-place credits per step
        mem = m.NewIntVar(max(0, lower), upper if upper is not None else
                          p.base + sum(p.size) + sum(max(0, w) for w in p.workspace) + 1, "mem")
        self.mem = mem
        for j in range(1, n + 1):
            chk.tick()
            expr = [s * term for s, term in occ[j]]
            for i in range(n):
                if not lo[i] <= j <= hi[i]:
                    continue
                o = D[i][j] - D[i][j - 1]  # the paper's O[i,j]
                if isinstance(o, int) and o == 0:
                    continue
                if p.workspace[i]:
                    expr.append(p.workspace[i] * o)
                created = sum(p.size[t] for t in p.creates[i])
                cands = [t for t in p.inplace[i] if not p.pinned[t]]
                if not cands or created == 0:
                    continue
                rs = []
                for t in cands:
                    credit = min(p.size[t], created)
                    if credit <= 0:
                        continue
                    others = [done(c, j - 1) for c in dict.fromkeys(p.consumers[t]) if c != i]
                    if any(isinstance(x, int) and x == 0 for x in others):
                        continue
                    R = m.NewBoolVar(f"R{i}_{t}_{j}")
                    self.n_bool += 1
                    m.Add(R <= o)
                    for x in others:
                        if not isinstance(x, int):
                            m.AddImplication(R, x)
                    rs.append(R)
                    expr.append(-credit * R)
                if len(rs) > 1:
                    m.Add(sum(rs) <= 1)
            m.Add(mem >= p.base + sum(expr))
        m.Minimize(mem)

    def hint(self, order: Sequence[int], deadline: Deadline | None = None) -> None:
        chk = Checker(deadline, 8)
        pos = {v: k + 1 for k, v in enumerate(order)}
        for i, row in enumerate(self.D):
            chk.tick()
            for j, x in enumerate(row):
                if not isinstance(x, int):
                    self.m.AddHint(x, 1 if pos[i] <= j else 0)

    def solve(self, time_limit: float | None = None, workers: int = 1, seed: int = 0,
              deterministic_time: float | None = None, log: bool = False,
              deadline: Deadline | None = None, keep_clock_cut: bool = False,
              reserve: float = 0.0):
        """Returns ``(order or None, lower bound, proven optimal, status name)``. The order is
        None when the clock (``time_limit`` / ``deadline``) stopped the search before a proof,
        unless ``keep_clock_cut``. ``reserve``: seconds kept back from CP-SAT's clock for what
        its ``max_time_in_seconds`` does not count (handing the model to C++, reading the
        response); when nothing is left after it, the solve is skipped (status ``EXPIRED``)."""
        from ortools.sat.python import cp_model

        deadline = Deadline.of(deadline, None).cap(time_limit)
        s = cp_model.CpSolver()
        s.parameters.num_workers = max(1, workers)
        s.parameters.random_seed = seed
        s.parameters.catch_sigint_signal = False  # Ctrl-C goes to Python (run_interruptible)
        left = deadline.remaining()
        stop_at = deadline
        if left is not None:
            left -= reserve
            if left <= 0.01:
                return None, 0, False, "EXPIRED"
            s.parameters.max_time_in_seconds = left
            # CP-SAT's own limit is soft on large models (seen 3 s late): stop it ourselves
            # when its share ends, so that returning fits in the reserve
            stop_at = deadline.cap(left)
        if deterministic_time is not None:
            s.parameters.max_deterministic_time = deterministic_time
        s.parameters.log_search_progress = log
        status = run_interruptible(lambda: s.Solve(self.m), s.stop_search, stop_at,
                                   grace=0.0 if stop_at is not deadline else 0.1)
        name = s.StatusName(status)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            bound = int(s.BestObjectiveBound()) if status != cp_model.INFEASIBLE else 0
            return None, bound, False, name
        if status != cp_model.OPTIMAL and not keep_clock_cut and not (
                deterministic_time is not None and
                s.response_proto.deterministic_time >= 0.999 * deterministic_time):
            return None, int(-(-s.BestObjectiveBound() // 1)), False, name + " (clock)"
        pos = []
        for i, row in enumerate(self.D):
            first = self.hi[i]
            for j in range(self.lo[i], self.hi[i]):
                x = row[j]
                if isinstance(x, int) or s.Value(x):
                    first = j
                    break
            pos.append((first, i))
        order = [i for _, i in sorted(pos)]
        lb = int(-(-s.BestObjectiveBound() // 1))
        return order, lb, status == cp_model.OPTIMAL, name


def solve_problem(p: Problem, upper: tuple[list[int], int] | None = None, lower: int = 0,
                  time_limit: float | None = None, prune: bool = True,
                  deadline: Deadline | None = None, **solver_opts):
    """CP-SAT on one (sub-)problem. Returns ``(order, peak, lower bound, stats)``; the order
    is the better of the solver's and ``upper``'s. ``time_limit`` and ``deadline`` (the
    earlier wins) cover building the model too; past the deadline during the build, the result
    is ``upper`` with ``lower`` (``stats["status"] == "expired"``)."""
    from ..limits import Expired

    t0 = time.perf_counter()
    deadline = Deadline.of(deadline, None).cap(time_limit)
    if upper is None:
        o, pk, _ = best_heuristic(p, deadline)
        upper = (o, pk)
    ub_order, ub = upper
    lower = max(lower, trivial_bound(p))
    stats = {"ops": p.n}
    if p.n == 0 or ub <= lower:
        stats.update(variables=0, status="trivial", seconds=0.0)
        return ub_order, ub, min(ub, max(lower, ub)), stats
    try:
        deadline.check_import("ortools.sat.python.cp_model", CPSAT_IMPORT_SECONDS)
        model = Model(p, upper=ub, lower=lower, prune=prune, deadline=deadline)
        model.hint(ub_order, deadline)
    except Expired:
        stats.update(variables=0, status="expired", seconds=round(time.perf_counter() - t0, 3))
        return ub_order, ub, min(ub, lower), stats
    build = time.perf_counter() - t0
    # CP-SAT's clock starts after the model is copied to C++ (~0.1x the Python build time),
    # and a stopped search can take ~0.7x the build time to return: measured on RandWire-WS-2
    # (4.9 s build: 0.4 s to start, 3.3 s from stop_search to return). Keep that back.
    order, lb, optimal, status = model.solve(None, deadline=deadline, reserve=0.8 * build,
                                             **solver_opts)
    stats.update(variables=model.n_bool, status=status, build_seconds=round(build, 3),
                 seconds=round(time.perf_counter() - t0, 3))
    best_o, best = ub_order, ub
    if order is not None:
        pk = p.evaluate(order).peak
        if pk < best:
            best_o, best = order, pk
    return best_o, best, min(max(lb, lower), best), stats


class CpsatTurns:
    """CP-SAT on one (sub-)problem in turns of growing length, for callers that interleave it
    with another technique (`memsched.schedulers.auto`). The model is built once, by the first
    turn (its build counts as that turn's time); CP-SAT cannot resume a search, so every turn
    solves again from the hint with its own clock. `turn` returns what `solve_problem` does."""

    def __init__(self, p: Problem, upper: tuple[list[int], int], lower: int = 0, **solver_opts):
        self.p, self.upper, self.solver_opts = p, upper, solver_opts
        self.lower = max(lower, trivial_bound(p))
        self.model = None
        self.build_seconds = 0.0
        self.variables = 0

    def turn(self, deadline: Deadline):
        from ..limits import Expired

        t0 = time.perf_counter()
        ub_order, ub = self.upper
        stats: dict = {"ops": self.p.n}
        if self.p.n == 0 or ub <= self.lower:
            stats.update(variables=0, status="trivial", seconds=0.0)
            return ub_order, ub, ub, stats
        if self.model is None:
            try:
                deadline.check_import("ortools.sat.python.cp_model", CPSAT_IMPORT_SECONDS)
                model = Model(self.p, upper=ub, lower=self.lower, prune=True, deadline=deadline)
                model.hint(ub_order, deadline)
            except Expired:
                stats.update(variables=0, status="expired",
                             seconds=round(time.perf_counter() - t0, 3))
                return ub_order, ub, min(ub, self.lower), stats
            self.model = model
            self.variables = model.n_bool
            self.build_seconds = time.perf_counter() - t0
        # see solve_problem for the reserve
        order, lb, optimal, status = self.model.solve(None, deadline=deadline,
                                                      reserve=0.8 * self.build_seconds,
                                                      **self.solver_opts)
        stats.update(variables=self.variables, status=status,
                     seconds=round(time.perf_counter() - t0, 3))
        best_o, best = ub_order, ub
        if order is not None:
            pk = self.p.evaluate(order).peak
            if pk < best:
                best_o, best = order, pk
                self.upper = (best_o, best)
        self.lower = max(self.lower, min(lb, best))
        return best_o, best, min(max(lb, self.lower), best), stats


def count_variables(p: Problem, prune: bool = True) -> int:
    """The paper's variable count (Table IV's "V"): ``O[i,j]`` over each op's step window and
    ``T[t,j]`` over each tensor's (every step without pruning). The CP-SAT model creates fewer
    Booleans (`Model.n_bool`): constants are substituted and ``T`` that equals a ``D`` is not
    created."""
    n = p.n
    lo, hi = windows(p) if prune else ([1] * n, [n] * n)
    prod = [-1] * len(p.size)
    for v, ts in enumerate(p.creates):
        for t in ts:
            prod[t] = v
    count = sum(h - lo_v + 1 for lo_v, h in zip(lo, hi))
    for t in range(len(p.size)):
        pr = prod[t]
        if pr < 0 and not p.initial[t]:
            continue
        cons = p.consumers[t]
        start = 1 if pr < 0 else lo[pr]
        if p.pinned[t]:
            end = n
        elif cons:
            end = max(hi[c] for c in cons)
        elif pr >= 0:
            end = hi[pr]
        else:
            continue
        count += max(0, end - start + 1)
    return count


@register("ilp", "CP-SAT scheduling ILP with topology-aware pruning (ILP-fusion §IV-A); "
                 "proves lower bounds")
def ilp(p: Problem, time_limit: float | None = 10.0, progress=False, divide: bool = True,
        prune: bool = True, workers: int = 1, seed: int = 0,
        deterministic_time: float | None = None, deadline: Deadline | None = None, **_):
    deadline = Deadline.of(deadline, time_limit)
    segs, subs, target = segment_problems(p, divide, deadline)
    variables = 0
    statuses = []
    for k in sorted(range(len(subs)), key=lambda k: -subs[k][3]):
        sub, ids, o, pk, lb = subs[k]
        if pk <= target:
            continue
        if deadline.expired():
            break
        o2, pk2, lb2, st = solve_problem(sub, (o, pk), target, None, prune, deadline=deadline,
                                         workers=workers, seed=seed,
                                         deterministic_time=deterministic_time)
        variables += st.get("variables", 0)
        statuses.append(st.get("status"))
        subs[k][2], subs[k][3], subs[k][4] = o2, pk2, max(lb, lb2)
        target = max(target, subs[k][4])
    order = [ids[v] for _, ids, o, *_ in subs for v in o]
    peak = max((s[3] for s in subs), default=0)
    lower = max((s[4] for s in subs), default=0)
    return order, min(lower, peak), peak <= lower, {
        "segments": len(segs), "variables": variables, "status": statuses}


# ---------------------------------------------------------------------------- partitioning
def acyclic_partition(p: Problem, order: Sequence[int], parts: int,
                      slack: float = 1.5, deadline: Deadline | None = None) -> list[list[int]]:
    """Split ``order`` (topological) into ``parts`` contiguous pieces, each at most
    ``slack * n / parts`` ops, minimising the bytes live across the cuts (the tensors a cut
    separates from their readers: the min-cut objective of Algorithm 2 restricted to cuts of
    one topological order, which are always acyclic partitions)."""
    n = len(order)
    parts = max(1, min(parts, n))
    if parts == 1:
        return [list(order)]
    lives = p.evaluate(order).lives  # lives[k]: bytes live between op k-1 and op k
    cap = max(1, int(slack * n / parts + 0.999))
    INF = float("inf")
    # best[k][i]: min cost splitting the first i ops into k parts
    best = [[INF] * (n + 1) for _ in range(parts + 1)]
    back = [[-1] * (n + 1) for _ in range(parts + 1)]
    best[0][0] = 0
    chk = Checker(deadline, 16)
    for k in range(1, parts + 1):
        for i in range(1, n + 1):
            chk.tick()
            for j in range(max(0, i - cap), i):
                if best[k - 1][j] == INF:
                    continue
                c = best[k - 1][j] + (lives[j] if j > 0 else 0)
                if c < best[k][i]:
                    best[k][i] = c
                    back[k][i] = j
    k = parts
    while best[k][n] == INF and k < n:
        k += 1  # cannot happen with cap*parts >= n, kept for safety
    cuts = []
    i = n
    while k > 0:
        j = back[k][i]
        cuts.append((j, i))
        i, k = j, k - 1
    return [list(order[a:b]) for a, b in reversed(cuts)]


def partition_schedule(p: Problem, time_limit: float | None = 10.0, parts: int | None = None,
                       part_solver: str = "ilp", fuse: bool = True, max_rounds: int = 8,
                       deadline: Deadline | None = None, **solver_opts):
    """Algorithm 2: fuse, find the peak of a cheap order, partition, solve the part holding the
    peak exactly (CP-SAT, or ``part_solver='exact'``: best-first search), keep the cheap order
    elsewhere; repeat while the peak moves to an unsolved part. A part solve the clock stops
    keeps the part's order (see module docstring)."""
    from ..limits import Expired
    from ..simplify import simplify
    from .exact import astar

    t0 = time.perf_counter()
    deadline = Deadline.of(deadline, time_limit)
    simp = simplify(p, deadline=deadline) if fuse else None
    q = simp.problem if simp else p
    order, peak, name = best_heuristic(q, deadline)
    if parts is None:
        parts = max(1, q.n // 40)
    try:
        pieces = acyclic_partition(q, order, parts, deadline=deadline)
    except Expired:  # no partition in time: the best baseline
        out = simp.expand(order) if simp else order
        return out, {"parts": 0, "solved_parts": 0, "variables": 0, "fused_ops": q.n,
                     "stopped": "time", "seconds": round(time.perf_counter() - t0, 3)}
    solved: set[int] = set()
    orders = [list(x) for x in pieces]
    variables = 0
    rounds = 0
    while rounds < max_rounds and not deadline.expired():
        full = [v for piece in orders for v in piece]
        prof = q.evaluate(full)
        at = prof.peak_step
        k = next(i for i, piece in enumerate(orders)
                 if at < sum(len(x) for x in orders[:i + 1]))
        if k in solved:
            break
        solved.add(k)
        rounds += 1
        before = 0
        for piece in orders[:k]:
            for v in piece:
                before |= 1 << v
        sub, ids = q.restrict(orders[k], before)
        local = {v: i for i, v in enumerate(ids)}
        cur = [local[v] for v in orders[k]]
        cur_pk = sub.evaluate(cur).peak
        if part_solver == "exact":
            o2, pk2, _, _ = astar(sub, (cur, cur_pk), 0, deadline)
        else:
            o2, pk2, _, st = solve_problem(sub, (cur, cur_pk), 0, None, deadline=deadline,
                                           **solver_opts)
            variables += st.get("variables", 0)
        if pk2 < cur_pk:
            orders[k] = [ids[v] for v in o2]
    full = [v for piece in orders for v in piece]
    out = simp.expand(full) if simp else full
    return out, {"parts": len(pieces), "solved_parts": len(solved), "variables": variables,
                 "fused_ops": q.n, "seconds": round(time.perf_counter() - t0, 3)}


@register("ilp-partition", "memory-aware partitioning (ILP-fusion Algorithm 2): fusion, CP-SAT "
                           "on the part holding the peak, cheap order elsewhere (heuristic)")
def ilp_partition(p: Problem, time_limit: float | None = 10.0, progress=False,
                  parts: int | None = None, part_solver: str = "ilp", memory_limit=None, **opts):
    order, stats = partition_schedule(p, time_limit, parts, part_solver, **opts)
    return order, bound_in_time(p, opts.get("deadline")), False, stats

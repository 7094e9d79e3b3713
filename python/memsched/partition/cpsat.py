"""The CP-SAT model of the partition problem, shared by `exact` and `inc_ilp`.

Order encoding: ``y[v, j]`` (Boolean) is ``s(v) <= j`` for ``j = 0..k-2`` (``y[v, k-1]`` is
true, ``y[v, -1]`` false). Then

* monotone in ``j``: ``y[v, j] => y[v, j+1]``; dependency ``u -> v``: ``y[v, j] => y[u, j]``;
* op ``v`` is in stage ``j`` iff ``y[v, j] - y[v, j-1] = 1``, so stage ``j`` is non-empty iff
  ``sum_v y[v, j] - sum_v y[v, j-1] >= 1`` (one linear constraint per stage, no extra literals);
* ``m_j = sum_v own(v) * (y[v, j] - y[v, j-1]) + sum_b bytes(b) * w[b, j]`` where ``own(v)`` is
  the bytes of the buffers only ``v`` uses and ``w[b, j] >= [some user of b is in stage j]``
  (clause ``not y[v,j] or y[v,j-1] or w[b,j]``) for the shared buffers;
* tensor ``t`` crosses boundary ``j``: ``z[t, j] >= y[prod, j] - y[r, j]`` for every reader
  ``r`` (graph outputs: ``z >= y[prod, j]``; graph inputs: ``y[prod, j]`` is 1).

**Domain reduction** (what makes the proofs fast): under ``P <= Pmax`` every op's stage lies in
``[ceil(A(v)/Pmax) - 1, k - ceil(D(v)/Pmax)]`` where ``A(v)`` (``D(v)``) are the bytes of the
distinct buffers of ``v`` and its ancestors (descendants): stages ``0..s(v)`` cache at least
``A(v)`` bytes and each caches at most ``Pmax``. Variables outside the window are the constants
0/1 and never created. An empty window proves ``P > Pmax``.

Minimisation variables are never forced up (``w``, ``z``, ``o`` only appear with lower bounds),
so each solve's optimum is the problem's optimum and ``BestObjectiveBound`` a proven bound.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from .problem import PartitionProblem, split_params


def closure_param_bytes(problem: PartitionProblem) -> tuple[np.ndarray, np.ndarray]:
    """(A, D): bytes of the distinct buffers used by each op with its ancestors (A) or with its
    descendants (D)."""
    n, nb = problem.n, len(problem.param_bytes)
    own = np.zeros((n, max(nb, 1)), dtype=bool)
    for v, ps in enumerate(problem.op_params):
        own[v, list(ps)] = True
    order = problem.topological_order()
    anc = own.copy()
    for v in order:
        for u in problem.preds[v]:
            anc[v] |= anc[u]
    desc = own.copy()
    for v in reversed(order):
        for w in problem.succs[v]:
            desc[v] |= desc[w]
    pbytes = np.zeros(max(nb, 1), dtype=np.int64)
    pbytes[:nb] = problem.param_bytes
    return anc.astype(np.int64) @ pbytes, desc.astype(np.int64) @ pbytes


def stage_domains(problem: PartitionProblem, k: int, p_max: int | None,
                  closure: tuple[np.ndarray, np.ndarray] | None = None):
    """Per-op stage windows ``(lo, hi)`` valid for every assignment with ``P <= p_max``, or None
    when some window is empty (no such assignment exists)."""
    n = problem.n
    if p_max is None or p_max <= 0:
        if p_max is not None and p_max < 0:
            return None
        lo, hi = [0] * n, [k - 1] * n
        if p_max == 0:  # no op with parameters can be placed at all
            if any(problem.op_param_bytes(v) > 0 for v in range(n)):
                return None
        return lo, hi
    A, D = closure if closure is not None else closure_param_bytes(problem)
    lo = [int(-(-int(a) // p_max)) - 1 for a in A]
    hi = [k - int(-(-int(d) // p_max)) for d in D]
    lo = [max(0, x) for x in lo]
    hi = [min(k - 1, x) for x in hi]
    if any(a > b for a, b in zip(lo, hi)):
        return None
    return lo, hi


class Infeasible(Exception):
    """The model has no solution (an empty clause was built)."""


class CutModel:
    """One CP-SAT model: minimise ``P``, ``O`` or ``C`` under optional caps on the others.

    ``lo``/``hi``: per-op stage windows (from `stage_domains`, or a fixed stage for ops outside
    an Inc-ILP window).
    """

    def __init__(self, problem: PartitionProblem, k: int, sram: int, lo: Sequence[int],
                 hi: Sequence[int], objective: str, p_max: int | None = None,
                 o_max: int | None = None, c_max: int | None = None, p_min: int = 0,
                 stage_time: dict | None = None, c_min: int = 0,
                 prefix: tuple[Sequence[int], Sequence[int]] | None = None):
        from ortools.sat.python import cp_model

        self.p, self.k, self.sram = problem, k, sram
        self.lo, self.hi = list(lo), list(hi)
        self.objective = objective
        self.model = m = cp_model.CpModel()
        n = problem.n
        if any(a > b for a, b in zip(self.lo, self.hi)):
            raise Infeasible
        # y[v][j] for j in lo..hi-1 are variables; below lo the constant 0, from hi on 1
        self.y: list[dict[int, object]] = []
        for v in range(n):
            self.y.append({j: m.new_bool_var(f"y{v}_{j}") for j in range(self.lo[v], self.hi[v])})
        for v in range(n):
            for j in range(self.lo[v], self.hi[v] - 1):
                m.add_implication(self.y[v][j], self.y[v][j + 1])
        for v in range(n):
            for u in problem.preds[v]:
                for j in range(k - 1):
                    self._clause([self._neg(self.Y(v, j)), self.Y(u, j)])
        # every stage non-empty
        for j in range(k):
            expr = sum(self._lin(self.Y(v, j)) for v in range(n)) - \
                sum(self._lin(self.Y(v, j - 1)) for v in range(n))
            self._add(expr >= 1)
        # parameter bytes per stage
        own, shared = split_params(problem)
        if prefix is not None:  # L_j <= own(D_j) <= R_j (`bounds.prefix_chain`)
            R, L = prefix
            for j in range(k - 1):
                e = sum(own[v] * self._lin(self.Y(v, j)) for v in range(n) if own[v])
                self._add(e <= R[j])
                self._add(e >= L[j])
        self.m_expr = []
        for j in range(k):
            expr = 0
            for v in range(n):
                if own[v] and self.lo[v] <= j <= self.hi[v]:
                    expr += own[v] * (self._lin(self.Y(v, j)) - self._lin(self.Y(v, j - 1)))
            for b, us in shared:
                cand = [v for v in us if self.lo[v] <= j <= self.hi[v]]
                if not cand:
                    continue
                forced = any(self.lo[v] == j == self.hi[v] for v in cand)
                if forced:
                    expr += problem.param_bytes[b]
                    continue
                w = m.new_bool_var(f"w{b}_{j}")
                for v in cand:
                    self._clause([self._neg(self.Y(v, j)), self.Y(v, j - 1), w])
                expr += problem.param_bytes[b] * w
            self.m_expr.append(expr)
        total = sum(own) + sum(problem.param_bytes[b] for b, _ in shared)
        ub = max(total, 1)
        self.P = m.new_int_var(max(0, p_min), ub if p_max is None else min(ub, p_max), "P")
        for e in self.m_expr:
            m.add(self.P >= e)
        self.O = None
        if objective in ("O", "C", "T") or o_max is not None:
            self.o = []
            for j, e in enumerate(self.m_expr):
                oj = m.new_int_var(0, ub, f"o{j}")
                m.add(oj >= e - sram)
                self.o.append(oj)
            self.O = m.new_int_var(0, ub * k, "O")
            m.add(self.O == sum(self.o))
            if o_max is not None:
                m.add(self.O <= o_max)
        self.C = None
        if objective in ("C", "T") or c_max is not None:
            self._build_comm()
            if c_min > 0:  # a proven bound (`bounds.comm_lower_bound`)
                m.add(self.C >= c_min)
            if c_max is not None:
                m.add(self.C <= c_max)
        self.T = None
        if objective == "T":
            self._build_time(stage_time)
        target = {"P": self.P, "O": self.O, "C": self.C, "T": self.T}[objective]
        m.minimize(target)

    def _build_time(self, st: dict) -> None:
        """``T >= T_j`` for every stage, in integer time units (`stage_time`: ``"mac"``,
        ``"offchip"``, ``"link"`` units per MAC / off-chip byte / link byte, ``"macs"`` per op,
        ``"in"``, ``"out"``: the model's input and output bytes)."""
        m, k, n = self.model, self.k, self.p.n
        macs = st["macs"]
        terms = []
        for j in range(k):
            comp = 0
            for v in range(n):
                if macs[v] and self.lo[v] <= j <= self.hi[v]:
                    comp += int(macs[v]) * (self._lin(self.Y(v, j)) - self._lin(self.Y(v, j - 1)))
            in_b = st["in"] if j == 0 else self.c_expr[j - 1]
            out_b = st["out"] if j == k - 1 else self.c_expr[j]
            terms.append(st["mac"] * comp + st["offchip"] * self.o[j] + st["link"] * (in_b + out_b))
        ub = (st["mac"] * sum(int(x) for x in macs) + st["offchip"] * sum(self.p.param_bytes)
              + st["link"] * 2 * (sum(t.nbytes for t in self.p.tensors) + st["in"] + st["out"]))
        self.T = m.new_int_var(0, max(1, int(ub)), "T")
        for e in terms:
            m.add(self.T >= e)

    # ---------------------------------------------------------------- literals
    def Y(self, v: int, j: int):
        """``s(v) <= j`` as a variable or a Python bool."""
        if j < 0:
            return False
        if j >= self.k - 1:
            return True
        if j < self.lo[v]:
            return False
        if j >= self.hi[v]:
            return True
        return self.y[v][j]

    @staticmethod
    def _neg(x):
        return (not x) if isinstance(x, bool) else x.Not()

    @staticmethod
    def _lin(x):
        return int(x) if isinstance(x, bool) else x

    def _clause(self, lits):
        out = []
        for x in lits:
            if x is True:
                return
            if x is False:
                continue
            out.append(x)
        if not out:
            raise Infeasible
        self.model.add_bool_or(out)

    def _add(self, ct):
        if isinstance(ct, (bool, np.bool_)):
            return self._const(bool(ct))
        self.model.add(ct)

    @staticmethod
    def _const(ok: bool):
        if not ok:
            raise Infeasible

    def _build_comm(self):
        m, k, p = self.model, self.k, self.p
        self.c_expr = [0] * max(k - 1, 0)
        for ti, t in enumerate(p.tensors):
            if t.nbytes == 0 or (t.producer < 0 and not t.consumers and not t.is_output):
                continue
            for j in range(k - 1):
                yp = True if t.producer < 0 else self.Y(t.producer, j)
                if yp is False:
                    continue
                # needed after boundary j? (graph output, or some reader maybe after j)
                readers = [self.Y(r, j) for r in t.consumers]
                if not t.is_output and all(r is True for r in readers):
                    continue
                if yp is True and (t.is_output or any(r is False for r in readers)):
                    self.c_expr[j] += t.nbytes
                    continue
                z = m.new_bool_var(f"z{ti}_{j}")
                if t.is_output:
                    self._clause([self._neg(yp), z])
                else:
                    for r in readers:
                        self._clause([self._neg(yp), r, z])
                self.c_expr[j] += t.nbytes * z
        ub = max(1, sum(t.nbytes for t in p.tensors))
        self.C = m.new_int_var(0, ub, "C")
        for e in self.c_expr:
            m.add(self.C >= e)

    # ---------------------------------------------------------------- solving
    def solve(self, time_limit: float | None, hint: Sequence[int] | None = None,
              workers: int = 1, seed: int = 0, det_limit: float | None = None):
        """-> (proven_optimal, assignment or None, objective value, proven lower bound).

        ``det_limit``: CP-SAT's deterministic time budget (same answer on every run with one
        worker); a solve it stops returns ``(False, best or None, ...)`` like a time limit."""
        from ortools.sat.python import cp_model

        if hint is not None:
            for v, yv in enumerate(self.y):
                for j, var in yv.items():
                    self.model.add_hint(var, hint[v] <= j)
        solver = cp_model.CpSolver()
        prm = solver.parameters
        prm.num_workers = workers
        prm.random_seed = seed
        if time_limit is not None:
            prm.max_time_in_seconds = max(0.01, float(time_limit))
        if det_limit is not None:
            prm.max_deterministic_time = float(det_limit)
        t0 = time.perf_counter()
        status = solver.solve(self.model)
        self.seconds = time.perf_counter() - t0
        self.status = solver.status_name(status)
        if status == cp_model.INFEASIBLE:
            raise Infeasible
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return False, None, None, None
        s = []
        for v in range(self.p.n):
            st = self.k - 1
            for j in range(self.k - 1):
                lit = self.Y(v, j)
                val = lit if isinstance(lit, bool) else solver.boolean_value(lit)
                if val:
                    st = j
                    break
            s.append(st)
        value = int(round(solver.objective_value))
        bound = int(np.ceil(solver.best_objective_bound - 1e-6))
        return status == cp_model.OPTIMAL, s, value, min(bound, value)

"""Combinatorial lower bounds for the pipeline partition, tried before (and fed to) CP-SAT.

Notation: a cut ``s`` is monotone along the edges, so ``D_x = {v : s(v) <= x}`` is a downset
and stage ``x`` is ``D_x - D_{x-1}``. ``B(S)`` is the bytes of the distinct buffers used by the
ops of ``S``; the stages ``a..b`` together cache the buffers of every op they hold, so when a
set ``S`` lies in stages ``a..b`` and ``P <= Pmax``: ``B(S) <= (b - a + 1) * Pmax`` (*). Each
bound below is this inequality applied to a set proven to lie in ``a..b``; none uses the
non-emptiness of stages (a relaxation, so every bound stays valid).

**Stage windows** (`StageWindows.tighten`): per-op limits ``lo(v) <= s(v) <= hi(v)`` valid for
every cut with ``P <= Pmax``. Start from the closure windows of `cpsat.stage_domains` and repeat
until nothing changes:

* edges: ``lo(v) >= lo(u)`` and ``hi(u) <= hi(v)`` for ``u -> v``;
* *head test* of ``x = lo(v)``: if ``s(v) = x`` then for every ``a <= x`` the stages ``a..x``
  hold ``v``, every ancestor ``u`` of ``v`` with ``lo(u) >= a`` (``a <= s(u) <= s(v)``) and every
  op ``u`` with ``lo(u) >= a`` and ``hi(u) <= x``; when (*) fails for some ``a``, ``s(v) != x``,
  so ``lo(v) = x + 1``;
* *tail test* of ``y = hi(v)``, the mirror image (descendants, stages ``y..b``);
* *interval test*: the ops with ``a <= lo(u)`` and ``hi(u) <= b`` lie in ``a..b``; when (*)
  fails no cut with ``P <= Pmax`` exists. So does an empty window.

The largest ``Pmax`` the tests refute plus one is a lower bound on ``P`` (`p_lower_bound`:
binary search; refutation is monotone in ``Pmax`` because every window and set only grows
with it).

**Boundary cuts** (`comm_lower_bound`): for boundary ``j`` the downset ``D_j`` contains every op
with ``hi <= j`` and no op with ``lo > j``; ``c_j`` is the bytes of the tensors made in ``D_j``
(graph inputs: always) and read outside it or returned. The cheapest such downset, ignoring
every other constraint, is a minimum s-t cut (a closure problem: the source side is ``D_j``,
precedence edges of infinite capacity, one node per tensor so that a tensor with several
readers outside counts once), so ``C >= max_j mincut_j`` for every cut inside the windows.
"""
from __future__ import annotations

import numpy as np

from .problem import PartitionProblem, split_params


class StageWindows:
    """Precomputed closures of one problem; `tighten` gives windows for a cap ``Pmax``."""

    def __init__(self, problem: PartitionProblem):
        self.p = problem
        n = self.n = problem.n
        order = problem.topological_order()
        self.order = order
        anc = np.zeros((n, n), dtype=bool)  # anc[v, u]: u is v or an ancestor of v
        for v in order:
            anc[v, v] = True
            for u in problem.preds[v]:
                anc[v] |= anc[u]
        self.anc = anc
        self.desc = anc.T.copy()  # desc[v, u]: u is v or a descendant of v
        own_l, shared = split_params(problem)
        own = np.array(own_l, dtype=np.int64)
        self.own = own
        self.sh_bytes = np.array([problem.param_bytes[b] for b, _ in shared], dtype=np.int64)
        self.sh_use = np.zeros((n, len(shared)), dtype=bool)
        for i, (_, us) in enumerate(shared):
            self.sh_use[us, i] = True
        self.total = int(own.sum() + self.sh_bytes.sum())
        # int64 products: exact, and numpy does them without BLAS (whose threads spin on a
        # busy machine: 6x slower float64 matvecs measured with a second process running)
        self._anc_i = anc.astype(np.int64)
        self._desc_i = self.desc.astype(np.int64)
        self._sh_i = self.sh_use.astype(np.int64)
        A = self.set_bytes_rows(anc)
        D = self.set_bytes_rows(self.desc)
        self.A, self.D = A, D

    # ------------------------------------------------------------------ B(S)
    def set_bytes(self, mask: np.ndarray) -> int:
        """``B(S)`` for one boolean mask over the ops."""
        b = int(self.own[mask].sum())
        if len(self.sh_bytes):
            b += int(self.sh_bytes[self.sh_use[mask].any(axis=0)].sum())
        return b

    def set_bytes_rows(self, rows: np.ndarray) -> np.ndarray:
        """``B`` of every row of a boolean matrix (one set per row)."""
        r = rows.astype(np.int64)
        out = r @ self.own
        if len(self.sh_bytes):
            hit = (r @ self._sh_i) > 0
            out = out + hit.astype(np.int64) @ self.sh_bytes
        return out

    def _rows_bytes(self, closure: np.ndarray, inner: np.ndarray,
                    extra: np.ndarray) -> np.ndarray:
        """For every op v: a lower bound on ``B((closure(v) & inner) | extra)`` (closure
        includes v): its own bytes plus the shared buffers of ``extra`` (the per-row shared
        part costs a matrix product per buffer column and is small; a lower bound keeps every
        test valid)."""
        keep = inner & ~extra
        own = closure @ (self.own * keep) + int(self.own[extra].sum())
        if len(self.sh_bytes):
            own = own + int(self.sh_bytes[self.sh_use[extra].any(axis=0)].sum())
        return own

    # ------------------------------------------------------------------ windows
    def closure_windows(self, k: int, p_max: int):
        lo = np.maximum(0, -(-self.A // p_max) - 1)
        hi = np.minimum(k - 1, k - (-(-self.D // p_max)))
        return lo.astype(np.int64), hi.astype(np.int64)

    def tighten(self, k: int, p_max: int, lo=None, hi=None, max_rounds: int = 50):
        """Windows ``(lo, hi)`` (lists) valid for every cut with ``P <= p_max`` and inside the
        given windows, or ``None`` when the tests refute every such cut."""
        if p_max <= 0:
            return None if self.total > 0 else ([0] * self.n, [k - 1] * self.n)
        clo, chi = self.closure_windows(k, p_max)
        lo = clo if lo is None else np.maximum(clo, np.asarray(lo, dtype=np.int64))
        hi = chi if hi is None else np.minimum(chi, np.asarray(hi, dtype=np.int64))
        for _ in range(max_rounds):
            lo, hi = self._edges(lo, hi)
            if (lo > hi).any() or self._interval_fails(k, p_max, lo, hi):
                return None
            nlo, nhi = lo.copy(), hi.copy()
            # head test of x = lo(v), for every a <= x
            for x in range(k):
                cand = lo == x
                if not cand.any():
                    continue
                fixed_hi = hi <= x
                for a in range(x + 1):
                    inner = lo >= a
                    b = self._rows_bytes(self._anc_i, inner, inner & fixed_hi)
                    nlo[cand & (b > (x - a + 1) * p_max)] = x + 1
            for y in range(k):
                cand = hi == y
                if not cand.any():
                    continue
                fixed_lo = lo >= y
                for b_ in range(y, k):
                    inner = hi <= b_
                    b = self._rows_bytes(self._desc_i, inner, inner & fixed_lo)
                    nhi[cand & (b > (b_ - y + 1) * p_max)] = y - 1
            if (nlo == lo).all() and (nhi == hi).all():
                return lo.tolist(), hi.tolist()
            lo, hi = nlo, nhi
        lo, hi = self._edges(lo, hi)
        if (lo > hi).any():
            return None
        return lo.tolist(), hi.tolist()

    def _edges(self, lo, hi):
        lo, hi = lo.copy(), hi.copy()
        for v in self.order:
            for u in self.p.preds[v]:
                if lo[u] > lo[v]:
                    lo[v] = lo[u]
        for v in reversed(self.order):
            for w in self.p.succs[v]:
                if hi[w] < hi[v]:
                    hi[v] = hi[w]
        return lo, hi

    def _interval_fails(self, k, p_max, lo, hi) -> bool:
        for a in range(k):
            for b in range(a, k):
                if self.set_bytes((lo >= a) & (hi <= b)) > (b - a + 1) * p_max:
                    return True
        return False

    def p_lower_bound(self, k: int, lo_bound: int, hi_bound: int, **kw) -> int:
        """The smallest ``P`` in ``lo_bound..hi_bound`` the window tests do not refute (a
        lower bound on ``P`` when ``lo_bound`` is one and some cut has ``P <= hi_bound``)."""
        a, b = lo_bound, hi_bound
        while a < b:
            mid = (a + b) // 2
            if self.tighten(k, mid, **kw) is None:
                a = mid + 1
            else:
                b = mid
        return a


def stab_count(windows) -> int:
    """The fewest stages meeting every window ``(lo, hi)`` (greedy by right end, optimal for
    intervals): a buffer whose users have these windows is cached by at least that many
    stages."""
    count, last = 0, None
    for lo, hi in sorted(windows, key=lambda w: w[1]):
        if last is None or lo > last:
            count, last = count + 1, hi
    return count


def comm_lower_bound(problem: PartitionProblem, k: int, lo, hi) -> list[int]:
    """Per boundary ``j``: the fewest bytes any downset ``D_j`` inside the windows lets cross
    (a minimum s-t cut; see the module docstring). ``C >= max`` of the list."""
    from ortools.graph.python import max_flow

    n = problem.n
    INF = sum(t.nbytes for t in problem.tensors) + 1  # more than any finite cut
    out = []
    for j in range(k - 1):
        mf = max_flow.SimpleMaxFlow()
        S, T = n, n + 1
        nxt = n + 2
        for v in range(n):
            if hi[v] <= j:
                mf.add_arc_with_capacity(S, v, INF)
            if lo[v] > j:
                mf.add_arc_with_capacity(v, T, INF)
            for u in problem.preds[v]:  # v in D => u in D
                mf.add_arc_with_capacity(v, u, INF)
        for t in problem.tensors:
            if t.nbytes == 0:
                continue
            src = S if t.producer < 0 else t.producer
            if t.is_output:
                mf.add_arc_with_capacity(src, T, t.nbytes)
                continue
            if not t.consumers:
                continue
            x = nxt
            nxt += 1
            mf.add_arc_with_capacity(src, x, t.nbytes)
            for r in t.consumers:
                mf.add_arc_with_capacity(x, r, INF)
        status = mf.solve(S, T)
        if status != mf.OPTIMAL:
            raise RuntimeError(f"max flow failed with status {status}")
        out.append(int(mf.optimal_flow()))
    return out


def _downset_extreme(sw: StageWindows, lo, hi, j: int, cap: int, maximize: bool,
                     time_limit: float = 0.25):
    """Over the downsets ``D`` with every op of ``hi <= j`` and none of ``lo > j``: the largest
    ``own(D) <= cap`` (``maximize``) or the smallest ``own(D) >= cap`` — as a proven bound (an
    upper bound on the maximum, a lower bound on the minimum); None when no such ``D``."""
    from ortools.sat.python import cp_model

    p, own = sw.p, sw.own
    base = int(own[hi <= j].sum())
    free = np.flatnonzero((lo <= j) & (hi > j))
    if maximize and base > cap:
        return None
    m = cp_model.CpModel()
    x = {int(v): m.new_bool_var(f"x{v}") for v in free}
    for v in x:
        for u in p.preds[v]:
            if u in x:
                m.add_implication(x[v], x[u])
    e = sum(int(own[v]) * x[v] for v in x if own[v])
    if maximize:
        m.add(e <= cap - base)
        m.maximize(e)
    else:
        m.add(e >= cap - base)
        m.minimize(e)
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    s.parameters.max_deterministic_time = time_limit  # deterministic, unlike wall time
    st = s.solve(m)
    if st == cp_model.INFEASIBLE:
        return None
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):  # no answer: the trivial bound
        return cap
    b = s.best_objective_bound
    return base + (int(np.floor(b + 1e-6)) if maximize else int(np.ceil(b - 1e-6)))


def forced_shared(sw: StageWindows, lo, hi, j: int) -> int:
    """Bytes of the shared buffers stage ``j`` caches in every cut inside the windows: those
    with a user whose window is ``{j}``."""
    if not len(sw.sh_bytes):
        return 0
    fixed = (np.asarray(lo) == j) & (np.asarray(hi) == j)
    return int(sw.sh_bytes[sw.sh_use[fixed].any(axis=0)].sum())


def prefix_chain(sw: StageWindows, k: int, p_max: int, lo, hi, rounds: int = 3):
    """Refine windows by the weights the boundary downsets can take, or None (refuted).

    With ``own(S)`` the bytes of the buffers only one op uses (additive), stage ``j`` caches at
    least ``own(D_j) - own(D_{j-1})``, so ``own(D_j) <= own(D_{j-1}) + Pmax`` and
    ``own(D_j) >= own(D_{j+1}) - Pmax``. Forgetting that ``D_{j-1} ⊆ D_j`` (a relaxation)
    leaves only the weights: ``R_j`` = the largest weight of a downset inside boundary ``j``'s
    windows that is ``<= R_{j-1} + Pmax`` bounds ``own(D_j)`` from above (induction on ``j``),
    ``L_j`` = the smallest one ``>= L_{j+1} - Pmax`` from below (``R_{-1} = 0``,
    ``L_{k-1} = own(V)``); ``L_j > R_j`` refutes. Stage ``j`` also caches every shared buffer
    one of whose users has the window ``{j}`` (``F_j`` bytes, outside ``own``), so ``Pmax`` is
    ``Pmax - F_j`` for stage ``j`` in these steps (on NASNetLarge k = 6 this 2,688-byte
    difference in the last stage is what refutes ``P <= P* - 1``). Then an op ``v`` whose
    ancestors with the ops forced into ``D_j`` weigh more than ``R_j`` is not in ``D_j``
    (``lo(v) > j``), and one whose exclusion (with its descendants) leaves less than ``L_j``
    is in it (``hi(v) <= j``); the windows go back through `StageWindows.tighten` and the
    loop repeats.
    Returns ``(lo, hi, R, L)``.
    """
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    tot = int(sw.own.sum())
    R = L = None
    for _ in range(rounds):
        cap = [p_max - forced_shared(sw, lo, hi, j) for j in range(k)]
        R, prev = [], 0
        for j in range(k - 1):
            r = _downset_extreme(sw, lo, hi, j, prev + cap[j], True)
            if r is None:
                return None
            R.append(r)
            prev = r
        if tot - prev > cap[k - 1]:
            return None
        L, nxt = [0] * (k - 1), tot
        for j in reversed(range(k - 1)):
            lj = _downset_extreme(sw, lo, hi, j, nxt - cap[j + 1], False)
            if lj is None or lj > R[j]:
                return None
            L[j] = nxt = lj
        nlo, nhi = lo.copy(), hi.copy()
        for j in range(k - 1):
            forced = hi <= j
            heavy = sw._anc_i @ (sw.own * ~forced) + int(sw.own[forced].sum())
            nlo[(lo <= j) & (heavy > R[j])] = j + 1
            out = lo > j
            # own(V - desc(v) - out): what D_j can hold without v
            light = tot - (sw._desc_i @ (sw.own * ~out)) - int(sw.own[out].sum())
            nhi[(hi > j) & (light < L[j])] = j
        if (nlo == lo).all() and (nhi == hi).all():
            break
        w = sw.tighten(k, p_max, nlo, nhi)
        if w is None:
            return None
        lo, hi = np.asarray(w[0]), np.asarray(w[1])
    return lo.tolist(), hi.tolist(), R, L

"""GenEFlow's search (MemoriaNova §3.3.4): an elitist single-objective GA, on pymoo.

pymoo's `GA` supplies what the paper asks of its GA library: constraints as ``G <= 0`` with
feasibility-first selection and survival (a feasible chromosome beats any infeasible one; among
infeasible ones the smaller violation wins), elitism ((mu + lambda) survival keeps the best),
duplicate elimination, and seeding. What is ours:

* the variables: the interior points ``x_i1 .. x_i,n-1`` of every operator (`Encoding`), each
  vector sorted before evaluation (the repair that keeps eq. 10);
* the objective and constraints: `evaluate` (latency; ``G = [structural cv1-cv6, memory]``
  where memory is the sum over devices of the peak's overflow relative to the limit);
* operators that respect the gene structure: crossover swaps whole operator vectors between
  parents, mutation replaces an operator's vector by a candidate split (whole on a device,
  even over some devices, copied from an aligned producer) or shifts one cut point;
* the initial population: the single-device, uniform and greedy solutions plus mutants of them,
  so the GA never ends worse than the best baseline it was given;
* a local search on the GA's best (`polish`, a memetic step): every operator tries its
  candidate splits with the rest fixed, keeping improvements.

Deterministic: the same problem, cost model, seed and generation budget give the same answer
(``time_limit`` can cut a run short; then the result depends on the machine's speed).
"""
from __future__ import annotations

import time

import numpy as np

from .baselines import candidates
from .cost import CostModel
from .encoding import Encoding, even_split
from .evaluate import evaluate
from .problem import SplitError


def _pymoo():
    try:
        import pymoo  # noqa: F401
    except ImportError:
        raise SplitError("the GA needs pymoo: pip install 'tvm-memsched[split]' "
                         "(or pip install pymoo)") from None


def constraint_columns(enc: Encoding, cost: CostModel, ev) -> np.ndarray:
    """``G`` for pymoo, ``(P, 2)``: positive parts of cv1-cv6, and the memory overflow."""
    P = ev.latency.shape[0]
    struct = np.zeros(P)
    for k, v in ev.cv.items():
        if k != "cv7":
            struct += np.maximum(v.reshape(P, -1), 0).sum(axis=1)
    lim = cost.limits
    finite = np.isfinite(lim)
    over = np.maximum(ev.peak - np.where(finite, lim, 0)[None, :], 0)
    mem = np.where(finite[None, :], over / np.maximum(np.where(finite, lim, 1), 1)[None, :],
                   0).sum(axis=1)
    return np.stack([struct, mem], axis=1)


def run_ga(enc: Encoding, cost: CostModel, seeds=(), seed: int = 0, pop_size: int = 48,
           n_gen: int = 300, patience: int = 60, time_limit: float | None = None,
           progress=None, mutation_ops: float = 3.0,
           polish_sweeps: int = 1) -> tuple[np.ndarray, dict]:
    """Best chromosome ``(N, n+1)`` and stats. ``seeds``: chromosomes put in the initial
    population; ``patience``: stop after that many generations without improvement;
    ``progress(gen, best_latency, feasible)`` is called every generation."""
    _pymoo()
    from pymoo.algorithms.soo.nonconvex.ga import GA
    from pymoo.core.crossover import Crossover
    from pymoo.core.mutation import Mutation
    from pymoo.core.problem import Problem
    from pymoo.core.sampling import Sampling
    from pymoo.termination import get_termination

    N, n = enc.problem.n, enc.n
    nv = enc.n_genes
    if nv == 0:
        X = enc.single(0)
        return X, {"generations": 0, "evaluations": 1}
    L = enc.lengths
    seed_genes = [enc.genes(np.asarray(s)) for s in seeds]
    cand_cache: dict[int, list] = {}

    def cands(i, X):
        if i not in cand_cache:
            cand_cache[i] = candidates(enc, cost, i)
        out = list(cand_cache[i])
        prob = enc.problem
        for r in prob.ops[i].inputs:
            j = prob.tensors[r.tensor].producer
            if j >= 0 and enc.dims[j] == enc.dims[i] and L[j] == L[i]:
                out.append(X[j])
        return out

    stats = {"evaluations": 0}

    class SplitGA(Problem):
        def __init__(self):
            super().__init__(n_var=nv, n_obj=1, n_ieq_constr=2, xl=np.zeros(nv),
                             xu=np.repeat(L, n - 1).astype(float), vtype=int)

        def _evaluate(self, G, out, *args, **kwargs):
            X = enc.chromosome(np.rint(G).astype(np.int64))
            ev = evaluate(enc, cost, X)
            stats["evaluations"] += X.shape[0]
            out["F"] = ev.latency[:, None]
            out["G"] = constraint_columns(enc, cost, ev)

    dims = enc.dims

    def scaled(x, to):
        """Split vector ``x`` rescaled to length ``to`` (same shares)."""
        frm = x[-1]
        y = np.rint(np.asarray(x, float) * to / max(frm, 1)).astype(np.int64)
        y[0], y[-1] = 0, to
        return np.maximum.accumulate(y)

    def mutate_one(g, rs, rate):
        X = enc.chromosome(g)
        k = max(1, rs.binomial(N, min(1.0, rate / max(N, 1))))
        for i in rs.choice(N, size=min(k, N), replace=False):
            i = int(i)
            u = rs.random()
            if u < 0.35:  # a candidate split (whole on a device, even over some, aligned)
                c = cands(i, X)
                X[i] = c[rs.integers(len(c))]
            elif u < 0.55 and L[i] > 1 and n > 1:  # shift one cut point
                j = rs.integers(1, n)
                step = max(1, int(L[i]) // 8)
                X[i, j] = np.clip(X[i, j] + rs.integers(-step, step + 1), 0, L[i])
                X[i, 1:-1] = np.sort(X[i, 1:-1])
            elif u < 0.85:  # propagate op i's shares forward: aligned slices move nothing
                span = int(rs.geometric(1 / 8))
                whole_dev = int(np.argmax(np.diff(X[i]))) if (np.diff(X[i]) > 0).sum() == 1 \
                    else None
                for j in range(i + 1, min(N, i + 1 + span)):
                    if dims[j] == dims[i] and dims[i] != "whole":
                        X[j] = scaled(X[i], int(L[j]))
                    elif whole_dev is not None:
                        X[j] = even_split(int(L[j]), n, [whole_dev])
            else:  # a run of ops whole on one device
                d = int(rs.integers(n))
                for j in range(i, min(N, i + int(rs.geometric(1 / 6)))):
                    X[j] = even_split(int(L[j]), n, [d])
        return enc.genes(X)

    class SeededSampling(Sampling):
        def _do(self, problem, n_samples, *args, random_state=None, **kwargs):
            rs = random_state
            pop = [g.copy() for g in seed_genes][:n_samples]
            base = pop or [enc.genes(enc.uniform())]
            while len(pop) < n_samples:
                g = base[len(pop) % len(base)]
                pop.append(mutate_one(g, rs, mutation_ops * 3))
            return np.stack(pop).astype(float)

    class OpCrossover(Crossover):
        def __init__(self):
            super().__init__(2, 2)

        def _do(self, problem, Xp, *args, random_state=None, **kwargs):
            rs = random_state
            _, m, _ = Xp.shape
            A = Xp[0].reshape(m, N, n - 1)
            B = Xp[1].reshape(m, N, n - 1)
            swap = rs.random((m, N, 1)) < 0.5
            C1 = np.where(swap, B, A)
            C2 = np.where(swap, A, B)
            return np.stack([C1.reshape(m, -1), C2.reshape(m, -1)])

    class OpMutation(Mutation):
        def _do(self, problem, Xp, *args, random_state=None, **kwargs):
            rs = random_state
            out = np.array(Xp, copy=True)
            for p in range(out.shape[0]):
                out[p] = mutate_one(np.rint(out[p]).astype(np.int64), rs, mutation_ops)
            return out

    problem = SplitGA()
    algo = GA(pop_size=pop_size, sampling=SeededSampling(), crossover=OpCrossover(),
              mutation=OpMutation(), eliminate_duplicates=True)
    algo.setup(problem, termination=get_termination("n_gen", n_gen), seed=seed, verbose=False)
    t0 = time.perf_counter()
    best, best_gen, gen = np.inf, 0, 0
    while algo.has_next():
        algo.next()
        gen += 1
        opt = algo.opt[0]
        f = float(opt.F[0])
        feas = bool(opt.CV[0] <= 0)
        key = f if feas else np.inf
        if key < best - 1e-12:
            best, best_gen = key, gen
        if progress is not None:
            progress(gen, f, feas)
        if gen - best_gen >= patience and np.isfinite(best):
            break
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            stats["time_limited"] = True
            break
    opt = algo.opt[0]
    X = enc.chromosome(np.rint(opt.X).astype(np.int64))
    stats.update(generations=gen)
    if polish_sweeps:
        left = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))
        X, moves = polish(enc, cost, X, sweeps=polish_sweeps, time_limit=left)
        stats["polish_moves"] = moves
    stats["seconds"] = time.perf_counter() - t0
    return X, stats


def _key(ev) -> np.ndarray:
    """Sort key of evaluated chromosomes: feasible first, then latency (violation when not)."""
    v = ev.violation
    return np.where(v > 0, 1e30 + v, ev.latency)


def polish(enc: Encoding, cost: CostModel, X, sweeps: int = 1, time_limit: float | None = None):
    """Local search after the GA (a memetic step): for every operator in order, try its
    candidate splits (`candidates`, plus its neighbours' shares rescaled to it) with the rest
    fixed, all priced in one `evaluate` call, and keep the best if it is better. Returns
    (chromosome, number of improving moves). Deterministic."""
    t0 = time.perf_counter()
    X = np.array(X, dtype=np.int64)
    N = enc.problem.n
    best = _key(evaluate(enc, cost, X))[0]
    moves = 0
    for _ in range(sweeps):
        improved = False
        for i in range(N):
            if time_limit is not None and time.perf_counter() - t0 > time_limit:
                return X, moves
            cands = candidates(enc, cost, i, X)
            for j in (i - 1, i + 1):
                if 0 <= j < N and enc.dims[j] == enc.dims[i] and enc.dims[i] != "whole":
                    x = np.rint(X[j].astype(float) * enc.lengths[i] / max(X[j, -1], 1))
                    x = np.maximum.accumulate(x.astype(np.int64))
                    x[0], x[-1] = 0, enc.lengths[i]
                    cands.append(x)
            cands = [c for c in cands if not np.array_equal(c, X[i])]
            if not cands:
                continue
            Xc = np.repeat(X[None], len(cands), axis=0)
            Xc[:, i, :] = np.stack(cands)
            k = _key(evaluate(enc, cost, Xc))
            b = int(np.argmin(k))
            if k[b] < best - 1e-12 * max(1.0, abs(best)):
                X, best = Xc[b], k[b]
                moves += 1
                improved = True
        if not improved:
            break
    return X, moves

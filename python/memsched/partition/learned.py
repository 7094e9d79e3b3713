"""The learned initial cut: an LSTM pointer network (Inc-ILP paper, §III-B), numpy inference.

The agent reads the ops in one topological order (the model's own) and *points* at the ``k-1``
ops where a new stage begins, so its cut is contiguous along that order and always valid
(monotone along every edge, no stage empty). Architecture (Bello et al.'s pointer network, as
the paper uses it):

* node embedding: per-op features (`features`: ASAP level and its parent's level -- the paper's
  absolute and relative coordinates --, parameter bytes, running parameter share, output size,
  the activation bytes a cut before the op would send, degrees, ``k``), a linear layer;
* encoder: an LSTM over the embedded ops; its last state starts the decoder;
* decoder: an LSTM cell whose first input is a trained vector and later inputs the embedding of
  the op it pointed at; pointing attention ``u_i = v . tanh(W_ref e_i + W_q d_t)``, clipped by
  ``10 tanh``, masked so cut positions increase and leave an op for every later stage.

Training (``python -m memsched.partition.train_pointer``, torch, CPU, minutes): REINFORCE with
the paper's cosine-similarity reward between the agent's stage vector and the exact solver's
labels on synthetic DAGs (`memsched.partition.synthetic`), greedy rollout as the baseline. The
weights ship as ``data/pointer_net.npz``; inference here needs numpy only. The ``learned``
method returns the best (under the objective) of the greedy cut and 15 cuts sampled from the
policy -- Bello et al.'s "sampling" inference; ``samples=0`` gives the greedy cut alone.
"""
from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

from .base import register
from .problem import DEFAULT_SRAM, PartitionError, PartitionProblem, evaluate

WEIGHTS = os.path.join(os.path.dirname(__file__), "data", "pointer_net.npz")
N_FEATURES = 14
CLIP = 10.0
SAMPLES = 16  # default inference: best of the greedy cut and 15 sampled ones


def features(problem: PartitionProblem, k: int, order=None) -> np.ndarray:
    """``(n, N_FEATURES)`` float32 node features along ``order`` (default input order)."""
    order = problem.topological_order() if order is None else list(order)
    n = problem.n
    pos = {v: i for i, v in enumerate(order)}
    levels = problem.asap_levels()
    depth = max(1, max(levels, default=0))
    total = max(1, problem.total_param_bytes)
    own = np.array([problem.op_param_bytes(v) for v in order], dtype=np.float64)
    seen: set[int] = set()
    cum_before = np.zeros(n)
    run = 0
    for i, v in enumerate(order):
        cum_before[i] = run
        for b in problem.op_params[v]:
            if b not in seen:
                seen.add(b)
                run += problem.param_bytes[b]
    cum_after = np.append(cum_before[1:], run)
    outb = np.zeros(n)
    for t in problem.tensors:
        if t.producer >= 0:
            outb[pos[t.producer]] += t.nbytes
    # activation bytes a cut just before position i would send: produced before i, needed at/after
    width = np.zeros(n + 1)
    for t in problem.tensors:
        if t.nbytes == 0:
            continue
        a = 0 if t.producer < 0 else pos[t.producer] + 1
        e = n if t.is_output else max((pos[r] for r in t.consumers), default=a - 1) + 1
        if e > a:
            width[a:e] += t.nbytes  # cut positions a..e-1 (a cut before i lies after i-1)
    width = width[:n]
    indeg = np.array([len(problem.preds[v]) for v in order], dtype=np.float64)
    outdeg = np.array([len(problem.succs[v]) for v in order], dtype=np.float64)
    lvl = np.array([levels[v] for v in order], dtype=np.float64)
    plvl = np.array([max((levels[u] for u in problem.preds[v]), default=-1) + 1
                     for v in order], dtype=np.float64)
    maxlog = np.log1p(own.max()) if own.max() > 0 else 1.0
    f = np.stack([
        lvl / depth,
        plvl / depth,
        own / total,
        np.log1p(own) / maxlog,
        cum_before / total,
        cum_after / total,
        (cum_before / total * k) % 1.0,
        cum_before / total * k / 8.0,
        outb / max(1.0, outb.max()),
        width / max(1.0, width.max()),
        np.arange(n) / max(1, n - 1),
        np.minimum(indeg, 8) / 8.0,
        np.minimum(outdeg, 8) / 8.0,
        np.full(n, k / 8.0),
    ], axis=1)
    return f.astype(np.float32)


def cut_to_assignment(order, positions, n: int) -> list[int]:
    """Stage of every op when stage ``t+1`` starts at order position ``positions[t]``."""
    s = [0] * n
    stage, cuts = 0, list(positions)
    for i, v in enumerate(order):
        while stage < len(cuts) and i >= cuts[stage]:
            stage += 1
        s[v] = stage
    return s


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _lstm_step(x, h, c, w_ih, w_hh, b):
    g = w_ih @ x + w_hh @ h + b
    H = h.shape[0]
    i, f, gg, o = _sigmoid(g[:H]), _sigmoid(g[H:2 * H]), np.tanh(g[2 * H:3 * H]), \
        _sigmoid(g[3 * H:])
    c = f * c + i * gg
    return o * np.tanh(c), c


@lru_cache(maxsize=4)
def load_weights(path: str = WEIGHTS) -> dict:
    if not os.path.exists(path):
        raise FileNotFoundError(f"pointer-network weights not found: {path} (train them with "
                                "python -m memsched.partition.train_pointer)")
    with np.load(path) as z:
        return {key: z[key].astype(np.float64) for key in z.files}


def pointer_cut(problem: PartitionProblem, k: int, weights: dict | None = None,
                order=None, samples: int = 0, seed: int = 0) -> list[int] | list[list[int]]:
    """The ``k-1`` cut positions along ``order``: greedy decoding, or with ``samples > 0`` a
    list of that many cuts sampled from the policy (the greedy one first)."""
    W = load_weights() if weights is None else weights
    order = problem.topological_order() if order is None else list(order)
    n = problem.n
    x = features(problem, k, order).astype(np.float64)
    emb = x @ W["emb_w"].T + W["emb_b"]
    H = W["enc_w_hh"].shape[1]
    h, c = np.zeros(H), np.zeros(H)
    enc = np.zeros((n, H))
    be = W["enc_b_ih"] + W["enc_b_hh"]
    for i in range(n):
        h, c = _lstm_step(emb[i], h, c, W["enc_w_ih"], W["enc_w_hh"], be)
        enc[i] = h
    ref = enc @ W["ref_w"].T + W["ref_b"]
    ref32, v32 = ref.astype(np.float32), W["v"].astype(np.float32)
    bd = W["dec_b_ih"] + W["dec_b_hh"]
    S = max(1, samples)
    rng = np.random.default_rng(seed)
    # decode S sequences at once (row 0 greedy, the others sampled)
    hs, cs = np.repeat(h[None], S, 0), np.repeat(c[None], S, 0)
    inp = np.repeat(W["dec_start"][None], S, 0)
    prev = np.zeros(S, dtype=np.int64)
    cuts = np.zeros((S, k - 1), dtype=np.int64)
    ar = np.arange(n)
    for t in range(k - 1):
        g = inp @ W["dec_w_ih"].T + hs @ W["dec_w_hh"].T + bd
        i_, f_, g_, o_ = (_sigmoid(g[:, :H]), _sigmoid(g[:, H:2 * H]), np.tanh(g[:, 2 * H:3 * H]),
                          _sigmoid(g[:, 3 * H:]))
        cs = f_ * cs + i_ * g_
        hs = o_ * np.tanh(cs)
        q = hs @ W["q_w"].T + W["q_b"]
        hi = n - (k - 1 - t)  # leave one op for every later stage
        lo = int(prev.min()) + 1  # attention only over positions some row may still take
        u = np.full((S, n), -np.inf)
        att = np.tanh(ref32[None, lo:hi + 1] + q.astype(np.float32)[:, None, :]) @ v32
        u[:, lo:hi + 1] = CLIP * np.tanh(att.astype(np.float64))
        u[ar[None] <= prev[:, None]] = -np.inf
        p = np.argmax(u, axis=1)
        if S > 1:
            z = np.exp(u[1:] - u[1:].max(axis=1, keepdims=True))
            z /= z.sum(axis=1, keepdims=True)
            p[1:] = [rng.choice(n, p=row) for row in z]
        cuts[:, t] = p
        prev = p
        inp = emb[p]
    if samples <= 0:
        return [int(x) for x in cuts[0]]
    return [[int(x) for x in row] for row in cuts]


def learned_cut(problem: PartitionProblem, stages: int, weights: dict | None = None,
                samples: int = 0, sram_bytes: int = DEFAULT_SRAM, seed: int = 0) -> list[int]:
    """The learned initial cut as an assignment (valid by construction): the greedy decoding,
    or with ``samples > 0`` the best under the objective of the greedy cut and ``samples - 1``
    cuts sampled from the policy (Bello et al.'s "sampling" inference)."""
    problem.check_stages(stages)
    if stages == 1:
        return [0] * problem.n
    order = problem.topological_order()
    if samples <= 0:
        return cut_to_assignment(order, pointer_cut(problem, stages, weights, order), problem.n)
    best, best_key = None, None
    for cut in pointer_cut(problem, stages, weights, order, samples=samples, seed=seed):
        s = cut_to_assignment(order, cut, problem.n)
        key = evaluate(problem, s, sram_bytes).key
        if best_key is None or key < best_key:
            best, best_key = s, key
    return best


@register("learned", "the learned initial cut alone (LSTM pointer network, numpy inference)")
def learned(problem: PartitionProblem, stages: int, sram_bytes: int,
            time_limit: float | None = None, samples: int = SAMPLES, seed: int = 0, **_):
    try:
        return learned_cut(problem, stages, samples=samples, sram_bytes=sram_bytes,
                           seed=seed), {}, False, {"samples": samples}
    except FileNotFoundError as e:
        raise PartitionError(str(e)) from None

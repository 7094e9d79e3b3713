"""The one evaluator of split chromosomes: latency, traffic, per-device memory, constraints.

Every solver (single device, uniform, greedy, GA) and every printed number goes through
`evaluate`, which prices a whole population ``X`` of shape ``(P, N, n+1)`` at once with numpy.

**Communication** (paper §3.3.2, cases (i)-(iii)). Before operator ``i`` runs, device ``k``
needs, of every input tensor, the region its output slice reads (`encoding.needed`); it already
holds the part that its own slice of the producer covers (`encoding.held`); every other part
comes from the device that holds it (a graph input: from the host). So the bytes device ``k``
receives are ``needed - held``, which gives the paper's three cases:

* (i) ``i`` split by cout (a dense convolution): the whole input is needed; device ``k``
  receives ``M_out(j)`` minus its own slice of it;
* (ii) ``i`` by fmh, producer ``j`` by cout: rows ``[s, e)`` (with halo) of every channel are
  needed; ``k`` holds its channels, so it receives ``M_out(j) * (C - C_k)/C * (e - s)/H``;
* (iii) both by fmh: ``k`` receives the needed rows it does not hold,
  ``M_out(j) * H_comm / H`` with ``H_comm = (e - s) - |[s, e) & [x_k-1, x_k)|``, i.e.
  ``max(0, e - x_k) + max(0, x_k-1 - s)`` when the ranges overlap (the paper prints ``max``
  where this ``min``-form is meant) and ``e - s`` when they do not.

How long the transfers take depends on the link (`cost.Link`): pieces per owner, broadcast,
host relay and remote calls are priced there; consecutive operators without transfers form a
stage run as one call per device.

**Memory** (eq. 18): device ``k`` holds, throughout, the weights of the slices it computes
(cout slices the weights; fmh and whole replicate them), and at operator ``i``: every slice it
holds of a tensor that is live (from its producer to its last consumer, graph outputs to the
end; one definition of liveness with `memsched.memory`) plus, when it takes part in ``i``, the
input regions it assembles (received pieces plus the assembled region; a strict sub-region of
a local slice is a copy too). ``cv7[i, k] = that - limit_k``. With everything on one device and
weights not counted, the peak equals `memsched.memory`'s ``paper`` peak of the same order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cost import CostModel
from .encoding import Encoding, cells, held, needed, overlap


@dataclass
class Evaluation:
    latency: np.ndarray  # (P,) seconds
    comm_time: np.ndarray  # (P,)
    comm_bytes: np.ndarray  # (P,) bytes received by devices (and the host for outputs)
    peak: np.ndarray  # (P, n) bytes per device
    weights: np.ndarray  # (P, n) resident weight bytes per device
    cv: dict  # name -> array, every entry <= 0 when legal (cv7: (P, N, n))
    received: np.ndarray  # (P, N, n) bytes device k receives for op i
    stages: np.ndarray  # (P,) number of stages

    @property
    def violation(self) -> np.ndarray:
        """(P,) sum of the positive constraint terms (0 = legal)."""
        tot = np.zeros(self.latency.shape[0])
        for v in self.cv.values():
            tot += np.maximum(v.reshape(v.shape[0], -1), 0).sum(axis=1)
        return tot

    @property
    def feasible(self) -> np.ndarray:
        return self.violation <= 0

    def row(self, p: int = 0) -> dict:
        return {"latency_s": float(self.latency[p]), "comm_s": float(self.comm_time[p]),
                "comm_bytes": int(self.comm_bytes[p]),
                "per_device_peak_bytes": [int(v) for v in self.peak[p]],
                "per_device_weight_bytes": [int(v) for v in self.weights[p]],
                "memory_ok": bool(self.feasible[p]), "stages": int(self.stages[p])}


def _regions_equal(r1, r2):
    return (r1[0] == r2[0]) & (r1[1] == r2[1]) & (r1[2] == r2[2]) & (r1[3] == r2[3])


def _intersect(r1, r2):
    return (np.maximum(r1[0], r2[0]), np.minimum(r1[1], r2[1]),
            np.maximum(r1[2], r2[2]), np.minimum(r1[3], r2[3]))


def input_traffic(enc: Encoding, X, i: int, r):
    """Pieces of input ``r`` of op ``i``: (need, pieces cells (P, n_dest, n_own), local cells,
    owner held regions or None for a graph input)."""
    prob = enc.problem
    ten = prob.tensors[r.tensor]
    d = enc.dims[i]
    a, b = X[:, i, :-1], X[:, i, 1:]
    need = needed(r, ten, d, a, b)  # each (P, n)
    j = ten.producer
    if j < 0:
        return need, None, np.zeros_like(a), None
    hj = held(ten, enc.dims[j], X[:, j, :-1], X[:, j, 1:])  # each (P, n)
    nk = tuple(x[:, :, None] for x in need)
    hd = tuple(x[:, None, :] for x in hj)
    pieces = overlap(nk, hd)  # (P, n, n)
    local = np.diagonal(pieces, axis1=1, axis2=2).copy()
    idx = np.arange(enc.n)
    pieces[:, idx, idx] = 0
    return need, pieces, local, hj


@dataclass
class OpTerms:
    """What op ``i`` costs, per chromosome of the population (see `op_terms`)."""

    t_comm: np.ndarray  # (P,) transfer time before the op
    comp: np.ndarray  # (P, n) compute seconds per device
    on: np.ndarray  # (P, n) device takes part
    recv: np.ndarray  # (P, n) bytes received per device
    extra: np.ndarray  # (P, n) assembled-input bytes on each device while the op runs
    w_add: np.ndarray  # (P, n) weight bytes the op adds to each device
    out_held: np.ndarray  # (P, n) bytes of the output slice each device keeps
    assembled: np.ndarray  # (P, n) bytes of input regions assembled (copied) on each device


def op_terms(enc: Encoding, cost: CostModel, X, i: int) -> OpTerms:
    """Transfers, compute and memory terms of op ``i`` (only rows ``i`` and its producers of
    ``X`` matter); the building block of `evaluate` and of the greedy baseline."""
    prob = enc.problem
    P, n = X.shape[0], enc.n
    link = cost.link
    host = link.topology == "host"
    lat, bw, bw_dn = link.latency, link.bandwidth, link.bandwidth_down
    call = link.call_overhead
    op = prob.ops[i]
    d = enc.dims[i]
    a, b = X[:, i, :-1], X[:, i, 1:]
    size = b - a
    on = size > 0
    L = enc.lengths[i]
    if d == "cout":
        w_add = op.weight_cout * size / L + (op.weight_bytes - op.weight_cout) * on
    else:
        w_add = op.weight_bytes * on.astype(float)
    out = prob.tensors[op.output]
    out_held = cells(held(out, d, a, b)) * out.unit
    t_comm = np.zeros(P)
    recv_all = np.zeros((P, n))
    extra = np.zeros((P, n))
    copied = np.zeros((P, n))
    for r in op.inputs:
        ten = prob.tensors[r.tensor]
        u = ten.unit
        need, pieces, local, hj = input_traffic(enc, X, i, r)
        need_cells = cells(need)
        from_host = pieces is None
        if from_host:  # a graph input: the host is its one owner and holds all of it
            pieces = need_cells[:, :, None]
            zero = np.zeros((P, 1), dtype=np.int64)
            hj = (zero, zero + ten.channels, zero, zero + ten.rows)
        recv = pieces.sum(axis=2)
        cnt = (pieces > 0).sum(axis=(1, 2))
        recv_bytes = recv.sum(axis=1) * u
        if host or link.broadcast:
            # one download / transmission per owner: the hull of what the others need
            has = pieces > 0  # (P, k, d)
            inter = _intersect(tuple(x[:, :, None] for x in need),
                               tuple(x[:, None, :] for x in hj))
            big = np.iinfo(np.int64).max
            hull = (np.where(has, inter[0], big).min(axis=1),
                    np.where(has, inter[1], -1).max(axis=1),
                    np.where(has, inter[2], big).min(axis=1),
                    np.where(has, inter[3], -1).max(axis=1))
            owner_has = has.any(axis=1)  # (P, d)
            n_own = owner_has.sum(axis=1)
            hull_bytes = np.where(owner_has, cells(hull), 0).sum(axis=1) * u
            if host:
                t_comm += cnt * lat + recv_bytes / bw  # uploads, one per piece
                if not from_host:  # downloads, one per owner (+ a call to cut a part out)
                    sub = owner_has & ~_regions_equal(hull, hj)
                    t_comm += n_own * lat + hull_bytes / bw_dn + sub.sum(axis=1) * call
            else:
                t_comm += n_own * lat + hull_bytes / bw
        else:
            t_comm += cnt * lat + recv_bytes / bw
        # memory on the receivers: the received pieces, plus the region assembled from two or
        # more parts (or cut out of a larger local slice)
        parts = (pieces > 0).sum(axis=2) + (local > 0)
        if from_host:
            cut = np.zeros_like(recv, dtype=bool)
        else:
            cut = (local > 0) & ~_regions_equal(need, hj)
        assembled = (parts >= 2) | ((parts == 1) & cut)
        copied += np.where(assembled, need_cells * u, 0)
        extra += np.where(assembled, need_cells * u, 0) + recv * u
        recv_all += recv * u
    comp = cost.times.time(d, i, size)
    if cost.copy_bandwidth:
        comp = comp + copied / cost.copy_bandwidth
    comp = comp / cost.speeds[None, :]
    return OpTerms(t_comm, comp, on, recv_all, extra, w_add, out_held, copied)


def evaluate(enc: Encoding, cost: CostModel, X) -> Evaluation:
    """Price chromosomes ``X`` ``(P, N, n+1)`` (or one ``(N, n+1)``); see the module docstring."""
    X = enc.check_shape(X)
    if X.ndim == 2:
        X = X[None]
    prob = enc.problem
    n, N, P = enc.n, prob.n, X.shape[0]
    if cost.n != n:
        raise ValueError(f"cost model has {cost.n} devices, encoding {n}")
    link = cost.link
    host = link.topology == "host"
    call = link.call_overhead

    latency = np.zeros(P)
    comm_time = np.zeros(P)
    comm_bytes = np.zeros(P)
    received = np.zeros((P, N, n))
    extra = np.zeros((P, N, n))
    weights = np.zeros((P, n))
    stage_sum = np.zeros((P, n))
    stage_on = np.zeros((P, n), dtype=bool)
    stages = np.zeros(P, dtype=np.int64)
    # live-slice bookkeeping: delta[i] is added to the live bytes from op i on
    delta = np.zeros((P, N + 1, n))

    # slices produced in the current stage that outlive it are the stage function's results;
    # more than one costs one remote call each (tuple items are taken out on the device)
    last = [prob.last_use(op.output) for op in prob.ops]
    expire: dict = {}
    for j, lu in enumerate(last):
        if lu > j:
            expire.setdefault(lu + 1, []).append(j)
    results = np.zeros((P, n))
    stage_start = np.zeros(P, dtype=np.int64)
    ons: list = []

    def flush(mask, i):
        extra_calls = np.where(results > 1, results, 0) * link.item_overhead
        t = np.max(np.where(stage_on, stage_sum + call + extra_calls, 0.0), axis=1)
        latency[:] += np.where(mask, t, 0.0)
        stages[:] += (mask & stage_on.any(axis=1))
        stage_sum[mask] = 0.0
        stage_on[mask] = False
        results[mask] = 0
        stage_start[mask] = i

    for i, op in enumerate(prob.ops):
        for j in expire.get(i, ()):
            results -= ons[j] * (stage_start <= j)[:, None]
        t = op_terms(enc, cost, X, i)
        weights += t.w_add
        delta[:, i, :] += t.out_held
        delta[:, min(last[i], N - 1) + 1, :] -= t.out_held
        extra[:, i, :] = t.extra
        received[:, i, :] = t.recv
        rb = t.recv.sum(axis=1)
        comm_bytes += rb
        # a stage ends before an op that needs transfers
        flush((rb > 0) | (i == 0), i)
        latency += t.t_comm
        comm_time += t.t_comm
        stage_sum += t.comp
        stage_on |= t.on
        ons.append(t.on.astype(float))
        if last[i] > i:
            results += ons[i]
    flush(np.ones(P, dtype=bool), N)
    # graph outputs back to the host
    for tid in prob.outputs:
        ten = prob.tensors[tid]
        j = ten.producer
        if j < 0:
            continue
        hj = held(ten, enc.dims[j], X[:, j, :-1], X[:, j, 1:])
        c = cells(hj)
        cnt = (c > 0).sum(axis=1)
        byt = c.sum(axis=1) * ten.unit
        t_out = cnt * link.latency + byt / (link.bandwidth_down if host else link.bandwidth)
        latency += t_out
        comm_time += t_out
        comm_bytes += byt
    # memory
    live = np.cumsum(delta, axis=1)[:, :N, :]  # (P, N, n): slices live at op i
    foot = live + extra
    if cost.count_weights:
        foot = foot + weights[:, None, :]
    if N:
        peak = foot.max(axis=1)
    else:
        peak = weights.copy() if cost.count_weights else np.zeros((P, n))
    limits = cost.limits[None, None, :]
    finite = np.isfinite(limits)
    cv = enc.constraints(X)
    cv["cv7"] = np.where(finite, foot - np.where(finite, limits, 0), -1.0)
    return Evaluation(latency, comm_time, comm_bytes, peak, weights, cv, received, stages)

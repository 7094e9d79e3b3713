"""GenEFlow's chromosome: one split vector per operator, and what each vector means.

For operator ``i`` (in execution order) split over ``n`` devices the gene is
``x_i = [x_i0, x_i1, ..., x_in]`` with (paper eqs. 6-10)::

    x_ij integer,  x_i0 = 0,  x_in = length_i,  x_i0 <= x_i1 <= ... <= x_in

and device ``j`` (1-based in the paper, 0-based here) computes the output slice
``[x_i,j-1, x_ij)`` along the operator's split dimension; ``x_i,j-1 == x_ij`` leaves device
``j`` out of the operator. The chromosome is ``X = [x_1, ..., x_N]`` (eq. 11), stored as an
integer array of shape ``(N, n + 1)`` (a population: ``(P, N, n + 1)``).

**Split dimension (the k1/k2 rule).** The paper picks cout when ``k1 < k2`` and fmh otherwise,
from a table that did not survive in our copy of the text; it says the memory calculations and
the data to transfer decide. Our reading (`choose_dims`), stated once here: ``k1`` / ``k2`` are
the bytes the devices must receive for the operator under an even ``n``-way split along cout /
fmh, given the dimensions already chosen for the operators before it ("the current graph
state"); memory then overrides: fmh replicates an operator's weights on every device, so while
the replicated weights plus an even share of the activation peak do not fit the smallest
device, the operator with the most weights goes to cout. Convolutions on large feature maps
exchange only halo rows by fmh, deep layers whose weights do not fit go cout, and
element-wise/pool/concat operators follow their producer (zero traffic). Ties go fmh, as in the
paper. An operator that supports one dimension uses it; one that supports none is ``whole``:
its length is 1 and the gene picks the device.

**Constraint terms** (paper eqs. 13-16; eq. 18, memory, is computed by the evaluator):
``cv1 = x_i0``, ``cv2 = -x_i0``, ``cv3 = x_in - length``, ``cv4 = length - x_in``,
``cv5_j = x_i,j-1 - x_ij``, ``cv6 = (devices used) - min(n, k_max)``, each ``<= 0`` when legal.
``k_max`` (the most parts an operator may take) is ``length`` (every part at least one row or
channel), capped by ``max_parts`` when given; a ``whole`` operator has ``k_max = 1``.

**Regions.** `needed` maps an output slice to the input region it reads (`InputReq`), `held`
gives the region of a tensor a device holds after computing its slice. Both work element-wise
on numpy arrays, so the evaluator prices a whole population at once.
"""
from __future__ import annotations

import numpy as np

from .problem import InputReq, SplitError, SplitProblem, TensorInfo


# ---------------------------------------------------------------------------- regions
def held(ten: TensorInfo, dim: str, s, e):
    """Region ``(c0, c1, h0, h1)`` of ``ten`` a device holds after computing ``[s, e)`` of its
    producer split along ``dim`` (empty when ``s == e``)."""
    s = np.asarray(s)
    e = np.asarray(e)
    on = e > s
    zero = np.zeros_like(s)
    C = np.where(on, ten.channels, 0)
    H = np.where(on, ten.rows, 0)
    if dim == "cout":
        return s, e, zero, H
    if dim == "fmh":
        return zero, C, s, e
    return zero, C, zero, H  # whole: everything or nothing


def needed(req: InputReq, ten: TensorInfo, dim: str, a, b):
    """Region ``(c0, c1, h0, h1)`` of input ``ten`` that computing output slice ``[a, b)``
    along ``dim`` reads (empty when ``a == b``)."""
    a = np.asarray(a)
    b = np.asarray(b)
    on = b > a
    zero = np.zeros_like(a)
    C, H = ten.channels, ten.rows
    full_c = (zero, np.where(on, C, 0))
    full_h = (zero, np.where(on, H, 0))
    if dim == "cout":
        h = full_h
        if req.cmode == "same":
            c = (a, b) if C > 1 else full_c
        elif req.cmode == "group":
            og, ig = req.cout_group, req.cin_group
            c = ((a // og) * ig, -(-b // og) * ig)
        elif req.cmode == "offset":
            c0 = np.clip(a - req.offset, 0, C)
            c1 = np.clip(b - req.offset, 0, C)
            c = (c0, c1)
            h = (zero, np.where(c1 > c0, H, 0))
        else:
            c = full_c
    elif dim == "fmh":
        c = full_c
        if req.rmode == "window":
            h0 = np.clip(a * req.stride - req.pad, 0, H)
            h1 = np.clip((b - 1) * req.stride - req.pad + req.extent, 0, H)
            h = (h0, np.maximum(h1, h0))
        elif req.rmode == "same" and H > 1:
            h = (a, b)
        else:
            h = full_h
    else:
        c, h = full_c, full_h
    c0, c1 = c
    h0, h1 = h
    empty = ~on | (c1 <= c0) | (h1 <= h0)
    return (np.where(empty, 0, c0), np.where(empty, 0, c1),
            np.where(empty, 0, h0), np.where(empty, 0, h1))


def overlap(r1, r2):
    """Cells in the intersection of two regions (element-wise)."""
    dc = np.minimum(r1[1], r2[1]) - np.maximum(r1[0], r2[0])
    dh = np.minimum(r1[3], r2[3]) - np.maximum(r1[2], r2[2])
    return np.maximum(dc, 0) * np.maximum(dh, 0)


def cells(r):
    return np.maximum(r[1] - r[0], 0) * np.maximum(r[3] - r[2], 0)


# ---------------------------------------------------------------------------- encoding
def even_split(length: int, n: int, devices=None) -> np.ndarray:
    """``[0, ..., length]`` splitting ``length`` as evenly as possible over ``devices``
    (default all ``n``; others get nothing)."""
    devices = list(range(n)) if devices is None else list(devices)
    sizes = np.zeros(n, dtype=np.int64)
    k = len(devices)
    for r, d in enumerate(devices):
        sizes[d] = length // k + (1 if r < length % k else 0)
    return np.concatenate([[0], np.cumsum(sizes)])


def proportional_split(length: int, weights) -> np.ndarray:
    """Split ``length`` in proportion to ``weights`` (largest remainders)."""
    w = np.asarray(weights, dtype=float)
    w = w / w.sum()
    raw = w * length
    sizes = np.floor(raw).astype(np.int64)
    for d in np.argsort(-(raw - sizes), kind="stable")[: length - sizes.sum()]:
        sizes[d] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


class Encoding:
    """The chromosome layout of a problem on ``n`` devices: split dimension and length of every
    operator (k1/k2 rule, module docstring), ``k_max``, gene <-> chromosome conversion.

    The GA searches the interior points ``x_i1 .. x_i,n-1`` (``n - 1`` integers per operator in
    ``[0, length_i]``): the endpoints are fixed by eqs. 8-9, and `chromosome` sorts each vector
    (the repair that keeps eq. 10), so cv1-cv5 hold for every searched chromosome; `constraints`
    still computes them for any chromosome handed in from outside.
    """

    def __init__(self, problem: SplitProblem, n: int, dims=None, max_parts: int | None = None,
                 memory: float | None = None):
        if int(n) < 1:
            raise SplitError(f"need at least one device, got {n}")
        self.problem = problem
        self.n = int(n)
        self.dims = list(dims) if dims is not None else choose_dims(problem, self.n, memory)
        if len(self.dims) != problem.n:
            raise SplitError("one split dimension per operator expected")
        for op, d in zip(problem.ops, self.dims):
            if d != "whole" and d not in op.dims:
                raise SplitError(f"op {op.name!r} cannot be split along {d}")
        self.lengths = np.array([1 if d == "whole" else int(op.dims[d])
                                 for op, d in zip(problem.ops, self.dims)], dtype=np.int64)
        kmax = np.where(np.array(self.dims) == "whole", 1, self.lengths)
        if max_parts is not None:
            kmax = np.minimum(kmax, int(max_parts))
        self.k_max = kmax

    @property
    def n_genes(self) -> int:
        return self.problem.n * (self.n - 1)

    def chromosome(self, genes) -> np.ndarray:
        """Interior points ``(P, N*(n-1))`` or ``(N*(n-1),)`` -> chromosomes ``(P, N, n+1)``
        (sorted and clipped to ``[0, length]``)."""
        g = np.asarray(genes, dtype=np.int64)
        single = g.ndim == 1
        g = g.reshape(-1, self.problem.n, self.n - 1)
        g = np.sort(np.clip(g, 0, self.lengths[None, :, None]), axis=2)
        P = g.shape[0]
        X = np.empty((P, self.problem.n, self.n + 1), dtype=np.int64)
        X[:, :, 0] = 0
        X[:, :, 1:-1] = g
        X[:, :, -1] = self.lengths[None, :]
        return X[0] if single else X

    def genes(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.int64)
        if X.ndim == 2:
            return X[:, 1:-1].reshape(-1)
        return X[:, :, 1:-1].reshape(X.shape[0], -1)

    def check_shape(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.int64)
        if X.shape[-2:] != (self.problem.n, self.n + 1):
            raise SplitError(f"chromosome of shape {X.shape[-2:]}, expected "
                             f"({self.problem.n}, {self.n + 1})")
        return X

    def constraints(self, X) -> dict:
        """cv1-cv6 (module docstring) of chromosomes ``(P, N, n+1)``: dict name -> array
        ``(P, N)`` (``cv5``: ``(P, N, n)``); legal when every entry is ``<= 0``."""
        X = self.check_shape(X)
        if X.ndim == 2:
            X = X[None]
        L = self.lengths[None, :]
        used = (np.diff(X, axis=2) != 0).sum(axis=2)
        return {
            "cv1": X[:, :, 0],
            "cv2": -X[:, :, 0],
            "cv3": X[:, :, -1] - L,
            "cv4": L - X[:, :, -1],
            "cv5": X[:, :, :-1] - X[:, :, 1:],
            "cv6": used - np.minimum(self.n, self.k_max)[None, :],
        }

    def is_legal(self, X) -> np.ndarray:
        cv = self.constraints(X)
        ok = np.ones(cv["cv1"].shape[0], dtype=bool)
        for v in cv.values():
            ok &= (v.reshape(v.shape[0], -1) <= 0).all(axis=1)
        return ok

    # --------------------------------------------------------------- reference solutions
    def uniform(self) -> np.ndarray:
        """Equal shares on every operator (``whole`` ones on device 0)."""
        return np.stack([even_split(L, self.n) if d != "whole" else even_split(1, self.n, [0])
                         for L, d in zip(self.lengths, self.dims)])

    def single(self, device: int = 0) -> np.ndarray:
        return np.stack([even_split(int(L), self.n, [device]) for L in self.lengths])


def activation_peak(problem: SplitProblem) -> int:
    """Peak live activation bytes of the problem's order on one device (no weights)."""
    N = problem.n
    delta = np.zeros(N + 1)
    for i, op in enumerate(problem.ops):
        b = problem.tensors[op.output].nbytes
        delta[i] += b
        delta[min(problem.last_use(op.output), N - 1) + 1] -= b
    return int(np.cumsum(delta)[:N].max()) if N else 0


def _received(problem, dims, i, d, n) -> float:
    """Bytes all devices receive for op ``i`` split evenly along ``d`` (producers split evenly
    along ``dims``)."""
    op = problem.ops[i]
    x = even_split(int(op.dims[d]), n)
    total = 0.0
    for j in range(n):
        a, b = x[j], x[j + 1]
        if b <= a:
            continue
        for r in op.inputs:
            ten = problem.tensors[r.tensor]
            need = needed(r, ten, d, a, b)
            src = ten.producer
            have = 0
            if src >= 0:
                pd = dims[src]
                pL = 1 if pd == "whole" else int(problem.ops[src].dims[pd])
                px = even_split(pL, n) if pd != "whole" else even_split(1, n, [0])
                have = overlap(need, held(ten, pd, px[j], px[j + 1]))
            total += (int(cells(need)) - int(have)) * ten.unit
    return total


def _by_traffic(problem, n, forced) -> list[str]:
    dims: list[str] = []
    for i, op in enumerate(problem.ops):
        cands = [d for d in ("cout", "fmh") if d in op.dims]
        if i in forced:
            dims.append(forced[i])
        elif not cands:
            dims.append("whole")
        elif len(cands) == 1 or n == 1:
            dims.append(cands[-1] if n == 1 else cands[0])
        else:
            k1 = _received(problem, dims, i, "cout", n)
            k2 = _received(problem, dims, i, "fmh", n)
            dims.append("cout" if k1 < k2 else "fmh")
    return dims


def resident_weights(problem: SplitProblem, dims, n: int) -> float:
    """Weight bytes per device when every op is split evenly over ``n`` devices along
    ``dims`` (cout slices weights, fmh replicates them)."""
    tot = 0.0
    for op, d in zip(problem.ops, dims):
        tot += op.weight_bytes - op.weight_cout + (op.weight_cout / n if d == "cout"
                                                   else op.weight_cout)
    return tot


def choose_dims(problem: SplitProblem, n: int, memory: float | None = None) -> list[str]:
    """The k1/k2 rule (module docstring), in two steps:

    1. traffic: in execution order, ``k1`` / ``k2`` = bytes the devices must receive for the
       op split evenly along cout / fmh, given the dims chosen before it; cout when
       ``k1 < k2``, else fmh (ties: fmh, as in the paper);
    2. memory (when a per-device ``memory`` is given): while the weights every device holds
       (fmh replicates them, cout slices them) plus an even share of the activation peak do not
       fit, the op with the most weights still split by fmh goes to cout; then step 1 runs again
       for the ops without weights, which follow their producers.
    """
    dims = _by_traffic(problem, n, {})
    if memory is None or n == 1 or not np.isfinite(memory):
        return dims
    act = activation_peak(problem) / n
    movable = sorted((i for i, (op, d) in enumerate(zip(problem.ops, dims))
                      if d != "cout" and "cout" in op.dims and op.weight_cout > 0),
                     key=lambda i: -problem.ops[i].weight_cout)
    res = resident_weights(problem, dims, n)
    for i in movable:
        if res + act <= memory:
            break
        op = problem.ops[i]
        res -= op.weight_cout - op.weight_cout / n
        dims[i] = "cout"
    forced = {i: d for i, (op, d) in enumerate(zip(problem.ops, dims)) if op.weight_bytes > 0}
    return _by_traffic(problem, n, forced)

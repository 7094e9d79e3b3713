"""The windows' walk on numpy lanes: `axis_windows` for many bands at once.

A lane is one band of one band count (and one pass group of a squeeze-and-excitation region):
its seeds are the band's range of each target tensor, and `lane_walk` back-propagates every
lane's range operator by operator, last first, with the rules of `geometry.axis_read` (the
same ranges, the same tensors, the same reasons as `windows.axis_windows` band by band).
`SharedWalk` walks from one end down once for every region that ends there with the same
seeds: walking backwards, what it holds after the operators from ``start`` on does not depend
on the operators before ``start``. `windows.grid_macs` reads its sums.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .errors import Refused
from .geometry import SpatialModel
from .regions import VECTOR, Region

BATCH = 8  # band counts walked together (`windows`): the default grids' rows and columns
NONE = 1 << 40  # a lane's low where the tensor is not needed (its high: -NONE)


def too_small(n: int, sizes) -> Refused | None:
    """Why ``n`` bands do not fit (as `axis_windows` band by band: the first size smaller
    than ``n``, group by group; ``sizes``: per group, its targets' sizes), or None."""
    for per in sizes:
        size = next((s for s in per if n > s), None)
        if size is not None:
            return Refused(f"{n} bands do not fit a size of {size}")
    return None


def seeds(sm: SpatialModel, region: Region, axis: int, ns: list[int], groups):
    """The lanes of `windows._band_table`: (the counts too small for a size -> `Refused`, the
    counts walked, the first lane of each (count, group), count-major, and the targets' lows
    and highs per lane)."""
    small: dict = {}
    lanes = 0
    per: dict = {}  # target (None: the split tensors) -> (first lane, lows, highs) per group
    blocks: list[int] = []
    counts: list[int] = []
    sizes = [[region.hw[axis]] if group is None else [sm.tensors[t].hw[axis] for t in group]
             for group in groups]
    for n in ns:
        why = too_small(n, sizes)
        if why is not None:
            small[n] = why
            continue
        counts.append(n)
        for group in groups:
            blocks.append(lanes)
            if group is None:
                per.setdefault(None, []).append((lanes, *cuts(region.hw[axis], n)))
            else:
                for t in dict.fromkeys(group):
                    per.setdefault(t, []).append((lanes, *cuts(sm.tensors[t].hw[axis], n)))
            lanes += n
    lows: dict = {}
    highs: dict = {}
    for t, rows in per.items():  # a target's range in the lanes of its groups
        lo = np.full(lanes, NONE, dtype=np.int64)
        hi = np.full(lanes, -NONE, dtype=np.int64)
        for first, a, b in rows:
            lo[first:first + len(a)], hi[first:first + len(a)] = a, b
        if t is None:  # the region without reductions: its split tensors, every lane
            for s in region.split:
                lows[s], highs[s] = lo, hi
        else:
            lows[t], highs[t] = lo, hi
    return small, counts, blocks, lows, highs


class SharedWalk:
    """`lane_walk` from operator ``end - 1`` down, one operator at a time, for every region that
    ends at ``end`` with the same seeds: walking backwards, what the walk holds after the
    operators from ``start`` on does not depend on the operators before ``start``. Per start
    passed: the tensors held so far (walk order) and the ranges of the tensors read so far
    and made before it (the region's inputs among them read theirs)."""

    def __init__(self, sm: SpatialModel, top: int, axis: int, counts: list, blocks: list,
                 lows: dict, highs: dict, strict: bool, full: set, too_small: dict,
                 keep_reads: bool):
        self.sm, self.axis, self.at = sm, axis, top
        self.too_small, self.counts, self.blocks = too_small, counts, blocks
        self.strict, self.full = strict, full
        self.lows, self.highs = lows, highs
        self.names: list = []  # the tensors held, walk order; their ranges' rows below
        lanes = len(next(iter(lows.values()))) if lows else 0
        self.lo = np.empty((16, lanes), dtype=np.int64)
        self.hi = np.empty((16, lanes), dtype=np.int64)
        self.open = set(lows)  # tensors with ranges whose operator is not walked yet
        # start -> (held count, {open tensor: (lows, highs)}: the reads, when kept)
        self.snaps: dict = {}
        self.refused: tuple | None = None  # (operator index, Refused): the walk stops there
        self.keep_reads = keep_reads

    @classmethod
    def of_region(cls, sm: SpatialModel, region: Region, axis: int, ns: list[int], groups
                  ) -> "SharedWalk":
        """The walk of ``region``'s pass ``groups`` (`seeds`: the counts too small left out),
        from its end, the reads of its inputs kept."""
        small, counts, blocks, lows, highs = seeds(sm, region, axis, ns, groups)
        strict = groups == [None]
        full = set(lows) if strict else \
            {t for t in lows if all(t in group for group in groups)}
        return cls(sm, region.length, axis, counts, blocks, lows, highs, strict, full, small,
                   True)

    @classmethod
    def seeded(cls, sm: SpatialModel, top: int, axis: int, ns: tuple, targets: tuple, hw,
               strict: bool) -> "SharedWalk":
        """A walk from operator ``top - 1`` down of ``targets`` (each cut in the bands of
        its own size; ``hw``: the one size of them all, a strict walk's), every count of
        ``ns`` walked whatever the sizes (`_GroupMacs` asks only for counts that fit its
        region's); MACs only: the region inputs' reads are not kept."""
        blocks = [sum(ns[:j]) for j in range(len(ns))]
        lanes = sum(ns)
        lows: dict = {}
        highs: dict = {}
        for t in targets:
            size = hw[axis] if hw is not None else sm.tensors[t].hw[axis]
            lo = np.empty(lanes, dtype=np.int64)
            hi = np.empty(lanes, dtype=np.int64)
            for first, n in zip(blocks, ns):
                lo[first:first + n], hi[first:first + n] = cuts(size, n)
            lows[t], highs[t] = lo, hi
        # one group: every lane needs every target
        return cls(sm, top, axis, list(ns), blocks, lows, highs, strict, set(lows), {}, False)

    def positions(self) -> dict:
        """Tensor -> its row, for the tensors held so far."""
        got = self.__dict__.get("_pos")
        if got is None or len(got) != len(self.names):
            got = self._pos = {t: i for i, t in enumerate(self.names)}
        return got

    def band_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """Per (count, group) row and tensor held so far (walk order): the sum of its
        extents over the bands, and whether the first band holds it (as
        `windows._band_table`, for every tensor walked)."""
        n = len(self.names)
        got = self.__dict__.get("_sums")
        if got is None or got[0] != n:
            lo, hi = self.lo[:n], self.hi[:n]
            ext = hi - lo
            there = lo != NONE
            if not self.strict:
                ext[~there] = 0
            sums = np.add.reduceat(ext, self.blocks, axis=1).T if n else \
                np.zeros((len(self.blocks), 0), dtype=np.int64)
            got = self._sums = (n, sums, there[:, self.blocks].T)
        return got[1], got[2]

    def reach(self, start: int) -> Refused | None:
        """Walk down to ``start``: None, or the `Refused` of a region from there."""
        if self.at > start and self.refused is None:
            self.upto(start)
        if self.refused is not None and self.refused[0] >= start:
            return self.refused[1]
        return None

    def upto(self, start: int):
        """(held tensors, their lows and highs (rows), {tensor: (lows, highs)} of the tensors
        read and made before ``start``) of the region from ``start``, or its `Refused`."""
        lows, highs, opened = self.lows, self.highs, self.open
        while self.at > start and self.refused is None:
            k = self.at - 1
            entry = lane_entry(self.sm, k, self.axis)
            if entry is not None:
                try:
                    got = lane_walk([entry], lows, highs, self.strict, self.full)
                except Refused as e:
                    self.refused = (k, e)
                    break
                for t, (a, b) in got.items():
                    i = len(self.names)
                    if i == len(self.lo):  # grow by doubling
                        self.lo = np.concatenate([self.lo, np.empty_like(self.lo)])
                        self.hi = np.concatenate([self.hi, np.empty_like(self.hi)])
                    self.lo[i], self.hi[i] = a, b
                    self.names.append(t)
                opened.discard(entry[0])
                opened.update(r[0] for r in entry[2])
            self.at = k
            self.snaps[k] = (len(self.names), {t: (lows[t], highs[t]) for t in opened}
                             if self.keep_reads else None)
        if self.refused is not None and self.refused[0] >= start:
            return self.refused[1]
        count, reads = self.snaps[start]
        return self.names[:count], self.lo[:count], self.hi[:count], reads


def lane_op(sm: SpatialModel, op, axis: int):
    """One operator's entry of the lanes' walk (`lane_walk`): its output, its name for errors and
    per read (tensor, mode, stride, pad, kernel, dilation, size), mode 0 split in two: 3 where
    the read tensor is no smaller than the output along the axis (the range itself: every
    range lies in its tensor), else 0; None for a vector operator, computed whole."""
    if op.cls in VECTOR:
        return None
    osize = sm.tensors[op.output].shape[1 + axis]
    reads = []
    for pos, t in enumerate(op.inputs):
        if op.cls == "scale" and pos == 1:
            continue  # the vector: whole
        size = sm.tensors[t].shape[1 + axis]
        if op.cls != "window":
            reads.append((t, 3, 1, 0, 1, 1, size) if size >= osize else (t, 0, 1, 0, 1, 1, size))
            continue
        kernel, stride = op.kernel[axis], op.stride[axis]
        dilation, pad = op.dilation[axis], op.pad[axis]
        mode = 1 if dilation == 1 and stride <= kernel else 2
        reads.append((t, mode, stride, pad, kernel, dilation, size))
    return (op.output, f"{op.index} ({op.kind})", reads)


@lru_cache(maxsize=4096)
def cuts(size: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The lows and highs of ``n`` near-equal bands of ``size`` (`grid_cells`' rounding)."""
    return (np.array([round(i * size / n) for i in range(n)], dtype=np.int64),
            np.array([round((i + 1) * size / n) for i in range(n)], dtype=np.int64))


def lane_entry(sm: SpatialModel, k: int, axis: int):
    """`lane_op` of operator ``k``, kept on the model (``sm._lane_ops``)."""
    known = sm.__dict__.setdefault("_lane_ops", {})
    op = sm.ops[k]
    got = known.get((axis, k))
    if got is None or got[0] is not op:
        got = known[(axis, k)] = (op, lane_op(sm, op, axis))
    return got[1]


def lane_walk(program: list, lows: dict, highs: dict, strict: bool, full: set) -> dict:
    """`axis_windows`' walk on numpy lanes (tensor -> int64 array per lane; a lane where a
    tensor is not needed holds ``NONE`` / ``-NONE``; ``strict``: every lane needs the same
    tensors, an output never needed is refused; ``full``: tensors every lane needs, grown as
    the walk goes). Returns tensor -> (lows, highs) per
    operator output, walk order."""
    held: dict = {}
    for out, where, reads in program:
        a = lows.get(out)
        if a is None:
            if strict:
                raise Refused(f"operator {where}: its output is never used")
            continue
        b = highs[out]
        ok = None
        if out not in full:
            ok = a != NONE
            if ok.all():
                ok = None
                full.add(out)
        held[out] = (a, b)
        for t, mode, stride, pad, kernel, dilation, size in reads:
            if ok is None:
                full.add(t)  # every lane reads it
            if mode == 3:  # element-wise, concat, no smaller: the same range
                r0, r1 = a, b
            elif mode == 0:  # ... clipped (not emptied, as `axis_windows`)
                r0, r1 = np.maximum(a, 0), np.minimum(b, size)
            else:
                if mode == 1:
                    r0 = np.maximum(a * stride - pad, 0)
                    r1 = np.minimum((b - 1) * stride - pad + kernel, size)
                else:
                    r0, r1 = _lane_read(a, b, kernel, stride, dilation, pad, size)
                empty = r0 >= r1
                if empty.any():
                    r0, r1 = np.where(empty, 0, r0), np.where(empty, 0, r1)
                if ok is not None:
                    r0, r1 = np.where(ok, r0, NONE), np.where(ok, r1, -NONE)
            if t in lows:
                lows[t], highs[t] = np.minimum(lows[t], r0), np.maximum(highs[t], r1)
            else:
                lows[t], highs[t] = r0, r1
    return held


def _lane_read(a, b, kernel: int, stride: int, dilation: int, pad: int, size: int):
    """`geometry.axis_read` on lanes (an empty range not yet zeroed: the caller does)."""
    lo = np.full(a.shape, size, dtype=np.int64)
    hi = np.full(a.shape, -1, dtype=np.int64)
    for j in range(kernel):
        off = j * dilation - pad
        o = np.maximum(a, -(-(-off) // stride))
        lo = np.where(o < b, np.minimum(lo, o * stride + off), lo)
        o = np.minimum(b - 1, (size - 1 - off) // stride)
        hi = np.where(o >= a, np.maximum(hi, o * stride + off + 1), hi)
    return lo, hi

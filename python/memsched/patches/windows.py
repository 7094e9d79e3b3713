"""The windows of a patch and their MACs.

A patch of an ``R x C`` grid is one cell of the split tensors (`grid_cells`). Back-propagation,
patch by patch and operator by operator in reverse order (`windows`): the window a tensor is
computed on is the bounding box of what its consumers in the region read (and of the patch's
cell for a split tensor); an operator reads the input window `SOp.in_window` of its output
window, clipped to the tensor, and pads the rest explicitly (which is the implicit padding of
the original, so only on true borders). A pass over the patches of a squeeze-and-excitation
region back-propagates its targets instead (`regions.pass_targets`: grid cell ``i`` of each
target tensor's own size).

The MACs of a grid (`grid_macs`) without building its plan: windows are rectangles whose
bounding boxes split by axis, so a grid's windows are the products of its row and column ranges
(`axis_windows`), and the MACs are sums of those ranges' extents per axis. The search counts
them for thousands of (region, grid) pairs: every band of the band counts 1-8 is walked at
once, one numpy lane per band (`_bands`), the same ranges as `axis_windows` band by band.
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from .errors import Refused
from .geometry import SpatialModel, Win, axis_read, bbox
from .regions import VECTOR, Region, pass_targets


def _merged(targets: dict, split, cell: Win) -> dict:
    """``targets`` (tensor -> window) with the split tensors' ``cell``, a tensor in both
    getting the bounding box."""
    out = dict(targets)
    for t in split:
        out[t] = bbox([out[t], cell]) if t in out else cell
    return out


def grid_cells(h: int, w: int, rows: int, cols: int) -> list[Win]:
    """The ``rows x cols`` cells of an ``h x w`` map, row-major, near-equal sizes."""
    if not (1 <= rows <= h and 1 <= cols <= w):
        raise Refused(f"grid {rows}x{cols} does not fit a {h}x{w} feature map")
    hs = [round(i * h / rows) for i in range(rows + 1)]
    ws = [round(j * w / cols) for j in range(cols + 1)]
    return [Win(hs[i], hs[i + 1], ws[j], ws[j + 1]) for i in range(rows) for j in range(cols)]


def windows(sm: SpatialModel, region: Region, cell: Win, targets: dict | None = None):
    """Back-propagate one patch: (held window per tensor, (needed input window unclipped, clipped)
    per (op, input position)) for the patch whose split tensors cover ``cell``; or, with
    ``targets`` (tensor -> window: one pass of a squeeze-and-excitation region), for those
    windows, operators not needed by them left out."""
    lenient = targets is not None
    need: dict[int, list[Win]] = {t: [w] for t, w in (
        targets.items() if lenient else ((t, cell) for t in region.split))}
    held: dict[int, Win] = {}
    reads: dict[tuple[int, int], tuple[Win, Win]] = {}
    for k in reversed(region.ops):
        op = sm.ops[k]
        if op.cls in VECTOR:
            continue
        wants = need.get(op.output)
        if not wants:
            if lenient:
                continue
            raise Refused(f"operator {op.index} ({op.kind}): its output is never used")
        held[op.output] = out = bbox(wants)
        for pos, t in enumerate(op.inputs):
            if op.cls == "scale" and pos == 1:
                continue  # the vector: whole
            h, w = sm.tensors[t].hw
            full = op.in_window(out)
            clipped = op.read_window(out, (h, w))
            if clipped.area <= 0:
                raise Refused(f"operator {op.index} ({op.kind}): a patch reads only padding")
            reads[(k, pos)] = (full, clipped)
            need.setdefault(t, []).append(clipped)
    for t in region.inputs:
        if t in need:
            held[t] = bbox(need[t])
    return held, reads


def axis_windows(sm: SpatialModel, region: Region, axis: int, lo: int, hi: int,
                 targets: dict | None = None, program: list | None = None
                 ) -> dict[int, tuple[int, int]]:
    """`windows` along one axis (0 = H, 1 = W) for cells covering ``[lo, hi)`` of the split
    tensors (or ``targets``: tensor -> range, one pass of a squeeze-and-excitation region):
    windows are rectangles whose bounding boxes split by axis, so a grid's windows are the
    products of its row and column ranges. Region inputs included (the range sliced).
    ``program``: `axis_program` of this region and axis (built here when None)."""
    lenient = targets is not None
    lows: dict[int, int] = {}
    highs: dict[int, int] = {}
    for t, (a, b) in (targets.items() if lenient else ((t, (lo, hi)) for t in region.split)):
        lows[t], highs[t] = min(a, lows.get(t, a)), max(b, highs.get(t, b))
    held: dict[int, tuple[int, int]] = {}
    for out, where, reads in program or axis_program(sm, region, axis):
        a = lows.get(out)
        if a is None:
            if lenient:
                continue
            raise Refused(f"operator {where}: its output is never used")
        b = highs[out]
        held[out] = (a, b)
        for t, mode, stride, pad, kernel, dilation, size in reads:
            if mode == 0:  # element-wise, concat: the same range, clipped
                r0, r1 = (a if a > 0 else 0), (b if b < size else size)
            elif mode == 1:  # taps without gaps: the range's first to last tap, clipped
                r0, r1 = a * stride - pad, (b - 1) * stride - pad + kernel
                r0, r1 = (r0 if r0 > 0 else 0), (r1 if r1 < size else size)
                if r0 >= r1:
                    r0 = r1 = 0
            else:
                r0, r1 = axis_read(a, b, kernel, stride, dilation, pad, size)
            if t in lows:
                if r0 < lows[t]:
                    lows[t] = r0
                if r1 > highs[t]:
                    highs[t] = r1
            else:
                lows[t], highs[t] = r0, r1
    for t in region.inputs:  # the ranges the patches slice, as `windows` holds them
        if t in lows:
            held[t] = (lows[t], highs[t])
    return held


def axis_program(sm: SpatialModel, region: Region, axis: int) -> list:
    """What `axis_windows` walks, once per region and axis: per operator (last first, vector
    operators left out) its output, its name for errors, and per input read the rule of its
    range (0: the output's range; 1: a window whose taps leave no gap, stride <= kernel and no
    dilation: the range's first to last tap; 2: any window, `geometry.axis_read`)."""
    prog = []
    for k in reversed(region.ops):
        entry = _lane_op(sm, sm.ops[k], axis)
        if entry is not None:  # the lanes' rule 3 is rule 0 here
            out, name, reads = entry
            prog.append((out, name, [(r[0], 0) + r[2:] if r[1] == 3 else r for r in reads]))
    return prog


def _keep_targets(passes: list[list[int]]) -> list[list[int]]:
    """The one pass of `plans.plan_patches`' keep mode, as far as windows go: every target at
    once."""
    return [list(dict.fromkeys(t for ts in passes for t in ts))]


def grid_macs(sm: SpatialModel, region: Region, grid: tuple[int, int],
              keep: bool = False, cache: dict | None = None) -> int:
    """MACs of the region's operators over all patches of ``grid`` (= `plans.plan_patches`'
    ``macs``, ``keep`` as there) in O((rows + cols) x ops): per op, (sum of row extents) x
    (sum of column extents) x channels x MACs per output element. The sums along one axis
    depend on that axis's band count only: ``cache`` (a dict the caller keeps) shares them
    between the grids of one region (e.g. the rows of 2x1, 2x2, 2x3, 2x4); its ``"walks"``
    entry, a dict the caller may share between regions, the walks of regions with the same
    end (`_SharedWalk`)."""
    if cache is None:
        cache = {}
    fixed = cache.get("fixed")
    if fixed is None:  # what depends on the region alone, once per region
        passes = pass_targets(sm, region)
        se = len(passes) > 1
        vector = sum(sm.op_macs(sm.ops[k]) for k in region.ops if sm.ops[k].cls in VECTOR)
        # per operator computed patch by patch: its output and MACs per output cell
        per = [(sm.ops[k].output, sm.tensors[sm.ops[k].output].channels *
                sm.ops[k].macs_per_out) for k in region.ops
               if not (sm.ops[k].is_pad or sm.ops[k].cls in VECTOR)]
        fixed = cache["fixed"] = (passes, se, vector, [t for t, _ in per],
                                  np.array([m for _, m in per], dtype=np.int64))
    passes, se, total, outs, m = fixed
    groups = (_keep_targets(passes) if keep else passes) if se else [None]
    # per band count, once per region: the rows' sums weighted by the operators' MACs per
    # output cell where the first row band computes them, and the columns' sums
    rows = cache.get(("rows", grid[0], keep))
    if rows is None:
        hb = _bands(sm, region, 0, grid[0], groups, keep, cache)
        hc = hb.walk.columns(outs)
        there = hb.first[:, hc] & (hc >= 0)  # computed in the first row band
        rows = cache[("rows", grid[0], keep)] = (np.where(there, hb.sums[:, hc] * m, 0),
                                                 there)
    cols = cache.get(("cols", grid[1], keep))
    if cols is None:
        wb = _bands(sm, region, 1, grid[1], groups, keep, cache)
        wc = wb.walk.columns(outs)
        cols = cache[("cols", grid[1], keep)] = (wb.sums[:, wc], wc < 0)
    if (rows[1] & cols[1]).any():
        raise KeyError("a tensor of the row bands missing from the column bands")
    return total + int((rows[0] * cols[0]).sum())


def _band_sums(sm: SpatialModel, region: Region, axis: int, n: int, groups, keep: bool,
               cache: dict | None) -> list[dict]:
    """Per pass group (None: the region without reductions, cut at its split tensors): per
    tensor computed in the first band, the sum of its extents along ``axis`` over ``n``
    bands (`axis_windows`, band by band; what `grid_macs` reads from `_bands`)."""
    b = _bands(sm, region, axis, n, groups, keep, cache)
    names = b.walk.names
    return [{t: v for t, v, o in zip(names, row, ok) if o}
            for row, ok in zip(b.sums.tolist(), b.first.tolist())]


class _Walk(NamedTuple):
    """The tensors one `_walk` held, in its order, and their columns."""

    names: list
    pos: dict
    cols: dict

    def columns(self, outs: list) -> np.ndarray:
        """The columns of ``outs`` (-1: not held), once per list."""
        got = self.cols.get(id(outs))
        if got is None:
            got = self.cols[id(outs)] = (outs, np.array([self.pos.get(t, -1) for t in outs],
                                                        dtype=np.intp))
        return got[1]


class _Bands(NamedTuple):
    """One band count's sums along one axis: per pass group (rows) and held tensor (columns,
    `_Walk`), the sum of its extents over the bands, and whether the first band holds it."""

    walk: _Walk
    sums: np.ndarray
    first: np.ndarray


def _bands(sm: SpatialModel, region: Region, axis: int, n: int, groups, keep: bool,
           cache: dict | None) -> _Bands:
    """`_Bands` of ``n`` bands (`Refused` as `axis_windows` band by band). The first call for
    a region, axis and ``keep`` walks the region once for the band counts 1-8 and ``n``
    together (`_band_table`: every band of every count at once, numpy lanes); later counts
    come from ``cache``."""
    if cache is None:
        cache = {}
    strict = groups == [None]
    keep = keep and not strict  # one pass: the same windows either way
    if axis == 1 and _square(sm, region, groups, keep, cache):
        axis = 0  # the same walk along both axes
    key = ("bands", region.start, region.length, axis, keep)
    table = cache.get(key)
    if table is None:
        table = cache[key] = {}
    got = table.get(n)
    if got is None:
        table.update(_band_table(sm, region, axis, sorted({n, *range(1, BATCH + 1)}
                                                           - set(table)), groups,
                                 cache.setdefault("walks", {})))
        got = table[n]
    if isinstance(got, Refused):
        raise Refused(str(got))
    return got


def _square(sm: SpatialModel, region: Region, groups, keep: bool, cache: dict) -> bool:
    """Are the walks along both axes the same (the same rules and sizes along H as along W,
    targets included: a square region of square kernels)?"""
    key = ("square", region.start, region.length, keep)
    got = cache.get(key)
    if got is None:
        hw = [region.hw] if groups == [None] else \
            [sm.tensors[t].hw for group in groups for t in group]
        got = cache[key] = all(h == w for h, w in hw) and \
            all(_symmetric(sm, k) for k in region.ops)
    return got


def _symmetric(sm: SpatialModel, k: int) -> bool:
    """Is operator ``k``'s lane entry the same along both axes (kept on the model)?"""
    known = sm.__dict__.setdefault("_symmetric", {})
    got = known.get(k)
    if got is None:
        got = known[k] = _lane_entry(sm, k, 0) == _lane_entry(sm, k, 1)
    return got


BATCH = 8  # band counts walked together (`_bands`): the default grids' rows and columns
_NONE = 1 << 40  # a lane's low where the tensor is not needed (its high: -_NONE)


def _band_table(sm: SpatialModel, region: Region, axis: int, ns: list[int], groups,
                walks: dict) -> dict:
    """``n`` -> `_Bands` (or the `Refused` `axis_windows` gives) for each band count in
    ``ns``: `axis_windows` for every band of every count and group at once, one lane each,
    in one walk over the region (same ranges, same tensors, same reasons). The walk from the
    region's end is shared by every region with the same end, split tensors and groups (the
    same seeds, `_SharedWalk`, kept in ``walks``): a region from ``start`` reads its first
    steps."""
    key = (region.length, tuple(region.split), axis, tuple(ns),
           tuple(None if g is None else tuple(g) for g in groups))
    walk = walks.get(key)
    if walk is None:
        walk = walks[key] = _SharedWalk(sm, region, axis, ns, groups)
    out = dict(walk.too_small)
    if not walk.blocks:
        return out
    got = walk.upto(region.start)
    if isinstance(got, Refused):
        for n in walk.counts:
            out[n] = got
        return out
    names, lo, hi, reads = got
    ins = [t for t in region.inputs if t in reads]
    if ins:
        names = names + ins
        lo = np.concatenate([lo, np.array([reads[t][0] for t in ins])])
        hi = np.concatenate([hi, np.array([reads[t][1] for t in ins])])
    ext = hi - lo
    there = lo != _NONE  # a range is never that far out: the lanes that need the tensor
    if not walk.strict:
        ext[~there] = 0
    blocks = walk.blocks
    sums = np.add.reduceat(ext, blocks, axis=1).T  # (count, group) x tensor
    first = there[:, blocks].T
    columns = _Walk(names, {t: c for c, t in enumerate(names)}, {})
    g = len(groups)
    for j, n in enumerate(walk.counts):
        out[n] = _Bands(columns, sums[j * g:(j + 1) * g], first[j * g:(j + 1) * g])
    return out


def _seeds(sm: SpatialModel, region: Region, axis: int, ns: list[int], groups):
    """The lanes of `_band_table`: (the counts too small for a size -> `Refused`, the counts
    walked, the first lane of each (count, group), count-major, and the targets' lows and
    highs per lane)."""
    too_small: dict = {}
    lanes = 0
    seeds: dict = {}  # target (None: the split tensors) -> (first lane, lows, highs) per group
    blocks: list[int] = []
    counts: list[int] = []
    for n in ns:
        why = None
        for group in groups:  # as `axis_windows` band by band: the first size too small
            sizes = [region.hw[axis]] if group is None else \
                [sm.tensors[t].hw[axis] for t in group]
            size = next((s for s in sizes if n > s), None)
            if size is not None:
                why = Refused(f"{n} bands do not fit a size of {size}")
                break
        if why is not None:
            too_small[n] = why
            continue
        counts.append(n)
        for group in groups:
            blocks.append(lanes)
            if group is None:
                seeds.setdefault(None, []).append((lanes, *_cuts(region.hw[axis], n)))
            else:
                for t in dict.fromkeys(group):
                    seeds.setdefault(t, []).append((lanes, *_cuts(sm.tensors[t].hw[axis], n)))
            lanes += n
    lows: dict = {}
    highs: dict = {}
    for t, rows in seeds.items():  # a target's range in the lanes of its groups
        lo = np.full(lanes, _NONE, dtype=np.int64)
        hi = np.full(lanes, -_NONE, dtype=np.int64)
        for first, a, b in rows:
            lo[first:first + len(a)], hi[first:first + len(a)] = a, b
        if t is None:  # the region without reductions: its split tensors, every lane
            for s in region.split:
                lows[s], highs[s] = lo, hi
        else:
            lows[t], highs[t] = lo, hi
    return too_small, counts, blocks, lows, highs


class _SharedWalk:
    """`_walk` from operator ``end - 1`` down, one operator at a time, for every region that
    ends at ``end`` with the same seeds: walking backwards, what the walk holds after the
    operators from ``start`` on does not depend on the operators before ``start``. Per start
    passed: the tensors held so far (walk order) and the ranges of the tensors read so far
    and made before it (the region's inputs among them read theirs)."""

    def __init__(self, sm: SpatialModel, region: Region, axis: int, ns: list[int], groups):
        self.sm, self.axis, self.at = sm, axis, region.length
        self.too_small, self.counts, self.blocks, lows, highs = _seeds(sm, region, axis, ns,
                                                                       groups)
        self.strict = strict = groups == [None]
        self.full = set(lows) if strict else \
            {t for t in lows if all(t in group for group in groups)}
        self.lows, self.highs = lows, highs
        self.names: list = []  # the tensors held, walk order; their ranges' rows below
        lanes = len(next(iter(lows.values()))) if lows else 0
        self.lo = np.empty((16, lanes), dtype=np.int64)
        self.hi = np.empty((16, lanes), dtype=np.int64)
        self.open = set(lows)  # tensors with ranges whose operator is not walked yet
        self.snaps: dict = {}  # start -> (held count, {open tensor: (lows, highs)})
        self.refused: tuple | None = None  # (operator index, Refused): the walk stops there

    def upto(self, start: int):
        """(held tensors, their lows and highs (rows), {tensor: (lows, highs)} of the tensors
        read and made before ``start``) of the region from ``start``, or its `Refused`."""
        lows, highs, opened = self.lows, self.highs, self.open
        while self.at > start and self.refused is None:
            k = self.at - 1
            entry = _lane_entry(self.sm, k, self.axis)
            if entry is not None:
                try:
                    got = _walk([entry], lows, highs, self.strict, self.full)
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
            self.snaps[k] = (len(self.names), {t: (lows[t], highs[t]) for t in opened})
        if self.refused is not None and self.refused[0] >= start:
            return self.refused[1]
        count, reads = self.snaps[start]
        return self.names[:count], self.lo[:count], self.hi[:count], reads


def _lane_op(sm: SpatialModel, op, axis: int):
    """One operator's entry of the lanes' walk (`_walk`): its output, its name for errors and
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
def _cuts(size: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The lows and highs of ``n`` near-equal bands of ``size`` (`grid_cells`' rounding)."""
    return (np.array([round(i * size / n) for i in range(n)], dtype=np.int64),
            np.array([round((i + 1) * size / n) for i in range(n)], dtype=np.int64))


def _lane_entry(sm: SpatialModel, k: int, axis: int):
    """`_lane_op` of operator ``k``, kept on the model (``sm._lane_ops``)."""
    known = sm.__dict__.setdefault("_lane_ops", {})
    op = sm.ops[k]
    got = known.get((axis, k))
    if got is None or got[0] is not op:
        got = known[(axis, k)] = (op, _lane_op(sm, op, axis))
    return got[1]


def _walk(program: list, lows: dict, highs: dict, strict: bool, full: set) -> dict:
    """`axis_windows`' walk on numpy lanes (tensor -> int64 array per lane; a lane where a
    tensor is not needed holds ``_NONE`` / ``-_NONE``; ``strict``: every lane needs the same
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
            ok = a != _NONE
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
                    r0, r1 = _axis_read(a, b, kernel, stride, dilation, pad, size)
                empty = r0 >= r1
                if empty.any():
                    r0, r1 = np.where(empty, 0, r0), np.where(empty, 0, r1)
                if ok is not None:
                    r0, r1 = np.where(ok, r0, _NONE), np.where(ok, r1, -_NONE)
            if t in lows:
                lows[t], highs[t] = np.minimum(lows[t], r0), np.maximum(highs[t], r1)
            else:
                lows[t], highs[t] = r0, r1
    return held


def _axis_read(a, b, kernel: int, stride: int, dilation: int, pad: int, size: int):
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

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
them for tens of thousands of (region, grid) pairs: every band of the band counts 1-8 is walked
at once, one numpy lane per band (`lanes`), the same ranges as `axis_windows` band by band; and
the walks are shared by regions (`_GroupMacs`): the search's MACs are suffix sums over walks
from each region end and each pass's targets. Without the search's cache, `grid_macs` walks
each region on its own (`_bands`): the reference the shared sums are checked against.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .errors import Refused
from .geometry import SpatialModel, Win, axis_read, bbox
from .lanes import BATCH, NONE, SharedWalk, lane_entry, lane_op, too_small
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
        entry = lane_op(sm, sm.ops[k], axis)
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
    end (`SharedWalk`)."""
    if cache is None:
        cache = {}
    if "walks" in cache:
        return _suffix_macs(sm, region, grid, keep, cache)
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


class _GroupMacs:
    """The MACs one pass group of a region computes, for every region that shares its
    walk: walking back from the group's seeds (`SharedWalk`), an operator's windows depend
    on the operators after it alone, not on where the region starts, so neither do its MACs
    per grid; a region's are a suffix sum over its operators, kept per grid as cumulative
    sums, O(1) per region (the search counts every grid of every region after each region
    of a sequence: TVM's MobileNetV3-Small-like int8 @128 asks 36,000 times).

    The seeds, by kind: ``strict`` the split tensors of the regions ending at ``top`` (no
    reduction: one pass); ``pass`` one pass's targets (recompute: each pass walks its own
    targets, lanes never mix, and only the operators before the targets are needed, so
    every region with that pass shares it); ``keep`` every reduction input before ``top``
    and the split tensors (keep: one walk of every pass's targets; the inputs of reductions
    before a region's start only reach operators before it). The same sums as
    `grid_macs`' per-region path, term by term (tests/test_patches_windows.py)."""

    def __init__(self, sm: SpatialModel, kind: str, top: int, targets: tuple, hw,
                 walks: dict):
        self.sm, self.kind, self.top, self.targets, self.hw = sm, kind, top, targets, hw
        self.walks = walks
        self.cum: dict = {}  # grid -> (first operator counted, suffix sums from there)
        self.rows: dict = {}  # (walk id, first operator) -> per operator its row, ...
        self.mine: dict = {}  # (axis, count) -> its walk

    @staticmethod
    def of(sm: SpatialModel, kind: str, top: int, targets: tuple, hw, walks: dict
           ) -> "_GroupMacs":
        key = ("group macs", kind, top, targets)
        got = walks.get(key)
        if got is None:
            got = walks[key] = _GroupMacs(sm, kind, top, targets, hw, walks)
        return got

    def _walk(self, axis: int, n: int, start: int) -> SharedWalk:
        """The walk of ``n`` bands along ``axis`` (counts up to `BATCH` in one), walked
        down to ``start``; a strict walk's `Refused` (an output never used)."""
        if axis == 1 and self._square():
            axis = 0  # the same walk along both axes
        walk = self.mine.get((axis, n))
        if walk is None:
            ns = tuple(range(1, BATCH + 1)) if n <= BATCH else (n,)
            key = ("group walk", self.kind, self.top, self.targets, axis, ns)
            walk = self.walks.get(key)
            if walk is None:
                walk = self.walks[key] = SharedWalk.seeded(self.sm, self.top, axis, ns,
                                                            self.targets, self.hw,
                                                            self.kind == "strict")
            self.mine[(axis, n)] = walk
        got = walk.reach(start)
        if got is not None:
            raise Refused(str(got))
        return walk

    def _square(self) -> bool:
        """Are the walks along both axes the same: square targets, and below the top only
        operators whose lane entries are the same along both axes (as `_square`, for every
        region the walks may serve)?"""
        got = self.__dict__.get("square")
        if got is None:
            sm = self.sm
            hw = [self.hw] if self.hw is not None else [sm.tensors[t].hw for t in self.targets]
            got = self.square = all(h == w for h, w in hw) and \
                all(_symmetric(sm, k) for k in range(self.top))
        return got

    def macs(self, start: int, grid: tuple[int, int]) -> int:
        if self.top <= start:  # targets made before the region: nothing in it for them
            return 0
        rows, cols = grid
        wa = self._walk(0, rows, start)
        wb = self._walk(1, cols, start)
        got = self.cum.get(grid)
        if got is None or got[0] > start:
            got = self.cum[grid] = (start, self._suffix(wa, rows, wb, cols, start))
        return int(got[1][start - got[0]])

    def _suffix(self, wa: SharedWalk, rows: int, wb: SharedWalk, cols: int, start: int
                ) -> np.ndarray:
        """Suffix sums from operator ``start`` to the top: per operator computed patch by
        patch the MACs of its output windows, (row extents) x (column extents) x its MACs
        per cell, where the first row band holds it (as `grid_macs` counts them)."""
        sa, fa = wa.band_sums()
        sb, _ = wb.band_sums()
        ja, jb = wa.counts.index(rows), wb.counts.index(cols)
        ia, m = self._rows(wa, start)
        ib, _ = self._rows(wb, start)
        per = np.zeros(len(ia), dtype=np.int64)
        if sa.shape[1]:
            ka, kb = np.maximum(ia, 0), np.maximum(ib, 0)
            there = (ia >= 0) & fa[ja][ka]
            if (there & (ib < 0)).any():
                raise KeyError("a tensor of the row bands missing from the column bands")
            per = np.where(there, sa[ja][ka] * sb[jb][kb] * m, 0)
        out = np.zeros(len(per) + 1, dtype=np.int64)
        out[:-1] = np.cumsum(per[::-1])[::-1]
        return out

    def _rows(self, walk: SharedWalk, start: int):
        """Per operator from ``start`` to the top: the row of its output in ``walk`` (-1:
        none, or not computed patch by patch) and its MACs per output cell."""
        key = (id(walk), start)
        got = self.rows.get(key)
        if got is None:
            sm = self.sm
            pos = walk.positions()
            idx, per = [], []
            for k in range(start, self.top):
                op = sm.ops[k]
                if op.cls in VECTOR or op.is_pad:
                    idx.append(-1), per.append(0)
                    continue
                idx.append(pos.get(op.output, -1))
                per.append(sm.tensors[op.output].channels * op.macs_per_out)
            got = self.rows[key] = (np.array(idx, dtype=np.intp),
                                    np.array(per, dtype=np.int64))
        return got


def _suffix_macs(sm: SpatialModel, region: Region, grid: tuple[int, int], keep: bool,
                 cache: dict) -> int:
    """`grid_macs` from walks shared between regions (`_GroupMacs`, in ``cache["walks"]``):
    the same MACs and the same `Refused` (a count too small for a size, rows first; then a
    strict walk's)."""
    groups = cache.get(("groups", keep))
    if groups is None:  # once per region: its pass groups, their sizes, their walks
        walks = cache["walks"]
        passes = pass_targets(sm, region)
        if len(passes) == 1:
            checked = [None]
            sums = [_GroupMacs.of(sm, "strict", region.length, tuple(region.split),
                                  region.hw, walks)]
        elif keep:
            checked = _keep_targets(passes)
            sums = [_GroupMacs.of(sm, "keep", region.length, _keep_seeds(sm, region), None,
                                  walks)]
        else:
            checked, sums = passes, []
            for group in passes:
                targets = tuple(dict.fromkeys(group))
                top = max(sm.producer.get(t, -1) for t in targets) + 1
                sums.append(_GroupMacs.of(sm, "pass", top, targets, None, walks))
        sizes = [[region.hw[axis]] if group is None else
                 [sm.tensors[t].hw[axis] for t in group] for group in checked
                 for axis in (0, 1)]
        groups = cache[("groups", keep)] = (sizes, sums, _vector_macs(sm, region))
    sizes, sums, total = groups
    for axis, n in ((0, grid[0]), (1, grid[1])):  # rows first, as `_bands`
        why = too_small(n, sizes[axis::2])
        if why is not None:
            raise why
    for g in sums:
        total += g.macs(region.start, grid)
    return total


def _vector_macs(sm: SpatialModel, region: Region) -> int:
    """The MACs of the region's vector operators (computed once, whole): prefix sums kept
    on the model."""
    pre = sm.__dict__.get("_vector_prefix")
    if pre is None or len(pre) != len(sm.ops) + 1:
        pre = [0]
        for op in sm.ops:
            pre.append(pre[-1] + (sm.op_macs(op) if op.cls in VECTOR else 0))
        sm.__dict__["_vector_prefix"] = pre
    return pre[region.length] - pre[region.start]


def _keep_seeds(sm: SpatialModel, region: Region) -> tuple:
    """Keep's seeds for the regions ending where ``region`` does: the input of every
    reduction before its end, then its split tensors (kept on the model)."""
    known = sm.__dict__.setdefault("_keep_seeds", {})
    key = (region.length, tuple(region.split))
    got = known.get(key)
    if got is None:
        ins = [sm.ops[k].inputs[0] for k in range(region.length) if sm.ops[k].cls == "reduce"]
        got = known[key] = tuple(dict.fromkeys([*ins, *region.split]))
    return got


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
    """The tensors one `lanes.lane_walk` held, in its order, and their columns."""

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
        got = known[k] = lane_entry(sm, k, 0) == lane_entry(sm, k, 1)
    return got


def _band_table(sm: SpatialModel, region: Region, axis: int, ns: list[int], groups,
                walks: dict) -> dict:
    """``n`` -> `_Bands` (or the `Refused` `axis_windows` gives) for each band count in
    ``ns``: `axis_windows` for every band of every count and group at once, one lane each,
    in one walk over the region (same ranges, same tensors, same reasons). The walk from the
    region's end is shared by every region with the same end, split tensors and groups (the
    same seeds, `SharedWalk`, kept in ``walks``): a region from ``start`` reads its first
    steps."""
    key = (region.length, tuple(region.split), axis, tuple(ns),
           tuple(None if g is None else tuple(g) for g in groups))
    walk = walks.get(key)
    if walk is None:
        walk = walks[key] = SharedWalk.of_region(sm, region, axis, ns, groups)
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
    there = lo != NONE  # a range is never that far out: the lanes that need the tensor
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



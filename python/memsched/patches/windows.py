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
(`axis_windows`), and the MACs are sums of those ranges' extents per axis.
"""
from __future__ import annotations

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
        op = sm.ops[k]
        if op.cls in VECTOR:
            continue
        reads = []
        for pos, t in enumerate(op.inputs):
            if op.cls == "scale" and pos == 1:
                continue  # the vector: whole
            size = sm.tensors[t].shape[1 + axis]
            if op.cls != "window":
                reads.append((t, 0, 1, 0, 1, 1, size))
                continue
            kernel, stride = op.kernel[axis], op.stride[axis]
            dilation, pad = op.dilation[axis], op.pad[axis]
            mode = 1 if dilation == 1 and stride <= kernel else 2
            reads.append((t, mode, stride, pad, kernel, dilation, size))
        prog.append((op.output, f"{op.index} ({op.kind})", reads))
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
    between the grids of one region (e.g. the rows of 2x1, 2x2, 2x3, 2x4)."""
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
        fixed = cache["fixed"] = (passes, se, vector, per)
    passes, se, total, per = fixed
    groups = (_keep_targets(passes) if keep else passes) if se else [None]
    hs = _band_sums(sm, region, 0, grid[0], groups, keep, cache)
    ws = _band_sums(sm, region, 1, grid[1], groups, keep, cache)
    for sh, sw in zip(hs, ws):
        for t, m in per:
            h = sh.get(t)
            if h is not None:
                total += h * sw[t] * m
    return total


def _band_sums(sm: SpatialModel, region: Region, axis: int, n: int, groups, keep: bool,
               cache: dict | None) -> list[dict]:
    """Per pass group (None: the region without reductions, cut at its split tensors): per
    tensor computed in the first band, the sum of its extents along ``axis`` over ``n``
    bands (`axis_windows`)."""
    key = (region.start, region.length, axis, n, keep)
    if cache is not None and key in cache:
        return cache[key]
    prog_key = ("program", region.start, region.length, axis)
    program = cache.get(prog_key) if cache is not None else None
    if program is None:
        program = axis_program(sm, region, axis)
        if cache is not None:
            cache[prog_key] = program
    out = []
    for group in groups:
        sums: dict[int, int] = {}
        for i in range(n):
            if group is None:
                size = region.hw[axis]
                if n > size:
                    raise Refused(f"{n} bands do not fit a size of {size}")
                held = axis_windows(sm, region, axis, round(i * size / n),
                                    round((i + 1) * size / n), program=program)
            else:
                rng = {}
                for t in group:
                    size = sm.tensors[t].hw[axis]
                    if n > size:
                        raise Refused(f"{n} bands do not fit a size of {size}")
                    rng[t] = (round(i * size / n), round((i + 1) * size / n))
                held = axis_windows(sm, region, axis, 0, 0, rng, program)
            if i == 0:
                sums = {t: 0 for t in held}
            for t in sums:
                a, b = held.get(t, (0, 0))
                sums[t] += b - a
        out.append(sums)
    if cache is not None:
        cache[key] = out
    return out

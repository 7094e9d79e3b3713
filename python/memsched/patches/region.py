"""Patch regions and the patched graph they give.

A *region* is a run of operators ``[start, length)`` of the model in file order made only of
spatially local operators (`geometry.SOp` classes ``window``, ``eltwise``, ``concat``); it may
be a DAG (residual adds, concat of branches). With ``start = 0`` it begins at the model inputs;
with ``start > 0`` the operators before it run whole (e.g. a leading QUANTIZE of a float input,
which then dies before the patches) and the region reads their outputs as its *inputs*, sliced
per patch like model inputs. Its *split tensors* are the tensors it produces that are read after
it or are model outputs; all must share one spatial size, on which the grid of patches is laid.

`plan_patches` builds, for a region and an ``R x C`` grid, the patched computation as a list of
`PNode` (per patch: slices of the model inputs, crops where a consumer needs less than the
tensor's window, explicit pads on true borders, the region's operators on their windows with no
implicit padding; then the concatenations that reassemble each split tensor). Back-propagation,
patch by patch and operator by operator in reverse order: the window a tensor is computed on is
the bounding box of what its consumers in the region read (and of the patch's cell for a split
tensor); an operator reads the input window `SOp.in_window` of its output window, clipped to
the tensor, and pads the rest explicitly (which is the implicit padding of the original, so only
on true borders). A reassembly has at most `MAX_CONCAT_INPUTS` inputs per CONCATENATION (TFLite
Micro's ``kMaxInputNum``): more pieces are chained (the first ten concatenated, then that
partial tensor and the next nine, ...). A refused region carries the reason (`Refused`).

Squeeze-and-excitation (opt-in: ``regions(..., se=True)``): a region may contain operators of
classes ``reduce`` (a global sum/mean over H and W), ``vector`` (operators on its result, run
once) and ``scale`` (a feature map times such a vector). Each tensor has a *stage*: the number
of reductions it depends on. The patches then run in passes: pass ``p`` computes, patch by
patch (grid cell ``i`` of each target tensor's own size), the tensors of stage ``p`` that a
reduction reads and their *partial* sums over the patch's own cells (no halo), added up
(``accumulate``); after the pass each reduction is finished once (``reduce``: the sum of the
partials divided by H*W for a mean) and the ``vector`` operators that can run do; the last
pass computes the split tensors. Two ways to get the feature maps a later pass reads (the
search prices both and keeps whichever its evaluator prefers):

* **recompute** (default): every pass recomputes what it needs from the region's inputs (the
  MACs count it; only patch-sized tensors live across a reduction);
* **keep** (``keep=True``): every operator runs once per patch, on the bounding box of what
  all passes need of its output; pass ``p`` runs the operators of stage ``p`` and the pieces a
  later pass reads stay live until it does (no extra MACs; the pieces of those feature maps,
  halos included, live across the reduction).

Exact or refused (`geometry.inexact_reduction`, applied by `regions`): a region runs through
a reduction only if the partial sums combine to the whole sum's bits (an integer accumulator
that cannot overflow, or the original's order); float sums only with
``exact_reductions=False`` (they differ from the whole sum by rounding).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .geometry import PAD_NONE, SpatialModel, Win, axis_read, bbox, inexact_reduction

SPATIAL = ("window", "eltwise", "concat")
SE_CLASSES = ("reduce", "vector", "scale")  # squeeze-and-excitation (regions opt in: se=True)
VECTOR = ("reduce", "vector")  # operators whose outputs are vectors (computed once, whole)
MAX_CONCAT_INPUTS = 10  # TFLite Micro's CONCATENATION kMaxInputNum; more pieces are chained
MAX_START = 4  # regions may start after the first MAX_START operators (run whole)


class Refused(ValueError):
    """A region or grid the patch rewrite cannot handle; the message says why."""


@dataclass
class Region:
    """Operators ``start .. length - 1`` of the model (file order)."""

    length: int
    split: list[int]  # tensor indices reassembled after the patches
    inputs: list[int]  # tensors the region reads and does not produce (sliced per patch)
    hw: tuple[int, int]  # spatial size of the split tensors
    start: int = 0  # the operators before it run whole

    @property
    def ops(self) -> range:
        return range(self.start, self.length)


def partial_se_blocks(ops, outputs) -> set[int]:
    """Operators an adapter classified ``reduce`` / ``vector`` / ``scale`` that are not part of
    a whole squeeze-and-excitation block, to be given back their own class: a reduction or
    vector whose result reaches a model output (``outputs``) or an operator other than a
    vector one or the vector side of a scale (a classifier head's mean), a vector fed by
    anything else, a scale whose vector is no longer one; to a fixpoint."""
    cls = [op.cls for op in ops]
    producer = {op.output: k for k, op in enumerate(ops)}
    consumers: dict[int, list[int]] = {}
    for k, op in enumerate(ops):
        for t in op.inputs:
            consumers.setdefault(t, []).append(k)
    outputs = set(outputs)
    partial: set[int] = set()
    changed = True
    while changed:
        changed = False
        for k, op in enumerate(ops):
            if k in partial:
                continue
            if cls[k] in VECTOR:
                bad = op.output in outputs or any(
                    cls[c] not in ("vector", "scale") or
                    (cls[c] == "scale" and ops[c].inputs[1] != op.output)
                    for c in consumers.get(op.output, [])) or (cls[k] == "vector" and any(
                        cls[producer[t]] not in VECTOR for t in op.inputs))
            else:
                bad = cls[k] == "scale" and cls[producer[op.inputs[1]]] not in VECTOR
            if bad:
                partial.add(k)
                cls[k] = "other"
                changed = True
    return partial


def regions(sm: SpatialModel, starts=(0,), se: bool = False, exact_reductions: bool = True
            ) -> tuple[list[Region], str]:
    """Candidate regions: for each ``start`` (default: the model inputs only), each run of
    spatial operators from ``start`` whose split tensors share one spatial size; and why the
    spatial prefix from operator 0 ends (the first operator that is not spatial). ``se``: runs
    may contain squeeze-and-excitation blocks (``reduce`` / ``vector`` / ``scale`` operators);
    a run whose vectors are read after it is not a region; a run ends before a reduction whose
    partial sums do not combine exactly (`geometry.inexact_reduction`; a float sum passes when
    ``exact_reductions`` is False)."""
    out = []
    why = "every operator is spatially local"
    why_se = ""
    model_out = set(sm.outputs)
    allowed = SPATIAL + SE_CLASSES if se else SPATIAL
    for start in starts:
        if start >= len(sm.ops):
            continue
        avail = set(sm.inputs) | {sm.ops[k].output for k in range(start)}
        produced: set[int] = set()
        vec: set[int] = set()
        for k in range(start, len(sm.ops)):
            op = sm.ops[k]
            if op.cls not in allowed:
                if start == 0:
                    reason = op.reason or (f"{op.cls} of a squeeze-and-excitation block "
                                           "(regions through it: se=True)")
                    why = f"operator {op.index} ({op.kind}): {reason}"
                break
            if any(t not in produced and t not in avail for t in op.inputs):
                if start == 0:
                    why = f"operator {op.index} ({op.kind}) reads a tensor not produced before it"
                break
            bad = ""
            if op.cls == "vector" and any(t not in vec for t in op.inputs):
                bad = "a vector operator reads a tensor that is not a vector of the region"
            elif op.cls == "scale" and (len(op.inputs) != 2 or op.inputs[0] in vec or
                                        op.inputs[1] not in vec):
                bad = "a scale that does not multiply a feature map by a vector of the region"
            elif op.cls == "reduce" and op.inputs[0] in vec:
                bad = "a reduction of a vector"
            elif op.cls == "reduce":
                h, w = sm.tensors[op.inputs[0]].hw
                bad = inexact_reduction(op, h * w, float_sums=not exact_reductions)
            elif op.cls in SPATIAL and any(t in vec for t in op.inputs):
                bad = "a spatial operator reads a vector"
            if bad:
                if start == 0:
                    why = f"operator {op.index} ({op.kind}): {bad}"
                break
            produced.add(op.output)
            if op.cls in VECTOR:
                vec.add(op.output)
            length = k + 1
            if vec and any(t in model_out or any(c >= length for c in sm.consumers.get(t, []))
                           for t in vec):
                if start == 0 and not why_se:
                    why_se = (f"operator {op.index} ({op.kind}): a global reduction whose "
                              "result is read after every region through it")
                continue
            split = [t for t in sorted(produced - vec, key=lambda t: sm.producer[t])
                     if t in model_out or any(c >= length for c in sm.consumers.get(t, []))]
            if not split:
                continue
            hws = {sm.tensors[t].hw for t in split}
            if len(hws) != 1:
                continue
            ins = sorted({t for j in range(start, length) for t in sm.ops[j].inputs
                          if t not in produced}, key=lambda t: (sm.producer.get(t, -1), t))
            out.append(Region(length, split, ins, hws.pop(), start))
            if start == 0:
                why_se = ""  # a region reaches past that reduction
    if why_se and why == "every operator is spatially local":
        why = why_se
    return out, why


def stages(sm: SpatialModel, region: Region) -> dict[int, int]:
    """Per tensor of the region (inputs included): how many reductions it depends on."""
    st = {t: 0 for t in region.inputs}
    for k in region.ops:
        op = sm.ops[k]
        s = max((st.get(t, 0) for t in op.inputs), default=0)
        st[op.output] = s + 1 if op.cls == "reduce" else s
    return st


def kept_floor(sm: SpatialModel, region: Region) -> int:
    """Bytes `plan_patches`' keep mode holds at least: when pass ``p`` ends, the pieces of
    every reduced tensor of stage ``p`` that a later pass reads are all live, and they cover
    the whole tensor (each holds its patch's own cell); the largest such sum over the
    passes."""
    st = stages(sm, region)
    later: dict[int, int] = {}  # tensor -> the latest stage of an operator reading it
    for k in region.ops:
        op = sm.ops[k]
        if op.cls not in VECTOR:
            for t in op.inputs:
                later[t] = max(later.get(t, 0), st[op.output])
    per: dict[int, set] = {}
    for k in region.ops:
        op = sm.ops[k]
        if op.cls == "reduce" and later.get(op.inputs[0], -1) > st[op.inputs[0]]:
            per.setdefault(st[op.inputs[0]], set()).add(op.inputs[0])
    return max((sum(sm.tensors[t].nbytes for t in ts) for ts in per.values()), default=0)


def pass_targets(sm: SpatialModel, region: Region) -> list[list[int]]:
    """The tensors each pass over the patches computes patch by patch: pass ``p`` < last the
    inputs of the reductions of stage ``p``, the last pass the split tensors (one pass when
    the region has no reduction)."""
    reduces = [k for k in region.ops if sm.ops[k].cls == "reduce"]
    if not reduces:
        return [list(region.split)]
    st = stages(sm, region)
    last = max(st.values())
    out: list[list[int]] = [[] for _ in range(last)]
    for k in reduces:
        t = sm.ops[k].inputs[0]
        if t not in out[st[t]]:
            out[st[t]].append(t)
    return out + [list(region.split)]


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


@dataclass
class PNode:
    """One operator of the patched graph.

    ``kind``: ``slice`` (window ``win`` of ``tensor`` cut from a source holding window
    ``base`` of it: a model input or another node), ``pad`` (explicit border padding
    ``pads`` = top, bottom, left, right), ``op`` (region operator ``op`` on its input nodes,
    VALID), ``concat`` (along ``axis``: 1 = H, 2 = W); squeeze-and-excitation:
    ``partial`` (the sum over space of its input window, for reduce operator ``op``; ``win``
    the patch's own cell of the reduced tensor), ``accumulate`` (the running sum: previous
    + partial), ``reduce`` (the finished reduction of ``op``: the sum of the partials divided
    by ``SOp.divisor``), ``vector`` (vector operator ``op``, once); these hold ``tensor`` =
    the reduce / vector operator's output (``nbytes`` its bytes). ``win``: the window of
    ``tensor`` (the original tensor) this node holds; a pad node holds the padded (unclipped)
    window.
    """

    kind: str
    tensor: int
    win: Win
    inputs: tuple = ()  # node ids (or ("t", tensor index) for model inputs)
    op: int = -1
    pads: tuple = (0, 0, 0, 0)
    axis: int = 0
    patch: int = -1
    pad_value: str = ""
    base: Win | None = None  # slice: the window of ``tensor`` its source holds
    phase: int = 0  # the pass over the patches (squeeze-and-excitation regions)
    nbytes: int = -1  # bytes when not the window of ``tensor`` (vectors, partial sums)
    # op: the operator with its own padding rule on its input's window (`margins`; ``pads``
    # what that rule amounts to there), not VALID on an explicitly padded input
    implicit: bool = False


@dataclass
class PatchPlan:
    region: Region
    grid: tuple[int, int]
    cells: list[Win]
    nodes: list[PNode] = field(default_factory=list)
    result: dict = field(default_factory=dict)  # split tensor -> node id of its reassembly
    macs: int = 0  # MACs of the region's operators over all patches
    region_macs: int = 0  # MACs of the region unpatched
    keep: bool = False  # squeeze-and-excitation: later passes read kept pieces (no recompute)
    margins: bool = False  # operators with their own padding on wider windows (`margins`)

    @property
    def se_mode(self) -> str:
        """How later passes of a squeeze-and-excitation region get their feature maps:
        ``keep`` / ``recompute``; "" for a region without one."""
        if self.keep:
            return "keep"
        return "recompute" if any(nd.phase for nd in self.nodes) else ""

    @property
    def patches(self) -> int:
        return len(self.cells)

    def node_bytes(self, sm: SpatialModel, k: int) -> int:
        nd = self.nodes[k]
        if nd.nbytes >= 0:
            return nd.nbytes
        return sm.tensors[nd.tensor].win_bytes(nd.win)


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


def is_se(sm: SpatialModel, region: Region) -> bool:
    """Does the region contain a squeeze-and-excitation block (passes over the patches)?"""
    return any(sm.ops[k].cls == "reduce" for k in region.ops)


def _keep_targets(passes: list[list[int]]) -> list[list[int]]:
    """The one pass of `plan_patches`' keep mode, as far as windows go: every target at once."""
    return [list(dict.fromkeys(t for ts in passes for t in ts))]


def grid_macs(sm: SpatialModel, region: Region, grid: tuple[int, int],
              keep: bool = False, cache: dict | None = None) -> int:
    """MACs of the region's operators over all patches of ``grid`` (= `plan_patches`'
    ``macs``, ``keep`` as there) in O((rows + cols) x ops): per op, (sum of row extents) x
    (sum of column extents) x channels x MACs per output element. The sums along one axis
    depend on that axis's band count only: ``cache`` (a dict the caller keeps) shares them
    between the grids of one region (e.g. the rows of 2x1, 2x2, 2x3, 2x4)."""
    passes = pass_targets(sm, region)
    se = len(passes) > 1
    groups = (_keep_targets(passes) if keep else passes) if se else [None]
    hs = _band_sums(sm, region, 0, grid[0], groups, keep, cache)
    ws = _band_sums(sm, region, 1, grid[1], groups, keep, cache)
    total = sum(sm.op_macs(sm.ops[k]) for k in region.ops if sm.ops[k].cls in VECTOR)
    for sh, sw in zip(hs, ws):
        for k in region.ops:
            op = sm.ops[k]
            t = op.output
            if op.kind in ("PAD", "PADV2") or op.cls in VECTOR or t not in sh:
                continue
            total += sh[t] * sw[t] * sm.tensors[t].channels * op.macs_per_out
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


def plan_patches(sm: SpatialModel, region: Region, grid: tuple[int, int],
                 keep: bool = False) -> PatchPlan:
    """The patched region for ``grid`` = (rows, cols) (see the module docstring; ``keep``:
    the feature maps later passes read are kept, not recomputed; only for a region with a
    squeeze-and-excitation block)."""
    rows, cols = grid
    cells = grid_cells(*region.hw, rows, cols)
    passes = pass_targets(sm, region)
    se = len(passes) > 1
    if keep and not se:
        raise Refused("keep: the region has no squeeze-and-excitation block")
    plan = PatchPlan(region, (rows, cols), cells, keep=keep)
    nodes = plan.nodes

    def add(nd: PNode) -> int:
        nodes.append(nd)
        return len(nodes) - 1

    vec_node: dict[int, int] = {}  # vector tensor -> its node (squeeze-and-excitation)
    readers: dict[int, list[int]] = {}  # reduced tensor -> its reduce operators
    for k in region.ops:
        if sm.ops[k].cls == "reduce":
            readers.setdefault(sm.ops[k].inputs[0], []).append(k)
    computed: set[int] = set()
    tcells = {t: grid_cells(*sm.tensors[t].hw, rows, cols) for ts in passes for t in ts}
    stage = stages(sm, region) if keep else {}
    in_readers = {t: [k for k in region.ops if t in sm.ops[k].inputs] for t in region.inputs}
    if keep:  # one back-propagation per patch: every pass's targets at once
        kept = [windows(sm, region, cell, _merged(
            {t: tcells[t][p] for ts in passes for t in ts}, region.split, cell))
            for p, cell in enumerate(cells)]
        kept_nodes: list[dict] = [{} for _ in cells]  # per patch: tensor -> node, all passes
    for phase, targets in enumerate(passes):
        final = phase == len(passes) - 1
        acc: dict[int, int] = {}  # reduce operator -> its running sum
        for p, cell in enumerate(cells):
            tw = {t: tcells[t][p] for t in targets}
            if keep:
                held, reads = kept[p]
                node_of = kept_nodes[p]
            else:
                held, reads = windows(sm, region, cell, tw if se else None)
                node_of = {}
            for t in region.inputs:
                if t not in held or (keep and t not in tw and not any(
                        stage[sm.ops[k].output] == phase and sm.ops[k].output in held
                        for k in in_readers[t])):
                    continue  # keep: sliced in each pass that reads it
                h, w = sm.tensors[t].hw
                if held[t] == Win(0, h, 0, w):
                    node_of[t] = ("t", t)  # the whole model input, no slice
                else:
                    node_of[t] = add(PNode("slice", t, held[t], (("t", t),), patch=p,
                                           base=Win(0, h, 0, w), phase=phase))

            def view(t: int, win: Win) -> int:
                """Node holding window ``win`` of tensor ``t`` (a crop when ``t``'s is
                larger)."""
                src = node_of[t]
                if held[t] == win:
                    return src
                return add(PNode("slice", t, win, (src,), patch=p, base=held[t], phase=phase))

            for k in region.ops:
                op = sm.ops[k]
                if op.cls in VECTOR or op.output not in held or \
                        (keep and stage[op.output] != phase):
                    continue
                computed.add(k)
                ins = []
                for pos, t in enumerate(op.inputs):
                    if op.cls == "scale" and pos == 1:
                        ins.append(vec_node[t])  # the vector, whole
                        continue
                    full, clipped = reads[(k, pos)]
                    src = view(t, clipped)
                    if full != clipped:
                        if op.pad_value == PAD_NONE:
                            raise Refused(f"operator {op.index} ({op.kind}) with SAME padding "
                                          "on a border patch: explicit padding would change "
                                          "what it averages over")
                        if op.kind in ("PAD", "PADV2"):
                            ins.append(src)  # the op itself pads (with the border amounts)
                            continue
                        src = add(PNode("pad", t, full, (src,), pads=full.pads(clipped),
                                        patch=p, pad_value=op.pad_value, phase=phase))
                    ins.append(src)
                out = held[op.output]
                if op.kind in ("PAD", "PADV2"):
                    full, clipped = reads[(k, 0)]
                    if full == clipped:  # an interior patch: the PAD is the identity here
                        node_of[op.output] = ins[0]
                        continue
                    node_of[op.output] = add(PNode("op", op.output, out, tuple(ins), op=k,
                                                   pads=full.pads(clipped), patch=p,
                                                   phase=phase))
                    continue
                node_of[op.output] = add(PNode("op", op.output, out, tuple(ins), op=k, patch=p,
                                               phase=phase))
                plan.macs += sm.op_macs(op, out)
            if final:
                for t in region.split:
                    nd = view(t, cell)
                    plan.result.setdefault(t, []).append(nd)
                continue
            for t in targets:  # partial sums over the patch's own cells
                src = view(t, tw[t])
                for k in readers[t]:
                    o = sm.ops[k].output
                    nb = sm.tensors[o].nbytes
                    part = add(PNode("partial", o, tw[t], (src,), op=k, patch=p, phase=phase,
                                     nbytes=nb))
                    acc[k] = part if k not in acc else add(
                        PNode("accumulate", o, tw[t], (acc[k], part), op=k, patch=p,
                              phase=phase, nbytes=nb))
        if final:
            break
        for k in sorted(acc):  # the reductions of this pass, then the vectors they allow
            op = sm.ops[k]
            vec_node[op.output] = add(PNode("reduce", op.output, Win(0, 1, 0, 1), (acc[k],),
                                            op=k, phase=phase,
                                            nbytes=sm.tensors[op.output].nbytes))
            plan.macs += sm.op_macs(op)
            computed.add(k)
        for k in region.ops:
            op = sm.ops[k]
            if op.cls == "vector" and op.output not in vec_node and \
                    all(t in vec_node for t in op.inputs):
                vec_node[op.output] = add(PNode("vector", op.output, Win(0, 1, 0, 1),
                                                tuple(vec_node[t] for t in op.inputs), op=k,
                                                phase=phase,
                                                nbytes=sm.tensors[op.output].nbytes))
                plan.macs += sm.op_macs(op)
                computed.add(k)
    if se:
        for k in region.ops:
            if k not in computed:
                op = sm.ops[k]
                raise Refused(f"operator {op.index} ({op.kind}): its output is never used")
    plan.region_macs = sum(sm.op_macs(sm.ops[k]) for k in region.ops)
    reassemble(plan)
    return plan


def reassemble(plan: PatchPlan) -> None:
    """Concatenate each split tensor's pieces (``plan.result[t]``: one node per patch, in
    cell order) into one node: each row's patches along W, then the rows along H, chained by
    `MAX_CONCAT_INPUTS`."""
    nodes = plan.nodes
    rows, cols = plan.grid
    cells = plan.cells

    def concat(t: int, pieces: list[tuple[int, Win]], axis: int) -> tuple[int, Win]:
        cur, rest = None, list(pieces)
        while rest:
            take = MAX_CONCAT_INPUTS - (cur is not None)
            group = ([cur] if cur is not None else []) + rest[:take]
            rest = rest[take:]
            win = bbox([w for _, w in group])
            nodes.append(PNode("concat", t, win, tuple(k for k, _ in group), axis=axis))
            cur = (len(nodes) - 1, win)
        return cur

    for t in plan.region.split:
        pieces = plan.result[t]
        if len(pieces) == 1:
            plan.result[t] = pieces[0]
            continue
        row_nodes = []
        for i in range(rows):
            row = list(zip(pieces[i * cols:(i + 1) * cols], cells[i * cols:(i + 1) * cols]))
            row_nodes.append(row[0] if cols == 1 else concat(t, row, 2))
        plan.result[t] = row_nodes[0][0] if rows == 1 else concat(t, row_nodes, 1)[0]

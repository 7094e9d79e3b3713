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
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .geometry import PAD_NONE, SpatialModel, Win, axis_read, bbox

SPATIAL = ("window", "eltwise", "concat")
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


def regions(sm: SpatialModel, starts=(0,)) -> tuple[list[Region], str]:
    """Candidate regions: for each ``start`` (default: the model inputs only), each run of
    spatial operators from ``start`` whose split tensors share one spatial size; and why the
    spatial prefix from operator 0 ends (the first operator that is not spatial)."""
    out = []
    why = "every operator is spatially local"
    model_out = set(sm.outputs)
    for start in starts:
        if start >= len(sm.ops):
            continue
        avail = set(sm.inputs) | {sm.ops[k].output for k in range(start)}
        produced: set[int] = set()
        for k in range(start, len(sm.ops)):
            op = sm.ops[k]
            if op.cls not in SPATIAL:
                if start == 0:
                    why = f"operator {op.index} ({op.kind}): {op.reason}"
                break
            if any(t not in produced and t not in avail for t in op.inputs):
                if start == 0:
                    why = f"operator {op.index} ({op.kind}) reads a tensor not produced before it"
                break
            produced.add(op.output)
            length = k + 1
            split = [t for t in sorted(produced, key=lambda t: sm.producer[t])
                     if t in model_out or any(c >= length for c in sm.consumers.get(t, []))]
            if not split:
                continue
            hws = {sm.tensors[t].hw for t in split}
            if len(hws) != 1:
                continue
            ins = sorted({t for j in range(start, length) for t in sm.ops[j].inputs
                          if t not in produced}, key=lambda t: (sm.producer.get(t, -1), t))
            out.append(Region(length, split, ins, hws.pop(), start))
    return out, why


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
    VALID), ``concat`` (along ``axis``: 1 = H, 2 = W). ``win``: the window of ``tensor`` (the
    original tensor) this node holds; a pad node holds the padded (unclipped) window.
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


@dataclass
class PatchPlan:
    region: Region
    grid: tuple[int, int]
    cells: list[Win]
    nodes: list[PNode] = field(default_factory=list)
    result: dict = field(default_factory=dict)  # split tensor -> node id of its reassembly
    macs: int = 0  # MACs of the region's operators over all patches
    region_macs: int = 0  # MACs of the region unpatched

    @property
    def patches(self) -> int:
        return len(self.cells)

    def node_bytes(self, sm: SpatialModel, k: int) -> int:
        nd = self.nodes[k]
        return sm.tensors[nd.tensor].win_bytes(nd.win)


def windows(sm: SpatialModel, region: Region, cell: Win):
    """Back-propagate one patch: (held window per tensor, (needed input window unclipped, clipped)
    per (op, input position)) for the patch whose split tensors cover ``cell``."""
    need: dict[int, list[Win]] = {t: [cell] for t in region.split}
    held: dict[int, Win] = {}
    reads: dict[tuple[int, int], tuple[Win, Win]] = {}
    for k in reversed(region.ops):
        op = sm.ops[k]
        wants = need.get(op.output)
        if not wants:
            raise Refused(f"operator {op.index} ({op.kind}): its output is never used")
        held[op.output] = out = bbox(wants)
        for pos, t in enumerate(op.inputs):
            h, w = sm.tensors[t].hw
            full = op.in_window(out)
            clipped = op.read_window(out, (h, w))
            if clipped.area <= 0:
                raise Refused(f"operator {op.index} ({op.kind}): a patch reads only padding")
            reads[(k, pos)] = (full, clipped)
            need.setdefault(t, []).append(clipped)
    for t in region.inputs:
        held[t] = bbox(need[t])
    return held, reads


def axis_windows(sm: SpatialModel, region: Region, axis: int, lo: int, hi: int
                 ) -> dict[int, tuple[int, int]]:
    """`windows` along one axis (0 = H, 1 = W) for cells covering ``[lo, hi)`` of the split
    tensors: windows are rectangles whose bounding boxes split by axis, so a grid's windows are
    the products of its row and column ranges."""
    need: dict[int, list[tuple[int, int]]] = {t: [(lo, hi)] for t in region.split}
    held: dict[int, tuple[int, int]] = {}
    for k in reversed(region.ops):
        op = sm.ops[k]
        wants = need.get(op.output)
        if not wants:
            raise Refused(f"operator {op.index} ({op.kind}): its output is never used")
        a, b = min(w[0] for w in wants), max(w[1] for w in wants)
        held[op.output] = (a, b)
        for t in op.inputs:
            size = sm.tensors[t].shape[1 + axis]
            if op.cls == "window":
                rng = axis_read(a, b, op.kernel[axis], op.stride[axis], op.dilation[axis],
                                op.pad[axis], size)
            else:
                rng = (max(a, 0), min(b, size))
            need.setdefault(t, []).append(rng)
    return held


def grid_macs(sm: SpatialModel, region: Region, grid: tuple[int, int]) -> int:
    """MACs of the region's operators over all patches of ``grid`` (= `plan_patches`'
    ``macs``) in O((rows + cols) x ops): per op, (sum of row extents) x (sum of column
    extents) x channels x MACs per output element."""
    cells = grid_cells(*region.hw, *grid)
    rows, cols = grid
    hs = [axis_windows(sm, region, 0, c.h0, c.h1) for c in cells[::cols]]
    ws = [axis_windows(sm, region, 1, c.w0, c.w1) for c in cells[:cols]]
    total = 0
    for k in region.ops:
        op = sm.ops[k]
        t = op.output
        if op.kind in ("PAD", "PADV2"):
            continue
        sh = sum(h[t][1] - h[t][0] for h in hs)
        sw = sum(w[t][1] - w[t][0] for w in ws)
        total += sh * sw * sm.tensors[t].channels * op.macs_per_out
    return total


def plan_patches(sm: SpatialModel, region: Region, grid: tuple[int, int]) -> PatchPlan:
    """The patched region for ``grid`` = (rows, cols) (see the module docstring)."""
    rows, cols = grid
    cells = grid_cells(*region.hw, rows, cols)
    plan = PatchPlan(region, (rows, cols), cells)
    nodes = plan.nodes

    def add(nd: PNode) -> int:
        nodes.append(nd)
        return len(nodes) - 1

    for p, cell in enumerate(cells):
        held, reads = windows(sm, region, cell)
        node_of: dict[int, int] = {}
        for t in region.inputs:
            h, w = sm.tensors[t].hw
            if held[t] == Win(0, h, 0, w):
                node_of[t] = ("t", t)  # the whole model input, no slice
            else:
                node_of[t] = add(PNode("slice", t, held[t], (("t", t),), patch=p,
                                       base=Win(0, h, 0, w)))

        def view(t: int, win: Win) -> int:
            """Node holding window ``win`` of tensor ``t`` (a crop when ``t``'s is larger)."""
            src = node_of[t]
            if held[t] == win:
                return src
            return add(PNode("slice", t, win, (src,), patch=p, base=held[t]))

        for k in region.ops:
            op = sm.ops[k]
            ins = []
            for pos, t in enumerate(op.inputs):
                full, clipped = reads[(k, pos)]
                src = view(t, clipped)
                if full != clipped:
                    if op.pad_value == PAD_NONE:
                        raise Refused(f"operator {op.index} ({op.kind}) with SAME padding on "
                                      "a border patch: explicit padding would change what it "
                                      "averages over")
                    if op.kind in ("PAD", "PADV2"):
                        ins.append(src)  # the op itself pads (with the border amounts)
                        continue
                    src = add(PNode("pad", t, full, (src,), pads=full.pads(clipped), patch=p,
                                    pad_value=op.pad_value))
                ins.append(src)
            out = held[op.output]
            if op.kind in ("PAD", "PADV2"):
                full, clipped = reads[(k, 0)]
                if full == clipped:  # an interior patch: the PAD is the identity here
                    node_of[op.output] = ins[0]
                    continue
                node_of[op.output] = add(PNode("op", op.output, out, tuple(ins), op=k,
                                               pads=full.pads(clipped), patch=p))
                continue
            node_of[op.output] = add(PNode("op", op.output, out, tuple(ins), op=k, patch=p))
            plan.macs += sm.op_macs(op, out)
        for t in region.split:
            nd = view(t, cell)
            plan.result.setdefault(t, []).append(nd)
    plan.region_macs = sum(sm.op_macs(sm.ops[k]) for k in region.ops)
    # reassembly: each row's patches along W, then the rows along H
    def concat(t: int, pieces: list[tuple[int, Win]], axis: int) -> tuple[int, Win]:
        """Concatenate ``pieces`` (node, window of ``t``) along ``axis``, chained by
        `MAX_CONCAT_INPUTS`."""
        cur, rest = None, list(pieces)
        while rest:
            take = MAX_CONCAT_INPUTS - (cur is not None)
            group = ([cur] if cur is not None else []) + rest[:take]
            rest = rest[take:]
            win = bbox([w for _, w in group])
            cur = (add(PNode("concat", t, win, tuple(k for k, _ in group), axis=axis)), win)
        return cur

    for t in region.split:
        pieces = plan.result[t]
        if len(pieces) == 1:
            plan.result[t] = pieces[0]
            continue
        row_nodes = []
        for i in range(rows):
            row = list(zip(pieces[i * cols:(i + 1) * cols], cells[i * cols:(i + 1) * cols]))
            row_nodes.append(row[0] if cols == 1 else concat(t, row, 2))
        plan.result[t] = row_nodes[0][0] if rows == 1 else concat(t, row_nodes, 1)[0]
    return plan

"""The patched computation of a region for a grid.

`plan_patches` builds, for a region and an ``R x C`` grid, the patched computation as a list of
`PNode` (per patch: slices of the model inputs, crops where a consumer needs less than the
tensor's window, explicit pads on true borders, the region's operators on their windows with no
implicit padding; then the concatenations that reassemble each split tensor). The windows are
back-propagated patch by patch (`windows.windows`). A reassembly has at most the runtime's
limit of inputs per concatenation (`runtime.Runtime.max_concat_inputs`, e.g. TFLite Micro's
``kMaxInputNum`` = 10): more pieces are chained (the first ten concatenated, then that partial
tensor and the next nine, ...). A refused region carries the reason (`errors.Refused`).

Squeeze-and-excitation (`regions.stages`, `regions.pass_targets`): the patches run in passes:
pass ``p`` computes, patch by patch (grid cell ``i`` of each target tensor's own size), the
tensors of stage ``p`` that a reduction reads and their *partial* sums over the patch's own
cells (no halo), added up (``accumulate``); after the pass each reduction is finished once
(``reduce``: the sum of the partials divided by H*W for a mean) and the ``vector`` operators
that can run do; the last pass computes the split tensors. Two ways to get the feature maps a
later pass reads (the search prices both and keeps whichever its evaluator prefers):

* **recompute** (default): every pass recomputes what it needs from the region's inputs (the
  MACs count it; only patch-sized tensors live across a reduction);
* **keep** (``keep=True``): every operator runs once per patch, on the bounding box of what
  all passes need of its output; pass ``p`` runs the operators of stage ``p`` and the pieces a
  later pass reads stay live until it does (no extra MACs; the pieces of those feature maps,
  halos included, live across the reduction).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

from .errors import Refused
from .geometry import PAD_NONE, SpatialModel, Win, bbox
from .regions import VECTOR, Region, pass_targets, stages
from .windows import _merged, grid_cells, windows



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

    def cuts(self) -> tuple[bool, bool]:
        """A slice's (rows, columns) cut: whether its window is narrower than its source's
        window ``base`` along H, along W (a slice cutting both is a strided window)."""
        b, w = self.base, self.win
        return (w.h0, w.h1) != (b.h0, b.h1), (w.w0, w.w1) != (b.w0, b.w1)


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
    padded_sources: bool = False  # region inputs padded once, whole (`pad_sources`)

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


def plan_patches(sm: SpatialModel, region: Region, grid: tuple[int, int],
                 keep: bool = False, max_concat: int | None = None,
                 own_padding=None) -> PatchPlan:
    """The patched region for ``grid`` = (rows, cols) (see the module docstring; ``keep``:
    the feature maps later passes read are kept, not recomputed; only for a region with a
    squeeze-and-excitation block; ``max_concat``: the most inputs the runtime's
    concatenation takes, `Runtime.max_concat_inputs`; ``own_padding``: ``(op, pads) ->
    bool``, `Runtime.own_padding`: a border patch's operator that takes its pads as its own
    padding reads the clipped window, no pad node before it)."""
    return _Planner(sm, region, grid, keep, own_padding).build(max_concat)


class _At(NamedTuple):
    """Where `_Planner` is: patch ``p`` of pass ``phase``, the windows it holds and reads,
    and the node of each tensor it holds."""

    p: int
    phase: int
    held: dict
    reads: dict
    node_of: dict


class _Planner:
    """The nodes of one plan (`plan_patches`), added pass by pass, patch by patch."""

    def __init__(self, sm: SpatialModel, region: Region, grid: tuple[int, int], keep: bool,
                 own_padding=None):
        rows, cols = grid
        self.sm, self.region, self.keep = sm, region, keep
        self.own_padding = own_padding
        self.cells = cells = grid_cells(*region.hw, rows, cols)
        self.passes = passes = pass_targets(sm, region)
        self.se = len(passes) > 1
        if keep and not self.se:
            raise Refused("keep: the region has no squeeze-and-excitation block")
        self.plan = PatchPlan(region, (rows, cols), cells, keep=keep)
        self.vec_node: dict[int, int] = {}  # vector tensor -> its node (squeeze-and-excitation)
        self.readers: dict[int, list[int]] = {}  # reduced tensor -> its reduce operators
        for k in region.ops:
            if sm.ops[k].cls == "reduce":
                self.readers.setdefault(sm.ops[k].inputs[0], []).append(k)
        self.computed: set[int] = set()
        self.tcells = {t: grid_cells(*sm.tensors[t].hw, rows, cols) for ts in passes for t in ts}
        self.stage = stages(sm, region) if keep else {}
        self.in_readers = {t: [k for k in region.ops if t in sm.ops[k].inputs]
                           for t in region.inputs}
        if keep:  # one back-propagation per patch: every pass's targets at once
            self.kept = [windows(sm, region, cell, _merged(
                {t: self.tcells[t][p] for ts in passes for t in ts}, region.split, cell))
                for p, cell in enumerate(cells)]
            self.kept_nodes: list[dict] = [{} for _ in cells]  # per patch: tensor -> node

    def add(self, nd: PNode) -> int:
        self.plan.nodes.append(nd)
        return len(self.plan.nodes) - 1

    def build(self, max_concat: int | None) -> PatchPlan:
        sm, region, plan = self.sm, self.region, self.plan
        for phase, targets in enumerate(self.passes):
            final = phase == len(self.passes) - 1
            acc: dict[int, int] = {}  # reduce operator -> its running sum
            for p, cell in enumerate(self.cells):
                tw = {t: self.tcells[t][p] for t in targets}
                at = self._patch(p, phase, cell, tw)
                for k in region.ops:
                    self._run(at, k)
                if final:
                    for t in region.split:
                        plan.result.setdefault(t, []).append(self._view(at, t, cell))
                else:
                    self._partials(at, targets, tw, acc)
            if final:
                break
            self._finish_pass(phase, acc)
        if self.se:
            for k in region.ops:
                if k not in self.computed:
                    op = sm.ops[k]
                    raise Refused(f"operator {op.index} ({op.kind}): its output is never used")
        plan.region_macs = sum(sm.op_macs(sm.ops[k]) for k in region.ops)
        reassemble(plan, max_concat)
        return plan

    def _patch(self, p: int, phase: int, cell: Win, tw: dict) -> _At:
        """Patch ``p`` of pass ``phase``: its windows, and the slices of the region inputs."""
        sm, region, keep = self.sm, self.region, self.keep
        if keep:
            held, reads = self.kept[p]
            node_of = self.kept_nodes[p]
        else:
            held, reads = windows(sm, region, cell, tw if self.se else None)
            node_of = {}
        for t in region.inputs:
            if t not in held or (keep and t not in tw and not any(
                    self.stage[sm.ops[k].output] == phase and sm.ops[k].output in held
                    for k in self.in_readers[t])):
                continue  # keep: sliced in each pass that reads it
            h, w = sm.tensors[t].hw
            if held[t] == Win(0, h, 0, w):
                node_of[t] = ("t", t)  # the whole model input, no slice
            else:
                node_of[t] = self.add(PNode("slice", t, held[t], (("t", t),), patch=p,
                                            base=Win(0, h, 0, w), phase=phase))
        return _At(p, phase, held, reads, node_of)

    def _view(self, at: _At, t: int, win: Win) -> int:
        """Node holding window ``win`` of tensor ``t`` (a crop when ``t``'s is larger)."""
        src = at.node_of[t]
        if at.held[t] == win:
            return src
        return self.add(PNode("slice", t, win, (src,), patch=at.p, base=at.held[t],
                              phase=at.phase))

    def _run(self, at: _At, k: int) -> None:
        """Operator ``k`` on its window in patch ``at`` (if this pass computes it there)."""
        sm, plan = self.sm, self.plan
        op = sm.ops[k]
        if op.cls in VECTOR or op.output not in at.held or \
                (self.keep and self.stage[op.output] != at.phase):
            return
        self.computed.add(k)
        ins = []
        own = ()  # the border pads the operator takes as its own padding
        for pos, t in enumerate(op.inputs):
            if op.cls == "scale" and pos == 1:
                ins.append(self.vec_node[t])  # the vector, whole
                continue
            full, clipped = at.reads[(k, pos)]
            src = self._view(at, t, clipped)
            if full != clipped:
                if op.pad_value == PAD_NONE:
                    raise Refused(f"operator {op.index} ({op.kind}) with SAME padding on a "
                                  "border patch: explicit padding would change what it "
                                  "averages over")
                if op.is_pad:
                    ins.append(src)  # the op itself pads (with the border amounts)
                    continue
                pads = full.pads(clipped)
                if self.own_padding is not None and len(op.inputs) == 1 and \
                        self.own_padding(op, pads):
                    own = pads  # the kernel pads the clipped window itself
                    ins.append(src)
                    continue
                src = self.add(PNode("pad", t, full, (src,), pads=full.pads(clipped),
                                     patch=at.p, pad_value=op.pad_value, phase=at.phase))
            ins.append(src)
        out = at.held[op.output]
        if op.is_pad:
            full, clipped = at.reads[(k, 0)]
            if full == clipped:  # an interior patch: the PAD is the identity here
                at.node_of[op.output] = ins[0]
                return
            at.node_of[op.output] = self.add(PNode("op", op.output, out, tuple(ins), op=k,
                                                   pads=full.pads(clipped), patch=at.p,
                                                   phase=at.phase))
            return
        at.node_of[op.output] = self.add(PNode("op", op.output, out, tuple(ins), op=k,
                                               patch=at.p, phase=at.phase,
                                               pads=own or (0, 0, 0, 0), implicit=bool(own)))
        plan.macs += sm.op_macs(op, out)

    def _partials(self, at: _At, targets: list[int], tw: dict, acc: dict) -> None:
        """The partial sums of the reductions over the patch's own cells, added up."""
        for t in targets:
            src = self._view(at, t, tw[t])
            for k in self.readers[t]:
                o = self.sm.ops[k].output
                nb = self.sm.tensors[o].nbytes
                part = self.add(PNode("partial", o, tw[t], (src,), op=k, patch=at.p,
                                      phase=at.phase, nbytes=nb))
                acc[k] = part if k not in acc else self.add(
                    PNode("accumulate", o, tw[t], (acc[k], part), op=k, patch=at.p,
                          phase=at.phase, nbytes=nb))

    def _finish_pass(self, phase: int, acc: dict) -> None:
        """The reductions of this pass, then the vector operators they allow."""
        sm, plan, vec_node = self.sm, self.plan, self.vec_node
        for k in sorted(acc):
            op = sm.ops[k]
            vec_node[op.output] = self.add(PNode("reduce", op.output, Win(0, 1, 0, 1),
                                                 (acc[k],), op=k, phase=phase,
                                                 nbytes=sm.tensors[op.output].nbytes))
            plan.macs += sm.op_macs(op)
            self.computed.add(k)
        for k in self.region.ops:
            op = sm.ops[k]
            if op.cls == "vector" and op.output not in vec_node and \
                    all(t in vec_node for t in op.inputs):
                vec_node[op.output] = self.add(PNode("vector", op.output, Win(0, 1, 0, 1),
                                                     tuple(vec_node[t] for t in op.inputs),
                                                     op=k, phase=phase,
                                                     nbytes=sm.tensors[op.output].nbytes))
                plan.macs += sm.op_macs(op)
                self.computed.add(k)


def reassemble(plan: PatchPlan, max_inputs: int | None = None) -> None:
    """Concatenate each split tensor's pieces (``plan.result[t]``: one node per patch, in
    cell order) into one node: each row's patches along W, then the rows along H; with
    ``max_inputs`` (the runtime's limit per concatenation, e.g. TFLite Micro's 10) more
    pieces are chained: the first ``max_inputs``, then that partial tensor and the next
    ``max_inputs - 1``, ..."""
    nodes = plan.nodes
    rows, cols = plan.grid
    cells = plan.cells

    def concat(t: int, pieces: list[tuple[int, Win]], axis: int) -> tuple[int, Win]:
        cur, rest = None, list(pieces)
        while rest:
            take = (max_inputs or len(rest) + 1) - (cur is not None)
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


def pad_sources(plan: PatchPlan) -> PatchPlan | None:
    """``plan`` with each region input that two or more patches pad at their borders padded
    once, whole (`Runtime.pad_sources`): one pad node of the whole input (the largest border
    amounts) before the patches, every patch's window cut from it, padding included, so the
    per-patch pads of that input go (fewer nodes: each costs a runtime its per-operator
    records) and the unpadded input is read once. The padded input lives through the
    patches instead of the input (a border more); the search prices both plans and keeps the
    lower total. None when no region input is padded by two patches (or read otherwise
    than through slices, or padded with two values)."""
    nodes = plan.nodes
    readers: dict = {}
    for k, nd in enumerate(nodes):
        for s in nd.inputs:
            readers.setdefault(s, []).append(k)
    chosen: dict = {}  # region input -> (its slices, the pads reading only them)
    for t in {s[1] for nd in nodes for s in nd.inputs if isinstance(s, tuple)}:
        direct = readers.get(("t", t), [])
        if not direct or any(nodes[k].kind != "slice" or nodes[k].phase for k in direct):
            continue
        pads = [x for k in direct for x in readers.get(k, []) if nodes[x].kind == "pad"]
        if len(pads) < 2 or len({nodes[x].pad_value for x in pads}) != 1:
            continue
        chosen[t] = (direct, pads)
    if not chosen:
        return None
    new: list[PNode] = []
    at: dict[int, int] = {}  # old node id -> new node id
    whole: dict[int, int] = {}  # region input -> its padded node
    for t, (direct, pads) in sorted(chosen.items()):
        amounts = [max(nodes[x].pads[i] for x in pads) for i in range(4)]
        src = nodes[direct[0]].base  # the whole input
        win = Win(src.h0 - amounts[0], src.h1 + amounts[1], src.w0 - amounts[2],
                  src.w1 + amounts[3])
        new.append(PNode("pad", t, win, (("t", t),), pads=tuple(amounts), patch=0,
                         pad_value=nodes[pads[0]].pad_value))
        whole[t] = len(new) - 1
    gone = set()
    for t, (direct, pads) in chosen.items():
        gone |= {k for k in direct if all(x in pads for x in readers.get(k, []))}
    for k, nd in enumerate(nodes):
        if k in gone:
            continue
        t = nd.tensor
        if nd.kind == "slice" and nd.inputs == (("t", t),) and t in whole:
            nd = replace(nd, inputs=(whole[t],), base=new[whole[t]].win)
        elif nd.kind == "pad" and t in chosen and k in chosen[t][1]:
            # the padded window, cut from the padded input
            nd = PNode("slice", t, nd.win, (whole[t],), patch=nd.patch,
                       base=new[whole[t]].win, phase=nd.phase)
        else:
            nd = replace(nd, inputs=tuple(s if isinstance(s, tuple) else at[s]
                                          for s in nd.inputs))
        new.append(nd)
        at[k] = len(new) - 1
    out = replace(plan, nodes=new, result={t: at[k] for t, k in plan.result.items()})
    out.padded_sources = True
    return out

"""Patch-based execution (MCUNetV2-style) of the spatial prefix of an ExecuTorch edge program.

The ExecuTorch counterpart of `memsched.transform.tile_patches` (Relax) and
`memsched.tflite.tile` (.tflite): a thin adapter over the one patch search of
`memsched.patches`.

1. **Describe.** The edge-dialect graph a pass of ``ExecutorchBackendConfig(passes=[...])``
   receives (before ``ToOutVarPass``; NCHW feature maps seen as 1 x H x W x C) becomes a
   `SpatialModel` (one operator per FX node that reads an activation) and the matching
   `OpGraph` under ExecuTorch's memory model (`EXECUTORCH_MEMORY`: activations only, the
   planned model inputs and outputs counted; weights are constants of the .pte). Spatially
   local: ``convolution`` (2-D, not transposed; grouped and depthwise included),
   ``max_pool2d_with_indices`` with its ``getitem 0`` (indices unused), ``avg_pool2d``,
   ``constant_pad_nd`` on H/W, element-wise ops on same-shape activations or with scalar /
   per-channel constants (``relu``, ``hardtanh`` = ReLU6, ``clamp``, residual ``add``, ...),
   ``cat`` along channels. Squeeze-and-excitation blocks (`_squeeze_excitation`): a
   floating-point ``mean.dim`` / ``sum.dim_IntList`` over H and W (or an adaptive average pool
   to 1x1) -> ``reduce``, the nodes on its [N, C, 1, 1] or [N, C] vector (1x1 convolution,
   ``relu``, ``hardsigmoid`` / its decomposition, ``addmm`` / ``view_copy`` of an nn.Linear,
   ...) -> ``vector``, ``mul.Tensor`` (``add`` / ``sub`` / ``div``) of the feature map by the
   vector -> ``scale``; only whole blocks (a mean whose vector reaches a classifier head or a
   model output stays ``other``). Nodes that read no activation (weight permutes) are left
   where they are and not modelled. The Cortex-M int8 flow's ``cortex_m::`` kernels (quantize,
   quantized convolutions / pools / add / mul / activation, pad, minimum / maximum) are
   described by `memsched.executorch.patch_cortex_m`, their CMSIS-NN scratch buffers as
   per-op workspace.
2. **Search.** `memsched.patches.search.search_patches` with ``RuntimeMemory("executorch",
   EXECUTORCH_MODEL)`` and ``se=True``: region (a prefix ending at its split tensors) and
   grid, the lowest
   peak within ``max_overhead`` extra MACs, only if it beats the unpatched graph in its best
   order (a forced ``grid``/``split`` is applied even when it does not).
3. **Rewrite** (on a copy of the graph module; the input module is never changed): per patch
   ``slice_copy`` of the input window with its halo (H, then W), ``constant_pad_nd`` only on
   true borders (zero; ``-inf`` / the dtype's minimum before a max pool), the same
   convolution / pool with padding 0, element-wise ops on the windows; ``cat`` of each row's
   patches along W, then of the rows along H, into the split tensor; its consumers are
   redirected to the reassembled tensor and the region's original nodes removed. Through an
   SE block: first passes over the patches with ``sum.dim_IntList`` (keepdim as the original)
   of each patch's own cells, the partial sums chained with ``add.Tensor``, one ``div.Scalar``
   by H*W for a mean (divide, not multiply by 1/(H*W): the same operation as the mean's
   kernel), copies of the vector nodes on it, then the last pass scales the patches with a
   copy of the ``mul.Tensor``: recomputed from the region's inputs, or the first pass's
   pieces kept live (``TileReport.se_patches``), whichever the search prices lower. fp32
   results may differ from the unpatched program in the last bits (the partial sums change
   the summation order).

The pass (`TilePatchesPass`) keeps a `TileReport` per method in ``report``; it never raises on
a graph it cannot patch: it returns the graph unchanged with the reason in the report.
``backend_config(tile_patches=True)`` puts it into ``passes``; the planning pass that follows
(certified order + exact packer) then allocates the patched optimum.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from ..patches.region import Refused
from ..patches.search import SearchResult, search_patches
from .errors import ExecutorchError
from .model import EXECUTORCH_MODEL
from .patch_describe import EXECUTORCH_MEMORY, EdgeModel, describe_graph
from .patch_rewrite import _rewritten_copy
from .records import ExecutorchRecords

class TilePatchesError(ExecutorchError):
    """Bad options of the patch pass (a grid that is not ``(rows, cols)``, a negative
    overhead)."""


@dataclass
class TileReport:
    """What the patch pass did to one method. ``skipped``: why the graph was left unchanged
    (empty when it was patched). ``values_added`` / ``instructions_added``: FX nodes (each a
    value, and for operators an instruction, in the .pte; the method allocator holds one
    record per value and per instruction at load time) added by the rewrite."""

    grid: str = ""
    split: list = field(default_factory=list)
    region_ops: int = 0
    macs_before: int = 0
    macs: int = 0
    mac_overhead: float = 0.0
    peak_before: int = 0  # the scheduler's peak of the unpatched graph (this pass's model)
    peak_after: int = 0  # the same of the patched graph
    certified: bool = False
    se_patches: str = ""  # through SE blocks: "recompute" or "keep" (the evaluator's choice)
    prefix_end: str = ""
    frontier: list = field(default_factory=list)  # "grid@split:peak:overhead"
    values_added: int = 0
    instructions_added: int = 0
    # a second region after the first one's reassembly (operators [start, end) of the
    # once-patched graph), when one lowers the peak further
    second_grid: str = ""
    second_split: list = field(default_factory=list)
    second_region: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    # the method allocator's records of the described calls (`memsched.executorch.records`),
    # modelled: before, and what the patches add (priced in the choice with price_records)
    records_before: int = 0
    records_added: int = 0
    seconds: float = 0.0
    skipped: str = ""

    @property
    def patched(self) -> bool:
        return not self.skipped

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        if self.skipped:
            return f"patches: left unchanged: {self.skipped}"
        se = f", SE: {self.se_patches}" if self.se_patches else ""
        if self.second_grid:
            se += (f"; then grid {self.second_grid} @ {','.join(self.second_split)} "
                   f"(ops {self.second_region[0]}-{self.second_region[1] - 1} of the "
                   "once-patched graph)")
        return (f"patches: grid {self.grid} @ {','.join(self.split)} ({self.region_ops} ops"
                f"{se}), "
                f"MACs {self.macs_before:,} -> {self.macs:,} (+{100 * self.mac_overhead:.1f} %),"
                f" modelled peak {self.peak_before:,} B -> {self.peak_after:,} B "
                f"({'certified' if self.certified else 'not proven'}), "
                f"+{self.values_added} values / +{self.instructions_added} instructions "
                f"(+{self.records_added:,} B of method-allocator records), "
                f"{self.seconds:.2f} s")


# ---------------------------------------------------------------------------- search
def memory_of(em: EdgeModel, price_records: bool = True):
    """The patch search's memory model for ``em``: the planned arena plus the method
    allocator's records of every call (``price_records``), or the arena alone."""
    return ExecutorchRecords(EXECUTORCH_MODEL, em.op_bytes) if price_records else \
        EXECUTORCH_MEMORY


def search(em: EdgeModel, *, max_overhead: float = 0.3, grid=None, split=None,
           time_limit: float = 10.0, se_patches: str | None = None,
           price_records: bool = True) -> SearchResult:
    """The one patch search under ExecuTorch's memory model (`memory_of`). Regions start at
    the first operator, and also right after it when that one is element-wise on a model
    input (the int8 flow's quantize of the float input): quantized whole before the region,
    or patch by patch inside it, whichever the evaluator prices lower."""
    return search_patches(em.sm, em.graph, em.tensor_index, memory_of(em, price_records),
                          grids=[tuple(grid)] if grid is not None else None, split=split,
                          max_overhead=max_overhead, time_limit=time_limit, se=True,
                          se_patches=se_patches, starts=_starts(em.sm))


def _starts(sm) -> tuple:
    ops = sm.ops
    if len(ops) > 1 and ops[0].cls == "eltwise" and set(ops[0].inputs) <= set(sm.inputs):
        return (0, 1)
    return (0,)


def tile_graph_module(gm, *, max_overhead: float = 0.3, grid=None, split=None,
                      time_limit: float = 10.0, se_patches: str | None = None,
                      second_region: bool = True, price_records: bool = True,
                      planned_inputs: bool = True):
    """(the patched copy of ``gm`` or None, `TileReport`); ``gm`` itself is never changed.
    ``second_region`` (when neither ``grid`` nor ``split`` is forced): then a second region,
    starting right after the first one's reassembly, searched on the once-patched graph with
    what is left of the MAC budget (`_second_region`). ``planned_inputs``: False when the
    planning pass leaves the user inputs out of the arena (``alloc_graph_input=False``)."""
    t0 = time.perf_counter()
    rep = TileReport()
    try:
        em = describe_graph(gm, planned_inputs)
        res = search(em, max_overhead=max_overhead, grid=grid, split=split,
                     time_limit=time_limit, se_patches=se_patches,
                     price_records=price_records)
    except Refused as e:
        rep.skipped, rep.seconds = str(e), time.perf_counter() - t0
        return None, rep
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - a node we do not know: leave the graph alone
        rep.skipped = f"cannot model the graph: {type(e).__name__}: {e}"
        rep.seconds = time.perf_counter() - t0
        return None, rep
    rep.peak_before = int(res.reordered.peak)
    rep.macs_before = int(res.original.macs)
    rep.prefix_end = res.prefix_end
    rep.frontier = [f"{c.label}@{','.join(c.split)}:{c.peak}:{c.overhead:.3f}"
                    for c in res.frontier[:12]]
    c = res.choice
    if c is None:
        rep.skipped = "no patch grid lowers the peak within the MAC budget" if res.evaluated \
            else "no candidate (region, grid) could be patched"
        if res.refused:
            rep.skipped += f" (refused: {res.refused[0]})"
        rep.seconds = time.perf_counter() - t0
        return None, rep
    plan = res.plan_of(c)
    try:
        # rewrite a copy: the caller's module stays as it was, whatever happens below
        new, nmap, (values, instructions) = _rewritten_copy(gm, em, plan, c.node_order)
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - the rewrite failed: the original stays
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        rep.skipped = f"rewrite failed: {type(e).__name__}: {first}"
        rep.seconds = time.perf_counter() - t0
        return None, rep
    rep.grid = f"{c.grid[0]}x{c.grid[1]}"
    rep.split = list(c.split)
    rep.se_patches = plan.se_mode
    rep.region_ops = int(c.region_ops)
    rep.macs = int(c.macs)
    rep.mac_overhead = float(c.overhead)
    rep.peak_after = int(c.peak)
    rep.certified = bool(c.certified)
    rep.values_added, rep.instructions_added = values, instructions
    rep.records_before = int(res.original.persistent)
    rep.records_added = int(c.persistent - res.original.persistent)
    if second_region and grid is None and split is None:
        new = _two_regions(gm, em, res, new, nmap, rep, max_overhead, time_limit, se_patches,
                           price_records, planned_inputs)
    rep.seconds = time.perf_counter() - t0
    return new, rep


SECOND_REGION_TRIES = 4  # first-region choices (the search's, then finer grids) tried


def _two_regions(gm, em: EdgeModel, res: SearchResult, new, nmap, rep: TileReport,
                 max_overhead: float, time_limit: float, se_patches, price_records=True,
                 planned_inputs=True):
    """A second patch region after the first one's reassembly (each region with its own
    grid: e.g. the stem's stage in many patches, then the next stage in a few), as
    `memsched.tflite.tile` does for .tflite files. First regions tried: the search's choice,
    then its region with finer grids within the MAC budget (alone they were no better: the
    operators after the region bound the peak, which a second region lowers), by the peak
    of their patched part. For each, the once-patched graph is searched again under the
    same memory model, regions starting right after the first one, within the MAC budget
    left; the lowest total is kept if it beats one region. Returns the graph module to use
    and fills ``rep``; ``time_limit`` bounds the whole of it."""
    deadline = time.perf_counter() + time_limit
    first0 = res.choice
    best = None  # (total, graph module, first candidate, first plan, second candidate, counts)
    for first, plan1 in _first_choices(em, res, max_overhead, time_limit / 8):
        left = deadline - time.perf_counter()
        if left < 0.5:
            break
        try:
            if first is first0:
                g1, m1, counts1 = new, nmap, (rep.values_added, rep.instructions_added)
            else:
                g1, m1, counts1 = _rewritten_copy(gm, em, plan1, first.node_order)
            post = {m1[n] for n in em.nodes[plan1.region.length:]}
            out = _second_region(g1, post, first, res.original.macs, max_overhead,
                                 min(left, time_limit / 2), se_patches, price_records,
                                 planned_inputs)
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - keep what we have
            rep.notes.append(f"second region after {first.label}: {type(e).__name__}: {e}")
            continue
        if out is None:
            continue
        g2, c2, counts2 = out
        if c2.total < first0.total and (best is None or c2.total < best[0]):
            best = (c2.total, g2, first, plan1, c2,
                    (counts1[0] + counts2[0], counts1[1] + counts2[1]))
    if best is None:
        rep.notes.append(f"second region: none lowers the peak below {first0.total:,} B")
        return new
    _, g2, first, plan1, c2, (values, instructions) = best
    rep.grid = f"{first.grid[0]}x{first.grid[1]}"
    rep.split = list(first.split)
    rep.se_patches = plan1.se_mode
    rep.region_ops = int(first.region_ops)
    rep.second_grid = f"{c2.grid[0]}x{c2.grid[1]}"
    rep.second_split = list(c2.split)
    rep.second_region = [int(c2.region_start), int(c2.region_ops)]
    rep.macs = int(c2.macs)
    rep.mac_overhead = float(c2.overhead)
    rep.peak_after = int(c2.peak)
    rep.certified = bool(c2.certified)
    rep.records_added = int(c2.persistent - rep.records_before)
    rep.values_added, rep.instructions_added = values, instructions
    return g2


def _first_choices(em: EdgeModel, res: SearchResult, max_overhead: float, time_limit: float):
    """(candidate, plan) first regions for `_two_regions`: the search's choice, then its
    region with more patches within the MAC budget, lowest patched-part peak first (the
    rest of the model not counted: a second region will lower it)."""
    from ..memory import Problem
    from ..patches.region import grid_macs, plan_patches
    from ..patches.search import DEFAULT_GRIDS, Candidate, heuristic_peak, patched_graph

    c0 = res.choice
    plan0 = res.plan_of(c0)
    yield c0, plan0
    sm, r, keep = em.sm, plan0.region, plan0.keep
    t_end = time.perf_counter() + time_limit
    region_macs = sum(sm.op_macs(sm.ops[k]) if sm.ops[k].cls != "other" else sm.macs[k]
                      for k in r.ops)
    scored = []
    for g in DEFAULT_GRIDS:
        if time.perf_counter() > t_end:
            break
        if g[0] * g[1] <= c0.patches or g[0] > r.hw[0] or g[1] > r.hw[1]:
            continue
        try:
            macs = res.original.macs - region_macs + grid_macs(sm, r, g, keep)
            over = macs / res.original.macs - 1 if res.original.macs else 0.0
            if over > max_overhead:
                continue
            plan = plan_patches(sm, r, g, keep)
        except Refused:
            continue
        pg = patched_graph(sm, em.graph, em.tensor_index, plan, prefix_only=True)
        peak = heuristic_peak(pg, plan, Problem.from_graph(pg, EXECUTORCH_MODEL),
                              baselines=False)
        scored.append((peak, g[0] * g[1], Candidate(
            list(c0.split), list(c0.split_index), c0.region_ops, g, peak, 0, macs, over, 0,
            c0.region_start, keep=keep, note="first of two regions"), plan))
    scored.sort(key=lambda x: (x[0], x[1]))
    for _, _, c, plan in scored[:SECOND_REGION_TRIES - 1]:
        yield c, plan


def _second_region(gm, post: set, first, macs0: int, max_overhead: float, time_limit: float,
                   se_patches, price_records=True, planned_inputs: bool = True):
    """The second search on the once-patched graph module ``gm`` (``post``: its nodes of the
    operators after the first region): regions starting at the first of those operators,
    within the MAC budget left. Returns (the twice-patched copy, the second candidate,
    (values, instructions) added) or None."""
    em = describe_graph(gm, planned_inputs)
    # the search runs the operators before a region in file order: put the once-patched
    # graph in the scheduler's order first (the first region's patches, as the search priced
    # them), or its file order's peak would hide what a second region saves
    _in_scheduled_order(gm, em, time_limit / 4)
    em = describe_graph(gm, planned_inputs)
    start = next((k for k, n in enumerate(em.nodes) if n in post), None)
    if start is None:
        return None
    # the budget left, in the once-patched graph's own MAC count (its slices, pads and
    # concatenations count as the search counts them there): what the second region adds to
    # the first's MACs stays within max_overhead of the original
    sm = em.sm
    macs1 = sum(sm.op_macs(op) if op.cls != "other" else sm.macs[k]
                for k, op in enumerate(sm.ops))
    budget = ((1 + max_overhead) * macs0 - first.macs) / macs1 if macs1 else 0.0
    res = search_patches(em.sm, em.graph, em.tensor_index, memory_of(em, price_records),
                         max_overhead=max(budget, 0.0), time_limit=time_limit, se=True,
                         se_patches=se_patches, starts=[start])
    c = res.choice
    if c is None:
        return None
    c.macs = first.macs + c.macs - macs1  # in the original graph's count
    c.overhead = c.macs / macs0 - 1 if macs0 else 0.0
    new, _, counts = _rewritten_copy(gm, em, res.plan_of(c), c.node_order)
    return new, c, counts


def _in_scheduled_order(gm, em: EdgeModel, time_limit: float) -> None:
    """Move ``gm``'s nodes (in place) into the order of memsched's scheduler on ``em``'s op
    graph: a topological order of all FX nodes by the rank of their operator in the
    schedule, nodes that are no operator of ``em`` (placeholders, getitems, constants)
    right after their last input."""
    import heapq

    from ..schedulers import schedule
    from .reorder import apply_node_order

    s = schedule(em.graph, "auto", EXECUTORCH_MODEL, time_limit=max(time_limit, 0.1))
    nodes = list(gm.graph.nodes)
    index = {n: i for i, n in enumerate(nodes)}
    rank = {em.nodes[v]: r for r, v in enumerate(s.order)}
    preds = {n: [a for a in n.all_input_nodes] for n in nodes}
    succs: dict = {n: [] for n in nodes}
    for n in nodes:
        for a in preds[n]:
            succs[a].append(n)
    key: dict = {}
    waiting = {n: len(preds[n]) for n in nodes}
    heap = []
    for n in nodes:
        if not preds[n]:
            # a call without inputs (a scratch buffer's ``alloc``) goes with its first reader,
            # not first in the graph, where it would live from the start (placeholders keep
            # their order: it is the program's signature)
            key[n] = rank.get(n, -1) if n.op != "call_function" else \
                min((rank[u] for u in n.users if u in rank), default=-1)
            heapq.heappush(heap, (key[n], index[n], n))
    order = []
    while heap:
        _, _, n = heapq.heappop(heap)
        order.append(n)
        for c in succs[n]:
            waiting[c] -= 1
            if waiting[c] == 0:
                key[c] = len(nodes) if c.op == "output" else \
                    rank.get(c, max(key[a] for a in preds[c]))
                heapq.heappush(heap, (key[c], index[c], c))
    apply_node_order(gm, order)


def _grid(grid):
    if grid is None:
        return None
    if isinstance(grid, str):
        try:
            grid = tuple(int(x) for x in grid.lower().split("x"))
        except ValueError:
            raise TilePatchesError(f"bad grid {grid!r}: give 'RxC' or (rows, cols)") from None
    grid = tuple(int(g) for g in grid)
    if len(grid) != 2 or min(grid) < 1:
        raise TilePatchesError(f"bad grid {grid!r}: give (rows, cols) >= 1")
    return grid


class TilePatchesPass:
    """An edge-dialect pass for ``ExecutorchBackendConfig(passes=[...])``: the spatial prefix
    patch by patch (see the module docstring). ``report``: one `TileReport` per method, in the
    order the methods were lowered. The graph module it is given is never changed: a patched
    copy is returned, or the same module when nothing is patched."""

    def __init__(self, max_overhead: float = 0.3, grid=None, split: str | None = None,
                 time_limit: float = 10.0, se_patches: str | None = None,
                 second_region: bool = True, price_records: bool = True,
                 planned_inputs: bool = True):
        if max_overhead < 0:
            raise TilePatchesError("max_overhead must be >= 0")
        if se_patches not in (None, "recompute", "keep"):
            raise TilePatchesError(f"se_patches must be 'recompute' or 'keep', not "
                                   f"{se_patches!r}")
        self.se_patches = se_patches
        self.second_region = bool(second_region)
        self.price_records = bool(price_records)
        self.planned_inputs = bool(planned_inputs)  # alloc_graph_input of the planning pass
        self.max_overhead = float(max_overhead)
        self.grid = _grid(grid)
        self.split = split
        self.time_limit = float(time_limit)
        self.report: list[TileReport] = []

    def __call__(self, graph_module):
        from torch.fx.passes.infra.pass_base import PassResult

        new, rep = tile_graph_module(graph_module, max_overhead=self.max_overhead,
                                     grid=self.grid, split=self.split,
                                     time_limit=self.time_limit, se_patches=self.se_patches,
                                     price_records=self.price_records,
                                     second_region=self.second_region,
                                     planned_inputs=self.planned_inputs)
        self.report.append(rep)
        if new is None:
            return PassResult(graph_module, False)
        return PassResult(new, True)


__all__ = ["EXECUTORCH_MEMORY", "EdgeModel", "TilePatchesError", "TilePatchesPass",
           "TileReport", "describe_graph", "tile_graph_module"]

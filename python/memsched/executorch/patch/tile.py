"""Patch-based execution (MCUNetV2-style) of the spatial prefix of an ExecuTorch edge program.

The ExecuTorch counterpart of `memsched.transform.tile_patches` (Relax) and
`memsched.tflite.patch.tile` (.tflite): a thin adapter over the one patch search of
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
   described by `memsched.executorch.patch.cortex_m`, their CMSIS-NN scratch buffers as
   per-op workspace.
2. **Search.** `memsched.patches.search_model` with ExecuTorch's runtime description
   (`executorch_runtime`: the arena plus the method allocator's records, SE blocks
   rewritten, the Cortex-M layout contract on channels-last maps) and the user's
   `PatchOptions`: a
   sequence of regions (each a run of operators ending at its split tensors, starting where
   the one before ends) and a grid per region, the lowest peak within ``max_overhead`` extra
   MACs for the whole graph, only if it beats the unpatched graph in its best order (a forced
   ``grid``/``split``: one region, applied even when it does not lower the peak).
3. **Rewrite** (on a copy of the graph module; the input module is never changed; region by
   region, the last one first, `patch.rewrite.rewrite`): per patch
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
   pieces kept live (``TileReport.se_patches``), whichever the search prices lower. Only
   with ``exact_reductions=False``: a float mean's partial sums change the summation order,
   so fp32 results may differ from the unpatched program in the last bits; by default
   (exact or refused, `memsched.patches.geometry.inexact_reduction`) the regions end before
   it and ``TileReport.prefix_end`` says why.

The pass (`TilePatchesPass`) keeps a `TileReport` per method in ``report``; it never raises on
a graph it cannot patch: it returns the graph unchanged with the reason in the report.
``backend_config(tile_patches=True)`` puts it into ``passes``; the planning pass that follows
(certified order + exact packer) then allocates the patched optimum.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace

from ...patches import (Clock, Described, PatchOptions, Refused, Runtime, SearchResult,
                        entry_options, search_model, unmet_grid)
from ..errors import ExecutorchError
from ..memory.model import EXECUTORCH_MODEL
from .describe import EXECUTORCH_MEMORY, EdgeModel, describe_graph
from .cortex_m import own_padding
from .layout import CHANNELS_LAST
from .rewrite import _copy_module, rewrite
from .records import ExecutorchRecords, check_target

class TilePatchesError(ExecutorchError):
    """Bad options of the patch pass (a grid that is not ``(rows, cols)``, a negative
    overhead), or a grid asked for that the graph cannot take (the reason): the same in
    every runtime's adapter."""


def records_target(target) -> str | None:
    """``target`` checked: "cortex-m", "host" or None (per graph:
    `records.default_target`); anything else raises `TilePatchesError`."""
    try:
        return check_target(target)
    except ValueError as e:
        raise TilePatchesError(str(e)) from None


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
    # every region (`Candidate.region_dict`: operators [region_start, region_ops) of the
    # unpatched graph, grid, split, its part's peak, what it adds), in model order; the
    # second's again in second_* (the two-region fields of before)
    regions: list = field(default_factory=list)
    second_grid: str = ""
    second_split: list = field(default_factory=list)
    second_region: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    # the stage the wall-clock time limit stopped the search in (`patches.budget.Clock`);
    # empty: the work budgets alone decided, and any machine writes the same program
    stopped_by_time_limit: str = ""
    # the method allocator's records of the described calls (`memsched.executorch.patch.records`),
    # modelled at records_target's ABI ("cortex-m", "host"; "" when not priced): before, and
    # what the patches add (priced in the choice with price_records)
    records_before: int = 0
    records_added: int = 0
    records_target: str = ""
    # the records were priced for the program with its equal values shared
    # (`memsched.executorch.plan.share`: write ``share_values(program)``, not the emitter's bytes)
    values_shared: bool = False
    # the CPU instructions of one execute on a Cortex-M55, predicted by the search's kernel
    # cost model (`memsched.executorch.memory.instructions`; None: no model for this graph): before,
    # with the patches, their ratio, the bound the choice was made under, and the (total
    # bytes, instructions) frontier the search found ("grid@split:bytes:slowdown")
    cpu_instructions_before: int | None = None
    cpu_instructions: int | None = None
    slowdown: float | None = None
    max_slowdown: float | None = None
    time_frontier: list = field(default_factory=list)
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
        for r in self.regions[1:]:
            se += (f"; then grid {r['grid']} @ {','.join(r['split'])} "
                   f"(ops {r['region_start']}-{r['region_ops'] - 1})")
        return (f"patches: grid {self.grid} @ {','.join(self.split)} ({self.region_ops} ops"
                f"{se}), "
                f"MACs {self.macs_before:,} -> {self.macs:,} (+{100 * self.mac_overhead:.1f} %),"
                f" modelled peak {self.peak_before:,} B -> {self.peak_after:,} B "
                f"({'certified' if self.certified else 'not proven'}), "
                f"+{self.values_added} values / +{self.instructions_added} instructions "
                f"(+{self.records_added:,} B of method-allocator records"
                f"{' at ' + self.records_target if self.records_target else ''}"
                f"{', values shared' if self.values_shared and self.records_target else ''}), "
                f"{self._time()}{self.seconds:.2f} s")

    def _time(self) -> str:
        if self.cpu_instructions is None:
            return ""
        bound = f"{self.max_slowdown:g}x" if self.max_slowdown is not None else "none"
        return (f"predicted Cortex-M55 instructions {self.cpu_instructions_before:,} -> "
                f"{self.cpu_instructions:,} ({self.slowdown:.3f}x; max_slowdown {bound}), ")


# ---------------------------------------------------------------------------- search
def memory_of(em: EdgeModel, price_records: bool = True):
    """The patch search's memory model for ``em``: the planned arena plus the method
    allocator's records of every call at ``em.target``'s ABI (``price_records``), or the
    arena alone."""
    if not price_records:
        return EXECUTORCH_MEMORY
    return ExecutorchRecords(EXECUTORCH_MODEL, em.op_bytes,
                             CHANNELS_LAST if em.channels_last else None, em.target,
                             () if em.planned_inputs else em.sm.inputs, em.shared,
                             em.op_out_bytes)


def executorch_runtime(em: EdgeModel, price_records: bool = True) -> Runtime:
    """ExecuTorch as the patch search sees it (`memsched.patches.Runtime`): `memory_of`;
    portable kernels take a convolution's / pool's own padding on any window, on both sides
    (plans with margins), while the Cortex-M flow's rebuilt calls on channels-last maps are
    not written that way and cut on the maps' NHWC form (`patch.layout.CHANNELS_LAST`);
    squeeze-and-excitation blocks are rewritten; ``time``: the M55 instructions of the
    Cortex-M flow's kernels (`patch.time.time_model`; None where a call has no model);
    ``own_padding``: a Cortex-M convolution takes the border pads its kernel and shape
    function allow as its own padding (`patch.cortex_m.own_padding`)."""
    cl = em.channels_last
    from .time import time_model

    return Runtime(memory_of(em, price_records), implicit_padding=not cl,
                   padding_rule="fixed", se=True, layout=CHANNELS_LAST if cl else None,
                   time=time_model(em), own_padding=own_padding)


def search(em: EdgeModel, options: PatchOptions | None = None, *,
           price_records: bool = True, **given) -> SearchResult:
    """The one patch search (`memsched.patches.search_model`) under ExecuTorch's memory model
    (`executorch_runtime`). ``given``: `PatchOptions` fields put over ``options``."""
    return search_model(Described(em.sm, em.graph, em.tensor_index),
                        executorch_runtime(em, price_records), PatchOptions.of(options, **given))


def tile_graph_module(gm, options: PatchOptions | None = None, *, max_overhead=None,
                      grid=None, split=None, time_limit=None, se_patches=None,
                      second_region=None, price_records: bool = True,
                      planned_inputs: bool = True, exact_reductions=None, padding=None,
                      max_regions=None, target: str | None = None,
                      share_values: bool = False, max_slowdown=...):
    """(the patched copy of ``gm`` or None, `TileReport`); ``gm`` itself is never changed.

    ``options``: the search's `memsched.patches.PatchOptions` (the keywords of the same names
    put over it: ``max_overhead``, ``max_slowdown`` (the most instructions per execute the
    choice may run on a Cortex-M55, predicted by `memsched.executorch.memory.instructions`, as a
    factor of the unpatched program's: default 1.10, None no bound), ``grid``, ``split``,
    ``se_patches``, ``max_regions`` (regions in sequence, each with its own grid, under the one
    MAC budget; ``second_region``: its deprecated name), ``exact_reductions`` (a float mean's
    partial sums, equal up to rounding, only with False), ``padding`` (``"explicit"``:
    constant_pad_nd on patch borders; ``"margins"``: convolutions and pools keep their own
    padding on wider windows; default: both priced), ``time_limit`` (the search's wall-clock
    safety net)). ``price_records``: the objective is the planned arena plus the method
    allocator's records (`memsched.executorch.patch.records`), else the arena alone; ``target``: the
    ABI those records are priced at, "cortex-m" (32-bit Arm) or "host" (x86-64); None:
    "cortex-m" for a graph with ``cortex_m::`` operators, else "host"
    (`records.default_target`). ``planned_inputs``: False when the planning pass leaves the user
    inputs out of the arena (``alloc_graph_input=False``). ``share_values``: the records are
    priced for the program with its equal values shared
    (`memsched.executorch.plan.share.share_values`, which the caller applies to the written
    ``.pte``). Bad options raise `TilePatchesError`."""
    target = records_target(target)
    opts = entry_options(TilePatchesError, options, max_overhead=max_overhead,
                         max_slowdown=max_slowdown, grid=grid,
                         split=split, time_limit=time_limit, se_patches=se_patches,
                         second_region=second_region, exact_reductions=exact_reductions,
                         padding=padding, max_regions=max_regions)
    t0 = time.perf_counter()
    rep = TileReport()
    try:
        em = describe_graph(gm, planned_inputs, target, share_values)
        rep.records_target = em.target if price_records else ""
        rep.values_shared = bool(share_values)
        res = search(em, opts, price_records=price_records)
    except Refused as e:
        if opts.grid is not None:  # a grid asked for is never silently dropped
            raise TilePatchesError(f"cannot tile the graph with grid {opts.grid[0]}x"
                                   f"{opts.grid[1]}: {e}") from None
        rep.skipped, rep.seconds = str(e), time.perf_counter() - t0
        return None, rep
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - a node we do not know: leave the graph alone
        rep.skipped = f"cannot model the graph: {type(e).__name__}: {e}"
        rep.seconds = time.perf_counter() - t0
        return None, rep
    unmet = unmet_grid(opts, res)
    if unmet:
        raise TilePatchesError(f"cannot tile the graph with {unmet}")
    rep.peak_before = int(res.reordered.peak)
    if res.stopped:
        rep.stopped_by_time_limit = res.stopped
        rep.notes.append(Clock.note_of(res.stopped))
    rep.macs_before = int(res.original.macs)
    rep.cpu_instructions_before = res.original.instructions
    rep.max_slowdown = opts.max_slowdown if res.original.instructions is not None else None
    rep.time_frontier = [f"{c.label}@{','.join(c.split) or '-'}:{c.total}:{c.slowdown:.3f}"
                         for c in res.time_frontier()]
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
    plans = res.plans_of(c)
    try:
        # rewrite a copy: the caller's module stays as it was, whatever happens below
        new, (values, instructions) = _rewritten(gm, em, plans,
                                                 [r.node_order for r in c.sequence])
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - the rewrite failed: the original stays
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        rep.skipped = f"rewrite failed: {type(e).__name__}: {first}"
        rep.seconds = time.perf_counter() - t0
        return None, rep
    seq = c.sequence
    rep.grid = f"{seq[0].grid[0]}x{seq[0].grid[1]}"
    rep.split = list(seq[0].split)
    rep.se_patches = plans[0].se_mode
    rep.region_ops = int(seq[0].region_ops)
    rep.regions = [r.region_dict() for r in seq]
    if len(seq) > 1:  # the old two-region fields: the second region
        rep.second_grid = f"{seq[1].grid[0]}x{seq[1].grid[1]}"
        rep.second_split = list(seq[1].split)
        rep.second_region = [int(seq[1].region_start), int(seq[1].region_ops)]
    rep.macs = int(c.macs)
    rep.mac_overhead = float(c.overhead)
    rep.cpu_instructions, rep.slowdown = c.instructions, c.slowdown
    rep.peak_after = int(c.peak)
    rep.certified = bool(c.certified)
    rep.values_added, rep.instructions_added = values, instructions
    rep.records_before = int(res.original.persistent)
    rep.records_added = int(c.persistent - res.original.persistent)
    rep.seconds = time.perf_counter() - t0
    return new, rep


def _rewritten(gm, em: EdgeModel, plans, orders=None) -> tuple:
    """(a copy of ``gm`` with every region of ``plans`` patched, (values, instructions)
    added). The last region first: the nodes of the regions before stay as `describe_graph`
    named them, and each region's reassembly then takes over every reader of its split
    tensors, the later regions' slices included. ``orders``: per plan, its nodes in the
    order the search priced (`Candidate.node_order`) or None."""
    new, nmap = _copy_module(gm)
    em2 = replace(em, nodes=[nmap[n] for n in em.nodes],
                  node_of={t: nmap[n] for t, n in em.node_of.items()})
    orders = list(orders) if orders is not None else [None] * len(plans)
    values = instructions = 0
    for plan, order in reversed(list(zip(plans, orders))):
        v, i = rewrite(new, em2, plan, order)
        values, instructions = values + v, instructions + i
    return new, (values, instructions)


class TilePatchesPass:
    """An edge-dialect pass for ``ExecutorchBackendConfig(passes=[...])``: the spatial prefix
    patch by patch (see the module docstring). ``report``: one `TileReport` per method, in the
    order the methods were lowered. The graph module it is given is never changed: a patched
    copy is returned, or the same module when nothing is patched. ``options``: the search's
    `memsched.patches.PatchOptions` (the keywords of `tile_graph_module`, put over it; checked
    here, once: bad ones raise `TilePatchesError`)."""

    def __init__(self, options: PatchOptions | None = None, *, max_overhead=None, grid=None,
                 split: str | None = None, time_limit=None, se_patches: str | None = None,
                 second_region=None, price_records: bool = True,
                 planned_inputs: bool = True, exact_reductions=None,
                 padding: str | None = None, max_regions=None, target: str | None = None,
                 share_values: bool = False, max_slowdown=..., memory_map=None):
        self.target = records_target(target)
        self.share_values = bool(share_values)
        # checked once, here: a PatchOptions passed on is not checked again
        self.options = entry_options(
            TilePatchesError, options, max_overhead=max_overhead, max_slowdown=max_slowdown,
            grid=grid, split=split,
            time_limit=time_limit, se_patches=se_patches, second_region=second_region,
            exact_reductions=exact_reductions, padding=padding, max_regions=max_regions,
            # a memory map (ExecuTorch's ``TargetMemoryMap``): the search prefers plans whose
            # arena fits its fastest bank
            fast_memory=memory_map.banks[0].size if memory_map is not None else None)
        self.price_records = bool(price_records)
        self.planned_inputs = bool(planned_inputs)  # alloc_graph_input of the planning pass
        self.report: list[TileReport] = []

    def __call__(self, graph_module):
        from torch.fx.passes.infra.pass_base import PassResult

        new, rep = tile_graph_module(graph_module, self.options,
                                     price_records=self.price_records,
                                     planned_inputs=self.planned_inputs, target=self.target,
                                     share_values=self.share_values)
        self.report.append(rep)
        if new is None:
            return PassResult(graph_module, False)
        return PassResult(new, True)


__all__ = ["EXECUTORCH_MEMORY", "EdgeModel", "TilePatchesError", "TilePatchesPass",
           "TileReport", "describe_graph", "tile_graph_module"]

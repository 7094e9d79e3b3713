"""`TilePatches`: patch-based execution (MCUNetV2-style) of the spatial prefix of a Relax model.

The first, high-resolution operators of a CNN hold the largest feature maps; no operator order
gets below "input and output of the worst operator live". Running the prefix patch by patch
(each patch computes its piece of the *split tensors* from a window of the model input, halos
recomputed) keeps only patch-sized tensors live until the split tensors are reassembled.

This pass is a thin adapter over `memsched.patches` (plain Python):

1. the first dataflow block of each Relax function is described as a `patches.SpatialModel`
   (one operator per binding, NCHW or NHWC feature maps seen as 1 x H x W x C): conv2d
   (groups included: depthwise), max/avg pool2d, nn.pad, element-wise unary/binary ops on
   same-shape tensors or with per-channel/scalar constants (bias, folded batch norm, clip,
   relu, residual add), concat along channels; squeeze-and-excitation blocks (a mean/sum over
   H and W -> ``reduce``, the bindings on its vector -> ``vector``, the feature map times the
   vector -> ``scale``: `_squeeze_excitation`; regions through them are searched with
   ``se=True``, through a mean / sum only when its partial sums combine exactly: an integer
   sum that cannot overflow, float sums with ``exact_reductions=False``). Bindings that
   read no activation (weight reshapes) are kept in front, untouched;
2. the one patch search (`memsched.patches.search_model`) chooses the regions (a sequence,
   each starting where the one before ends) and a grid per region under
   TVM's planned storage (`TVM_MEMORY`: memsched's ``tvm`` memory model, parameters and the
   returned tensor not planned, nothing kept per operator): MACs, patch-order heuristics and the
   certified scheduler on the whole patched graph for the frontier. Choice: the lowest peak
   within ``max_overhead`` extra MACs, ties to fewer patches; none when nothing beats the
   unpatched graph in its best order;
3. the region is rewritten from `patches.plan_patches`: per patch ``strided_slice`` of the
   input with its halo, ``nn.pad`` only on the true borders (zero, the dtype's lowest value
   for max pooling), the same conv/pool with ``padding=0``, element-wise ops on the windows,
   and ``concat`` of the patches (rows along W, then along H) bound to the split tensor's own
   variable, so the rest of the block is unchanged. Through an SE block: a first pass over
   the patches with ``relax.sum`` of each patch's own cells, the partial sums added, one
   ``divide`` by H*W bound to the mean's variable, the vector bindings unchanged, then the
   patches again with the scale: recomputed from the region's inputs, or read from the
   first pass's pieces kept live, whichever the search prices lower (see
   docs/patches_tvm.md).

Results are function attributes: ``memsched.patches_split`` (tensor names, comma separated),
``memsched.patches_grid`` ("RxC"), ``memsched.patches_region_ops`` (these three: the first
region), ``memsched.patches_regions`` (every region: ``first-last op:RxC@split``, ``; ``
separated),
``memsched.patches_peak_before`` / ``memsched.patches_peak_after`` (bytes, the scheduler's
peaks under the ``tvm`` model, unpatched and patched), ``memsched.patches_mac_overhead``,
``memsched.patches_macs``, ``memsched.patches_certified``, ``memsched.patches_se``
(``recompute`` / ``keep`` through SE blocks, else ""), ``memsched.patches_frontier``
(``grid@split:peak:overhead`` entries, ``RxC+keep`` for kept pieces),
(the seconds: `memsched.transform.timings`, never in the module); and
``memsched.patches_skipped`` (the reason) when a function is left unchanged.

Use it before MemoryAwareSchedule + PlanArena, so those allocate the patched optimum::

    ex = tvm.compile(mod, "llvm", relax_pipeline=memsched.pipeline(tile_patches=True))
"""
from __future__ import annotations

import time
import warnings

import tvm
import tvm_ffi
from tvm import relax

from ..patches import (Described, PatchOptions, PatchOptionsError, Refused, Runtime,
                       RuntimeMemory, SearchResult, entry_options, search_model, unmet_grid)
from . import timings
from .common import map_relax_functions, with_blocks
from .tile_patches_describe import BlockModel, TVM_MODEL, describe_block
from .tile_patches_rewrite import rewrite_block

# a PatchOptionsError raised inside the pass crosses TVM's FFI: registered, it comes back to
# the caller as itself (a ValueError), not as a RuntimeError
tvm_ffi.register_error("PatchOptionsError", PatchOptionsError)


# ---------------------------------------------------------------------------- search
TVM_MEMORY = RuntimeMemory("tvm", TVM_MODEL)  # planned storage: activations only
# TVM as the patch search sees it: Relax convolutions and pools take their declared padding
# on any window (plans with margins can be written, but explicit is the default: the planned
# storage keeps nothing per operator, so margins save only the pads' copies, and on the
# MobileNetV2 table they never won while their pricing took search time); a batch norm's
# tuple cannot be reassembled by concat (its [0] is the split tensor); SE blocks rewritten
TVM_RUNTIME = Runtime(TVM_MEMORY, implicit_padding=True, padding_rule="declared",
                      default_padding="explicit", se=True, no_split_kinds=("nn.batch_norm",))


def search(bm: BlockModel, options: PatchOptions | None = None, **given) -> SearchResult:
    """The one patch search (`memsched.patches.search_model`) under TVM's planned storage
    (`TVM_RUNTIME`). ``given``: `PatchOptions` fields put over ``options``."""
    return search_model(Described(bm.sm, bm.graph, bm.tensor_index), TVM_RUNTIME,
                        PatchOptions.of(options, **given))


# ---------------------------------------------------------------------------- the pass
@tvm.transform.module_pass(opt_level=0, name="TilePatches")
class TilePatches:
    """Rewrite the spatial prefix of each Relax function into patches (see the module doc).

    Parameters
    ----------
    options : memsched.patches.PatchOptions, optional
        The search's options, whole; the parameters below of the same names are put over it.
    max_overhead : float
        Extra MACs allowed, as a fraction of the model's MACs (default 0.3 = +30 %).
    grid : (rows, cols) or "RxC", optional
        Force this grid (default: searched among 1x2 ... 8x8).
    split : str, optional
        Force the region to end at the tensor (binding variable) of this name.
    time_limit : float, optional
        The search's wall-clock safety net per function in seconds (default 60): the search is
        bounded by its work budgets (`memsched.patches.Budget`), so the same module gives the
        same result on any machine unless this stops it (then
        ``memsched.patches_stopped_by_time_limit`` says where).
    functions : list of str, optional
        Only these functions (default: every Relax function).
    se_patches : {"recompute", "keep"}, optional
        Through a squeeze-and-excitation block, the patches after its mean recompute their
        feature maps from the region's inputs, or read the first pass's pieces kept live
        (default: whichever the search prices lower).
    max_regions : int
        Regions in sequence, each with its own grid, under the one MAC budget (default 4; 1:
        one region). A forced grid or split asks for one region.
    exact_reductions : bool
        A region runs through a squeeze-and-excitation mean / sum only if its per-patch
        partial sums combine exactly: an integer sum that cannot overflow (default True; a
        float sum ends the region, the reason in ``memsched.patches_prefix_end``). False also
        allows float sums, equal to the unpatched mean up to float reassociation (not
        bit-equal; e.g. an int8 .tflite imported by TVM's TFLite frontend, whose MEAN is a
        float32 sum of dequantized values).
    padding : str, optional
        ``"explicit"`` (the default here, `TVM_RUNTIME`): exact windows, ``nn.pad`` on patch
        borders; ``"margins"``: convolutions and pools keep their own padding on windows as
        wide as the halo (no ``nn.pad``, fewer crops, more MACs; `memsched.patches.margins`).

    Bad options raise ``ValueError`` (`memsched.patches.PatchOptionsError`), and so does a
    forced ``grid`` a function cannot take (the reason; as in every runtime's adapter).
    """

    def __init__(self, max_overhead: float | None = None, grid=None, split: str | None = None,
                 time_limit: float | None = None, functions=None, se_patches: str | None = None,
                 max_regions: int | None = None, exact_reductions: bool | None = None,
                 padding: str | None = None, options: PatchOptions | None = None):
        self.options = entry_options(
            PatchOptionsError, options, "TilePatches: ", max_overhead=max_overhead, grid=grid,
            split=split, time_limit=time_limit, se_patches=se_patches, max_regions=max_regions,
            exact_reductions=exact_reductions, padding=padding)
        self.functions = None if functions is None else set(functions)

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        return map_relax_functions(mod, self.functions, self._function)

    def _skip(self, func, name, why):
        warnings.warn(f"TilePatches: {name}: left unchanged: {why}", stacklevel=3)
        return func.with_attrs({"memsched.patches_skipped": why})

    def _function(self, func: relax.Function, name: str):
        t0 = time.perf_counter()
        body = func.body
        if not isinstance(body, relax.SeqExpr):
            return None
        blocks = list(body.blocks)
        idx = [i for i, b in enumerate(blocks) if isinstance(b, relax.DataflowBlock)]
        if not idx:
            return self._skip(func, name, "no dataflow block")
        i = idx[0]
        try:
            bm = describe_block(func, blocks[i])
            if not bm.sm.ops:
                raise Refused("the block has no operator on the inputs")
            res = search(bm, self.options)
        except Refused as e:
            if self.options.grid is not None:  # a grid asked for is never silently dropped
                g = self.options.grid
                raise PatchOptionsError(f"TilePatches: {name}: cannot tile with grid "
                                        f"{g[0]}x{g[1]}: {e}") from None
            return self._skip(func, name, str(e))
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - an unexpected binding: leave it as it was
            return self._skip(func, name, f"cannot model the block: {type(e).__name__}: {e}")
        unmet = unmet_grid(self.options, res)
        if unmet:
            raise PatchOptionsError(f"TilePatches: {name}: cannot tile with {unmet}")
        choice, refused = res.choice, res.refused
        attrs = {
            "memsched.patches_peak_before": int(res.reordered.peak),
            "memsched.patches_candidates": int(res.evaluated),
            "memsched.patches_prefix_end": res.prefix_end,
            "memsched.patches_priced": int(res.priced),
            "memsched.patches_frontier": "; ".join(
                f"{c.label}@{','.join(c.split)}:{c.peak}:{c.overhead:.3f}"
                for c in res.frontier[:12]),
        }
        if res.stopped:  # the safety net, not the work budgets: another machine may differ
            attrs["memsched.patches_stopped_by_time_limit"] = res.stopped
        if choice is None:
            msg = "no patch grid lowers the peak within the MAC budget" if res.evaluated else \
                "no candidate (region, grid) could be patched"
            if refused:
                msg += f" (refused: {refused[0]})"
            attrs["memsched.patches_skipped"] = msg
            timings.record("TilePatches", name, time.perf_counter() - t0)
            return func.with_attrs(attrs)
        try:
            plans = res.plans_of(choice)
            blocks[i] = relax.DataflowBlock(rewrite_block(bm, plans), blocks[i].span)
            new = with_blocks(func, blocks)
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - TVM rejected the rewrite: leave it as it was
            return self._skip(func, name, f"rewrite failed: {type(e).__name__}: "
                              f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}")
        seq = choice.sequence  # the one-region attributes: the first region's
        attrs.update({
            "memsched.patches_split": ",".join(seq[0].split),
            "memsched.patches_grid": f"{seq[0].grid[0]}x{seq[0].grid[1]}",
            "memsched.patches_region_ops": int(seq[0].region_ops),
            "memsched.patches_regions": "; ".join(
                f"{r.region_start}-{r.region_ops - 1}:{r.label}@{','.join(r.split)}"
                for r in seq),
            "memsched.patches_peak_after": int(choice.peak),
            "memsched.patches_macs": int(choice.macs),
            "memsched.patches_mac_overhead": float(round(choice.overhead, 6)),
            "memsched.patches_certified": int(choice.certified),
            "memsched.patches_se": plans[0].se_mode,
        })
        timings.record("TilePatches", name, time.perf_counter() - t0)  # not in attrs: no clock
        return new.with_attrs(attrs)

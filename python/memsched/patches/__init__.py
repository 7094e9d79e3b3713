"""Patch-based execution (MCUNetV2-style): run the first, high-resolution part of a CNN patch by
patch so the large feature maps never exist whole.

Plain Python + numpy (no TVM). The flow from a model to a written file::

    adapter: describe the graph ──> Described(sm, graph, tensor_index)
             describe the runtime ─> Runtime(memory, padding, limits, layout, ...)
    user:    options ─────────────> PatchOptions(max_overhead, grid, ..., budget)
    search_model(described, runtime, options) ─> SearchResult: frontier, choice, plans_of(choice)
    adapter: apply the plans ─────> the runtime's file / module

The request and what answers it:

* `options`: `PatchOptions`, every option of every entry point, checked once
  (`PatchOptionsError`); `budget`: the work the search may do (`Budget`) and the wall-clock
  safety net (`Clock`);
* `runtime`: what a runtime costs (`RuntimeMemory`) and what its adapter can write (`Runtime`:
  implicit padding and its rule, concatenation limits, reassembly it cannot do, squeeze-and-
  excitation, the layout contract of its cuts, `Layout`);
* `request`: the one entry point, `search_model`, and the graph description `Described`;
* `starts`: where a region may start (`region_starts`, one rule for every runtime); `se`: the
  squeeze-and-excitation classifier the adapters share (`classify_se`);

and below them:

* `geometry`: windows, the back-propagation rule of window operators, the spatial description
  of a model's operators (`SpatialModel`), the exact-or-refused rule for whole-map reductions
  (`inexact_reduction`);
* `errors`: why the rewrite refuses a region or grid (`Refused`);
* `regions`: candidate regions (spatial prefixes, DAGs included; `Region`, `regions`);
* `windows`: the windows of a patch (back-propagated from its cell) and the MACs of a grid
  (`grid_macs`);
* `plans`: the patched computation of a region for a grid (`plan_patches` -> `PatchPlan`);
* `margins`: the other plan of a region -- every operator with its own padding on a wider
  window (no PADs, fewer crops; `plan_margins`), for runtimes that pay per inserted node;
* `patched`: the patched model as an `OpGraph` (what the evaluator prices) and the
  patch-by-patch orders it is priced in;
* `evaluator`: the objective (activation peak + the bytes the runtime keeps, MACs), the
  options resolved against a runtime (`resolve` -> `Request`) and the one evaluator of a
  search (`Evaluator`: the problem, its caches, the prices of candidates);
* `search`: the one-region search over it, the Pareto frontier and the default choice;
  `result`: the answer (`SearchResult`) and the candidates;
* `sequence`: regions as a search dimension: a sequence of k >= 1 regions, each with its own
  grid, under one MAC budget (`search_sequence`);
* `reference`: a numpy reference that runs a region whole and patched (tests).

The adapters import from this face only: `memsched.tflite.patch.tile` (.tflite files, TFLite
Micro's memory model in `memsched.tflite.memory.model`), `memsched.transform.tile_patches`
(the Relax pass `TilePatches`, TVM's planned storage) and `memsched.executorch.patch.tile`
(ExecuTorch).
"""
from .budget import Budget, Clock
from .geometry import (INT_RANGES, PAD_MIN, PAD_NONE, PAD_ZERO, SOp, SpatialModel, STensor,
                       Win, inexact_reduction, same_padding, valid_size)
from .options import (MAX_REGIONS, PatchOptions, PatchOptionsError, entry_options, parse_grid,
                      unmet_grid)
from .errors import Refused
from .plans import PatchPlan, plan_patches
from .request import Described, search_model, search_ways
from .result import Candidate, Deferred, SearchResult
from .runtime import Layout, Runtime, RuntimeMemory, RuntimeTime
from .se import classify_se, partial_se_blocks
from .evaluator import BAND_GRIDS, DEFAULT_GRIDS
from .patched import patched_graph
from .starts import region_starts
# last: the function `regions`, not the module of that name
from .regions import Region, regions  # noqa: E402, I001

__all__ = ["BAND_GRIDS", "Budget", "Candidate", "Clock", "DEFAULT_GRIDS", "Deferred",
           "Described", "INT_RANGES", "Layout", "MAX_REGIONS", "PAD_MIN", "PAD_NONE", "PAD_ZERO",
           "PatchOptions", "PatchOptionsError", "PatchPlan", "Refused", "Region", "Runtime",
           "RuntimeMemory", "RuntimeTime", "SOp", "STensor", "SearchResult", "SpatialModel", "Win",
           "classify_se", "inexact_reduction", "parse_grid", "partial_se_blocks",
           "patched_graph", "plan_patches", "region_starts", "regions", "same_padding",
           "search_model", "search_ways", "valid_size", "unmet_grid", "entry_options"]

"""Patch-based execution (MCUNetV2-style): run the first, high-resolution part of a CNN patch by
patch so the large feature maps never exist whole.

Plain Python + numpy (no TVM):

* `geometry`: windows, the back-propagation rule of window operators, the spatial description
  of a model's operators (`SpatialModel`; each runtime adapter builds it from its graph), and
  the exact-or-refused rule for whole-map reductions (`inexact_reduction`);
* `errors`: why the rewrite refuses a region or grid (`Refused`);
* `regions`: candidate regions (spatial prefixes, DAGs included; `Region`, `regions`);
* `windows`: the windows of a patch (back-propagated from its cell) and the MACs of a grid
  (`grid_macs`);
* `plans`: the patched computation of a region for a grid (`plan_patches` -> `PatchPlan`);
* `search`: the one evaluator (activation peak under the certified scheduler + the bytes the
  runtime keeps per operator, MACs), with the runtime's memory model as its parameter
  (`RuntimeMemory`), the Pareto frontier and the default choice;
* `patched`: the patched model as an `OpGraph` (what the evaluator prices) and the
  patch-by-patch orders it is priced in;
* `margins`: the other plan of a region -- every operator with its own padding on a wider
  window (no PADs, fewer crops; `plan_margins`), for runtimes that pay per inserted node;
* `sequence`: regions as a search dimension: a sequence of k >= 1 regions, each with its own
  grid, under one MAC budget (`search_regions`, the search every adapter calls);
* `reference`: a numpy reference that runs a region whole and patched (tests).

The rewrites are thin adapters in the runtime packages: `memsched.tflite.tile` (.tflite files,
TFLite Micro's memory model in `memsched.tflite.tflm_memory`) and
`memsched.transform.tile_patches` (the Relax pass `TilePatches`, TVM's planned storage).
"""
from .errors import Refused  # noqa: F401
from .geometry import SOp, STensor, SpatialModel, Win, inexact_reduction  # noqa: F401
from .plans import PatchPlan, plan_patches  # noqa: F401
from .regions import Region, regions  # noqa: F401
from .search import (Candidate, RuntimeMemory, SearchResult, patched_graph,  # noqa: F401
                     search_patches)
from .sequence import search_regions  # noqa: F401

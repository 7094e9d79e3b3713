"""Patch-based execution (MCUNetV2-style): run the first, high-resolution part of a CNN patch by
patch so the large feature maps never exist whole.

Plain Python + numpy (no TVM):

* `geometry`: windows, the back-propagation rule of window operators, the spatial description
  of a model's operators (`SpatialModel`, from a .tflite graph);
* `region`: candidate regions (spatial prefixes, DAGs included) and the patched computation of
  a region for a grid (`plan_patches` -> `PatchPlan`);
* `search`: the evaluator (TFLite Micro peak under the certified scheduler + persistent bytes,
  MACs), the Pareto frontier and the default choice;
* `reference`: a numpy reference that runs a region whole and patched (tests).

The .tflite rewrite is `memsched.importers.tflite_patches.tile_tflite`.
"""
from .geometry import SOp, STensor, SpatialModel, Win  # noqa: F401
from .region import PatchPlan, Refused, Region, plan_patches, regions  # noqa: F401
from .search import (Candidate, SearchResult, TFLMPersistent, patched_graph,  # noqa: F401
                     search_patches)

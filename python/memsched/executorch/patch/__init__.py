"""The patch adapter (MCUNetV2-style patch-based execution of the spatial prefix, chosen by the
one patch search of `memsched.patches`). Imports `format`, `memory` and `plan`.

* `tile`: the pass (`TilePatchesPass`, `tile_graph_module`) and the request to the search;
* `describe`: an edge-dialect graph module as a `SpatialModel` and its `OpGraph`;
* `rewrite`: a patch plan applied to the graph module;
* `layout`: the memory layout of a rewrite on channels-last maps (`CHANNELS_LAST`), lowered at
  planning;
* `cortex_m`: the Cortex-M int8 operators (``cortex_m::`` on CMSIS-NN) as the geometry sees them;
* `records`: the method allocator's records of a call at a target's ABI
  (`ExecutorchRecords`, the search's `RuntimeMemory`);
* `time`: the search's time model on the Cortex-M55 (`ExecutorchTime`).
"""

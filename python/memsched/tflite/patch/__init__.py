"""The patch adapter for .tflite files (``memsched tile``): patch-based execution written with
builtin operators only, chosen by the one patch search of `memsched.patches`. Imports
`format`, `memory` and `plan`.

* `describe`: subgraph 0 described for the search (`spatial_model` -> `SpatialModel`);
* `tile`: the search's request (`tile_tflite`) and the rewrite of its plans (`rewrite_model`),
  with the measurement of both files (`measure_tile`).
"""

"""Everything memsched does to .tflite files, for TFLite, TFLite Micro and Edge TPU users.

Four rooms, each importing only the rooms above it in this list (`tests/test_layering.py`):

* `format`: the file format (the flatbuffer object API of LiteRT's schema, no tensorflow):
  `read` (a .tflite flatbuffer into an `OpGraph` plus its parameter buffers: `read_tflite`,
  `TFLiteGraph`), `write` (serialising a model object, the ``OfflineMemoryAllocation``
  metadata), `check` (the independent checker every written file passes), `aliases` (which
  tensors may share bytes in TFLite Micro), `tvm_guard` (an untrusted file checked before
  anything walks it);
* `memory`: TFLite Micro's memory and time model, computed from the file: `model` (lifetimes,
  alignment, persistent bytes per operator, the patch search's `TFLMMemory`), `arena` (the
  minimal arena on a 32-bit Cortex-M or the host, replayed from `abi`, `kernels` and `planner`),
  `kernel_costs` + `instructions` (instructions per ``Invoke()`` on a Cortex-M55, `TFLMTime`),
  `nodes` (what the patch writer writes per plan node, stated once for the writer and both
  models);
* `plan`: the certified operator order (`reorder`, ``memsched reorder``) and the offline arena
  plan (`pack`);
* `patch`: patch-based execution with builtin operators only (``memsched tile``): `describe`
  (the file as a `SpatialModel` for the one patch search of `memsched.patches`) and `tile`
  (the request and the rewrite).

Beside them: `segments` (Edge TPU pipeline segments, ``memsched partition``), `tvm_prepare`
(a file rewritten so TVM's TFLite frontend can import it; the loader,
`memsched.importers.load`), and running and measuring: `litert` (LiteRT interpreters, the
segment pipeline), `tflm` (TFLite Micro's minimal arena by bisection, its outputs).
"""

"""Everything memsched does to .tflite files, for TFLite, TFLite Micro and Edge TPU users.

Reading and writing (the flatbuffer object API of LiteRT's schema, no tensorflow):

* `read`: a .tflite flatbuffer into an `OpGraph` plus its parameter buffers (`read_tflite`,
  `TFLiteGraph`), the schema, dtype tables and MAC counts;
* `write`: serialising a model object, buffers, the ``OfflineMemoryAllocation`` metadata;
* `check`: the independent checker every written file passes (TFLM's allocation rules, offline
  plans);
* `tvm_guard` / `tvm_prepare`: an untrusted file checked before TVM's TFLite frontend walks it,
  and rewritten so that frontend can import it (the loader, `memsched.importers.load`).

TFLite Micro's memory model, stated once (`tflm_memory`: lifetimes, alignment, the persistent
bytes per operator), and what is built on it:

* `reorder`: the certified operator order and the offline arena plan (``memsched reorder``);
* `spatial` + `tile`: patch-based execution with builtin operators only (``memsched tile``),
  chosen by the one patch search of `memsched.patches`;
* `segments`: Edge TPU pipeline segments (``memsched partition``).

Running and measuring: `litert` (LiteRT interpreters, the segment pipeline), `tflm` (TFLite
Micro's minimal arena by bisection, its outputs); `tflm_arena` computes that minimal arena from
the file (a 32-bit Cortex-M with CMSIS-NN, or the host package), no interpreter, from
`tflm_abi` (the records' sizes per target), `tflm_kernels` (what each kernel allocates) and
`tflm_planner` (TFLM's greedy planner).
"""

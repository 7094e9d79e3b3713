"""TFLite Micro's memory and time model, computed from the file (no interpreter). Imports
`format` only.

* `model`: the memory model stated once (lifetimes, alignment, in-place and view aliases, the
  persistent bytes per operator) and TFLite Micro as the patch search sees it (`TFLMMemory`,
  `tflm_runtime`);
* `arena`: the minimal arena of a file on a 32-bit Cortex-M or the host package, replayed from
  `abi` (the records' sizes per target), `kernels` (what each kernel allocates: persistent
  buffers, scratch requests) and `planner` (TFLM's greedy planner);
* `kernel_costs` + `instructions`: the instructions one ``Invoke()`` runs on a Cortex-M55 with
  the CMSIS-NN kernels, per kernel and per file, and the patch search's time model
  (`TFLMTime`);
* `nodes`: what the patch writer writes per plan node, stated once below the two models that
  price it and the writer (`memsched.tflite.patch.tile`).
"""

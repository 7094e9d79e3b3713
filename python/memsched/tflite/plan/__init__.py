"""The plan of a .tflite file for TFLite Micro: the certified operator order and the offline
arena plan (``memsched reorder``). Imports `format` and `memory`.

* `reorder`: schedule subgraph 0 and write the file back in the new order;
* `pack`: the tensors' offsets for the ``OfflineMemoryAllocation`` metadata (memsched's exact
  packer under TFLM's lifetimes and alignment).
"""

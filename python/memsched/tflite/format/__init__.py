"""The .tflite file format: reading, writing and verifying flatbuffers (LiteRT's schema object
API, no tensorflow). The bottom room of `memsched.tflite`: it imports no other.

* `read`: a .tflite flatbuffer into an `OpGraph` plus its parameter buffers (`read_tflite`,
  `TFLiteGraph`), the schema, dtype tables and MAC counts;
* `write`: serialising a model object, buffers, the ``OfflineMemoryAllocation`` metadata;
* `check`: the independent checker every written file passes (TFLM's allocation rules,
  offline plans);
* `aliases`: which tensors of a file may share bytes in TFLite Micro (an in-place QUANTIZE, the
  patch writer's view RESHAPEs), the rule the checker and the memory model share;
* `tvm_guard`: an untrusted file checked before anything walks it (TVM's frontend, the
  analysis graph).
"""

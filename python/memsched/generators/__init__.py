"""Model and graph generators, for the examples, tests and benchmarks; nothing is downloaded.

* `examples`: small irregularly wired networks as Relax, ONNX or .tflite (``example:NAME`` on
  the command line);
* `cell_graphs`: RandWire / NASNet / HRNet-like op graphs (`memsched.graph.OpGraph`);
* `random_graphs`: random DAGs as op graphs;
* `tflite_synth`: .tflite files built with the flatbuffer object API (no tensorflow).

They sit above the runtime packages: the synthetic .tflite builder writes with the .tflite
writer of `memsched.tflite`; within the package only the loader (`importers.load`, for
``example:NAME``) imports them, and no runtime package does.
"""

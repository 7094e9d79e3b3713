"""ExecuTorch's memory and time model. Imports `format` only (and the package's `errors`).

* `model`: the memory model at the point `MemoryPlanningPass` runs, as an `OpGraph`
  (lifetimes of the node order, planned specs, storage bases; `build_model`, `ProgramModel`);
* `inplace`: the one alias a kernel allows (the Cortex-M quantize over its float input), shared
  by the model, the packer and the checks;
* `check`: the independent check every plan goes through (placements, graph modules);
* `liveness`: the liveness model of a ``.pte`` method as written (`plan_graph`) and the check of
  its written plan;
* `ram`: the RAM a program needs on a device, from the file (planned buffers, the method
  allocator's records at a target's ABI, the temp allocator);
* `instructions`: the instructions of one ``Method::execute`` on a Cortex-M55 (the time model).
"""

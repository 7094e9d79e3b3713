"""memsched for ExecuTorch: certified operator order and exact arenas for ``.pte`` programs.

Needs ``executorch`` (1.5.1, with the pinned torch); ``import memsched`` never imports this
package. One call::

    import memsched.executorch as mx
    config = mx.backend_config(time_limit=10)
    et = to_edge(torch.export.export(model, inputs)).to_executorch(config)
    print(mx.report(config))
    data, _ = mx.share_values(et.buffer)  # the .pte to write: equal values shared

The pieces: `MemschedPlanningPass` (reorder + plan), `MemschedAlgo` / `memsched_algo` (the packer
with ExecuTorch's algorithm signature), `reorder_graph_module`, `build_model` (the op graph
under ExecuTorch's memory model), `check_graph_module` (the independent plan check),
`TilePatchesPass` / `tile_graph_module` (patch-based execution of the spatial prefix:
``backend_config(tile_patches=True)``), and
`memsched.executorch.pte` for ``.pte`` files (read and written by `format.pte` and checked by
`format.verify` without executorch or torch; only running a program needs ExecuTorch's runtime).

Four rooms, each importing only the rooms above it in this list (`tests/test_layering.py`),
the same as `memsched.tflite`'s:

* `format`: the ``.pte`` file (`pte`: the schema, read and written; `verify`: the runtime's
  load checks; `read`: a file read and verified);
* `memory`: ExecuTorch's memory and time model (`model`, `inplace`, `check`, `liveness`,
  `ram`, `instructions`);
* `plan`: order, pack, share (`reorder`, `packer`, `banks`, `pte_banks`, `share`);
* `patch`: the patch adapter (`tile`, `describe`, `rewrite`, `layout`, `cortex_m`,
  `records`, `time`).

Beside them: `errors` (below every room), `planning` (the pass, `backend_config`), `pte`
(the commands' front on ``.pte`` files: analyze, reorder, run), `fold_constants`,
`host_kernels`.
"""
from .memory.check import check_graph_module, check_intervals  # noqa: F401
from .errors import (ExecutorchError, OutputsDifferError, PlanCheckError,  # noqa: F401
                     PteFileError, UnsupportedProgramError)
from .memory.model import PlanFlags, ProgramModel, build_model, liveness_peak  # noqa: F401
from .plan.packer import ArenaReport, MemschedAlgo, memsched_algo  # noqa: F401
from .planning import MemschedPlanningPass, PlanReport, backend_config, report  # noqa: F401
from .plan.reorder import OrderReport, reorder_graph_module  # noqa: F401
from .plan.share import ShareReport, check_shared, share_values  # noqa: F401
from .patch.tile import (EXECUTORCH_MEMORY, TilePatchesError, TilePatchesPass,  # noqa: F401
                         TileReport, tile_graph_module)

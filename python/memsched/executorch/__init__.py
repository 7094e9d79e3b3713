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
`memsched.executorch.pte` for ``.pte`` files (read and written by `pte_format` and checked by
`pte_verify` without executorch or torch; only running a program needs ExecuTorch's runtime).
"""
from .check import check_graph_module, check_intervals  # noqa: F401
from .errors import (ExecutorchError, OutputsDifferError, PlanCheckError,  # noqa: F401
                     PteFileError, UnsupportedProgramError)
from .model import PlanFlags, ProgramModel, build_model, liveness_peak  # noqa: F401
from .packer import ArenaReport, MemschedAlgo, memsched_algo  # noqa: F401
from .planning import MemschedPlanningPass, PlanReport, backend_config, report  # noqa: F401
from .reorder import OrderReport, reorder_graph_module  # noqa: F401
from .share import ShareReport, check_shared, share_values  # noqa: F401
from .patch_pass import (EXECUTORCH_MEMORY, TilePatchesError, TilePatchesPass,  # noqa: F401
                         TileReport, tile_graph_module)

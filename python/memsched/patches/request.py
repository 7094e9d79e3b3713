"""The one entry point of the patch search: an adapter's description of its graph, its
runtime's description and the user's options in; the frontier, the choice and the plans out.

An adapter (`memsched.tflite.tile`, `memsched.transform.tile_patches`,
`memsched.executorch.patch_pass`) describes its graph (`Described`: the spatial model, the
`OpGraph` the scheduler prices and how their tensors match), says what its runtime costs and
can write (`Runtime`), passes the user's `PatchOptions`, and applies the plans it gets back
(`SearchResult.plans_of(choice)`). Everything the search decides -- where regions may start
(`region_starts`), which grids, how the work is shared, the options' meaning -- is decided
here and below, once for every runtime.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..graph import OpGraph
from ..limits import collector_paused
from .geometry import SpatialModel
from .options import PatchOptions
from .result import SearchResult
from .runtime import Runtime, runtime_of
from .sequence import search_regions
from .starts import region_starts


@dataclass(frozen=True)
class Described:
    """An adapter's description of its graph: ``sm`` the spatial model (operator ``k`` = op
    ``k`` of ``graph``), ``graph`` the `OpGraph` its memory is priced on, ``tensor_index[t]``
    the ``sm`` tensor of ``graph`` tensor ``t``."""

    sm: SpatialModel
    graph: OpGraph
    tensor_index: list


def search_model(model: Described, runtime: Runtime, options: PatchOptions | None = None
           ) -> SearchResult:
    """Search the patch regions of ``model`` under ``runtime`` with ``options`` (default
    `PatchOptions()`): a sequence of regions, each with its grid, the lowest total within the
    MAC budget, only if it beats the unpatched model in its best order (a forced grid, split
    or start: one region, the best asked for). The result depends on the input alone unless
    the options' safety net stopped the search (``SearchResult.stopped``)."""
    # a forced start (``options.region_start``) overrides the rule in `search_regions`
    with collector_paused():
        return search_regions(model.sm, model.graph, list(model.tensor_index),
                              runtime_of(runtime), options, starts=tuple(region_starts(model.sm)))

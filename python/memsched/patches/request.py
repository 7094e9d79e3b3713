"""The one entry point of the patch search: an adapter's description of its graph, its
runtime's description and the user's options in; the frontier, the choice and the plans out.

An adapter (`memsched.tflite.patch.tile`, `memsched.transform.tile_patches`,
`memsched.executorch.patch.tile`) describes its graph (`Described`: the spatial model, the
`OpGraph` the scheduler prices and how their tensors match), says what its runtime costs and
can write (`Runtime`), passes the user's `PatchOptions`, and applies the plans it gets back
(`SearchResult.plans_of(choice)`). Everything the search decides -- where regions may start
(`region_starts`), which grids, how the work is shared, the options' meaning -- is decided
here and below, once for every runtime: the options are resolved into one request
(`evaluator.resolve`), one evaluator prices its candidates (`evaluator.Evaluator`) and the
sequence search runs over it (`sequence.search_sequence`).
"""
from __future__ import annotations

from ..limits import collector_paused
from .evaluator import Described, Evaluator, resolve
from .options import PatchOptions
from .result import SearchResult
from .runtime import Runtime, runtime_of
from .sequence import search_sequence

__all__ = ["Described", "search_model", "search_ways"]


def search_model(model: Described, runtime: Runtime, options: PatchOptions | None = None
                 ) -> SearchResult:
    """Search the patch regions of ``model`` under ``runtime`` with ``options`` (default
    `PatchOptions()`): a sequence of regions, each with its grid, the lowest total within the
    MAC budget, only if it beats the unpatched model in its best order (a forced grid, split
    or start: one region, the best asked for). The result depends on the input alone unless
    the options' safety net stopped the search (``SearchResult.stopped``)."""
    rt = runtime_of(runtime)
    with collector_paused():
        return search_sequence(Evaluator(model, rt, resolve(options, rt, model.sm)))


def search_ways(ways: list[tuple[Described, Runtime]], options: PatchOptions | None = None
                ) -> tuple[int, SearchResult]:
    """The search under each of an adapter's ways to write one model (``ways``: its
    description and runtime each, e.g. TFLite Micro's window slices copied or read as row
    views: the same plans priced otherwise), and the best answer by the one objective: the
    lowest total of the choice (the unpatched model's in its best order where there is none),
    then fewer predicted instructions, then the first way. Returns (the way's index, its
    result)."""
    best = None
    for i, (model, runtime) in enumerate(ways):
        res = search_model(model, runtime, options)
        c = res.choice if res.choice is not None else (res.reordered or res.original)
        key = (c.total, c.instructions if c.instructions is not None else float("inf"))
        if best is None or key < best[0]:
            best = (key, i, res)
    return best[1], best[2]


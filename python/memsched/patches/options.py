"""The patch search's options: one request, parsed and checked once.

Every entry point (`memsched tile` / `tile_tflite`, TVM's `TilePatches`, ExecuTorch's
`TilePatchesPass` and ``backend_config(tile_patches=True)``) builds one `PatchOptions` from its
keywords (or takes one, ``options=``) and hands it to `memsched.patches.search` unchanged. A bad
value raises `PatchOptionsError` here, once; each adapter turns it into its own user-facing
error (`memsched.tflite.patch.tile.TileError`, `memsched.executorch.patch.tile.TilePatchesError`, a
``ValueError`` from the TVM pass).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, fields, replace

from .budget import Budget

MAX_REGIONS = 4  # regions per sequence (deeper ones add little: halos grow, maps shrink)
# the wall-clock safety net (seconds over a whole search): the work budgets decide, and end
# well inside it (MobileNetV2 @224 under ExecuTorch: ~15 s on a loaded 2-core machine)
TIME_LIMIT = 60.0
# the instructions a plan may add by default: microcontroller users budget latency as hard as
# RAM, and +10 % keeps most of what patches save (docs/executorch_patches.md, docs/patches.md)
MAX_SLOWDOWN = 1.10
NONE_IS_A_VALUE = frozenset({"max_slowdown"})  # options whose None is not "not given"


class PatchOptionsError(ValueError):
    """An option of the patch search that is out of its domain; the message names it."""


@dataclass(frozen=True)
class PatchOptions:
    """What a user asks of the patch search (the runtime's own facts are in `Runtime`).

    ``max_overhead``: extra MACs allowed for the whole model (0.3 = +30 %); ``grid``: force
    one grid, ``"RxC"`` or (rows, cols); ``split``: force the (first) region to end at the
    tensor of that name; ``region_start``: force it to start at that operator (default: the
    shared rule, `memsched.patches.starts.region_starts`); a forced grid, split or start asks
    for one region, applied even when it does not lower the total. ``max_regions``: regions in
    sequence, each with its own grid, under the one MAC budget (1: one region).
    ``se_patches``: through squeeze-and-excitation blocks, ``"recompute"`` or ``"keep"`` the
    feature maps later passes read (default: both priced); ``exact_reductions``: regions run
    through a reduction only if its per-patch partial sums combine exactly (False: float sums
    too, equal up to rounding); ``padding``: ``"explicit"`` (exact windows, pads on patch
    borders) or ``"margins"`` (operators keep their own padding on wider windows; runtimes
    that can write it); default: the runtime's (`Runtime.default_padding`). ``budget``: the
    work the search may do (`memsched.patches.budget.Budget`: the result depends on the input
    alone); ``time_limit``: the wall-clock safety net over the whole search in seconds (None:
    none), which stops it early and says so; ``certify``: order the frontier with the
    certified scheduler. ``max_slowdown``: the most instructions the chosen plan may run per
    inference, predicted by the runtime's kernel cost model (`runtime.RuntimeTime`), as a
    factor of the unpatched program's (1.10 = +10 %); None: no bound (the RAM-only choice
    within ``max_overhead``); ignored for a runtime without a cost model (TVM: MACs alone).
    ``fast_memory``: the bytes of the fastest memory bank the planned arena is placed in (a
    memory map's first bank, `memsched.banks`): a plan whose arena fits it wins over every plan
    that does not, and among those the fewest instructions; when none fits, the plan whose
    fast bank serves the largest share of the traffic once placed (`fast_bank`); None: one
    memory."""

    max_overhead: float = 0.3
    grid: tuple | None = None
    split: str | None = None
    region_start: int | None = None
    max_regions: int = MAX_REGIONS
    se_patches: str | None = None
    exact_reductions: bool = True
    padding: str | None = None
    budget: Budget = field(default_factory=Budget)
    time_limit: float | None = TIME_LIMIT
    certify: bool = True
    max_slowdown: float | None = MAX_SLOWDOWN
    fast_memory: int | None = None

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        try:
            mo = float(self.max_overhead)
        except (TypeError, ValueError):
            mo = -1.0
        if not (mo >= 0 and math.isfinite(mo)):
            raise PatchOptionsError(f"max_overhead must be a number >= 0, not "
                                    f"{self.max_overhead!r}")
        put("max_overhead", mo)
        if self.max_slowdown is not None:
            try:
                ms = float(self.max_slowdown)
            except (TypeError, ValueError):
                ms = -1.0
            if not (ms >= 1.0 and math.isfinite(ms)):
                raise PatchOptionsError(f"max_slowdown must be a factor >= 1 (1.1 = +10 % "
                                        f"instructions) or None, not {self.max_slowdown!r}")
            put("max_slowdown", ms)
        if self.fast_memory is not None:
            put("fast_memory", _int(self.fast_memory, "fast_memory", 1))
        put("grid", parse_grid(self.grid))
        if self.split is not None and (not isinstance(self.split, str) or not self.split):
            raise PatchOptionsError(f"split must be a tensor name, not {self.split!r}")
        if self.region_start is not None:
            put("region_start", _int(self.region_start, "region_start", 0))
        put("max_regions", _int(self.max_regions, "max_regions", 1))
        if self.se_patches not in (None, "recompute", "keep"):
            raise PatchOptionsError(f"se_patches must be 'recompute' or 'keep', not "
                                    f"{self.se_patches!r}")
        if self.padding not in (None, "explicit", "margins"):
            raise PatchOptionsError(f"padding must be 'explicit' or 'margins', not "
                                    f"{self.padding!r}")
        if self.time_limit is not None:
            try:
                tl = float(self.time_limit)
            except (TypeError, ValueError):
                tl = -1.0
            if not tl > 0:
                raise PatchOptionsError(f"time_limit must be seconds > 0 or None, not "
                                        f"{self.time_limit!r}")
            put("time_limit", tl)
        if not isinstance(self.budget, Budget):
            raise PatchOptionsError(f"budget must be a memsched.patches.Budget, not "
                                    f"{type(self.budget).__name__}")
        put("exact_reductions", bool(self.exact_reductions))
        put("certify", bool(self.certify))

    @property
    def forced(self) -> bool:
        """A grid, split or start asked for: one region, the best of what was asked."""
        return self.grid is not None or self.split is not None or self.region_start is not None

    @property
    def regions(self) -> int:
        """Regions the search may chain (1 when forced)."""
        return 1 if self.forced else self.max_regions

    @classmethod
    def of(cls, options: PatchOptions | dict | None = None, *, second_region=None,
           **given) -> PatchOptions:
        """``options`` (a `PatchOptions`, a dict of its fields, or None: the defaults) with the
        keywords in ``given`` that are not None put over it (for `NONE_IS_A_VALUE`'s: that
        are not ``...``): how an entry point merges its own keywords. ``second_region`` is
        the deprecated name of ``max_regions`` (True: the default, False: 1)."""
        if options is None:
            base = cls()
        elif isinstance(options, PatchOptions):
            base = options
        elif isinstance(options, dict):
            base = cls(**_known(options))
        else:
            raise PatchOptionsError(f"options must be a PatchOptions or a dict, not "
                                    f"{type(options).__name__}")
        if second_region is not None:
            warnings.warn("second_region is deprecated: use max_regions (1: one region)",
                          DeprecationWarning, stacklevel=3)
            if given.get("max_regions") is None:
                given["max_regions"] = MAX_REGIONS if second_region else 1
        # None means "not given", except for the options whose None is a value of its own
        # (``max_slowdown=None``: no bound); an entry point's default for those is ``...``
        extra = _known({k: v for k, v in given.items()
                        if (v is not ... if k in NONE_IS_A_VALUE else v is not None)})
        return replace(base, **extra) if extra else base  # checked once: no re-validation


def entry_options(error, options: PatchOptions | dict | None = None, prefix: str = "",
                  **given) -> PatchOptions:
    """How every entry point turns its user's keywords into the one `PatchOptions`:
    `PatchOptions.of` (``given``'s values that are not None over ``options``), checked once,
    here; a bad value raises the entry point's own ``error`` class (a ValueError subclass)
    with the message (after ``prefix``)."""
    try:
        return PatchOptions.of(options, **given)
    except PatchOptionsError as e:
        raise error(f"{prefix}{e}") from None


def _known(d: dict) -> dict:
    names = {f.name for f in fields(PatchOptions)}
    bad = sorted(set(d) - names)
    if bad:
        raise PatchOptionsError(f"unknown patch option {bad[0]!r} (known: "
                                f"{', '.join(sorted(names))})")
    return d


def _int(v, name: str, least: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v < least:
        raise PatchOptionsError(f"{name} must be an integer >= {least}, not {v!r}")
    return int(v)


def parse_grid(grid) -> tuple[int, int] | None:
    """``"RxC"`` (``×`` too) or (rows, cols) -> (rows, cols), both >= 1; None stays None."""
    if grid is None:
        return None
    if isinstance(grid, str):
        parts = grid.lower().replace("×", "x").split("x")
        try:
            grid = tuple(int(p) for p in parts)
        except ValueError:
            raise PatchOptionsError(f"grid {grid!r} is not ROWSxCOLS (e.g. 3x3)") from None
    try:
        g = tuple(int(v) for v in grid)
    except (TypeError, ValueError):
        raise PatchOptionsError(f"grid {grid!r} is not two positive numbers ROWSxCOLS") \
            from None
    if len(g) != 2 or min(g) < 1:
        raise PatchOptionsError(f"grid {grid!r} is not two positive numbers ROWSxCOLS")
    return g


def unmet_grid(options: PatchOptions, result) -> str | None:
    """Why a grid the caller forced could not be applied (a `SearchResult` with no candidate at
    that grid), or None. Every adapter raises its own error with this reason: a grid asked for
    is never silently dropped."""
    g = options.grid
    if g is None or result.frontier:
        return None
    why = "; ".join(result.refused[:1]) or (
        f"no spatial region fits it (the spatial prefix ends at {result.prefix_end})")
    return f"grid {g[0]}x{g[1]}: {why}"

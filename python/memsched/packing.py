"""Exact arena packing of MiniMalloc's class, and MiniMalloc's CSV format.

The problem (dynamic storage allocation): buffers with a byte size and a half-open time interval
``[lower, upper)`` get byte offsets so that two buffers live at the same time never share a byte;
minimise the arena ``max(offset + size)``, or fit a given capacity. Its lower bound is the
liveness peak (the most bytes live at one time).

The search (C++, ``passes/packing.cc``, ``memsched.native.pack``) follows the ideas of
M. D. Moffitt, "MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated Machine
Learning", ASPLOS 2023 - written here from the paper's ideas, not from its code:

* **canonical solutions**: buffers are placed in order of non-decreasing offset, each at the
  lowest offset on top of the placed buffers it meets in time (every packing can be turned into
  one such: let the buffers fall, then sort them by offset), so a depth-first search over "which
  buffer next" is complete and never meets a solution twice;
* **inference**: time is compressed to the event points; in every section the unplaced buffers,
  each from the lowest offset it can still reach, must stack within the capacity (a release-date
  bound); buffers that split into groups disjoint in time are solved group by group; a buffer
  that meets no other unplaced buffer is placed without branching; equal buffers are tried once;
  failed states are remembered;
* **lower bound** = the liveness peak, raised by one unit whenever the search proves that the
  bound itself cannot be packed; sizes and capacity are divided by their common divisor first.

Several searches with different branching priorities (area, size, duration, start, perturbed
area) run in turns with doubling node budgets: which one finds a packing fast differs between
instances. Deterministic (node budgets, no clocks) unless the time limit cuts the search; anytime
under a time limit (best packing found + proven lower bound).

API: `pack` (intervals, half-open), `read_minimalloc_csv`, `pack_csv` and `run_pack` (the
JSON-ready report of ``memsched pack FILE.csv``). `memsched.arena.plan_exact` puts it behind
``arena.plan(method="exact" | "auto")`` (lifetimes with inclusive ends) and falls back to CP-SAT
without the native core, where `pack` raises `NativeUnavailable`.
"""
from __future__ import annotations

import csv
import ctypes
import io
import math
import os
import time
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Sequence

__all__ = ["PackingInputError", "Buffer", "PackResult", "pack",
           "read_minimalloc_csv", "pack_csv", "run_pack", "MAX_CSV_BYTES", "MAX_BUFFERS",
           "STOP_REASONS", "MAX_PAIRS", "MAX_EXACT_BUFFERS", "overlapping_pairs", "too_large"]

MAX_CSV_BYTES = 64 << 20  # untrusted files: larger ones are refused before parsing
MAX_BUFFERS = 1_000_000
# The search holds the time-overlap lists (one entry per overlapping pair, twice) and, along a
# path, up to n scopes: larger instances are refused by `pack` (the greedy packer's overlap
# lists grow the same way) and left to greedy by `memsched.arena.plan_exact`.
MAX_PAIRS = 2_000_000
MAX_EXACT_BUFFERS = 10_000
MAX_VALUE = 1 << 62       # times and sizes must stay well inside int64
STOP_REASONS = ("done", "time", "nodes", "interrupted")
COLUMNS = ("id", "lower", "upper", "size")


class PackingInputError(ValueError):
    """A packing instance (CSV file or buffer list) that cannot be read; one line."""


class Buffer(NamedTuple):
    """One row of a MiniMalloc CSV: ``size`` bytes live during ``[lower, upper)``."""

    id: str
    lower: int
    upper: int
    size: int


@dataclass
class PackResult:
    """``offsets`` in input order (bytes, multiples of ``alignment``): the best packing known
    (with a capacity: the first one within it, else the best found, over it); ``arena`` their
    arena (-1 with empty offsets only when no packing at all was given or found);
    ``lower_bound`` proven (no packing is smaller; above the capacity when none fits);
    ``optimal``: arena == lower_bound; ``fits``: arena <= capacity (None without a capacity);
    ``stop``: why the search ended (one of `STOP_REASONS`)."""

    arena: int
    lower_bound: int
    optimal: bool
    fits: bool | None
    offsets: list[int]
    capacity: int | None = None
    alignment: int = 1
    live_peak: int = 0
    seconds: float = 0.0
    nodes: int = 0
    stop: str = "done"
    method: str = "exact"
    stats: dict = field(default_factory=dict)

    @property
    def gap(self) -> float:
        """(arena - lower_bound) / lower_bound; inf when nothing was found."""
        if self.arena < 0:
            return math.inf
        return (self.arena - self.lower_bound) / self.lower_bound if self.lower_bound else 0.0


# ------------------------------------------------------------------------------------- input


def _int_field(text: str, name: str, line: int) -> int:
    t = text.strip()
    try:
        v = int(t, 10)
    except ValueError:
        raise PackingInputError(f"line {line}: {name} {t[:40]!r} is not an integer") from None
    if abs(v) > MAX_VALUE:
        raise PackingInputError(f"line {line}: {name} {t[:40]} is out of range")
    return v


def read_minimalloc_csv(source, max_bytes: int = MAX_CSV_BYTES) -> list[Buffer]:
    """Read MiniMalloc's CSV (header ``id,lower,upper,size`` in any column order, extra columns
    such as ``offset`` ignored; one buffer per row, half-open ``[lower, upper)``).

    ``source``: a path, or the text itself as ``io.StringIO``. Raises `PackingInputError` (a
    ValueError, one line) on a file larger than ``max_bytes``, a missing or duplicated column,
    a short row, a non-integer, a negative size or ``upper <= lower``."""
    if isinstance(source, io.StringIO):
        text = source.getvalue()
        if len(text) > max_bytes:
            raise PackingInputError(f"input is larger than {max_bytes} bytes")
        name = "<input>"
    else:
        name = os.fspath(source)
        try:
            with open(name, "rb") as f:
                raw = f.read(max_bytes + 1)
        except OSError as e:
            raise PackingInputError(f"{name}: cannot read: {e.strerror or e}") from None
        if len(raw) > max_bytes:
            raise PackingInputError(f"{name}: larger than {max_bytes} bytes")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise PackingInputError(f"{name}: not UTF-8 text") from None
    if "\0" in text:
        raise PackingInputError(f"{name}: binary data (NUL byte)")
    try:
        rows = list(csv.reader(io.StringIO(text), strict=True))
    except csv.Error as e:
        raise PackingInputError(f"{name}: malformed CSV: {e}") from None
    rows = [(k + 1, r) for k, r in enumerate(rows) if any(c.strip() for c in r)]
    if not rows:
        raise PackingInputError(f"{name}: empty (expected a header {','.join(COLUMNS)})")
    header = [c.strip().lower() for c in rows[0][1]]
    col = {}
    for k, h in enumerate(header):
        if h in COLUMNS:
            if h in col:
                raise PackingInputError(f"{name}: column {h!r} appears twice in the header")
            col[h] = k
    missing = [c for c in COLUMNS if c not in col]
    if missing:
        raise PackingInputError(f"{name}: header lacks column(s) {', '.join(missing)} "
                                f"(expected {','.join(COLUMNS)})")
    if len(rows) - 1 > MAX_BUFFERS:
        raise PackingInputError(f"{name}: more than {MAX_BUFFERS} buffers")
    width = max(col.values()) + 1
    out: list[Buffer] = []
    for line, r in rows[1:]:
        if len(r) < width:
            raise PackingInputError(f"{name}: line {line}: {len(r)} fields, expected "
                                    f"{len(header)}")
        lower = _int_field(r[col["lower"]], "lower", line)
        upper = _int_field(r[col["upper"]], "upper", line)
        size = _int_field(r[col["size"]], "size", line)
        if size < 0:
            raise PackingInputError(f"{name}: line {line}: negative size {size}")
        if upper <= lower:
            raise PackingInputError(f"{name}: line {line}: upper {upper} <= lower {lower} "
                                    f"(intervals are half-open [lower, upper))")
        out.append(Buffer(r[col["id"]].strip(), lower, upper, size))
    return out


def _check_buffers(buffers) -> list[tuple[int, int, int]]:
    out = []
    for k, b in enumerate(buffers):
        if isinstance(b, Buffer):
            lower, upper, size = b.lower, b.upper, b.size
        else:
            lower, upper, size = b
        lower, upper, size = int(lower), int(upper), int(size)
        if size < 0 or upper <= lower or max(abs(lower), abs(upper), size) > MAX_VALUE:
            raise PackingInputError(f"buffer {k}: need size >= 0 and lower < upper, got "
                                    f"[{lower}, {upper}) x {size}")
        out.append((lower, upper, size))
    return out


def overlapping_pairs(intervals: Sequence[tuple[int, int]]) -> int:
    """Number of pairs of half-open intervals that overlap (O(n log n))."""
    import bisect

    starts = sorted(lo for lo, _ in intervals)
    ends = sorted(hi for _, hi in intervals)
    total = 0
    for lo, hi in intervals:
        # others starting before hi, less those that ended at or before lo, less itself
        total += bisect.bisect_left(starts, hi) - bisect.bisect_right(ends, lo) - 1
    return total // 2


def too_large(intervals: Sequence[tuple[int, int]]) -> str | None:
    """Why the exact search would not be run on these (non-empty) intervals, or None."""
    if len(intervals) > MAX_EXACT_BUFFERS:
        return f"{len(intervals)} buffers (limit {MAX_EXACT_BUFFERS})"
    pairs = overlapping_pairs(intervals)
    if pairs > MAX_PAIRS:
        return f"{pairs} time-overlapping pairs (limit {MAX_PAIRS})"
    return None


# ------------------------------------------------------------------------------------ search


def _native_pack():
    from . import native

    native.load()
    import tvm_ffi

    return tvm_ffi.get_global_func("memsched.native.pack")


def native_available() -> bool:
    try:
        _native_pack()
        return True
    except Exception:  # noqa: BLE001 - NativeUnavailable, or a library without the packer
        return False


def _align_up(x: int, a: int) -> int:
    return -(-x // a) * a


def pack(buffers: Iterable, capacity: int | None = None, time_limit: float | None = 10.0,
         alignment: int = 1, initial: Sequence[int] | None = None,
         max_nodes: int | None = None) -> PackResult:
    """Pack ``buffers`` (`Buffer` or ``(lower, upper, size)``, half-open intervals).

    ``capacity``: find a packing within it (``fits``; stops at the first one) - or prove there
    is none; None: minimise the arena down to the proven lower bound. ``alignment``: every
    offset a multiple of it (sizes are rounded up). ``initial``: a valid packing to improve
    (None: the greedy packer's). ``time_limit`` (s) / ``max_nodes``: anytime limits (None:
    none); the result then carries the best packing and the proven bound."""
    t0 = time.perf_counter()
    bufs = _check_buffers(buffers)
    # Row order must not matter: the search (its tie rules, the greedy warm start) works on the
    # buffers sorted by their content (lower, upper, size); identical buffers are
    # interchangeable, so the result is the same for every order of the input rows.
    order = sorted(range(len(bufs)), key=lambda i: bufs[i])
    bufs = [bufs[i] for i in order]
    if initial is not None:
        if len(initial) != len(bufs):
            raise PackingInputError("initial needs one offset per buffer")
        initial = [initial[i] for i in order]
    a = int(alignment)
    if a < 1:
        raise PackingInputError(f"alignment must be >= 1, got {alignment}")
    if capacity is not None and int(capacity) < 0:
        raise PackingInputError(f"capacity must be >= 0, got {capacity}")
    n = len(bufs)
    sizes = [_align_up(s, a) for _, _, s in bufs]
    idx = [i for i in range(n) if sizes[i] > 0]
    why = too_large([bufs[i][:2] for i in idx])
    if why is not None:
        raise PackingInputError(f"instance too large for the exact packer: {why}")
    # time compressed to the event points; sizes and capacity in units of their common divisor
    events = sorted({t for i in idx for t in bufs[i][:2]})
    pos = {t: k for k, t in enumerate(events)}
    lo = [pos[bufs[i][0]] for i in idx]
    hi = [pos[bufs[i][1]] for i in idx]
    g = 0
    for i in idx:
        g = math.gcd(g, sizes[i])
    g = g or a
    units = [sizes[i] // g for i in idx]
    live = [0] * (len(events) + 1)
    for b, e, u in zip(lo, hi, units):
        live[b] += u
        live[e] -= u
    peak_u, cur = 0, 0
    for v in live:
        cur += v
        peak_u = max(peak_u, cur)
    raw_live = [0] * (len(events) + 1)
    for i, b, e in zip(idx, lo, hi):
        raw_live[b] += bufs[i][2]
        raw_live[e] -= bufs[i][2]
    live_peak, cur = 0, 0
    for v in raw_live:
        cur += v
        live_peak = max(live_peak, cur)
    cap_u = -1 if capacity is None else int(capacity) // g
    if initial is None and idx:
        from .arena_greedy import plan_greedy
        from .arena_problem import Lifetime

        initial = plan_greedy(
            [Lifetime(sizes[i], bufs[i][0], bufs[i][1] - 1) for i in range(n)], a).offsets
    init_u: list[int] = []
    if initial is not None and idx:
        if len(initial) != n:
            raise PackingInputError("initial needs one offset per buffer")
        if all(int(initial[i]) % g == 0 and int(initial[i]) >= 0 for i in idx):
            init_u = [int(initial[i]) // g for i in idx]
    times = events if (events and max(abs(events[0]), abs(events[-1])) < (1 << 31)
                       and max(units, default=0) < (1 << 31)) else []
    stats = {"buffers": n, "sections": max(len(events) - 1, 0), "unit": g}
    offsets = [0] * n
    if not idx:
        arena_b, lb_b, nodes, stop = 0, 0, 0, "done"
    else:
        fn = _native_pack()
        from .limits import run_interruptible

        flag = ctypes.c_int32(0)

        def stop_fn():
            flag.value = 1

        args = (lo, hi, units, times, cap_u, peak_u, init_u,
                -1.0 if time_limit is None else max(0.0, float(time_limit)),
                -1 if max_nodes is None else int(max_nodes))
        res = run_interruptible(lambda: [int(v) for v in fn(*args, ctypes.addressof(flag))],
                                stop_fn)
        arena_u, lb_u, nodes, reason = res[:4]
        off_u = res[4:]
        stop = STOP_REASONS[reason]
        if arena_u >= 0 and len(off_u) == len(idx):
            for i, o in zip(idx, off_u):
                offsets[i] = o * g
            arena_b = arena_u * g
        else:
            arena_b, offsets = -1, []
        lb_b = lb_u * g
    if offsets:
        unsorted = [0] * n
        for k, i in enumerate(order):
            unsorted[i] = offsets[k]
        offsets = unsorted
    if arena_b >= 0:
        lb_b = min(lb_b, arena_b)
    fits = None if capacity is None else (0 <= arena_b <= int(capacity))
    return PackResult(arena_b, lb_b, arena_b >= 0 and arena_b <= lb_b, fits, offsets,
                      None if capacity is None else int(capacity), a, live_peak,
                      time.perf_counter() - t0, nodes, stop, "exact", stats)


# ------------------------------------------------------------------------------ CSV front end
def pack_csv(path, capacity: int | None = None, time_limit: float | None = 10.0,
             alignment: int = 1) -> tuple[list[Buffer], PackResult]:
    """Read a MiniMalloc CSV and pack it (see `pack`); returns (buffers, result)."""
    bufs = read_minimalloc_csv(path)
    return bufs, pack(bufs, capacity, time_limit, alignment)


def run_pack(path, capacity: int | None = None, time_limit: float | None = 10.0,
             alignment: int = 1) -> dict:
    """The report of ``memsched pack FILE.csv``: a JSON-ready dict with ``arena``,
    ``lower_bound``, ``optimal``, ``fits`` (None without a capacity), ``gap``, ``seconds``,
    ``offsets`` (input order) and the instance's ``buffers`` / ``live_peak``. Raises
    `PackingInputError` (one line) on a bad file."""
    t0 = time.perf_counter()
    from . import native

    if not native.cheap_to_load():
        native.hide_torch_on_load()  # tvm_ffi's torch interop costs ~1-2 s and is not used
    bufs, r = pack_csv(path, capacity, time_limit, alignment)
    return {
        "file": os.fspath(path),
        "buffers": len(bufs),
        "live_peak": r.live_peak,
        "capacity": r.capacity,
        "alignment": r.alignment,
        "arena": r.arena if r.arena >= 0 else None,
        "lower_bound": r.lower_bound,
        "optimal": r.optimal,
        "fits": r.fits,
        "gap": None if r.arena < 0 else round(r.gap, 6),
        "stop": r.stop,
        "nodes": r.nodes,
        "seconds": round(time.perf_counter() - t0, 3),
        "offsets": r.offsets,
    }

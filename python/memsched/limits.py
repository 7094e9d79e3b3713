"""Limits of one scheduling call: a wall-clock deadline, a memory cap and Ctrl-C.

`memsched.schedule(graph, time_limit=T)` promises to return within about ``T`` seconds, so every
stage of the call (building the `Problem`, fusion, baselines, HMCOS, cut points, A*, CP-SAT, the
C++ kernel) works against the *same* `Deadline`, created once at the top and passed down. A stage
that gets a share of the time (`Deadline.share`) gets a child deadline that never ends after its
parent's.

Two kinds of stages, and the rule that keeps results reproducible:

* **deterministic stages** (baselines, fusion, HMCOS, the cut points, seeding segment orders)
  have no time budget of their own; they are bounded by work counts (states, rounds, beam
  widths). The deadline can only *abort* them (`Deadline.check` raises `Expired`); the caller
  then falls back to the result of the last stage that completed, never to a partial one.
* **searches for a proof** (A*, CP-SAT, BTSearch) are anytime. A search stopped by the clock
  contributes its proven lower bound and nothing else: its incumbent order depends on where the
  clock stopped it, so it is dropped (the A* only ever returns an order when it completes). A
  search stopped by a deterministic budget (``max_states``, ``memory_limit``, CP-SAT's
  ``deterministic_time``) keeps its incumbent.

Hence the same input and options give the same order whenever the same stages complete, and two
runs whose searches were all cut by the clock return the same (heuristic) order whatever their
time limits.

Memory: the exact searches store one entry per visited state and can exhaust RAM in seconds on
wide graphs. ``memory_limit`` (bytes, default `default_memory_limit`: a quarter of physical
memory) caps what a search may hold; at the cap it stops and returns the best order with its
proven lower bound. The cap is accounted deterministically (states x bytes per state), so it
cuts at the same point on every run.

Ctrl-C: native code (the C++ A*, CP-SAT) releases the GIL and does not return to the
interpreter, so Python's SIGINT handler cannot run until it finishes. `run_interruptible` runs
such a call in a worker thread and keeps the main thread (where Python delivers
``KeyboardInterrupt``) waiting in short slices; on Ctrl-C it asks the search to stop, waits for
it (a fraction of a second) and re-raises.
"""
from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
from typing import Callable, TypeVar

T = TypeVar("T")


class Expired(Exception):
    """The deadline passed inside a deterministic stage; its caller falls back to the last
    completed result."""


class Deadline:
    """A point in `time.perf_counter` time (``end``; None: no limit) shared by the stages of one
    call."""

    __slots__ = ("end",)

    def __init__(self, seconds: float | None = None, *, end: float | None = None):
        if end is not None:
            self.end = end
        else:
            self.end = None if seconds is None else time.perf_counter() + max(0.0, seconds)

    @classmethod
    def of(cls, deadline: "Deadline | None" = None, time_limit: float | None = None) -> "Deadline":
        """``deadline`` when given (the shared object), else a new one of ``time_limit`` s."""
        return deadline if isinstance(deadline, Deadline) else cls(time_limit)

    def remaining(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - time.perf_counter())

    def expired(self) -> bool:
        return self.end is not None and time.perf_counter() >= self.end

    def check(self) -> None:
        """Raise `Expired` when the deadline has passed (cheap: one clock read)."""
        if self.end is not None and time.perf_counter() >= self.end:
            raise Expired()

    def check_import(self, module: str, seconds: float) -> None:
        """Raise `Expired` when ``module`` is not imported yet and importing it (about
        ``seconds``) would not fit in the time left: imports inside a call count too."""
        if self.end is not None and module not in sys.modules and \
                time.perf_counter() + seconds >= self.end:
            raise Expired()

    def share(self, fraction: float) -> "Deadline":
        """A child deadline: ``fraction`` of the time left, never later than this one."""
        if self.end is None:
            return Deadline()
        now = time.perf_counter()
        return Deadline(end=min(self.end, now + max(0.0, fraction * (self.end - now))))

    def cap(self, seconds: float | None) -> "Deadline":
        """A child deadline ending after at most ``seconds`` (None: same as this one)."""
        if seconds is None:
            return Deadline(end=self.end)
        end = time.perf_counter() + max(0.0, seconds)
        return Deadline(end=end if self.end is None else min(self.end, end))

    def __repr__(self) -> str:
        r = self.remaining()
        return "Deadline(None)" if r is None else f"Deadline({r:.3f} s left)"


class Checker:
    """Polls a deadline every ``every`` calls (a clock read costs ~50 ns, a Python call more;
    hot loops tick, the clock is read now and then)."""

    __slots__ = ("deadline", "every", "_n")

    def __init__(self, deadline: Deadline | None, every: int = 256):
        self.deadline = deadline
        self.every = every
        self._n = 0

    def tick(self) -> None:
        self._n += 1
        if self._n >= self.every:
            self._n = 0
            if self.deadline is not None:
                self.deadline.check()


# ------------------------------------------------------------------------------- memory
def physical_memory() -> int | None:
    """Bytes of physical memory, or None when the platform does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


MEMORY_FRACTION = 0.25  # default cap: this fraction of physical memory
FALLBACK_MEMORY_LIMIT = 2 << 30  # when physical memory is unknown


# Model files (importers): sizes the importers share, here so no importer imports the loader.
MAX_TFLITE_BYTES = 2 << 30  # flatbuffers' own limit
MAX_DIM = 1 << 31  # largest input dimension `--input-shapes` accepts
# Largest tensor a frontend may compute while loading (constant folding): a quarter of RAM
# (of 16 GiB when unknown), at most 4 GiB. Activations are never allocated at load time and
# are bounded only by 2**60 (`memsched.graph.MAX_GRAPH_BYTES`).
MAX_FOLD_BYTES = min(4 << 30, (physical_memory() or 16 << 30) // 4)


def default_memory_limit() -> int:
    """A quarter of physical memory (2 GiB when unknown)."""
    phys = physical_memory()
    return int(phys * MEMORY_FRACTION) if phys else FALLBACK_MEMORY_LIMIT


def resolve_memory_limit(memory_limit: int | None) -> int:
    """Validate ``memory_limit`` (bytes, None: `default_memory_limit`)."""
    if memory_limit is None:
        return default_memory_limit()
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, (int, float)) or \
            memory_limit != memory_limit or memory_limit <= 0:
        raise ValueError(f"memory_limit must be a positive number of bytes, got {memory_limit!r}")
    return int(min(memory_limit, 1 << 62))


def python_state_bytes(n: int) -> int:
    """Bytes the Python A* (`memsched.schedulers.exact.astar`) holds per stored state for an
    ``n``-op problem: its executed-set int (28 B + 4 B per 30 bits), entries in three dicts
    (best peak, parent, live bytes), the parent tuple and the heap entry (measured with
    tracemalloc: 420-470 B plus the masks on 40-200-op problems)."""
    mask = 28 + 4 * ((n + 29) // 30)
    return 420 + 2 * mask


# ------------------------------------------------------------------------------- Ctrl-C
def run_interruptible(fn: Callable[[], T], stop: Callable[[], None],
                      deadline: Deadline | None = None, grace: float = 0.1) -> T:
    """Run ``fn()`` (native code that releases the GIL) so that Ctrl-C and the deadline reach
    it: in a worker thread, the calling thread waiting in 50 ms slices. On KeyboardInterrupt,
    ``stop()`` is called, the worker joined, and the interrupt re-raised; when the deadline is
    ``grace`` seconds past and ``fn`` still runs (e.g. CP-SAT presolve, which checks its own
    time limit only now and then), ``stop()`` is called once."""
    box: dict = {}
    done = threading.Event()

    def work():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e
        finally:
            done.set()

    # Waiting on an Event rather than Thread.join: a KeyboardInterrupt inside join() can leave
    # the thread looking finished while its native code still runs (the interpreter would
    # then exit under it).
    worker = threading.Thread(target=work, name="memsched-search", daemon=True)
    worker.start()
    stopped = False
    try:
        while not done.wait(0.05):
            if not stopped and deadline is not None and deadline.end is not None and \
                    time.perf_counter() > deadline.end + grace:
                stop()
                stopped = True
    except KeyboardInterrupt:
        stop()
        while True:
            try:
                while not done.wait(0.05):
                    pass
                break
            except KeyboardInterrupt:  # a second Ctrl-C: keep waiting for the native stop
                stop()
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]


@contextlib.contextmanager
def collector_paused():
    """Run the block with Python's cyclic garbage collector off (restored after, when it was
    on). A search allocates millions of short-lived lists and dicts; in a process that already
    holds a large graph (an exported torch program: ~400k objects) the collector's passes over
    the survivors cost a third of the patch search's time (MobileNetV2 @224 in ExecuTorch,
    18.5 s -> 12.9 s). Reference counting still frees what the search drops; cycles wait for
    the collector's next pass after the block."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

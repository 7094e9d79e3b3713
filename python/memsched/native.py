"""The native core: libmemsched_native (C++ sources in ``passes/``, built by ``pip install``).

It holds a C++ port of the exact search kernel (`memsched.schedulers.exact.astar`), a footprint
evaluator, and registers memsched's PassContext config keys (`CONFIG_KEYS`). Python stays the
reference; the native kernel is cross-checked against it in tests/test_native.py.

The kernel stops at the deadline, a state budget, a memory cap (bytes held by its tables) or on
Ctrl-C: `astar` runs it through `memsched.limits.run_interruptible` with a stop flag the C++ loop
polls, so ``KeyboardInterrupt`` arrives within a fraction of a second.

Config keys: TVM rejects unknown PassContext keys and the keys can only be registered from C++,
so the library must be loaded before ``PassContext(config={"memsched...": ...})``.
`register_config_keys_on_tvm_import` (called by ``import memsched``) loads it as soon as TVM is
imported (right away if it already is, else from an import hook that fires after ``import tvm``),
so ``import memsched`` itself never imports TVM.

`available()` says whether the library can be loaded; `load()` loads it (or raises
`NativeUnavailable` saying why and how to build it). ``MEMSCHED_NATIVE_LIB`` overrides the path.
"""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from typing import NamedTuple, Sequence

from .limits import run_interruptible
from .memory import Problem

LIB_NAME = "libmemsched_native.so"
VERSION = "memsched-native 0.4.0"  # the library built from these sources (astar ABI)
CONFIG_KEYS = ("memsched.algorithm", "memsched.time_limit_s", "memsched.memory_model",
               "memsched.memory_limit")
STOP_REASONS = ("done", "time", "states", "memory", "interrupted")
_DIR = Path(__file__).resolve().parent / "_native"
_state: dict = {}


class NativeUnavailable(RuntimeError):
    """libmemsched_native is not built or cannot be loaded."""


def library_path() -> Path:
    env = os.environ.get("MEMSCHED_NATIVE_LIB")
    return Path(env) if env else _DIR / LIB_NAME


def load():
    """Load the library once; returns a namespace of its global functions."""
    if "funcs" in _state:
        return _state["funcs"]
    if "error" in _state:
        raise NativeUnavailable(_state["error"])
    path = library_path()
    try:
        if not path.exists():
            raise NativeUnavailable(
                f"{path} not found: the native core is built by `pip install -e .` (needs cmake "
                f"and a C++17 compiler), or by hand: cmake -S <repo> -B build/native "
                f"-DPython_EXECUTABLE=<python> && cmake --build build/native")
        # tvm_ffi only, not TVM (importing TVM takes seconds): the config keys are registered
        # now if TVM is loaded, else by the import hook once it is (see module docstring)
        hide = _state.get("hide_torch") and "tvm_ffi" not in sys.modules and \
            "torch" not in sys.modules
        if hide:  # see hide_torch_on_load
            sys.modules["torch"] = None
        try:
            import tvm_ffi
        finally:
            if hide and "torch" in sys.modules and sys.modules["torch"] is None:
                del sys.modules["torch"]

        try:
            ctypes.CDLL(str(path), ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise NativeUnavailable(f"cannot load {path}: {e}") from None

        class _Funcs:
            astar = tvm_ffi.get_global_func("memsched.native.astar")
            astar_open = tvm_ffi.get_global_func("memsched.native.astar_open")
            astar_run = tvm_ffi.get_global_func("memsched.native.astar_run")
            astar_close = tvm_ffi.get_global_func("memsched.native.astar_close")
            evaluate = tvm_ffi.get_global_func("memsched.native.evaluate")
            register_pass_config = tvm_ffi.get_global_func("memsched.native.register_pass_config")
            version = tvm_ffi.get_global_func("memsched.native.version")

        built = str(_Funcs.version())
        if built != VERSION:
            raise NativeUnavailable(f"{path} is {built!r}, these sources need {VERSION!r}: "
                                    f"rebuild it with `pip install -e .`")
        _Funcs.register_pass_config()
        _state["funcs"] = _Funcs
        return _Funcs
    except NativeUnavailable as e:
        _state["error"] = str(e)
        raise


def hide_torch_on_load() -> None:
    """Load tvm_ffi (when `load` first needs it) without its optional torch interop: tvm_ffi
    imports torch whenever torch is importable, ~1 s of the ~1.2 s `load` costs otherwise
    (0.16 s without). For processes that will not hand torch tensors to TVM, such as the
    command line on a non-``.pt2`` model (``memsched.cli``); ``import torch`` works as before
    afterwards."""
    _state["hide_torch"] = True


def cheap_to_load() -> bool:
    """True when `load` costs a fraction of a second: already loaded, tvm_ffi or torch
    already imported, or torch hidden (`hide_torch_on_load`)."""
    return "funcs" in _state or "tvm_ffi" in sys.modules or "torch" in sys.modules or \
        bool(_state.get("hide_torch"))


def available() -> bool:
    try:
        load()
        return True
    except NativeUnavailable:
        return False


def unavailable_reason() -> str | None:
    return None if available() else _state.get("error")


def pack(p: Problem) -> list[int]:
    """The flat int64 encoding of a `Problem` read by the library (see passes/problem.h)."""
    out = [p.n, len(p.size), p.base]
    for v in range(p.n):
        for lst in (p.preds[v], p.creates[v], p.reads[v], p.inplace[v]):
            out.append(len(lst))
            out.extend(lst)
        out.append(p.workspace[v])
    for t in range(len(p.size)):
        out += [p.size[t], int(bool(p.initial[t])), int(bool(p.pinned[t])), len(p.consumers[t])]
        out.extend(p.consumers[t])
    return out


class NativeResult(NamedTuple):
    order: list
    peak: int
    lower_bound: int
    states: int
    reason: str  # one of STOP_REASONS
    memory_bytes: int  # bytes the search tables held at the end


def astar_full(p: Problem, upper: tuple[list[int], int], target: int,
               time_limit: float | None = None, max_states: int | None = None,
               memory_limit: int | None = None, packed=None, deadline=None,
               backward: bool = False) -> NativeResult:
    """The C++ A* on one (sub-)problem, interruptible by Ctrl-C (see module docstring).
    ``memory_limit``: bytes the search may hold (None: no cap). ``deadline``: a
    `memsched.limits.Deadline` also enforced from Python (the C++ loop gets ``time_limit``).
    ``backward``: search from the end of the schedule (same optimum and bounds, a different
    state space: see passes/astar.cc)."""
    f = load()
    ub_order, ub = upper
    args = (packed if packed is not None else pack(p), list(ub_order), int(ub), int(target),
            -1.0 if time_limit is None else float(max(0.0, time_limit)),
            -1 if max_states is None else int(max_states),
            -1 if memory_limit is None else int(memory_limit))
    flag = ctypes.c_int32(0)

    def stop():
        flag.value = 1

    res = run_interruptible(lambda: list(f.astar(*args, ctypes.addressof(flag), bool(backward))),
                            stop, deadline)
    return NativeResult([int(v) for v in res[5:]], int(res[0]), int(res[1]), int(res[2]),
                        STOP_REASONS[int(res[3])], int(res[4]))


def astar(p: Problem, upper: tuple[list[int], int], target: int,
          time_limit: float | None = None, max_states: int | None = None, packed=None,
          memory_limit: int | None = None, backward: bool = False):
    """Native `memsched.schedulers.exact.astar` (same contract): returns
    ``(order, peak, lower_bound, states)``."""
    r = astar_full(p, upper, target, time_limit, max_states, memory_limit, packed,
                   backward=backward)
    return r.order, r.peak, r.lower_bound, r.states


class AstarSession:
    """A resumable C++ A* on one (sub-)problem: every `run` goes on where the previous one
    stopped, so a caller can interleave it with other techniques in growing turns without
    repeating work. Holds the search tables (possibly GiBs) until `close` (or ``with``)."""

    def __init__(self, p: Problem, upper: tuple[list[int], int], target: int, packed=None,
                 backward: bool = False):
        self._f = load()
        ub_order, ub = upper
        self._h = int(self._f.astar_open(packed if packed is not None else pack(p),
                                         list(ub_order), int(ub), int(target), bool(backward)))
        self.states = 0

    def run(self, time_limit: float | None = None, max_states: int | None = None,
            memory_limit: int | None = None, target: int = 0,
            upper: tuple[list[int], int] | None = None, deadline=None) -> NativeResult:
        """Go on for at most ``time_limit`` s / ``max_states`` expansions (this run's). A
        ``target`` (a bound proven elsewhere) or a better ``upper`` order tightens the search
        first. ``states`` in the result counts every run so far."""
        if self._h is None:
            raise ValueError("the search is closed")
        order, ub = upper if upper is not None else ([], 1 << 62)
        flag = ctypes.c_int32(0)
        args = (self._h, int(target), list(order), int(ub),
                -1.0 if time_limit is None else float(max(0.0, time_limit)),
                -1 if max_states is None else int(max_states),
                -1 if memory_limit is None else int(memory_limit), ctypes.addressof(flag))

        def stop():
            flag.value = 1

        res = run_interruptible(lambda: list(self._f.astar_run(*args)), stop, deadline)
        self.states = int(res[2])
        return NativeResult([int(v) for v in res[5:]], int(res[0]), int(res[1]), int(res[2]),
                            STOP_REASONS[int(res[3])], int(res[4]))

    def close(self) -> None:
        if self._h is not None:
            self._f.astar_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def evaluate(p: Problem, order: Sequence[int]) -> tuple[int, list[int], list[int]]:
    """Native `Problem.evaluate`: ``(peak, steps, lives)``; ValueError on an invalid order."""
    f = load()
    res = [int(x) for x in f.evaluate(pack(p), [int(v) for v in order])]
    n = len(order)
    return res[0], res[1:1 + n], res[1 + n:]


# ---------------------------------------------------------------------- PassContext keys
def register_config_keys() -> bool:
    """Register `CONFIG_KEYS` with TVM (loads the library; needs TVM imported). False when the
    library is unavailable."""
    if not available():
        return False
    return bool(load().register_pass_config())


class _AfterTVMImport:
    """A `sys.meta_path` finder that lets the real finders locate ``tvm`` and wraps its loader
    so that `register_config_keys` runs right after ``tvm`` has been imported."""

    def find_spec(self, name, path=None, target=None):
        if name != "tvm":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _RegisteringLoader(spec.loader, self)
        return spec


class _RegisteringLoader:
    def __init__(self, loader, finder):
        self._loader = loader
        self._finder = finder

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _remove_hook(self._finder)
        try:
            register_config_keys()
        except Exception:  # noqa: BLE001 - never break `import tvm`; the keys stay unknown
            pass

    def __getattr__(self, name):  # get_resource_reader, is_package, ...
        return getattr(self._loader, name)


def _remove_hook(finder) -> None:
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass


def register_config_keys_on_tvm_import() -> None:
    """Make `CONFIG_KEYS` valid PassContext keys as soon as TVM is imported, without importing
    TVM: register now if ``tvm`` is already imported, else once ``import tvm`` completes."""
    if "tvm" in sys.modules:
        try:
            register_config_keys()
        except Exception:  # noqa: BLE001
            pass
        return
    if not any(isinstance(f, _AfterTVMImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTVMImport())

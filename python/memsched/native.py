"""The native core: libmemsched_native (C++ sources in ``passes/``, built by ``pip install``).

It holds a C++ port of the exact search kernel (`memsched.schedulers.exact.astar`), a footprint
evaluator, and registers memsched's PassContext config keys (``memsched.algorithm``,
``memsched.time_limit_s``, ``memsched.memory_model``). Python stays the reference; the native
kernel is cross-checked against it in tests/test_native.py.

`available()` says whether the library can be loaded; `load()` loads it (or raises
`NativeUnavailable` saying why and how to build it). ``MEMSCHED_NATIVE_LIB`` overrides the path.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Sequence

from .memory import Problem

LIB_NAME = "libmemsched_native.so"
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
        try:
            import tvm  # noqa: F401  (TVM first: the library registers config keys into it)
        except ImportError:
            pass
        import tvm_ffi

        try:
            ctypes.CDLL(str(path), ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise NativeUnavailable(f"cannot load {path}: {e}") from None

        class _Funcs:
            astar = tvm_ffi.get_global_func("memsched.native.astar")
            evaluate = tvm_ffi.get_global_func("memsched.native.evaluate")
            register_pass_config = tvm_ffi.get_global_func("memsched.native.register_pass_config")
            version = tvm_ffi.get_global_func("memsched.native.version")

        _Funcs.register_pass_config()
        _state["funcs"] = _Funcs
        return _Funcs
    except NativeUnavailable as e:
        _state["error"] = str(e)
        raise


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


def astar(p: Problem, upper: tuple[list[int], int], target: int,
          time_limit: float | None = None, max_states: int | None = None, packed=None):
    """Native `memsched.schedulers.exact.astar` (same contract): returns
    ``(order, peak, lower_bound, states)``."""
    f = load()
    ub_order, ub = upper
    res = f.astar(packed if packed is not None else pack(p), list(ub_order), int(ub), int(target),
                  -1.0 if time_limit is None else float(max(0.0, time_limit)),
                  -1 if max_states is None else int(max_states))
    res = list(res)
    return [int(v) for v in res[3:]], int(res[0]), int(res[1]), int(res[2])


def evaluate(p: Problem, order: Sequence[int]) -> tuple[int, list[int], list[int]]:
    """Native `Problem.evaluate`: ``(peak, steps, lives)``; ValueError on an invalid order."""
    f = load()
    res = [int(x) for x in f.evaluate(pack(p), [int(v) for v in order])]
    n = len(order)
    return res[0], res[1:1 + n], res[1 + n:]

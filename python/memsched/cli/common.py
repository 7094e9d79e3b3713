"""What every command shares: argument types (`seconds`, `parse_bytes`), the parser with
one-line errors (`_Parser`), model loading with TVM's log held back (`_load`,
`_quiet_native_stderr`), the terminal status lines (`_status`, `_progress_callback`) and `run`,
which maps every outcome of a command to its exit status (the guarantees in `memsched.cli`).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import time

from ..errors import CLIError

__all__ = ["CLIError", "parse_bytes", "run", "seconds"]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (argparse prints the usage block first)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def seconds(text: str) -> float:
    """argparse type of ``--time-limit``: a finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, not {text!r}")
    return value


def slowdown(text: str) -> float | None:
    """``--max-slowdown``: a factor >= 1 of the unpatched program's instructions, or ``none``
    (no bound); a ValueError (the commands' one-line bad input) otherwise."""
    if str(text).strip().lower() in ("none", "off"):
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"bad --max-slowdown {text!r}: must be a factor >= 1 (1.1 = +10 % "
                         "instructions) or none")
    return value


def parse_bytes(text: str) -> int:
    """``8388608``, ``8MiB``, ``8M``, ``512KiB``, ``6.5MB`` -> bytes (K/M/G are binary)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([KMG]?)(?:i?B)?\s*", str(text), re.I)
    if not m:
        raise ValueError(f"bad byte size {text!r}; expected e.g. 8388608 or 8MiB")
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def _known_errors():
    from ..errors import GraphError, ModelLoadError, UnsupportedModelError

    return (CLIError, ModelLoadError, UnsupportedModelError, GraphError)


@contextlib.contextmanager
def _quiet_native_stderr(verbose: bool):
    """Hold back what native code (TVM's C++ logging) writes to file descriptor 2 while a model
    is imported, so an error stays one line; ``--verbose`` replays it."""
    import tempfile

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if verbose:
                tmp.seek(0)
                sys.stderr.write(tmp.read().decode("utf-8", "replace"))


def _load(fn, args):
    with _quiet_native_stderr(getattr(args, "verbose", False)):
        return fn(args.model, _shapes(args))


def _shapes(args):
    from ..importers.load import parse_shapes

    return parse_shapes(args.input_shapes)


@contextlib.contextmanager
def _status(enabled: bool, text: str):
    """A spinner line on the terminal's stderr while TVM works (only on a terminal). It writes
    to its own copy of file descriptor 2, so `_quiet_native_stderr` (which holds back fd 2
    while TVM runs) does not swallow it. Yields a function that replaces the line's text
    (progress: which method or stage); a no-op when there is no line."""
    if not enabled or not sys.stderr.isatty():
        yield lambda _text: None
        return
    from rich.console import Console

    try:
        sys.stderr.flush()
        stream = os.fdopen(os.dup(2), "w")
    except (OSError, ValueError):
        yield
        return
    status = Console(file=stream, force_terminal=True).status(text)
    status.start()
    try:
        yield status.update
    finally:
        status.stop()
        stream.close()


def _progress_callback(enabled: bool):
    """A progress line on stderr for long searches (only on a terminal)."""
    if not enabled or not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console

    console = Console(stderr=True)
    status = console.status("scheduling ...")
    status.start()
    t0 = time.perf_counter()

    def update(segment, segments, states):
        status.update(f"exact search: segment {segment + 1}/{segments}, {states:,} states, "
                      f"{time.perf_counter() - t0:.1f} s")

    return update, status.stop


def _import_tvm(model: str | None) -> None:
    """Import TVM for a model that is not a ``.pt2`` without importing torch.

    tvm_ffi imports torch whenever torch is importable (``try: import torch``, a workaround for
    a symbol clash seen only on Windows), which costs 3-4 s of the ~6 s of ``import tvm`` here,
    although only the ``.pt2`` frontend needs torch. ``sys.modules["torch"] = None`` is the
    import system's documented way to make ``import torch`` raise ImportError; it is set for
    the duration of ``import tvm`` only (tvm_ffi then skips its optional torch interop), so torch
    stays importable afterwards. Nothing changes when TVM or torch is already loaded, for
    ``.pt2`` models, or with ``MEMSCHED_TVM_TORCH=1``."""
    if "tvm" in sys.modules or "torch" in sys.modules or os.environ.get("MEMSCHED_TVM_TORCH") \
            or (model or "").lower().endswith(".pt2"):
        return
    sys.modules["torch"] = None
    try:
        import tvm  # noqa: F401
    finally:
        if "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]


def _add_verbose(p):
    p.add_argument("-v", "--verbose", action="store_true",
                   help="on errors, print the traceback and TVM's log (also MEMSCHED_DEBUG=1)")


def _one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    text = lines[0] if lines else type(e).__name__
    return text[:500] + (" ..." if len(lines) > 1 or len(text) > 500 else "")


def _stdout_closed() -> None:
    """After a broken pipe, point stdout at /dev/null so the exit flush cannot fail again."""
    with contextlib.suppress(Exception):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


@contextlib.contextmanager
def _noting_sigint(seen: list):
    """Record Ctrl-C (and still raise KeyboardInterrupt): TVM turns a KeyboardInterrupt raised
    inside a Python callback it runs (a pass, a legalization) into a bare RuntimeError."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def handler(signum, frame):
        seen.append(True)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupted(prog: str, argv, verbose: bool) -> int:
    import traceback

    if verbose:
        traceback.print_exc()
    print(f"{prog}: interrupted", file=sys.stderr)
    if argv is None:  # the program itself (not a call from Python): leave now, without
        # interpreter teardown, which can abort on a search thread still inside native code
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(130)
    return 130


def run(prog: str, parser: argparse.ArgumentParser, argv=None) -> int:
    """Parse ``argv`` and run the command under the guarantees of `memsched.cli`."""
    import traceback
    import warnings

    try:
        args = parser.parse_args(argv)
    except KeyboardInterrupt:
        return _interrupted(prog, argv, False)
    verbose = bool(getattr(args, "verbose", False) or os.environ.get("MEMSCHED_DEBUG"))
    sigint: list = []
    try:
        with warnings.catch_warnings(), _noting_sigint(sigint):
            if not verbose:
                warnings.simplefilter("ignore")
            return args.func(args)
    except KeyboardInterrupt:
        return _interrupted(prog, argv, verbose)
    except BrokenPipeError:
        _stdout_closed()
        return 141
    except (*_known_errors(), OSError, MemoryError, RecursionError) as e:
        if sigint:
            return _interrupted(prog, argv, verbose)
        if verbose:
            traceback.print_exc()
        if isinstance(e, OSError) and e.strerror:
            msg = f"{e.strerror}: {e.filename!r}" if e.filename else e.strerror
        elif isinstance(e, MemoryError):
            msg = f"{getattr(args, 'model', '')}: out of memory"
        elif isinstance(e, RecursionError):
            msg = f"{getattr(args, 'model', '')}: nested too deeply"
        else:
            msg = _one_line(e)
        print(f"{prog}: error: {msg}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - last resort: one line, never a traceback
        if sigint:
            return _interrupted(prog, argv, verbose)
        if verbose:
            traceback.print_exc()
        where = getattr(args, "model", None)
        print(f"{prog}: internal error{f' on {where!r}' if where else ''}: "
              f"{type(e).__name__}: {_one_line(e)} (--verbose or MEMSCHED_DEBUG=1 shows the "
              "traceback)", file=sys.stderr)
        return 1


DEVICE_TARGETS = ("cortex-m", "host")


def device_target(args) -> str:
    """``--target`` of a .pte / .tflite file: the device whose RAM is reported, ``cortex-m``
    (default: a 32-bit Cortex-M with the CMSIS-NN kernels) or ``host`` (the 64-bit runtime of
    this machine)."""
    target = getattr(args, "target", None) or "cortex-m"
    if target not in DEVICE_TARGETS:
        raise CLIError(f"--target {target!r}: a .pte or .tflite file runs on "
                       f"{' or '.join(DEVICE_TARGETS)}")
    return target


def positive_seconds(text) -> float:
    """``--time-limit`` of the commands that rewrite a file (``reorder``, ``export``): a
    positive, finite number of seconds, else a one-line `ValueError`."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"bad --time-limit {text!r}: not a number") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"bad --time-limit {text!r}: must be a positive number of seconds")
    return v


def not_written(args, report: dict | None, message: str, path: str) -> int:
    """``--measure`` found the rewritten file computing something else: the JSON report (with
    ``written: false``) when asked, one line naming the difference, exit status 1."""
    if args.json and report is not None:
        print(json.dumps({**report, "written": False}))
    print(f"memsched: error: {message}; {path!r} not written", file=sys.stderr)
    return 1


def print_written(args, report: dict) -> bool:
    """Mark ``report`` written; with ``--json`` print it and return True (nothing else to
    print)."""
    report["written"] = True
    if args.json:
        print(json.dumps(report))
    return bool(args.json)


def bad_input(e: BaseException) -> int:
    """One line on stderr naming the problem (an OSError by its file), exit status 2: the
    commands that catch their own errors (``reorder``, ``tile``, ``pack``)."""
    msg = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.strerror else str(e)
    print(f"memsched: error: {msg}", file=sys.stderr)
    return 2


def tflite_output(model: str, output: str | None, verb: str, suffix: str) -> str:
    """The ``-o`` file of a command rewriting ``model`` (a .tflite file): checked before any
    work (input kind, a writable directory, not the input itself); default
    ``MODEL<suffix>``."""
    return rewrite_output(model, output, verb, suffix, ".tflite")


def rewrite_output(model: str, output: str | None, verb: str, suffix: str,
                   kind: str | tuple = ".tflite") -> str:
    """`tflite_output` for a rewritten file of kind ``kind`` (its extension, or several)."""
    from ..errors import ModelLoadError

    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    if not model.lower().endswith(kinds):
        raise ModelLoadError(f"cannot {verb} {model!r}: expected a {' or '.join(kinds)} file")
    out = output or os.path.splitext(model)[0] + suffix
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        raise ValueError(f"cannot write {out!r}: directory {out_dir!r} is missing or not "
                         "writable")
    if os.path.abspath(out) == os.path.abspath(model):
        raise ValueError("-o must differ from the input file")
    return out

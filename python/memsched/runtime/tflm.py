"""Measure a .tflite model with the real TFLite Micro interpreter (the ``tflite-micro`` package).

* `min_arena_bytes`: the smallest ``arena_size`` with which TFLM allocates the model, by
  bisection. ``Interpreter.from_file`` raises when the arena is too small, and on some models
  aborts the process, so every probe runs in a subprocess.
* `arena_sections`: what TFLM's recording allocator reports for one allocation: the head
  section (the planned, non-persistent activations and scratch buffers: what the memory
  planner decides) and the tail (persistent: tensor structs, kernel data).
* `run_tflm`: outputs of one invocation on given inputs (for bit-equality checks).

Nothing here imports tflite-micro in the calling process.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

_PROBE = r"""
import sys
from tflite_micro.python.tflite_micro import runtime
try:
    it = runtime.Interpreter.from_file(sys.argv[1], arena_size=int(sys.argv[2]))
except Exception:
    sys.exit(3)
if len(sys.argv) > 3:
    it.print_allocations()
sys.exit(0)
"""

class TFLMUnavailable(RuntimeError):
    """The tflite-micro package is not installed."""


def available() -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec("tflite_micro") is not None
    except (ImportError, ValueError):
        return False


def _probe(path: str, size: int, report: bool = False, timeout: float = 120.0):
    args = [sys.executable, "-c", _PROBE, path, str(int(size))] + (["report"] if report else [])
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, ""
    return r.returncode == 0, r.stdout + r.stderr


def allocates(path: str, size: int) -> bool:
    """Whether TFLM allocates ``path`` in an arena of ``size`` bytes (a crash counts as no)."""
    return _probe(path, size)[0]


def min_arena_bytes(path: str, hi: int | None = None, resolution: int = 16) -> int:
    """The smallest arena (bytes, to ``resolution``) in which TFLM allocates ``path``."""
    if not available():
        raise TFLMUnavailable("measuring needs the 'tflite-micro' package")
    hi = int(hi or 1 << 20)
    while not allocates(path, hi):
        hi *= 2
        if hi > 1 << 34:
            raise RuntimeError(f"TFLM cannot allocate {path!r} even with 16 GiB")
    lo = 0  # invariant: lo fails (or is 0), hi allocates
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        if allocates(path, mid):
            hi = mid
        else:
            lo = mid
    return hi


def arena_sections(path: str, size: int) -> dict:
    """{"total", "head", "tail"} bytes that TFLM's recording allocator reports at ``size``."""
    ok, text = _probe(path, size, report=True)
    if not ok:
        raise RuntimeError(f"TFLM cannot allocate {path!r} in {size} bytes")
    out = {}
    for key in ("total", "head", "tail"):
        m = re.search(rf"Arena allocation {key} (\d+) bytes", text)
        if m:
            out[key] = int(m.group(1))
    return out


_RUN = r"""
import sys, numpy as np
from tflite_micro.python.tflite_micro import runtime
it = runtime.Interpreter.from_file(sys.argv[1], arena_size=int(sys.argv[2]))
data = np.load(sys.argv[3])
for i in range(len(data.files)):
    it.set_input(data[f"arr_{i}"], i)
it.invoke()
n = int(sys.argv[5])
np.savez(sys.argv[4], *[it.get_output(i) for i in range(n)])
"""


def run_tflm(path: str, inputs: list, n_outputs: int, arena_size: int = 1 << 24) -> list:
    """Outputs of TFLM on ``inputs`` (a subprocess, like the probes)."""
    import os
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.npz"), os.path.join(d, "out.npz")
        np.savez(src, *inputs)
        r = subprocess.run([sys.executable, "-c", _RUN, path, str(arena_size), src, dst,
                            str(n_outputs)], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"TFLM failed on {path!r}: {r.stderr.strip()[-300:]}")
        with np.load(dst) as z:
            return [z[f"arr_{i}"] for i in range(n_outputs)]



def compare_models(path_a: str, path_b: str, count: int = 3, seed: int = 0,
                   tflm: bool = True) -> dict:
    """Run two .tflite files on the same random inputs and compare them bit for bit.

    LiteRT (no default delegates, every tensor preserved): every activation tensor of the files
    (by tensor index, which a reorder keeps), not only the outputs (an int8 softmax saturates and can hide a wrong intermediate).
    TFLM (when installed and ``tflm``): the outputs; ``tflm_equal`` is None (with
    ``tflm_note``) when TFLM cannot run the original file at all. Returns ``{"litert_equal",
    "tensors_compared", "tflm_equal", "tflm_note", "inputs"}``.
    """
    import numpy as np

    from .segments import make_interpreter, random_inputs

    from ..importers.tflite_graph import read_tflite

    ia = make_interpreter(path_a, preserve_all_tensors=True)
    ib = make_interpreter(path_b, preserve_all_tensors=True)
    # the file's activation tensors, by index (a reorder keeps tensor indices; names repeat
    # in converted models, and the interpreter's own temporaries hold garbage)
    acts = set(read_tflite(path_a).tensor_index) & set(read_tflite(path_b).tensor_index)
    feeds = random_inputs(ia.get_input_details(), count, seed)
    equal, compared = True, 0
    tflm_equal = tflm_note = None
    for feed in feeds:
        values = []
        for it in (ia, ib):
            by_name = {d["name"]: d["index"] for d in it.get_input_details()}
            for name, arr in feed.items():
                it.set_tensor(by_name[name], arr)
            it.invoke()
            vals = {}
            for t in acts:
                try:
                    vals[t] = it.get_tensor(t).copy()
                except ValueError:  # tensors without data
                    pass
            values.append(vals)
        shared = set(values[0]) & set(values[1])
        compared = max(compared, len(shared))
        equal = equal and all(np.array_equal(values[0][k], values[1][k]) for k in shared)
        if tflm and available() and tflm_note is None:
            ins = [feed[d["name"]] for d in ia.get_input_details()]
            n_out = len(ia.get_output_details())
            try:
                oa = run_tflm(path_a, ins, n_out)
            except RuntimeError as e:  # TFLM cannot run the original: nothing to compare
                tflm_note = f"TFLM cannot run {os.path.basename(path_a)}: {e}"
                continue
            try:
                ob = run_tflm(path_b, ins, n_out)
                same = all(np.array_equal(x, y) for x, y in zip(oa, ob))
            except RuntimeError as e:
                same, tflm_note = False, str(e)
            tflm_equal = same if tflm_equal is None else (tflm_equal and same)
    return {"litert_equal": bool(equal), "tensors_compared": compared,
            "tflm_equal": tflm_equal, "tflm_note": tflm_note, "inputs": len(feeds)}

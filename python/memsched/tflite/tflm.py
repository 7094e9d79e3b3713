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


def _failure(code: int, stderr: str) -> str:
    """One line saying why a TFLM subprocess failed (its last stderr line, or how it ended)."""
    lines = [x.strip() for x in (stderr or "").splitlines() if x.strip()]
    if lines:
        return lines[-1][-300:]
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name} (no message)"
        except ValueError:
            return f"killed by signal {-code} (no message)"
    return f"exit status {code} (no message)"


def difference(a, b) -> dict | None:
    """None if ``a`` and ``b`` are bit-equal, else how they differ (elements, max |a - b|)."""
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return {"elements": int(max(a.size, b.size)), "of": int(max(a.size, b.size)),
                "max_abs_diff": None, "detail": f"{a.dtype}{list(a.shape)} vs "
                                                f"{b.dtype}{list(b.shape)}"}
    if np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
        return None
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return {"elements": int(np.count_nonzero(a != b)), "of": int(a.size),
            "max_abs_diff": float(np.nanmax(diff)) if diff.size else 0.0}


def describe_difference(d: dict) -> str:
    """One line for a `compare_models` ``first_difference``."""
    if d.get("output") is None and d.get("tensor") is None:
        return f"{d['runtime']}: {d.get('detail', 'differs')}"
    what = (f"output {d['output']}" if d.get("output") is not None else f"tensor {d['tensor']}")
    size = (f"max |diff| {d['max_abs_diff']:g}" if d.get("max_abs_diff") is not None
            else d.get("detail", ""))
    return (f"{d['runtime']} {what} ({d['name']!r}) differs in {d['elements']:,} of "
            f"{d['of']:,} elements, {size}")


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
            raise RuntimeError(f"TFLM failed on {os.path.basename(path)!r}: "
                               f"{_failure(r.returncode, r.stderr)}")
        with np.load(dst) as z:
            return [z[f"arr_{i}"] for i in range(n_outputs)]



def compare_models(path_a: str, path_b: str, count: int = 3, seed: int = 0,
                   tflm: bool = True) -> dict:
    """Run two .tflite files on the same random inputs and compare them bit for bit.

    LiteRT (no default delegates, every tensor preserved): every activation tensor of the files
    (by tensor index, which a reorder keeps), not only the outputs (an int8 softmax saturates
    and can hide a wrong intermediate). TFLM (when installed and ``tflm``): the outputs;
    ``tflm_equal`` is None (with ``tflm_note``) when TFLM cannot run the original file at all.
    Returns ``{"equal", "litert_equal", "tensors_compared", "tflm_equal", "tflm_note",
    "inputs", "first_difference"}``: ``equal`` is False when any runtime found a difference,
    ``first_difference`` then says where (runtime, output or tensor, name, differing elements,
    max |diff|; outputs are looked at before intermediates).
    """

    from .format.read import read_tflite
    from .litert import make_interpreter, random_inputs

    ia = make_interpreter(path_a, preserve_all_tensors=True)
    ib = make_interpreter(path_b, preserve_all_tensors=True)
    # the file's activation tensors, by index (a reorder keeps tensor indices; names repeat
    # in converted models, and the interpreter's own temporaries hold garbage)
    acts = set(read_tflite(path_a).tensor_index) & set(read_tflite(path_b).tensor_index)
    outs = [d["index"] for d in ia.get_output_details()]
    names = {d["index"]: d["name"] for d in ia.get_tensor_details()}
    ordered = [t for t in outs if t in acts] + sorted(acts - set(outs))
    feeds = random_inputs(ia.get_input_details(), count, seed)
    equal, compared = True, 0
    tflm_equal = tflm_note = first = None
    for feed in feeds:
        values = []
        for it in (ia, ib):
            by_name = {d["name"]: d["index"] for d in it.get_input_details()}
            for name, arr in feed.items():
                it.set_tensor(by_name[name], arr)
            it.invoke()
            vals = {}
            for t in ordered:
                try:
                    vals[t] = it.get_tensor(t).copy()
                except ValueError:  # tensors without data
                    pass
            values.append(vals)
        shared = [t for t in ordered if t in values[0] and t in values[1]]
        compared = max(compared, len(shared))
        for t in shared:
            d = difference(values[0][t], values[1][t])
            if d is not None:
                equal = False
                if first is None:
                    first = {"runtime": "LiteRT", "tensor": int(t),
                             "output": outs.index(t) if t in outs else None,
                             "name": names.get(t, f"tensor_{t}"), **d}
        if tflm and available() and tflm_note is None:
            ins = [feed[d["name"]] for d in ia.get_input_details()]
            n_out = len(outs)
            try:
                oa = run_tflm(path_a, ins, n_out)
            except RuntimeError as e:  # TFLM cannot run the original: nothing to compare
                tflm_note = f"TFLM cannot run {os.path.basename(path_a)}: {e}"
                continue
            try:
                ob = run_tflm(path_b, ins, n_out)
            except RuntimeError as e:
                tflm_equal, tflm_note = False, str(e)
                if first is None:
                    first = {"runtime": "TFLM", "output": None, "tensor": None, "name": "",
                             "elements": 0, "of": 0, "max_abs_diff": None,
                             "detail": f"the written file fails: {e}"}
                continue
            same = True
            for i, (x, y) in enumerate(zip(oa, ob)):
                d = difference(x, y)
                if d is not None:
                    same = False
                    if first is None:
                        first = {"runtime": "TFLM", "output": i, "tensor": outs[i],
                                          "name": names.get(outs[i], f"output_{i}"), **d}
            tflm_equal = same if tflm_equal is None else (tflm_equal and same)
    return {"equal": bool(equal) and tflm_equal is not False, "litert_equal": bool(equal),
            "tensors_compared": compared, "tflm_equal": tflm_equal, "tflm_note": tflm_note,
            "inputs": len(feeds), "first_difference": first}

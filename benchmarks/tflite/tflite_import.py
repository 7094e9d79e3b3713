"""TFLite import time (issue 15, item 6: <= 0.5 s for a 1 MB file).

Synthesizes MobileNet-like .tflite files of about 1 MB (`generators.tflite_synth.mobilenet_like`:
int8, and a deeper int8 one with many more operators) and times, in fresh processes (median
of ``--runs``):

* ``flatbuffer``: `memsched.load_graph` on the file -- what ``memsched analyze`` does now (the
  flatbuffer read straight into an OpGraph, no TVM), after ``import memsched.importers.load``
  (so the schema module's import, ~0.03 s, is included; memsched's own import is not);
* ``tvm``: the previous path, TVM's TFLite frontend (`load_relax`) then `from_relax`, timed the
  same way; ``import tvm`` is included, as it was in the old analyze path (and is in the
  Relax view of ``memsched analyze``). `load_relax` now rewrites what the frontend rejected
  (`tflite.tvm_prepare`), so int8 files that failed before are timed too;
* ``process``: the whole ``memsched analyze FILE --view file --json`` process (scheduling
  included).

Run: ``nice -n 19 .venv/bin/python benchmarks/tflite/tflite_import.py [--runs 3]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

SNIPPET = {  # (imports done before the clock starts, timed statement)
    "flatbuffer": ("from memsched.importers.load import load_graph as f", "g = f(P)"),
    "tvm": ("from memsched.importers.load import load_relax",
            "from memsched.importers.relax import from_relax; g = from_relax(load_relax(P))"),
}


def timed(kind: str, path: str) -> float | str:
    pre, stmt = SNIPPET[kind]
    code = (f"import time, sys; {pre}; t0 = time.perf_counter(); P = sys.argv[1]; {stmt}"
            "; print(time.perf_counter() - t0, len(g))")
    r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True)
    if r.returncode:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return "fails: " + last[-90:]
    return float(r.stdout.split()[0])


def process(path: str) -> float:
    exe = os.path.join(os.path.dirname(sys.executable), "memsched")
    t0 = time.perf_counter()
    subprocess.run([exe, "analyze", path, "--view", "file", "--json"], capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from memsched.tflite.format.read import read_tflite
    from memsched.generators.tflite_synth import mobilenet_like

    d = tempfile.mkdtemp()
    files = {
        "mobilenet_like int8 (13 blocks)": mobilenet_like(True),
        "mobilenet_like f32 (13 blocks, width 16)": mobilenet_like(False, width=16),
        "deep int8 (80 blocks, width 6)": mobilenet_like(True, blocks=80, width=6, size=64),
    }
    print(f"{'file':42s} {'KB':>6s} {'ops':>4s} {'flatbuffer s':>12s} {'tvm s':>10s} "
          f"{'process s':>9s}")
    for name, buf in files.items():
        path = os.path.join(d, name.split()[0] + str(len(buf)) + ".tflite")
        with open(path, "wb") as f:
            f.write(buf)
        ops = len(read_tflite(buf).graph)
        row = {}
        for kind in ("flatbuffer", "tvm"):
            ts = [timed(kind, path) for _ in range(args.runs)]
            good = [t for t in ts if isinstance(t, float)]
            row[kind] = f"{statistics.median(good):.3f}" if good else ts[0]
        proc = statistics.median(process(path) for _ in range(args.runs))
        tvm = row["tvm"] if len(row["tvm"]) < 11 else "fails"
        print(f"{name:42s} {len(buf) // 1024:6d} {ops:4d} {row['flatbuffer']:>12s} "
              f"{tvm:>10s} {proc:9.3f}")
        if tvm == "fails":
            print(f"{'':42s} tvm {row['tvm']}")


if __name__ == "__main__":
    main()

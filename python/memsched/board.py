"""The emulated Cortex-M55 (QEMU ``mps3-an547``, MVE): a test oracle, not something users run.

Two firmwares, built once per machine from the ``shared`` directory's tools and third-party
sources (never copied into this project) into a cache (``MEMSCHED_M55_CACHE``, default the
project's ``build/m55``):

* ``executorch``: ExecuTorch's runtime with the ``cortex_m`` kernels on CMSIS-NN for MVE (the
  M55's default export, ``CortexMTargetConfig(cpu=CortexM.M55)``); `run_pte` runs a program's
  first method and reports the planned buffers, the bytes the method and temp allocators used
  and the instructions run.
* ``tflm``: TFLite Micro with the CMSIS-NN kernels; `run_tflite` runs a ``.tflite`` file and,
  with ``min_arena=True``, bisects the smallest arena on the board (head + tail).

Set-up: ``python -m memsched.board build`` (ExecuTorch's about 1-2 min, TFLM's 6-10 min on two
cores; a second call returns at once). It needs the Debian packages ``qemu-system-arm
gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib``; `BoardUnavailable`
says what is missing (tests skip with that reason). QEMU counts instructions; it has no timing
model, so instruction counts, not cycles, compare programs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


FIRMWARES = {  # kind -> (build tool, run tool, the ELF the build leaves)
    "executorch": ("build-cortex-m55-firmware", "run-on-cortex-m55", "cortex-m55-runner.elf"),
    "tflm": ("build-tflm-m55-firmware", "run-tflm-on-cortex-m55", "tflm-m55-runner.elf"),
}
_READY: dict[str, Path] = {}


def shared_dir() -> Path | None:
    """The ``shared`` directory holding the oracles' build tools and third-party sources (the
    one next to this project on the development machines and in CI; ``MEMSCHED_SHARED``
    overrides), or None."""
    env = os.environ.get("MEMSCHED_SHARED")
    here = Path(__file__).resolve().parents[2]  # the project root (python/memsched)
    for cand in ([Path(env)] if env else []) + [here.parent / "shared"]:
        if (cand / "tools" / "build-cortex-m-host-kernels").is_file():
            return cand
    return None


class BoardUnavailable(RuntimeError):
    """The emulated board cannot run here (the message says why: a missing package, no
    ``shared`` directory, a failed build)."""


def cache_dir() -> Path:
    env = os.environ.get("MEMSCHED_M55_CACHE")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "build" / "m55"


def _tools() -> Path:
    shared = shared_dir()
    if shared is None:
        raise BoardUnavailable("no ../shared/tools (set MEMSCHED_SHARED to the directory "
                               "holding the Cortex-M55 firmware tools)")
    return shared / "tools"


def firmware(kind: str, build: bool = True) -> Path:
    """The directory of the ``kind`` firmware (`FIRMWARES`), built once into the cache under a
    file lock (``build=False``: only if already built). Raises `BoardUnavailable`."""
    if kind in _READY:
        return _READY[kind]
    from filelock import FileLock

    tool, _, elf = FIRMWARES[kind]
    out = cache_dir() / kind
    out.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out.parent / f".{kind}.lock")):
        if build or not (out / elf).is_file():
            if not build:
                raise BoardUnavailable(f"the {kind} Cortex-M55 firmware is not built (run "
                                       "`python -m memsched.board build`)")
            r = subprocess.run([str(_tools() / tool), sys.executable, str(out)],
                               capture_output=True, text=True)
            if r.returncode != 0 or not (out / elf).is_file():
                lines = r.stderr.strip().splitlines() or ["?"]
                raise BoardUnavailable(f"building the {kind} Cortex-M55 firmware failed: "
                                       f"{lines[-1]}")
    _READY[kind] = out
    return out


def _memory_order(t) -> bytes:
    """A tensor's bytes in its memory order (channels-last: NHWC), as the firmware reads them."""
    import numpy as np

    if isinstance(t, (bytes, bytearray)):  # already raw bytes (an earlier run's output)
        return bytes(t)
    if hasattr(t, "dim_order"):  # torch
        return t.permute(*t.dim_order()).contiguous().numpy().tobytes()
    return np.ascontiguousarray(t).tobytes()


def run_pte(program: bytes, inputs, work: str | os.PathLike, runs: int = 1,
            timeout: float = 60.0) -> tuple[dict, list[bytes] | None]:
    """Run the first method of ``program`` on the board with ``inputs`` (tensors, arrays or
    raw bytes): (the runner's JSON: ``status``, ``planned_buffers``, ``method_allocator_bytes``,
    ``temp_allocator_bytes``, ``instructions``, ``execute_instructions``, ``outputs`` ...,
    each output's bytes in memory order, or None when the run failed)."""
    fw = firmware("executorch")
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "program.pte").write_bytes(program)
    files = []
    for i, t in enumerate(inputs):
        (work / f"x{i}.bin").write_bytes(_memory_order(t))
        files.append(str(work / f"x{i}.bin"))
    env = dict(os.environ, CORTEX_M55_TIMEOUT=str(int(timeout)), CORTEX_M55_RUNS=str(runs))
    r = subprocess.run([str(_tools() / FIRMWARES["executorch"][1]), str(fw),
                        str(work / "program.pte"), str(work / "run"), *files],
                       capture_output=True, text=True, env=env)
    try:
        res = json.loads(r.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        res = {"status": r.returncode, "error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    outs = [(work / "run" / f"output{i}.bin").read_bytes()
            for i in range(res.get("num_outputs", 0))] if r.returncode == 0 else None
    return res, outs


def run_tflite(model: str | os.PathLike | bytes, inputs, work: str | os.PathLike,
               min_arena: bool = False, arena: int | None = None,
               timeout: float = 600.0, per_op: bool = False) -> tuple[dict, list[bytes] | None]:
    """Run a ``.tflite`` (path or bytes) in TFLite Micro on the board with ``inputs`` (arrays or raw
    bytes, one per model input, in input order): (the runner's JSON: ``status``, ``head``, ``tail``,
    ``arena_used_bytes``, ``min_arena_bytes`` with ``min_arena``, ``invoke_instructions`` ...,
    each output's bytes, or None when the run failed). ``per_op``: run the profiling firmware,
    which adds ``op_instructions`` (one ``{"index", "op", "instructions"}`` per operator) and
    ``op_instructions_sum``; its ``invoke_instructions`` include the profiler's 40 per operator."""
    fw = firmware("tflm")
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    if isinstance(model, (bytes, bytearray)):
        (work / "in.tflite").write_bytes(bytes(model))
        model = work / "in.tflite"
    files = []
    for i, t in enumerate(inputs):
        (work / f"x{i}.bin").write_bytes(_memory_order(t))
        files.append(str(work / f"x{i}.bin"))
    flags = (["--per-op"] if per_op else []) + (["--min-arena"] if min_arena else []) + \
        (["--arena", str(int(arena))] if arena else []) + ["--timeout", str(int(timeout))]
    r = subprocess.run([str(_tools() / FIRMWARES["tflm"][1]), *flags, str(fw), str(model),
                        str(work / "run"), *files], capture_output=True, text=True)
    try:
        res = json.loads(r.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        res = {"status": r.returncode, "reason": (r.stderr.strip().splitlines() or ["?"])[-1]}
    n = len(res.get("outputs", []))
    outs = [(work / "run" / f"output{i}.bin").read_bytes() for i in range(n)] \
        if r.returncode == 0 else None
    return res, outs


def main(argv=None) -> int:
    """``python -m memsched.board build``: build both firmwares into the cache (set-up). Where
    the board cannot be built here it says why and exits 0: the tests skip with that reason;
    under CI (``CI`` set, not "0" / "false"), where the board tests must run, it exits 1."""
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["build"]:
        print("usage: python -m memsched.board build", file=sys.stderr)
        return 2
    failed = 0
    for kind in FIRMWARES:
        try:
            print(f"{kind}: {firmware(kind)}")
        except BoardUnavailable as e:
            print(f"{kind}: not built: {e}", file=sys.stderr)
            failed += 1
    if failed and os.environ.get("CI", "").lower() not in ("", "0", "false"):
        print("CI is set: the board tests must run here, so a board that cannot be built "
              "fails the set-up", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["BoardUnavailable", "cache_dir", "firmware", "run_pte", "run_tflite"]

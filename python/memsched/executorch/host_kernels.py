"""ExecuTorch's Cortex-M kernels on this machine: build, load, run.

The executorch wheel registers no ``cortex_m::`` kernels; its Python reference
implementations compute on logical tensors and cannot see memory layout. The backend's C++
kernels (``backends/cortex_m/ops`` with Arm CMSIS-NN on its portable C path) are built from a
checkout of their sources by the build script ``tools/build-cortex-m-host-kernels`` of a
``shared`` directory (the one next to this project on the development machines and in CI; set
``MEMSCHED_SHARED`` to use another). Loaded into a process before a program is, they register
beside the wheel's kernels, and a Cortex-M ``.pte`` runs in ``executorch.runtime`` exactly as
it runs with the kernels its users run -- the oracle for every Cortex-M program memsched
writes.

Programs for these kernels must be exported for the scalar C path,
``CortexMTargetConfig(cpu=CortexM.M55, isa=cmsis_nn.Backend.SCALAR)`` (`target_config`): the
kernels check scratch-buffer sizes, which differ per ISA.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..board import shared_dir  # noqa: F401 - the oracles' shared directory (re-exported)

_LOADED: dict[str, object] = {}
LIB_NAME = "libcortex_m_host_kernels.so"


class KernelsUnavailable(RuntimeError):
    """The Cortex-M kernels cannot be built or loaded here (the message says why)."""


def build(out_dir: str | os.PathLike | None = None, python: str | None = None) -> Path:
    """The kernels' shared library, built once into ``out_dir`` (default: the project's
    ``build/cortex-m-host-kernels``) under a file lock (parallel test workers build it once;
    about 20 s on 2 cores). Raises `KernelsUnavailable` with the reason."""
    from filelock import FileLock

    shared = shared_dir()
    if shared is None:
        raise KernelsUnavailable("no ../shared/tools/build-cortex-m-host-kernels (set "
                                 "MEMSCHED_SHARED to the directory holding it)")
    out = Path(out_dir) if out_dir else \
        Path(__file__).resolve().parents[3] / "build" / "cortex-m-host-kernels"
    out.mkdir(parents=True, exist_ok=True)
    lib = out / LIB_NAME
    with FileLock(str(out / ".lock")):
        if not lib.is_file():
            r = subprocess.run([str(shared / "tools" / "build-cortex-m-host-kernels"),
                                python or sys.executable, str(out)],
                               capture_output=True, text=True)
            if r.returncode != 0 or not lib.is_file():
                raise KernelsUnavailable("building the Cortex-M kernels failed: " +
                                         (r.stderr.strip().splitlines() or ["?"])[-1])
    return lib


def load(out_dir: str | os.PathLike | None = None) -> Path:
    """Build (once) and load the kernels into this process, before any Cortex-M program is
    loaded; returns the library's path."""
    import ctypes

    lib = build(out_dir)
    if str(lib) not in _LOADED:
        _LOADED[str(lib)] = ctypes.CDLL(str(lib), mode=os.RTLD_NOW | ctypes.RTLD_GLOBAL)
    return lib


def target_config():
    """The ``CortexMTargetConfig`` whose programs these kernels run (the scalar C path)."""
    from executorch.backends.cortex_m.library import cmsis_nn
    from executorch.backends.cortex_m.target_config import CortexM, CortexMTargetConfig

    return CortexMTargetConfig(cpu=CortexM.M55, isa=cmsis_nn.Backend.SCALAR)


def run(buffer: bytes, inputs, method: str = "forward") -> list:
    """Run ``method`` of the program ``buffer`` in ``executorch.runtime`` on ``inputs`` (the
    Program kept alive while its method runs: the runtime does not hold it)."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(buffer)
    m = program.load_method(method)
    out = list(m.execute(list(inputs)))
    del m, program
    return out


__all__ = ["KernelsUnavailable", "build", "load", "run", "shared_dir", "target_config"]

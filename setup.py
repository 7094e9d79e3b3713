"""Build script. Metadata lives in pyproject.toml; this file builds the native core
(``passes/``, C++17 against tvm-ffi, with the system CMake) into ``python/memsched/_native/``
during ``pip install`` (editable or not).

Environment: ``MEMSCHED_SKIP_NATIVE=1`` skips the native build (memsched then runs on its
Python reference implementation only); ``MEMSCHED_CMAKE`` names the cmake executable.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "python" / "memsched" / "_native"
LIB = "libmemsched_native.so"


def _fail(msg: str):
    raise SystemExit(
        f"\nmemsched: building the native core (libmemsched_native) failed:\n  {msg}\n"
        "It needs CMake >= 3.18, a C++17 compiler and apache-tvm-ffi (a build requirement).\n"
        "Set MEMSCHED_SKIP_NATIVE=1 to install without it (Python reference only).\n")


def build_native() -> Path:
    cmake = os.environ.get("MEMSCHED_CMAKE") or shutil.which("cmake")
    if not cmake:
        _fail("`cmake` not found on PATH")
    try:
        import tvm_ffi  # noqa: F401
    except ImportError:
        _fail(f"apache-tvm-ffi is not importable from {sys.executable}")
    build = ROOT / "build" / "native"
    cfg = [cmake, "-S", str(ROOT), "-B", str(build), f"-DPython_EXECUTABLE={sys.executable}",
           f"-DMEMSCHED_NATIVE_OUTPUT_DIR={OUT}", "-DCMAKE_BUILD_TYPE=Release"]
    # The build directory may be stale (e.g. from another interpreter / isolated build env).
    shutil.rmtree(build, ignore_errors=True)
    for cmd in (cfg, [cmake, "--build", str(build), "--parallel", "2"]):
        r = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if r.returncode != 0:
            _fail(f"command failed: {' '.join(cmd)}\n{r.stdout[-4000:]}")
    lib = OUT / LIB
    if not lib.exists():
        _fail(f"the build did not produce {lib}")
    return lib


class BuildPyWithNative(build_py):
    def run(self):
        lib = None
        if os.environ.get("MEMSCHED_SKIP_NATIVE", "") not in ("1", "true", "yes"):
            lib = build_native()
        super().run()
        if lib is not None and not getattr(self, "editable_mode", False):
            dest = Path(self.build_lib) / "memsched" / "_native"
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(lib, dest / LIB)


setup(cmdclass={"build_py": BuildPyWithNative})

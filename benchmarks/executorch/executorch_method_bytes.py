"""Method-allocator bytes of an ExecuTorch program, measured in ExecuTorch's own runtime.

Besides its planned arenas, a loaded method takes records from the *method allocator*: one
`EValue` per value, a `TensorImpl` and its sizes / dim order / strides per tensor, the chains,
instructions, kernel tables and argument lists. Patches add values and instructions; this
measures what they cost there. `benchmarks/native/method_allocator.cpp` is compiled once
(g++ against the headers and ``libexecutorch.so`` the executorch wheel ships), loads the
program with ``Program::load_method`` and a method allocator that records how far it went;
the program's operators are registered as no-op kernels (loading only, nothing runs).

    .venv/bin/python benchmarks/executorch/executorch_method_bytes.py model.pte [more.pte ...]
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "native" / "method_allocator.cpp"


def _tool() -> Path:
    """The compiled harness (cached next to the system temp dir, keyed by source and wheel)."""
    import executorch

    root = Path(list(executorch.__path__)[0])  # a namespace package: no __file__
    key = hashlib.sha256(SOURCE.read_bytes() + str(root).encode()).hexdigest()[:12]
    exe = Path(tempfile.gettempdir()) / f"memsched-method-allocator-{key}"
    if not exe.exists():
        cmd = ["g++", "-std=c++17", "-O1", "-DC10_USING_CUSTOM_GENERATED_MACROS",
               f"-I{root / 'include'}",
               f"-I{root / 'include/executorch/runtime/core/portable_type/c10'}",
               str(SOURCE), f"-L{root / 'lib'}", "-lexecutorch",
               f"-Wl,-rpath,{root / 'lib'}", "-o", str(exe) + ".tmp"]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        os.replace(str(exe) + ".tmp", exe)
    return exe


def operator_names(buffer: bytes, method: str = "forward") -> list[str]:
    """``aten::convolution.out``-style names of the method's operators."""
    from memsched.executorch.format.read import read_program

    plan = next(p for p in read_program(buffer).program.execution_plan if p.name == method)
    return [f"{op.name}.{op.overload}" if op.overload else op.name for op in plan.operators]


def method_allocator_bytes(buffer: bytes, method: str = "forward",
                           temp_pool: int | None = None) -> dict:
    """``{"bytes", "allocations", "temp_peak"}``: what the method allocator gave when
    ``method`` was loaded, and the temp allocator's peak; ``temp_pool``: the temp allocator's
    capacity (default 16 MiB, every operator lookup fits)."""
    with tempfile.NamedTemporaryFile(suffix=".pte") as f:
        f.write(buffer)
        f.flush()
        # libexecutorch registers the prim ops itself (et_view: a view of an unplanned input)
        ops = [n for n in operator_names(buffer, method) if not n.startswith("executorch_prim::")]
        pool = [] if temp_pool is None else ["--temp-pool", str(int(temp_pool))]
        out = subprocess.run([str(_tool()), f.name, method, *pool, *ops],
                             capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"method_allocator: {out.stderr.strip() or out.returncode}")
    vals = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    return {"bytes": int(vals["method_allocator_bytes"]),
            "allocations": int(vals["method_allocator_allocations"]),
            "temp_peak": int(vals["temp_allocator_peak"])}


def main(argv=None) -> int:
    for path in (argv if argv is not None else sys.argv[1:]):
        r = method_allocator_bytes(Path(path).read_bytes())
        print(f"{path}: {r['bytes']:,} B in {r['allocations']:,} allocations")
    return 0


if __name__ == "__main__":
    sys.exit(main())

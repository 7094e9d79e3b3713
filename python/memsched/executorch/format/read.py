"""A ``.pte`` file read and verified: `read_program` decodes a file (a path or the bytes) and
makes the checks ExecuTorch's runtime makes when it loads the program and its methods, so
anything the runtime would refuse is a `PteFileError` with one line. `planned_sizes` gives each
method's ``non_const_buffer_sizes`` as written (index 0 is reserved for constants; arenas are
1..n); `summary` the per-method facts the command line prints (operators, instructions,
planned tensors and bytes).
"""
from __future__ import annotations

import os
from collections import Counter

from ..errors import PteFileError
from .pte import read_pte
from .verify import verify

MAX_PTE_BYTES = 1 << 32  # 4 GiB: above this a file is refused before it is read


def _bytes_of(source) -> tuple[bytes, str]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), "<bytes>"
    path = os.fspath(source)
    try:
        size = os.path.getsize(path)
        if size > MAX_PTE_BYTES:
            raise PteFileError(f"{path}: {size:,} bytes, more than the {MAX_PTE_BYTES:,} B limit")
        with open(path, "rb") as f:
            return f.read(), path
    except OSError as e:
        raise PteFileError(f"{path}: cannot read ({e.strerror or e})") from None


def read_program(source, label: str | None = None):
    """The decoded `format.pte.PteFile` of ``source`` (a path or the bytes; ``label`` names it
    in errors), verified as the runtime verifies it at program and method load."""
    data, name = _bytes_of(source)
    name = label or name
    pte = read_pte(data, name)
    verify(pte, name)
    return pte


def planned_sizes(source) -> dict[str, list[int]]:
    """``{method: non_const_buffer_sizes}`` as written in the file."""
    pte = read_program(source)
    return {plan.name: list(plan.non_const_buffer_sizes) for plan in pte.program.execution_plan}


def summary(source) -> dict:
    """Per method: operator counts, instructions, delegates, planned tensors and the planned
    bytes as written (``planned_bytes``: arenas 1..n summed)."""
    return _summary(read_program(source))


def _summary(pte) -> dict:
    out = {}
    for plan in pte.program.execution_plan:
        ops = [f"{o.name}.{o.overload}" if o.overload else o.name for o in plan.operators]
        calls: Counter = Counter()
        n_instr = 0
        kinds: Counter = Counter()
        for chain in plan.chains:
            for ins in chain.instructions:
                n_instr += 1
                arg = ins.instr_args
                kinds[type(arg).__name__] += 1
                if type(arg).__name__ == "KernelCall":
                    calls[ops[arg.op_index]] += 1
        planned = sum(1 for v in plan.values
                      if getattr(v.val, "allocation_info", None) is not None)
        sizes = list(plan.non_const_buffer_sizes)
        out[plan.name] = {"instructions": n_instr, "instruction_kinds": dict(kinds),
                          "operators": dict(calls), "delegates": len(plan.delegates),
                          "planned_tensors": planned, "non_const_buffer_sizes": sizes,
                          "planned_bytes": sum(sizes[1:])}
    return out

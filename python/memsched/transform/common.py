"""What every memsched pass shares: walking the Relax functions of a module, rebuilding a
function from new binding blocks, and the scheduler options (constructor arguments, else
PassContext config keys, else defaults)."""
from __future__ import annotations

from typing import Callable

import tvm
from tvm import relax

from ..memory import MemoryModel
from ..schedulers.base import available
from . import config


def map_relax_functions(mod: tvm.IRModule, functions: set | None,
                        fn: Callable[[relax.Function, str], "relax.Function | None"]):
    """``mod`` with ``fn(func, name)`` applied to each Relax function (only those named in
    ``functions`` when given); ``fn`` returns None to leave a function as it is. The module is
    returned unchanged (same object) when nothing changed."""
    updates = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        if functions is not None and gv.name_hint not in functions:
            continue
        new = fn(func, gv.name_hint)
        if new is not None:
            updates[gv] = new
    if not updates:
        return mod
    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    for gv, func in updates.items():
        out[gv] = func
    return out


def with_blocks(func: relax.Function, blocks) -> relax.Function:
    """``func`` with its body's binding blocks replaced, normalised (a SeqExpr rebuilt in Python
    has no type until normalised, and well_formed rejects it)."""
    body = func.body
    seq = relax.SeqExpr(list(blocks), body.body, body.span)
    new = relax.Function(func.params, seq, func.ret_ty, func.is_pure, func.attrs, func.span)
    return relax.BlockBuilder().normalize(new)


def check_scheduler_options(algorithm, memory_model) -> None:
    """Fail at construction time, with a clear message, on a bad algorithm or memory model."""
    if algorithm is not None and algorithm not in available():
        raise ValueError(f"unknown scheduling algorithm {algorithm!r}; choose one of "
                         f"{sorted(available())}")
    if memory_model is not None:
        MemoryModel.get(memory_model)


def scheduler_options(ctx, algorithm, time_limit, memory_model, default_time_limit: float):
    """(algorithm, time limit or None, MemoryModel): arguments win, then the ``memsched.*``
    PassContext keys, then defaults. A negative ``time_limit`` means "not given"."""
    algo = algorithm or config.get(ctx, "memsched.algorithm", "auto")
    tl = time_limit
    if tl is not None and tl < 0:
        tl = float(config.get(ctx, "memsched.time_limit_s", default_time_limit))
        tl = None if tl <= 0 else tl
    model = MemoryModel.get(memory_model or config.get(ctx, "memsched.memory_model", "tvm"))
    return algo, tl, model

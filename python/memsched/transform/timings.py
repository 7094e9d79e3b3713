"""Seconds each memsched pass spent on each function, kept beside the module, never in it.

A Relax module's text must not depend on the clock (two builds of one model on an idle and a
loaded machine are the same bytes), so the passes report their times here, process-local:
``seconds("MemoryAwareSchedule", "main")`` after the pass ran; `memsched compile` and
`memsched analyze` print them in their reports.
"""
from __future__ import annotations

_LAST: dict[tuple[str, str], float] = {}


def record(pass_name: str, func: str, seconds: float) -> None:
    """Note that ``pass_name`` spent ``seconds`` on the function ``func`` (the latest run)."""
    _LAST[(pass_name, str(func))] = float(seconds)


def seconds(pass_name: str, func: str = "main") -> float | None:
    """The seconds of ``pass_name``'s latest run on ``func`` in this process, or None."""
    return _LAST.get((pass_name, str(func)))


__all__ = ["record", "seconds"]

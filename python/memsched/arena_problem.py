"""The arena problem, stated once: tensors with a size and a lifetime, offsets, the evaluator.

`Lifetime` (``size`` bytes live from step ``start`` to ``end`` inclusive), `ArenaPlan` (offsets,
arena, proven lower bound), `max_live` (the liveness lower bound), `verify` (the one check every
packer's answer goes through). The packers are `memsched.arena_greedy`, `memsched.packing`
(exact) and `memsched.arena` (CP-SAT and the `plan` front); `memsched.arena` re-exports all of
this.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Lifetime:
    """A tensor of ``size`` bytes, live from step ``start`` to step ``end`` inclusive."""

    size: int
    start: int
    end: int

    def overlaps(self, other: "Lifetime") -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass
class ArenaPlan:
    """Offsets (bytes, multiples of ``alignment``) for each lifetime, in input order.

    ``arena`` is the arena size (bytes, a multiple of ``alignment``); ``lower_bound`` a proven
    lower bound on the minimum arena for these lifetimes and this alignment; ``optimal`` is
    True when ``arena == lower_bound``. ``live_peak`` is the maximum live bytes without
    alignment padding (the liveness peak).
    """

    arena: int
    offsets: list[int]
    lower_bound: int
    optimal: bool
    method: str
    alignment: int = 1
    live_peak: int = 0
    seconds: float = 0.0
    stats: dict = field(default_factory=dict)


def align_up(x: int, alignment: int) -> int:
    return -(-int(x) // alignment) * alignment if alignment > 1 else int(x)


def normalise(lifetimes: Iterable) -> list[Lifetime]:
    out = []
    for t in lifetimes:
        lt = t if isinstance(t, Lifetime) else Lifetime(*(int(v) for v in t))
        if lt.size < 0 or lt.end < lt.start:
            raise ValueError(f"bad lifetime {lt}: need size >= 0 and start <= end")
        out.append(lt)
    return out


def max_live(lifetimes: Iterable, alignment: int = 1) -> int:
    """Maximum over time of the bytes of live tensors (sizes rounded up to ``alignment``):
    a lower bound on every arena, and the liveness peak when ``alignment == 1``."""
    events = []
    for lt in normalise(lifetimes):
        s = align_up(lt.size, alignment)
        if s:
            events.append((lt.start, s))
            events.append((lt.end + 1, -s))
    events.sort(key=lambda e: (e[0], e[1]))  # frees before allocations at the same step
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


def verify(lifetimes: Sequence, offsets: Sequence[int], alignment: int = 1,
           arena: int | None = None) -> None:
    """Raise ValueError unless the offsets are a valid packing (aligned, non-negative, inside
    ``arena`` when given, no two time-overlapping tensors overlapping in memory)."""
    lts = normalise(lifetimes)
    if len(offsets) != len(lts):
        raise ValueError("one offset per lifetime expected")
    for i, (lt, o) in enumerate(zip(lts, offsets)):
        if o < 0 or o % alignment:
            raise ValueError(f"tensor {i}: offset {o} negative or not a multiple of {alignment}")
        if arena is not None and o + lt.size > arena:
            raise ValueError(f"tensor {i}: [{o}, {o + lt.size}) exceeds arena {arena}")
    # sweep over time: compare each tensor with those alive when it starts
    order = sorted(range(len(lts)), key=lambda i: lts[i].start)
    active: list[int] = []
    for i in order:
        if not lts[i].size:
            continue
        active = [j for j in active if lts[j].end >= lts[i].start]
        for j in active:
            if offsets[i] < offsets[j] + lts[j].size and offsets[j] < offsets[i] + lts[i].size:
                raise ValueError(f"tensors {j} and {i} overlap in time and in memory: "
                                 f"{lts[j]}@{offsets[j]} vs {lts[i]}@{offsets[i]}")
        active.append(i)


def check_alignment(alignment: int) -> None:
    if int(alignment) < 1:
        raise ValueError(f"alignment must be >= 1, got {alignment}")



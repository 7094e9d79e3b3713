"""Placing buffers across memory banks: the fast bank's traffic first.

A microcontroller has several RAMs, a small fast one (a Cortex-M55's DTCM) and larger slow ones
(SRAM). Given buffers with a size, a lifetime and a *traffic* (the bytes the kernels move through
them: ``size x (1 + reads)``) and banks ordered fastest first, each with a capacity, choose a bank
and an offset for every buffer so that each bank's buffers pack into its capacity. The
objective, lexicographic (issue 59):

1. maximize the traffic the fastest bank serves;
2. then the next bank's, and so on;
3. then minimize the slower banks' sizes (the last bank is packed by the exact packer).

Per bank, the choice is a knapsack with a packing constraint. Its relaxation, the
*interval knapsack* -- at every step the chosen buffers' live bytes fit the capacity -- is an
integer program CP-SAT solves exactly on these sizes; its optimum is a certified upper bound on
the bank's traffic (``traffic_bound``). The chosen set is then packed by the exact packer
(`memsched.arena.plan`); when fragmentation makes it exceed the capacity, the relaxation is
solved again with the capacity lowered by the excess (a few rounds), and the best set that packs
is kept, then topped up with the buffers that fit into its free space. When everything fits the
fastest bank (memsched's unbanked plan fits it), everything goes there: 100 %.

ExecuTorch 1.5.1's ``banked_memory_planning_pass`` places the largest buffer first into the
fastest bank with room; that is a feasible point of the same problem, tried when the
lexicographic choice leaves the last bank too small (`place` then never fails where it
succeeds). Pins (a bank fixed by the caller) are kept; a pin that does not fit fails with the
bank's name and the bytes missing.

Pure Python (OR-Tools CP-SAT for the selection); bounded by work (CP-SAT's deterministic time,
the packer's node budget), so the answer is the same on any machine.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from .arena_problem import Lifetime, align_up

__all__ = ["Bank", "Buffer", "BankPlan", "BankCapacityError", "place", "greedy_place",
           "objective", "parse_memory_map", "check_plan"]

SELECTION_ROUNDS = 6
# CP-SAT's deterministic time per selection (its work measure, not seconds): the answer is the
# same on any machine; the wall-clock limit is a safety net only
SELECTION_WORK = 4.0
SAFETY_SECONDS = 60.0


class BankCapacityError(ValueError):
    """The banks cannot hold the buffers: the message names the bank and the bytes missing."""


@dataclass(frozen=True)
class Bank:
    """A memory region: ``size`` bytes for this program (``reserved`` of them already taken,
    e.g. by control-flow submodules), offsets and sizes multiples of ``alignment``."""

    name: str
    size: int
    alignment: int = 16
    reserved: int = 0

    @property
    def capacity(self) -> int:
        return self.size - self.reserved


@dataclass(frozen=True)
class Buffer:
    """``size`` bytes live from step ``start`` to ``end`` inclusive, moving ``traffic`` bytes;
    ``bank``: the index of the bank it is pinned to, or None."""

    size: int
    start: int
    end: int
    traffic: int = 0
    bank: int | None = None


@dataclass
class BankPlan:
    """Where each buffer goes: ``bank_of[i]`` (an index into ``banks``) and ``offsets[i]``
    (bytes from the bank's start, past its reserve). ``used[k]``: bank k's bytes (0 when
    empty); ``traffic[k]``: the traffic it serves; ``traffic_bound[k]``: a proven upper bound on
    that (the relaxation's optimum given the banks before it), so ``traffic[0] ==
    traffic_bound[0]`` certifies the fast bank's share optimal; ``method``: "memsched" or
    "greedy" (ExecuTorch's rule, kept when it alone fits)."""

    banks: list[Bank]
    bank_of: list[int]
    offsets: list[int]
    used: list[int]
    traffic: list[int]
    traffic_bound: list[int]
    method: str = "memsched"
    stats: dict = field(default_factory=dict)

    @property
    def total_traffic(self) -> int:
        return sum(self.traffic)

    def share(self, k: int = 0) -> float:
        """Bank k's share of the traffic (1.0 when there is none)."""
        total = self.total_traffic
        return self.traffic[k] / total if total else 1.0

    @property
    def optimal(self) -> bool:
        """The fastest bank's traffic is proven maximal."""
        return self.traffic[0] >= self.traffic_bound[0]


Pack = Callable[[list[int], int], tuple[int, list[int]]]


def default_pack(buffers: Sequence[Buffer], max_nodes: int | None = None) -> Pack:
    """The exact packer (`memsched.arena.plan`, "auto") on a subset of ``buffers``: returns
    ``pack(indices, alignment) -> (arena, offsets)``."""
    from .arena import plan

    def pack(idx: list[int], alignment: int):
        if not idx:
            return 0, []
        lts = [Lifetime(buffers[i].size, buffers[i].start, buffers[i].end) for i in idx]
        limits = dict(time_limit=None, max_nodes=max_nodes) if max_nodes else \
            dict(time_limit=10.0)
        p = plan(lts, "auto", alignment=alignment, **limits)
        return p.arena, list(p.offsets)
    return pack


def _select(buffers, idx, forced, bank: Bank, cap: int, hint=None):
    """The interval knapsack: the subset of ``idx`` (``forced`` included) of most traffic whose
    live aligned bytes fit ``cap`` at every step. Returns (chosen, proven bound)."""
    from ortools.sat.python import cp_model

    a = bank.alignment
    size = {i: align_up(buffers[i].size, a) for i in idx}
    m = cp_model.CpModel()
    x = {i: m.NewBoolVar(f"x{i}") for i in idx}
    for i in forced:
        m.Add(x[i] == 1)
    # the live bytes peak at some buffer's start: one constraint per distinct start
    starts = sorted({buffers[i].start for i in idx})
    seen = set()
    for t in starts:
        live = tuple(i for i in idx if buffers[i].start <= t <= buffers[i].end)
        if live in seen or sum(size[i] for i in live) <= cap:
            continue
        seen.add(live)
        m.Add(sum(size[i] * x[i] for i in live) <= cap)
    m.Maximize(sum(buffers[i].traffic * x[i] for i in idx))
    if hint:
        for i in idx:
            m.AddHint(x[i], i in hint)
    s = cp_model.CpSolver()
    s.parameters.num_search_workers = 1
    s.parameters.random_seed = 0
    s.parameters.max_deterministic_time = SELECTION_WORK
    s.parameters.max_time_in_seconds = SAFETY_SECONDS
    status = s.Solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, None
    chosen = [i for i in idx if s.Value(x[i])]
    bound = int(s.Value(sum(buffers[i].traffic * x[i] for i in idx))) \
        if status == cp_model.OPTIMAL else int(s.BestObjectiveBound() + 1e-6)
    return chosen, bound


def _top_up(buffers, placed: dict, rest, bank: Bank, cap: int) -> None:
    """Add buffers of ``rest`` (most traffic first) into the free space of a packed bank
    (``placed``: index -> offset), lowest offset first, without growing past ``cap``."""
    a = bank.alignment
    for i in sorted(rest, key=lambda i: (-buffers[i].traffic, i)):
        b, sz = buffers[i], align_up(buffers[i].size, a)
        if sz > cap:
            continue
        busy = sorted((o, o + align_up(buffers[j].size, a)) for j, o in placed.items()
                      if buffers[j].start <= b.end and b.start <= buffers[j].end)
        off = 0
        for lo, hi in busy:
            if off + sz <= lo:
                break
            off = max(off, align_up(hi, a))
        if off + sz <= cap:
            placed[i] = off


def _fill(buffers, idx, forced, bank: Bank, pack: Pack, stats: dict):
    """Bank ``bank``'s buffers among ``idx``: (placed {index: offset}, proven traffic bound)."""
    cap = bank.capacity
    arena, offs = pack(list(idx), bank.alignment)
    total = sum(buffers[i].traffic for i in idx)
    if arena <= cap:  # everything fits: the best there is
        return dict(zip(idx, offs)), total
    chosen, bound = _select(buffers, idx, forced, bank, cap)
    if chosen is None:
        return None, None
    best, best_traffic, limit = None, -1, cap
    for round_ in range(SELECTION_ROUNDS):
        arena, offs = pack(chosen, bank.alignment)
        stats.setdefault("rounds", []).append((bank.name, round_, len(chosen), arena))
        if arena <= cap:
            placed = dict(zip(chosen, offs))
            _top_up(buffers, placed, [i for i in idx if i not in placed], bank, cap)
            got = sum(buffers[i].traffic for i in placed)
            if got > best_traffic:
                best, best_traffic = placed, got
            break
        # fragmentation: ask the relaxation for a set with the excess to spare
        limit -= arena - cap
        if limit <= 0:
            break
        chosen, _ = _select(buffers, idx, forced, bank, limit, hint=set(chosen))
        if chosen is None:
            break
    if best is None:  # the pins alone, then whatever fits around them
        arena, offs = pack(list(forced), bank.alignment)
        if arena > cap:
            return None, bound
        best = dict(zip(forced, offs))
        _top_up(buffers, best, [i for i in idx if i not in best], bank, cap)
    return best, bound


def _missing(bank: Bank, need: int) -> BankCapacityError:
    return BankCapacityError(
        f"bank {bank.name!r} needs {need:,} B, {need - bank.capacity:,} B more than its "
        f"{bank.capacity:,} B")


def place(buffers: Sequence[Buffer], banks: Sequence[Bank], pack: Pack | None = None,
          max_nodes: int | None = None, shared=()) -> BankPlan:
    """Every buffer in a bank (see the module docstring for the objective). ``pack``:
    ``pack(indices, alignment) -> (arena, offsets)``, the packer of one bank's buffers (default
    `default_pack`, with ``max_nodes`` its work budget); a caller with buffers that may share
    bytes (ExecuTorch's in-place quantize: the index pairs ``shared``) gives its own, and
    checks those pairs' overlaps under its own rule. Raises `BankCapacityError` when no
    placement is found: a pin that does not fit its bank, or the last bank too small."""
    buffers, banks = list(buffers), list(banks)
    if not banks:
        raise BankCapacityError("a memory map needs at least one bank")
    for b in buffers:
        if b.bank is not None and not 0 <= b.bank < len(banks):
            raise BankCapacityError(f"a buffer is pinned to bank {b.bank}, not in the map")
    pack = pack or default_pack(buffers, max_nodes)
    stats: dict = {}
    bank_of, offsets = [0] * len(buffers), [0] * len(buffers)
    bounds = [0] * len(banks)
    left = [i for i, b in enumerate(buffers) if b.size > 0]
    n = len(banks)
    failure = None
    for k, bank in enumerate(banks):
        idx = [i for i in left if buffers[i].bank in (None, k)]
        forced = [i for i in idx if buffers[i].bank == k]
        if k == n - 1:
            arena, offs = pack(idx, bank.alignment)
            if arena > bank.capacity:
                failure = _missing(bank, arena)
                break
            placed = dict(zip(idx, offs))
            bounds[k] = sum(buffers[i].traffic for i in idx)
        else:
            placed, bound = _fill(buffers, idx, forced, bank, pack, stats)
            if placed is None:
                arena, _ = pack(list(forced), bank.alignment)
                raise _missing(bank, arena)
            bounds[k] = bound
        for i, off in placed.items():
            bank_of[i], offsets[i] = k, off
        left = [i for i in left if i not in placed]
    try:  # ExecuTorch's rule: the fallback, and never better than what is returned
        other = greedy_place(buffers, banks, pack, shared)
    except BankCapacityError:
        if failure is not None:
            raise failure from None
        other = None
    if other is not None:  # what ExecuTorch's rule gives the fast bank, for the reports
        stats["greedy_traffic"] = other.traffic[0]
    if failure is not None:
        other.traffic_bound[0] = max(bounds[0], other.traffic[0])
        other.stats = stats
        return other
    mine = _finish(buffers, banks, bank_of, offsets, bounds, "memsched", stats, shared)
    if other is not None and _key(other) < _key(mine):
        other.traffic_bound = [max(mine.traffic_bound[0], other.traffic[0])] + \
            list(other.traffic[1:])
        other.stats = stats
        return other
    return mine


def objective(traffic: Sequence[int], used: Sequence[int]) -> tuple:
    """The objective, stated once, smaller is better: each bank's traffic, fastest first,
    then the slower banks' sizes (per bank, in the map's order)."""
    return tuple(-t for t in traffic) + tuple(used[1:])


def _key(p: BankPlan) -> tuple:
    return objective(p.traffic, p.used)


def _finish(buffers, banks, bank_of, offsets, bounds, method, stats, shared=()) -> BankPlan:
    used, traffic = [0] * len(banks), [0] * len(banks)
    for i, b in enumerate(buffers):
        if b.size <= 0:
            continue
        k = bank_of[i]
        used[k] = max(used[k], offsets[i] + align_up(b.size, banks[k].alignment))
        traffic[k] += b.traffic
    p = BankPlan(banks, bank_of, offsets, used, traffic,
                 [max(t, u) for t, u in zip(traffic, bounds)], method, stats)
    check_plan(buffers, p, shared)
    return p


def greedy_place(buffers: Sequence[Buffer], banks: Sequence[Bank],
                 pack: Pack | None = None, shared=()) -> BankPlan:
    """ExecuTorch's rule (``banked_memory_planning_pass``): largest first, each into the
    fastest bank with room (pins first, to their banks), first fit by address; then each
    bank packed again by ``pack`` when that is smaller. The baseline `place` is measured
    against, and its fallback."""
    buffers, banks = list(buffers), list(banks)
    pack = pack or default_pack(buffers)
    order = sorted((i for i, b in enumerate(buffers) if b.size > 0),
                   key=lambda i: (buffers[i].bank is None, -buffers[i].size, i))
    placed: list[dict] = [{} for _ in banks]
    for i in order:
        b = buffers[i]
        for k in ([b.bank] if b.bank is not None else range(len(banks))):
            before = len(placed[k])
            _top_up(buffers, placed[k], [i], banks[k], banks[k].capacity)
            if len(placed[k]) > before:
                break
        else:
            k = b.bank if b.bank is not None else len(banks) - 1
            raise _missing(banks[k], sum(align_up(buffers[j].size, banks[k].alignment)
                                         for j in placed[k]) + b.size)
    bank_of, offsets = [0] * len(buffers), [0] * len(buffers)
    for k, bank in enumerate(banks):
        idx = sorted(placed[k])
        arena, offs = pack(idx, bank.alignment)
        mine = max((o + align_up(buffers[i].size, bank.alignment)
                    for i, o in placed[k].items()), default=0)
        final = dict(zip(idx, offs)) if arena < mine else placed[k]
        for i, off in final.items():
            bank_of[i], offsets[i] = k, off
    return _finish(buffers, banks, bank_of, offsets, [0] * len(banks), "greedy", {}, shared)


def check_plan(buffers: Sequence[Buffer], plan: BankPlan, shared=()) -> None:
    """The independent check: every buffer in a bank, aligned, inside the capacity, pins kept,
    no two buffers of one bank overlapping in time and bytes (``shared``: index pairs allowed
    to). Raises `BankCapacityError` naming the first violation."""
    ok_pairs = {frozenset(p) for p in shared}
    for k, bank in enumerate(plan.banks):
        idx = [i for i, b in enumerate(buffers) if b.size > 0 and plan.bank_of[i] == k]
        for i in idx:
            b = buffers[i]
            if b.bank is not None and b.bank != k:
                raise BankCapacityError(f"buffer {i} is pinned to bank {b.bank}, placed in {k}")
            end = plan.offsets[i] + align_up(b.size, bank.alignment)
            if plan.offsets[i] % bank.alignment or plan.offsets[i] < 0:
                raise BankCapacityError(f"buffer {i} at a misaligned offset in {bank.name!r}")
            if end > bank.capacity:
                raise _missing(bank, end)
        active: list[int] = []  # a sweep over time: each buffer against those live at its start
        for i in sorted(idx, key=lambda i: (buffers[i].start, i)):
            b, o = buffers[i], plan.offsets[i]
            active = [j for j in active if buffers[j].end >= b.start]
            for j in active:
                if frozenset((i, j)) in ok_pairs:
                    continue
                if o < plan.offsets[j] + buffers[j].size and plan.offsets[j] < o + b.size:
                    raise BankCapacityError(f"buffers {j} and {i} overlap in time and bytes in "
                                            f"bank {bank.name!r}")
            active.append(i)


def parse_memory_map(text: str) -> list[tuple[str, int, int]]:
    """``NAME:SIZE:MEM_ID[,...]`` (SIZE in bytes, or with a K/M suffix: KiB/MiB) -> a list of
    (name, size, mem_id), fastest first. Raises `BankCapacityError` (a ``ValueError``) with one
    line on a malformed map."""
    out = []
    for part in (p.strip() for p in str(text).split(",")):
        fields = part.split(":")
        if len(fields) != 3 or not fields[0]:
            raise BankCapacityError(f"memory map: {part!r} is not NAME:SIZE:MEM_ID")
        name, size, mem = fields
        scale = {"K": 1024, "M": 1 << 20}.get(size[-1:].upper(), 1)
        try:
            nbytes = int(size[:-1] if scale > 1 else size) * scale
            mem_id = int(mem)
        except ValueError:
            raise BankCapacityError(f"memory map: {part!r}: SIZE and MEM_ID must be integers") \
                from None
        if nbytes <= 0 or mem_id < 1:
            raise BankCapacityError(f"memory map: {part!r}: SIZE must be > 0 and MEM_ID >= 1 "
                                    "(0 holds the constants)")
        out.append((name, nbytes, mem_id))
    names, ids = [n for n, _, _ in out], [m for _, _, m in out]
    if len(set(names)) != len(names) or len(set(ids)) != len(ids):
        raise BankCapacityError("memory map: bank names and mem_ids must be unique")
    return out

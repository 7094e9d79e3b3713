"""Planning across ExecuTorch's target memory map (``executorch.exir.banked_memory_planning``).

``backend_config(memory_map=TargetMemoryMap([Bank(name, size, mem_id), ...]))`` hands the map,
ExecuTorch's own classes unchanged, to `MemschedAlgo`, which then places every planned buffer
with `memsched.banks.place` (the fast bank's traffic first, the exact packer per bank, the
in-place quantize pairs shared only inside one bank) instead of packing one arena. This module
is the adapter: it describes the graph (each storage's lifetime, bytes and *traffic*: bytes x
(1 + the kernel calls that read it, through any view)), turns the map into `memsched.banks.Bank`
(capacity minus the control-flow submodules' reserve and ``extra_padding``; per-bank alignment,
which must be a multiple of the graph's as in ExecuTorch), applies the placement and checks
each bank independently. ExecuTorch's ``banked_memory_planning_pass`` (largest first into the
fastest bank with room) is run on the same specs for the report.

Pins: a buffer whose ``mem_id`` a pass already set stays there; a pin to a ``mem_id`` the map
does not declare is laid out in its own arena, unbudgeted, as ExecuTorch does.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ..memory.check import check_placements
from ..errors import ExecutorchError
from ..memory.model import storage_root


class MemoryMapError(ExecutorchError):
    """A memory map that cannot hold the program (the message names the bank and the bytes
    missing) or that is malformed."""


@dataclass
class BankReport:
    """One bank of one planned graph: its ``size`` (the map's), the bytes memsched uses
    (``used``, what ``non_const_buffer_sizes`` says), the traffic it serves and the proven bound
    on that; ExecuTorch's ``banked_memory_planning_pass`` on the same graph (``greedy_used``,
    ``greedy_traffic``; None when it cannot place the program)."""

    graph: str
    name: str
    mem_id: int
    size: int
    used: int
    tensors: int
    traffic: int
    traffic_bound: int
    greedy_used: int | None
    greedy_traffic: int | None
    seconds: float


class BankedAlgo:
    """The packing algorithm under a memory map: callable with ExecuTorch's algorithm
    signature (`plan_banked`), one `BankReport` per bank per call in ``bank_reports``; the
    banks are packed by ``packer`` (a `MemschedAlgo`, whose ``reports`` stay empty)."""

    __name__ = "memsched_banked"

    def __init__(self, memory_map, packer):
        self.memory_map = memory_map
        self.packer = packer
        self.bank_reports: list = []
        self.reports = packer.reports
        self.top = None

    def __call__(self, alignment, specs, graph_module, graph_signature, extra_padding=0):
        self.packer.top = self.top
        return plan_banked(self, self.memory_map, alignment, specs, graph_module,
                           graph_signature, extra_padding)


def describe_map(memory_map) -> str:
    return ", ".join(f"{b.name}:{b.size}:{b.mem_id}" for b in memory_map.banks)


def is_kernel_call(node) -> bool:
    """What the emitter turns into an instruction: an operator or a delegate call (allocs,
    views of planned tensors, getitem and free emit none)."""
    import operator

    from executorch.exir import memory

    return node.op == "call_function" and node.target not in (
        memory.alloc, memory.view, memory.free, operator.getitem)


def _specs_of(value) -> list:
    import torch.fx

    out = []
    if isinstance(value, torch.fx.Node):
        spec = value.meta.get("spec")
        for s in (spec if isinstance(spec, (list, tuple)) else [spec]):
            if s is not None and hasattr(s, "lifetime"):
                out.append(s)
    elif isinstance(value, (list, tuple)):
        for v in value:
            out += _specs_of(v)
    elif isinstance(value, dict):
        for v in value.values():
            out += _specs_of(v)
    return out


def read_counts(graph_module) -> dict[int, int]:
    """``id(root storage) -> kernel calls reading it`` (each call counted once, a read through
    a view or a storage-backed spec counting for its root). An argument the call writes (its
    ``out``, the schema's mutable arguments) is not a read."""
    counts: dict[int, int] = {}
    for node in graph_module.graph.nodes:
        if not is_kernel_call(node):
            continue
        written = {id(s) for s in _specs_of(node)}
        schema = getattr(node.target, "_schema", None)
        for a in (schema.arguments if schema is not None else ()):
            if a.alias_info is not None and a.alias_info.is_write and a.name in node.kwargs:
                written |= {id(s) for s in _specs_of(node.kwargs[a.name])}
        read = set()
        for s in _specs_of(list(node.args) + list(node.kwargs.values())):
            if id(s) not in written:
                read.add(id(storage_root(s)))
        for r in read:
            counts[r] = counts.get(r, 0) + 1
    return counts


def traffic(spec, counts: dict[int, int]) -> int:
    """Issue 59's traffic of a root storage: its bytes x (1 + the calls that read it)."""
    return int(spec.nbytes()) * (1 + counts.get(id(spec), 0))


def _banks(memory_map, alignment: int, reserve, extra_padding: int):
    from ...banks import Bank

    out = []
    for b in memory_map.banks:
        a = b.alignment or alignment
        if a % alignment:
            raise MemoryMapError(f"bank {b.name!r}: alignment {a} is not a multiple of the "
                                 f"graph's {alignment}")
        base = reserve[b.mem_id] if len(reserve) > b.mem_id else 0
        out.append(Bank(b.name, int(b.size), a, base + extra_padding))
    return out


def plan_banked(algo, memory_map, alignment, specs, graph_module, graph_signature,
                extra_padding):
    """`BankedAlgo.__call__`: a ``MemoryAlgoResult`` whose buffers sit in
    the map's banks (module docstring). Raises `MemoryMapError` when the map cannot hold
    them."""
    from executorch.exir.memory_planning import MemoryAlgoResult, SpecAllocResult

    from ...banks import BankCapacityError, Buffer, place
    from .packer import _aligned, _idset, _inplace, _offset_in_root, _set_object_ids

    t0 = time.perf_counter()
    specs = list(specs)
    counts = read_counts(graph_module)
    greedy = _greedy(memory_map, alignment, specs, graph_module, graph_signature,
                     extra_padding, counts)
    for s in specs:
        s.realign(alignment)
    roots = [s for s in specs if storage_root(s) is s]
    reserve = getattr(graph_module, "input_mem_buffer_sizes", None) or []
    banks = _banks(memory_map, alignment, reserve, extra_padding)
    ids = memory_map.mem_ids()
    top = algo.top if algo.top is not None else graph_module
    placed_roots = [s for s in roots if s.mem_id is None or s.mem_id in ids]
    outside: dict[int, list] = {}  # pins to undeclared arenas
    for s in roots:
        if s.mem_id is not None and s.mem_id not in ids:
            outside.setdefault(s.mem_id, []).append(s)
    share = _inplace(top, placed_roots)
    buffers = [Buffer(s.allocated_memory, s.lifetime[0], s.lifetime[1], traffic(s, counts),
                      None if s.mem_id is None else ids.index(s.mem_id)) for s in placed_roots]

    def pack(idx, a):
        sub = [placed_roots[i] for i in idx]
        inside = _idset(sub)
        pairs = [x for x in share if x[1] in inside and x[2] in inside]
        p = _aligned(algo.packer._pack(sub, pairs, a), sub, pairs)
        return p.arena, list(p.offsets)

    at = {id(s): k for k, s in enumerate(placed_roots)}
    pairs_at = [(at[id(si)], at[id(so)]) for _, si, so in share]
    try:
        bp = place(buffers, banks, pack, shared=pairs_at)
    except BankCapacityError as e:
        raise MemoryMapError(f"memory map {describe_map(memory_map)} cannot hold the "
                             f"program: {e}") from None
    arenas: dict[int, list] = {}
    offset: dict[int, int] = {}
    for s, k, off in zip(placed_roots, bp.bank_of, bp.offsets):
        mem_id = ids[k]
        arenas.setdefault(mem_id, []).append(s)
        offset[id(s)] = banks[k].reserved - extra_padding + off
    for mem_id, group in outside.items():  # laid out on their own, as ExecuTorch does
        p = algo.packer._pack(group, [], alignment)
        base = reserve[mem_id] if len(reserve) > mem_id else 0
        arenas[mem_id] = group
        for s, off in zip(group, p.offsets):
            offset[id(s)] = base + off
    bufsizes = [0] * (max(list(arenas) + ids + [0]) + 1)
    result = MemoryAlgoResult({}, bufsizes)
    for mem_id, group in sorted(arenas.items()):
        inside = _idset(group)
        arena_specs = [s for s in specs if storage_root(s) in inside]
        for s in arena_specs:
            r = storage_root(s)
            off = offset[id(r)] + (_offset_in_root(s) if r is not s else 0)
            result.spec_dict[s] = SpecAllocResult(mem_id, 0, off)
        _set_object_ids(arena_specs, result.spec_dict)
        base = reserve[mem_id] if len(reserve) > mem_id else 0
        end = max((offset[id(s)] + s.allocated_memory for s in group), default=0)
        bufsizes[mem_id] = -(-max(end, base) // alignment) * alignment + extra_padding
        pairs = [(si, so) for _, si, so in share if si in inside and so in inside]
        check_placements([(s, result.spec_dict[s].mem_offset) for s in arena_specs],
                         bufsizes[mem_id], where=f"bank mem_id {mem_id}", shared=pairs)
    for k, (b, bank) in enumerate(zip(memory_map.banks, banks)):
        if bufsizes[b.mem_id] > b.size:  # the backstop: cannot happen when place is right
            raise MemoryMapError(f"bank {b.name!r} planned {bufsizes[b.mem_id]:,} B over its "
                                 f"{b.size:,} B")
        g_used, g_traffic = greedy.get(b.mem_id, (None, None)) if greedy else (None, None)
        algo.bank_reports.append(BankReport(
            "top" if graph_module is top else "submodule", b.name, b.mem_id, int(b.size),
            bufsizes[b.mem_id], sum(1 for x in bp.bank_of if x == k), bp.traffic[k],
            bp.traffic_bound[k], g_used, g_traffic, time.perf_counter() - t0))
    return result


def _greedy(memory_map, alignment, specs, graph_module, graph_signature, extra_padding,
            counts):
    """{mem_id: (bytes, traffic)} of ExecuTorch's ``banked_memory_planning_pass`` on the same
    specs (``counts``: `read_counts`), or None when it fails (its error is the user's if they
    planned with it)."""
    from executorch.exir.banked_memory_planning import BankedGreedy

    try:
        r = BankedGreedy(memory_map)(alignment, specs, graph_module, graph_signature,
                                     extra_padding)
    except Exception:  # noqa: BLE001 -- any failure of the baseline is "cannot place"
        return None
    out = {}
    for b in memory_map.banks:
        size = r.bufsizes[b.mem_id] if b.mem_id < len(r.bufsizes) else 0
        t = sum(traffic(s, counts) for s, a in r.spec_dict.items()
                if a.mem_id == b.mem_id and storage_root(s) is s)
        out[b.mem_id] = (size, t)
    return out

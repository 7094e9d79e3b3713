"""Memory banks for the planned buffers of a ``.pte`` method (issue 59, the file's side).

ExecuTorch numbers a method's planned buffers by ``mem_id`` (1..n of
``non_const_buffer_sizes``; 0 holds the constants); a board maps each to a RAM, a small fast
one first (a Cortex-M55's DTCM) and slower ones after. What a bank is worth is the traffic it
serves: a planned tensor's traffic is its bytes x (1 + the number of kernel calls -- and
delegate calls -- that read it), a read through a view counting for the view's storage
(`tensor_traffic`, on the liveness model of `memory.liveness.plan_graph`).

`bank_rows` reports a method's buffers as they are written (``analyze``); `place_banks`
re-places a method's storages across a memory map with `memsched.banks.place` in a given order
(``reorder --memory-map``): buffers at a ``mem_id`` the map does not name stay in their arena
(packed again by the exact packer, as `pte.reorder` does without a map).
"""
from __future__ import annotations

from ..memory.liveness import kernel_writes, storage_lifetimes

__all__ = ["tensor_traffic", "bank_rows", "fast_share", "memory_banks", "place_banks",
           "require_fit", "fits"]


def _reads(plan, info) -> list[set]:
    """Per instruction: the instance indices (as in ``info['resolved']``) it reads. A kernel
    call reads the arguments outside its written block (and the items of those lists: an
    in-place call's input, a scratch buffer); a delegate call reads every argument whose
    instance it did not make."""
    values = plan.values
    every = info["by_index"]
    out = []
    for k, ins in enumerate(plan.chains[0].instructions):
        arg = ins.instr_args
        at = dict(info["resolved"][k])
        read: set = set()
        if type(arg).__name__ == "KernelCall":
            for v, w in zip(arg.args, kernel_writes(arg.args, values)):
                if w:
                    continue
                items = getattr(values[v].val, "items", None)
                names = [v] + ([int(i) for i in items if int(i) >= 0]
                               if isinstance(items, list) else [])
                read.update(at[u] for u in names if u in at)
        else:  # a delegate: which arguments it writes is not in the file
            read.update(i for v in arg.args if v in at
                        for i in [at[v]] if every[i].start != k)
        out.append(read)
    return out


def tensor_traffic(plan, info) -> list[int]:
    """The traffic of each tensor of `plan_graph`'s graph (``info['instances']`` order): its
    bytes x (1 + the calls that read it)."""
    every = info["by_index"]
    reads: dict[int, int] = {}
    for read in _reads(plan, info):
        for i in read:
            reads[id(every[i])] = reads.get(id(every[i]), 0) + 1
    return [(s.hi - s.lo) * (1 + reads.get(id(s), 0)) for s in info["instances"]]


def memory_banks(memory_map) -> list[tuple[str, int, int]]:
    """A memory map as (name, size, mem_id) fastest first: the text ``NAME:SIZE:MEM_ID[,...]``
    (`memsched.banks.parse_memory_map`) or such a list; None stays None."""
    if memory_map is None:
        return None
    from ...banks import parse_memory_map

    if isinstance(memory_map, str):
        return parse_memory_map(memory_map)
    return [(str(n), int(s), int(m)) for n, s, m in memory_map]


def bank_rows(plan, info=None, memory_map=None, alignment: int = 16) -> dict:
    """A method's planned buffers as written: ``banks`` (per mem_id 1..n: ``mem_id``,
    ``bytes``, ``traffic_bytes``, and ``name`` where ``memory_map`` names it) and
    ``fast_bank_traffic_share`` (the fastest bank's share of the traffic: the map's first
    bank, else the lowest mem_id). ``info``: `plan_graph`'s, or None (a method memsched
    cannot model: bytes only, no traffic)."""
    banks = memory_banks(memory_map)
    sizes = list(plan.non_const_buffer_sizes)
    names = {m: n for n, _, m in banks or ()}
    rows = [{"mem_id": m, "name": names.get(m), "bytes": int(sizes[m]),
             "traffic_bytes": 0 if info is not None else None} for m in range(1, len(sizes))]
    if info is not None:
        for s, t in zip(info["instances"], tensor_traffic(plan, info)):
            if 0 < s.mem < len(sizes):
                rows[s.mem - 1]["traffic_bytes"] += t
    fast = banks[0][2] if banks else 1
    return {"banks": rows, "fast_bank_mem_id": fast,
            "fast_bank_traffic_share": fast_share(rows, fast)}


def fast_share(rows, mem_id: int) -> float | None:
    """The traffic share of ``mem_id`` among ``rows`` (1.0 when there is no traffic; None when
    the traffic is unknown)."""
    if any(r["traffic_bytes"] is None for r in rows):
        return None
    total = sum(r["traffic_bytes"] for r in rows)
    mine = sum(r["traffic_bytes"] for r in rows if r["mem_id"] == mem_id)
    return mine / total if total else 1.0


def _key(rows, banks) -> tuple:
    """The objective of `memsched.banks` on written rows, smaller is better: each bank's
    traffic (fastest first), then the slower banks' bytes."""
    from ...banks import objective

    by = {r["mem_id"]: r for r in rows}
    get = [by.get(m, {"traffic_bytes": 0, "bytes": 0}) for _, _, m in banks]
    return objective([r["traffic_bytes"] for r in get], [r["bytes"] for r in get])


def fits(rows, banks) -> bool:
    """Whether the buffers as written respect the map's capacities (a mem_id the map does not
    name is a pin, always respected)."""
    cap = {m: s for _, s, m in banks}
    return all(r["bytes"] <= cap[r["mem_id"]] for r in rows if r["mem_id"] in cap)


def require_fit(plan, banks, why: str) -> None:
    """A method that cannot be re-placed (``why``) is left as written: raise
    `memsched.banks.BankCapacityError` naming the first bank its buffers overflow."""
    from ...banks import BankCapacityError

    sizes = list(plan.non_const_buffer_sizes)
    for name, cap, m in banks:
        if m < len(sizes) and sizes[m] > cap:
            raise BankCapacityError(
                f"method {plan.name!r} cannot be re-placed ({why}): bank {name!r} needs "
                f"{sizes[m]:,} B, {sizes[m] - cap:,} B more than its {cap:,} B")


def place_banks(plan, graph, info, order, memory_map, alignment: int = 16,
                time_limit: float | None = 10.0):
    """Storages of one method placed across ``memory_map`` for the op order ``order`` (graph op
    ids): ``(place, sizes, report)`` with ``place`` {storage value: (mem_id, offset)},
    ``sizes`` the new ``non_const_buffer_sizes`` and ``report`` the banks (name, mem_id,
    bytes, traffic_bytes), the fast bank's share, the bound (``traffic_bound``: the proven
    maximum of the fast bank's traffic; ``fast_bank_optimal``) and ExecuTorch's greedy rule's
    share on the same buffers. Buffers at a mem_id the map does not name keep it (packed again
    in the new order). Raises `memsched.banks.BankCapacityError` when the map cannot hold
    them."""
    from ...arena import Lifetime, plan as plan_arena
    from ...banks import Bank, Buffer, place

    banks = memory_banks(memory_map)
    traffic = tensor_traffic(plan, info)
    mapped = {m: k for k, (_, _, m) in enumerate(banks)}
    free, pinned = [], {}  # free: (value, Buffer); pinned: mem -> [(value, lo, hi, size)]
    for t, v, mem, lo, hi, size in storage_lifetimes(plan, graph, info, order, alignment):
        if mem in mapped:
            free.append((v, Buffer(size, lo, hi, traffic[t])))
        else:
            pinned.setdefault(mem, []).append((v, lo, hi, size, traffic[t]))
    objs = [Bank(name, size, alignment) for name, size, _ in banks]
    bufs = [b for _, b in free]
    p = place(bufs, objs)
    greedy = p.stats.get("greedy_traffic")  # ExecuTorch's rule, tried by `place`
    top = max([m for _, _, m in banks] + [len(plan.non_const_buffer_sizes) - 1])
    sizes = [0] * (top + 1)
    where: dict[int, tuple[int, int]] = {}
    for (v, _), k, off in zip(free, p.bank_of, p.offsets):
        where[v] = (banks[k][2], off)
    for k, (_, _, m) in enumerate(banks):
        sizes[m] = p.used[k]
    for mem, items in pinned.items():
        a = plan_arena([Lifetime(sz, lo, hi) for _, lo, hi, sz, _ in items], "auto",
                       alignment=alignment, time_limit=time_limit or 10.0)
        sizes[mem] = a.arena
        for (v, *_), off in zip(items, a.offsets):
            where[v] = (mem, off)
    while len(sizes) > 2 and sizes[-1] == 0:  # no slot for empty banks past the last used
        sizes.pop()
    names = {m: nm for nm, _, m in banks}
    rows = [{"mem_id": m, "name": names.get(m), "bytes": sizes[m], "traffic_bytes": 0}
            for m in range(1, len(sizes))]
    for (v, b), k in zip(free, p.bank_of):
        rows[banks[k][2] - 1]["traffic_bytes"] += b.traffic
    for mem, items in pinned.items():
        rows[mem - 1]["traffic_bytes"] += sum(t for *_, t in items)
    report = {"banks": rows, "fast_bank_mem_id": banks[0][2],
              "fast_bank_traffic_share": fast_share(rows, banks[0][2]),
              "traffic_bound": p.traffic_bound[0], "fast_bank_optimal": p.optimal,
              "placement": p.method, "fast_bank_traffic_share_greedy":
              None if greedy is None else greedy / max(1, sum(traffic))}
    return where, sizes, report

"""The independent check every plan goes through.

A plan is correct when no two tensors live at the same time overlap in bytes of one arena
(unless one is stored inside the other: ``storage_base``), and every tensor ends within its
arena's planned size. `check_placements` checks a list of placements against the specs'
recorded lifetimes; `check_graph_module` re-derives the lifetimes from the final node order by
ExecuTorch's rule (`memsched.executorch.memory.model.lifetimes_of_nodes`, not the specs' own
``lifetime`` fields) and checks what ``MemoryPlanningPass`` wrote on the specs and in
``graph_module.meta["non_const_buffer_sizes"]``. Written here, apart from the packers and from
ExecuTorch's own ``Verifier``.
"""
from __future__ import annotations

from ..errors import PlanCheckError


def _holders(spec) -> list[tuple]:
    """``spec`` and the storages holding its bytes, outwards (a ``storage_base``; a view's
    base), each with ``spec``'s byte offset inside it; the last is its root storage."""
    out, off, seen = [], 0, set()
    while spec is not None and id(spec) not in seen:
        seen.add(id(spec))
        out.append((spec, off))
        up = getattr(spec, "storage_base", None)
        if up is not None:
            off += int(getattr(spec, "storage_base_offset", 0) or 0)
        elif type(spec).__name__ == "_ViewSpec":  # a view: its base's bytes
            up = object.__getattribute__(spec, "_base")
        spec = up
    return out


def _chain(spec) -> set:
    return {id(s) for s, _ in _holders(spec)}


def _root(spec):
    return _holders(spec)[-1][0]


def _offset_in_root(spec) -> int:
    return _holders(spec)[-1][1]


def check_intervals(items, bufsize: int | None, where: str = "", shared=()) -> None:
    """``items``: (spec, start, end, offset, size); raise `PlanCheckError` on a conflict.
    ``shared``: (input spec, output spec) of calls that may write their output over their
    input (`memsched.executorch.memory.inplace`): those two may overlap where the kernel's rule
    (`inplace.may_share`) allows and only there; so may the storages they are views of (a
    patch's float window read through its layout view)."""
    from .inplace import may_share

    pair = {(id(_root(a)), id(_root(b))): (a, b) for a, b in shared}
    items = sorted(items, key=lambda x: (x[1], x[2]))
    active: list = []
    for spec, lo, hi, off, size in items:
        if off < 0 or (bufsize is not None and off + size > bufsize):
            raise PlanCheckError(f"{where}: a tensor of {size:,} B at offset {off:,} reaches "
                                 f"past the planned {bufsize:,} B")
        if size == 0:
            continue
        active = [a for a in active if a[2] >= lo]
        for a in active:
            if off < a[3] + a[4] and a[3] < off + size:
                if id(a[0]) in _chain(spec) or id(spec) in _chain(a[0]):
                    continue
                ra, rs = id(_root(a[0])), id(_root(spec))
                p = pair.get((ra, rs)) or pair.get((rs, ra))
                if p is not None:
                    si, so = p
                    offs = {ra: a[3] - _offset_in_root(a[0]), rs: off - _offset_in_root(spec)}
                    if may_share(si, so, offs[id(_root(si))], offs[id(_root(so))]):
                        continue
                raise PlanCheckError(
                    f"{where}: tensors live at [{a[1]}, {a[2]}] and [{lo}, {hi}] overlap in "
                    f"bytes [{a[3]:,}, {a[3] + a[4]:,}) and [{off:,}, {off + size:,})")
        active.append((spec, lo, hi, off, size))


def check_placements(placements, bufsize: int, where: str = "plan", shared=()) -> None:
    """``placements``: (spec, offset) of one arena; lifetimes from ``spec.lifetime``."""
    check_intervals([(s, s.lifetime[0], s.lifetime[1], off, s.allocated_memory)
                     for s, off in placements], bufsize, where, shared)


def check_graph_module(graph_module, graph_signature, flags) -> int:
    """Check the plan ``MemoryPlanningPass`` left on ``graph_module`` (top level); returns the
    number of tensors checked."""
    from .model import FastSignature, lifetimes_of_nodes, planned_specs

    graph_signature = FastSignature.of(graph_signature)

    nodes = list(graph_module.graph.nodes)
    sizes = graph_module.meta.get("non_const_buffer_sizes")
    if sizes is None:
        raise PlanCheckError("the graph module has no planned buffer sizes")
    planned = planned_specs(graph_module, graph_signature, flags)
    # every spec's lifetime by the final node order; a base covers the specs stored in it
    life = lifetimes_of_nodes(nodes, graph_signature, flags)
    by_arena: dict[int, list] = {}
    for s in planned:
        if s.mem_id is None or s.mem_offset is None:
            raise PlanCheckError("a planned tensor has no memory id or offset")
        lo, hi, _ = life.get(id(s), [None, None, s])
        if lo is None:
            raise PlanCheckError("a planned tensor is not referred to by any node")
        by_arena.setdefault(s.mem_id, []).append((s, lo, hi, s.mem_offset, s.allocated_memory))
    # the in-place quantizes, re-derived here: the input's last reference is the call
    from .inplace import pairs

    shared = [(si, so) for i, si, so in pairs(graph_module)
              if (life.get(id(si)) or life.get(id(_root(si)), [0, -1]))[1] == i]
    for mem_id, items in by_arena.items():
        if not 0 < mem_id < len(sizes):
            raise PlanCheckError(f"memory id {mem_id} outside the {len(sizes)} planned buffers")
        check_intervals(items, sizes[mem_id], where=f"arena {mem_id}", shared=shared)
    return len(planned)

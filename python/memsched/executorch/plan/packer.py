"""memsched's exact arena packer as an ExecuTorch memory planning algorithm.

Signature of ExecuTorch 1.5.1's algorithms (``exir/memory_planning.py``)::

    algo(alignment, specs, graph_module, graph_signature, extra_padding) -> MemoryAlgoResult

``specs`` arrive with their lifetimes set (inclusive node indices); each arena (``mem_id``,
``None`` meaning 1, as in ``greedy``) is packed on its own by `memsched.arena.plan` ("auto":
greedy, then the exact packer with a proven lower bound). Storage-backed specs sit inside their
base at ``storage_base_offset``; an arena starts above the control-flow submodules' reserve
(``graph_module.input_mem_buffer_sizes``) and gets ``extra_padding`` on top, as in ``greedy``.
Each arena keeps the smaller of ExecuTorch's ``greedy`` and memsched's packing, so the result is
never larger than ``greedy``'s even outside a `MemoryPlanningAlgorithmSuite`; every plan goes
through the independent check (`memsched.executorch.memory.check`) before it is returned.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ..memory.check import check_placements
from ..memory.model import storage_parent, storage_root


@dataclass
class ArenaReport:
    """One arena of one planned graph: bytes (what ExecuTorch writes in
    ``non_const_buffer_sizes``) by ExecuTorch's ``greedy`` and by memsched, the proven lower
    bound, whether memsched's arena is certified optimal, the winner and seconds."""

    graph: str
    mem_id: int
    tensors: int
    greedy: int
    memsched: int
    lower_bound: int
    optimal: bool
    chosen: str
    seconds: float


class MemschedAlgo:
    """The packing algorithm; an instance is callable with ExecuTorch's signature and keeps
    the `ArenaReport` of every call in ``reports``."""

    __name__ = "memsched"

    def __init__(self, time_limit: float | None = 10.0, name: str = "memsched",
                 arena_nodes: int | None = None):
        self.time_limit = time_limit
        # a node budget (the patch search's `Budget.arena_nodes`): the packing is bounded by
        # work, not seconds, so the program is the same on any machine
        self.arena_nodes = arena_nodes
        self.__name__ = name
        self.reports: list[ArenaReport] = []
        self.top = None  # the top-level graph module being planned (set by the pass)

    def __call__(self, alignment, specs, graph_module, graph_signature, extra_padding=0):
        from executorch.exir.memory_planning import MemoryAlgoResult, SpecAllocResult, greedy

        specs = list(specs)
        g = greedy(alignment, specs, graph_module, graph_signature, extra_padding)
        reserve = getattr(graph_module, "input_mem_buffer_sizes", None) or []
        roots_by_arena: dict[int, list] = {}
        for s in specs:
            s.realign(alignment)
            if storage_root(s) is s:
                roots_by_arena.setdefault(1 if s.mem_id is None else s.mem_id, []).append(s)
        if not roots_by_arena:
            return g
        bufsizes = [0] * (max(roots_by_arena) + 1)
        result = MemoryAlgoResult({}, bufsizes)
        greedy_sizes = list(g.bufsizes) + [0] * (len(bufsizes) - len(g.bufsizes))
        for mem_id, roots in sorted(roots_by_arena.items()):
            t0 = time.perf_counter()
            base = reserve[mem_id] if len(reserve) > mem_id else 0
            share = _inplace(self.top if self.top is not None else graph_module, roots)
            p = self._pack(roots, share, alignment)
            p = _aligned(p, roots, share)
            mine = base + p.arena + extra_padding
            greedy_bytes = greedy_sizes[mem_id]
            lower = base + p.lower_bound + extra_padding
            in_arena = _idset(roots)
            arena_specs = [s for s in specs if storage_root(s) in in_arena]
            if mine < greedy_bytes:
                chosen = "memsched"
                for s, off in zip(roots, p.offsets):
                    result.spec_dict[s] = SpecAllocResult(mem_id, 0, base + off)
                for s in arena_specs:
                    if storage_root(s) is not s:
                        r = storage_root(s)
                        result.spec_dict[s] = SpecAllocResult(
                            mem_id, 0, result.spec_dict[r].mem_offset + _offset_in_root(s))
                _set_object_ids(arena_specs, result.spec_dict)
                bufsizes[mem_id] = mine
            else:  # greedy's own placements for this arena (equal or smaller)
                chosen = "greedy"
                for s in arena_specs:
                    result.spec_dict[s] = g.spec_dict[s]
                bufsizes[mem_id] = greedy_bytes
            check_placements(
                [(s, result.spec_dict[s].mem_offset) for s in arena_specs],
                bufsizes[mem_id], where=f"arena {mem_id}",
                shared=[(si, so) for _, si, so in share] if chosen == "memsched" else ())
            top = self.top is None or graph_module is self.top
            self.reports.append(ArenaReport(
                "top" if top else "submodule", mem_id, len(roots), greedy_bytes, bufsizes[mem_id],
                min(lower, bufsizes[mem_id]), bufsizes[mem_id] <= lower, chosen,
                time.perf_counter() - t0))
        return result

    def _pack(self, roots, share, alignment):
        """memsched's packing of ``roots``. With quantizes that may write over their input
        (``share``, `inplace`), the smallest of three packings that keep the kernel's rule:
        the relaxed problem (each such output packed as starting after its call) repaired by
        `_place`, the pairs it cannot repair packed apart in the next try (MobileNetV1-0.25's
        patched float input windows: 5 of 8 repaired, the arena 29,280 -> 28,144 B); each
        input split into the head its output shares and a tail put right above it
        (`_stacked`); no sharing. The relaxed problem's bound bounds all three."""
        from dataclasses import replace

        from ...arena import Lifetime, plan

        limits = dict(time_limit=None, max_nodes=self.arena_nodes) if self.arena_nodes else \
            dict(time_limit=10.0 if self.time_limit is None else self.time_limit)
        lts = [Lifetime(s.allocated_memory, s.lifetime[0], s.lifetime[1]) for s in roots]
        best = plan(lts, "auto", alignment=alignment, **limits)
        if not share:
            return best
        at = {id(s): k for k, s in enumerate(roots)}
        pairs = [(i, at[id(si)], at[id(so)], si, so) for i, si, so in share]
        cands, bound, tried = [], None, list(pairs)
        while tried:  # the pairs the repair could not place are packed apart next time
            moved = list(lts)
            for i, f, q, si, so in tried:
                moved[q] = Lifetime(lts[q].size, i + 1, lts[q].end)
            relaxed = plan(moved, "auto", alignment=alignment, **limits)
            bound = relaxed.lower_bound if bound is None else bound
            offsets = list(relaxed.offsets)
            failed = {x[:3] for x in tried
                      if not _place(offsets, lts, x[1], x[2], x[3], x[4], relaxed.arena,
                                    alignment)}
            if not failed:
                cands = [replace(relaxed, offsets=offsets)]
                break
            tried = [x for x in tried if x[:3] not in failed]
        cands.append(_stacked(lts, pairs, alignment, lambda x: plan(
            x, "auto", alignment=alignment, **limits)))
        for c in cands:
            if c is not None and c.arena < best.arena:
                best = c
        return replace(best, lower_bound=bound, optimal=best.arena <= bound)


def _aligned(p, roots, share):
    """``p`` with equal tensors (dtype, shape, dim order, bytes) at shared offsets where the
    packing allows (`memsched.arena.align_equal`, the arena no larger): the emitted program
    then holds equal tensor values a `memsched.executorch.plan.share` pass can make one (a patch's
    copies of an operator, scratch buffers of equal calls). The in-place pairs stay."""
    from dataclasses import replace

    from ...arena import Lifetime, align_equal

    lts = [Lifetime(s.allocated_memory, s.lifetime[0], s.lifetime[1]) for s in roots]
    keys = [(s.allocated_memory, tuple(s.shape), str(s.dtype), tuple(s.dim_order))
            if s.is_static_shape_tensor else None for s in roots]
    fixed = {k for k, s in enumerate(roots) for _, si, so in share if s is si or s is so}
    return replace(p, offsets=align_equal(lts, p.offsets, keys, p.arena, fixed))


def _inplace(graph_module, roots) -> list:
    """The in-place quantizes (`inplace.pairs`) whose two tensors are roots of this arena and
    whose output outlives the call."""
    from ..memory.inplace import pairs

    ids = {id(s) for s in roots}
    out = []
    for i, si, so in pairs(graph_module):
        # a layout view of its whole base (a patch's float window seen in the model's form)
        # is the base's bytes: the quantize may write over the base
        root = storage_root(si)
        if root is not si and (root.allocated_memory != si.allocated_memory or
                               type(si).__name__ != "_ViewSpec"):
            continue
        if id(root) in ids and id(so) in ids and root.lifetime[1] == i and so.lifetime[1] > i:
            out.append((i, root, so))
    return out


def _place(offsets, lts, fi, qi, si, so, arena, alignment) -> bool:
    """Make the packing of the relaxed problem (the output packed as starting after the
    call) keep the kernel's rule: the output ``qi`` and its input ``fi`` are apart, or the
    output starts at most a few bytes above the input (`inplace.may_share`), and neither
    meets another buffer over its whole lifetime. Else move one of them where nothing else
    lives with it -- the output onto the input's start, the input up to the output's start,
    the input to the arena's top, then any offset at the end of a buffer it overlaps in time
    -- or give up (False)."""
    from ..memory.inplace import may_share

    def apart_or_allowed() -> bool:
        f, q = lts[fi], lts[qi]
        apart = offsets[qi] >= offsets[fi] + f.size or offsets[fi] >= offsets[qi] + q.size
        return apart or may_share(si, so, offsets[fi], offsets[qi])

    def free(k, off) -> bool:
        a = lts[k]
        if off < 0 or off + a.size > arena:
            return False
        return not any(b.start <= a.end and a.start <= b.end and
                       off < offsets[j] + b.size and offsets[j] < off + a.size
                       for j, b in enumerate(lts) if j not in (fi, qi))

    def ok() -> bool:  # in the relaxed packing the output was placed from the call on
        return free(fi, offsets[fi]) and free(qi, offsets[qi]) and apart_or_allowed()

    if ok():
        return True
    top = (arena - lts[fi].size) // alignment * alignment
    # the three natural spots first, then any other offset where one of them fits (the
    # ends of the buffers it overlaps in time): a tight packing of patches' windows often
    # leaves none of the three free (MobileNetV1-0.25's float input windows)
    spots = [(qi, offsets[fi]), (fi, offsets[qi]), (fi, top)]
    for k in (qi, fi):
        a = lts[k]
        spots += [(k, offsets[j] + b.size) for j, b in enumerate(lts)
                  if j not in (fi, qi) and b.start <= a.end and a.start <= b.end]
        spots.append((k, 0))
    for k, off in spots:
        old = offsets[k]
        if off % alignment == 0 and free(k, off):
            offsets[k] = off
            if ok():
                return True
        offsets[k] = old
    return False


def _stacked(lts, pairs, alignment, pack):
    """The packing where each shared input is a head (its output's size, live while either
    is) and a tail (the rest, live while the input is): input and output then start where the
    packer left the two pieces adjacent -- the head at the bottom (both start at the head), or
    the tail right below the head (both start at the tail, when the output's bytes there are
    free after the input dies) -- else the tail is put right above its head where nothing else
    is (the arena grows if it must). None when none of these fits."""
    from dataclasses import replace

    from ...arena import Lifetime

    items = list(lts)
    for _, f, q, _, _ in pairs:
        items[f] = Lifetime(lts[q].size, lts[f].start, max(lts[f].end, lts[q].end))
        items[q] = Lifetime(lts[f].size - lts[q].size, lts[f].start, lts[f].end)
    p = pack(items)
    offsets = list(p.offsets)

    def free(k, off, life, skip) -> bool:
        return not any(j not in skip and b.start <= life.end and life.start <= b.end and
                       off < offsets[j] + b.size and offsets[j] < off + life.size
                       for j, b in enumerate(items))

    start = {}
    for i, f, q, _, _ in pairs:
        head, tail = offsets[f], offsets[q]
        after = Lifetime(lts[q].size, i + 1, lts[q].end)  # the output once its input is dead
        if head + items[f].size == tail:
            start[f] = head
        elif tail + items[q].size == head and free(q, tail, after, (f, q)):
            start[f] = tail
        elif free(q, head + items[f].size, items[q], (q,)):
            offsets[q] = head + items[f].size
            start[f] = head
        else:
            return None
    for _, f, q, _, _ in pairs:
        offsets[f] = offsets[q] = start[f]  # the output starts where its input does
    arena = max([p.arena] + [off + lt.size for off, lt in zip(offsets, lts)])
    arena = -(-arena // alignment) * alignment
    return replace(p, arena=arena, offsets=offsets)


class _idset:
    """Membership by identity (TensorSpec may define __eq__ on content one day)."""

    def __init__(self, items):
        self.ids = {id(x) for x in items}

    def __contains__(self, x):
        return id(x) in self.ids


def _offset_in_root(spec) -> int:
    off = 0
    while (up := storage_parent(spec)) is not None:
        spec, step = up
        off += step
    return off


def _set_object_ids(specs, spec_dict) -> None:
    """``mem_obj_id``: one id per run of specs connected by overlapping byte ranges (specs
    sharing memory at different times share an object, as ExecuTorch's Verifier expects)."""
    spans = sorted(((spec_dict[s].mem_offset, spec_dict[s].mem_offset + s.allocated_memory, i)
                    for i, s in enumerate(specs)))
    obj, reach = -1, -1
    for lo, hi, i in spans:
        if lo >= reach:
            obj += 1
        reach = max(reach, hi)
        spec_dict[specs[i]].mem_obj_id = obj


def memsched_algo(alignment, specs, graph_module, graph_signature, extra_padding=0):
    """memsched's packer with a 10 s limit per arena (a plain function for
    ``MemoryPlanningAlgorithmSuite(algo_list=[greedy, memsched_algo])``)."""
    return MemschedAlgo()(alignment, specs, graph_module, graph_signature, extra_padding)

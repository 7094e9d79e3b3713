"""The offline arena plan of a .tflite file: one offset per tensor of subgraph 0 for the
``OfflineMemoryAllocation`` metadata (`memsched.tflite.format.write.set_offline_plan`),
packed by memsched's exact packer under TFLite Micro's lifetimes and alignment
(`memsched.tflite.memory.model`), with the in-place QUANTIZE and the patch writer's view
RESHAPEs (`memsched.tflite.format.aliases`) and the kernels' scratch buffers.
`memsched.tflite.plan.reorder` writes it."""
from __future__ import annotations

from ... import arena as _arena
from ..format.read import TFLiteGraph
from ..memory.model import TFLM_ALIGNMENT, lifetimes


def offline_offsets(tg: TFLiteGraph, order, time_limit: float | None = 10.0,
                    alignment: int = TFLM_ALIGNMENT, inplace_quantize: bool = False,
                    max_nodes: int | None = None, scratch: dict | None = None,
                    views: bool = False) -> tuple[list[int], _arena.ArenaPlan]:
    """One offset per tensor of subgraph 0 (``-1`` for what TFLM plans itself) and the plan.
    ``inplace_quantize``: a `quantize_aliases` operator that runs first and whose float input
    is live at that step only (a leading QUANTIZE of a float model input) writes its output
    over its input, which starts at the output's offset (the input beyond the output is packed
    as its own rectangle at step 0; the packing or its mirror image, whichever leaves room
    above the output). Kept when its arena is below the plain packing's. ``time_limit`` /
    ``max_nodes``: the exact packer's limits (`memsched.arena.plan_exact`; ``time_limit=None``
    and a ``max_nodes``: offsets that depend on the input alone). ``scratch`` (file operator
    index -> bytes of each scratch buffer its kernel requests, `memory.arena.scratch_requests`):
    packed as buffers live during their operator but not written, so the plan leaves a gap
    where TFLite Micro's planner puts them (first fit) instead of above the plan. ``views``:
    the patch writer's view RESHAPEs (`memory.model.reshape_aliases`) run in place: each output
    gets its input's offset (one buffer, one lifetime)."""
    roots: dict[int, int] = {}
    if views:
        from ..format.aliases import alias_roots
        from ..memory.model import view_graph

        roots = alias_roots(tg.model)
        lts = lifetimes(tg, order, *view_graph(tg)) if roots else lifetimes(tg, order)
    else:
        lts = lifetimes(tg, order)
    alias: dict[int, int] = {}  # input -> output
    if inplace_quantize:
        from ..format.aliases import quantize_aliases

        at = {ti: k for k, (ti, _) in enumerate(lts)}
        first = int(tg.graph.ops[order[0]].source) if len(order) else -1
        for x, y, v in quantize_aliases(tg.model):
            if v == first and x in at and y in at and lts[at[x]][1].end == 0:
                alias[x] = y
    packed = [(ti, lt) for ti, lt in lts if ti not in alias]
    items = [lt for _, lt in packed]
    if alias:
        (x, y), = alias.items()  # one operator runs first
        iy = [ti for ti, _ in packed].index(y)
        sy = _arena.align_up(items[iy].size, alignment)
        # the rest of the input: live at step 0 only, with the output (nothing else is, but
        # other model inputs): packed as its own rectangle, so the arena holds the input then
        items.append(_arena.Lifetime(max(dict(lts)[x].size - sy, 0), 0, 0))
    n_written = len(packed)
    for step, v in enumerate(order):  # reserved, not written: TFLM places them itself
        for size in (scratch or {}).get(tg.graph.ops[v].source, ()):
            items.append(_arena.Lifetime(size, step, step))
    plan = _arena.plan(items, "auto", alignment, time_limit, max_nodes=max_nodes)
    _arena.verify(items, plan.offsets, alignment, plan.arena)
    offsets = [-1] * len(tg.subgraph.tensors or [])
    for (ti, _), off in zip(packed, plan.offsets):
        offsets[ti] = int(off)
    if alias:
        # the input must start at the output's offset: it fits there at step 0 when no other
        # tensor live at step 0 is in the way; the packing or its mirror image, the lower
        size_x = dict(lts)[x].size
        sizes = [_arena.align_up(lt.size, alignment) for lt in items]
        step0 = [k for k, (_, lt) in enumerate(packed) if lt.start == 0 and k != iy]
        best = None
        for offs in (plan.offsets, [plan.arena - o - sz for o, sz in zip(plan.offsets, sizes)]):
            lo, hi = offs[iy], offs[iy] + size_x
            if any(offs[k] < hi and lo < offs[k] + sizes[k] for k in step0):
                continue
            arena = max(plan.arena, _arena.align_up(hi, alignment))
            if best is None or arena < best[0]:
                best = (arena, offs)
        plain = offline_offsets(tg, order, time_limit, alignment, False, max_nodes, scratch,
                                views)
        if best is None or best[0] >= plain[1].arena:
            return plain  # no gain: the input planned as any tensor
        arena, offs = best
        for (ti, _), off in zip(packed, offs):
            offsets[ti] = int(off)
        offsets[x] = offsets[y]
        plan = _arena.ArenaPlan(arena, list(offs[:n_written]), plan.lower_bound,
                                plan.optimal and arena == plan.arena, plan.method + "+inplace",
                                alignment, plan.live_peak, plan.seconds, dict(plan.stats))
    for y, r in roots.items():  # a view shares its root's buffer
        offsets[y] = offsets[r]
    return offsets, plan

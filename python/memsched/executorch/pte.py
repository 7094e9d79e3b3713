"""Reading, analyzing and rewriting ``.pte`` files, on memsched's own reader and writer
(`format.pte`, `format.verify`): neither torch nor executorch is imported unless ``--measure``
runs both programs in ExecuTorch's runtime.

The front of the commands on ``.pte`` files (``memsched analyze``, ``reorder``): `analyze`,
`reorder` / `write_reordered`, and running a method (`run_method`, `random_inputs`). Reading
(`read_program`: decoded and checked as the runtime checks it at load, `planned_sizes`,
`summary`) is `format.read`'s, re-exported here.

What a kernel call reads and writes comes from the program itself (`kernel_writes`), not from
a table of operator schemas, so every backend's kernels (``cortex_m::`` ...) are covered; the
liveness model and the check of the written plan are in `memory.liveness`; memory banks (each
planned buffer's traffic, placement across a memory map for ``reorder``) in `plan.pte_banks`.
"""
from __future__ import annotations


from .format.pte import write_pte
from .format.read import (MAX_PTE_BYTES, _bytes_of, _summary,  # noqa: F401
                          planned_sizes, read_program, summary)
from .memory.liveness import (_alloc, _nbytes, _views, check_written_plan,  # noqa: F401
                              kernel_writes, plan_graph, storage_lifetimes)


# ---------------------------------------------------------------------- the file's schedule

def _stage(progress, plans, k: int, text: str) -> None:
    if progress is not None:
        progress(f"method {plans[k].name!r} ({k + 1}/{len(plans)}): {text}")


def analyze(source, time_limit: float | None = 10.0, alignment: int = 16,
            keep: dict | None = None, progress=None, memory_map=None) -> dict:
    """`summary` plus, per method, the liveness peak of the file's instruction order, the
    certified optimum over all orders and its lower bound (memsched's `auto` scheduler under
    ExecuTorch's model), and the check of the plan as written (``plan_check``: "passed", or
    the reason). A method that cannot be modelled gets ``error`` instead of those numbers.
    ``keep``: a dict that receives ``{method: (OpGraph, optimal order)}`` (for plots);
    ``progress``: called with a line of text as each method reaches each stage.

    Each method's ``banks`` (`plan.pte_banks.bank_rows`): per planned buffer (mem_id 1..n) its
    ``bytes`` and ``traffic_bytes``, with ``fast_bank_traffic_share``: the fastest bank's
    share of the traffic (the lowest mem_id, or ``memory_map``'s first bank, whose names the
    rows then carry)."""
    from ..schedulers import schedule
    from .errors import ExecutorchError
    from .memory.model import EXECUTORCH_MODEL
    from .plan.pte_banks import bank_rows, memory_banks

    banks = memory_banks(memory_map)
    pte = read_program(source)
    out = _summary(pte)
    plans = pte.program.execution_plan
    for k, plan in enumerate(plans):
        row = out[plan.name]
        _stage(progress, plans, k, f"modelling {row['instructions']:,} instructions")
        try:
            graph, info = plan_graph(plan, alignment)
        except ExecutorchError as e:
            row["error"] = str(e)
            row.update(bank_rows(plan, None, banks))
            continue
        from ..memory import peak_memory

        row.update(bank_rows(plan, info, banks))
        row["file_order_peak"] = peak_memory(graph, None, EXECUTORCH_MODEL)
        _stage(progress, plans, k, f"searching the order of {len(graph.ops):,} ops")
        s = schedule(graph, "auto", EXECUTORCH_MODEL, time_limit=time_limit)
        if keep is not None:
            keep[plan.name] = (graph, list(s.order))
        row.update({"optimum_peak": s.peak, "lower_bound": s.lower_bound,
                    "optimal": s.optimal, "schedule_seconds": round(s.seconds, 3),
                    "views": info["views"], "persistent": info["persistent"],
                    "scratch": info["scratch"]})
        try:
            check_written_plan(plan, graph, info)
            row["plan_check"] = "passed"
        except ExecutorchError as e:
            row["plan_check"] = str(e)
    return out


# ---------------------------------------------------------------------- rewriting a file
_TORCH_DTYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16",
                 6: "float32", 7: "float64", 11: "bool", 15: "bfloat16"}


def random_inputs(plan, seed: int = 0) -> list:
    """Random tensors for a method's inputs (shapes and dtypes from the file)."""
    import torch

    from .errors import UnsupportedProgramError
    g = torch.Generator().manual_seed(seed)
    out = []
    for v in plan.inputs:
        t = plan.values[v].val
        if type(t).__name__ != "Tensor":
            raise UnsupportedProgramError(f"method {plan.name!r}: a non-tensor input")
        name = _TORCH_DTYPES.get(int(t.scalar_type))
        if name is None:
            raise UnsupportedProgramError(f"method {plan.name!r}: input dtype "
                                          f"{int(t.scalar_type)} not generated here")
        dtype = getattr(torch, name)
        shape = [int(d) for d in t.sizes]
        if dtype.is_floating_point:
            out.append(torch.randn(shape, generator=g).to(dtype))
        elif dtype == torch.bool:
            out.append(torch.randint(0, 2, shape, generator=g).bool())
        else:
            out.append(torch.randint(-8, 8, shape, generator=g).to(dtype))
    return out


def run_method(data: bytes, name: str, inputs) -> list:
    """The outputs of method ``name`` of the program ``data`` in ExecuTorch's runtime;
    `UnsupportedProgramError` when the runtime here cannot load or run it (a backend's kernels,
    ``cortex_m::`` ..., exist on its device only)."""
    from executorch.runtime import Runtime

    from .errors import UnsupportedProgramError
    try:
        method = Runtime.get().load_program(data).load_method(name)
        outs = method.execute(inputs)
    except RuntimeError as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UnsupportedProgramError(
            f"--measure: ExecuTorch's runtime here cannot run method {name!r} ({first[:120]}"
            "; error 0x14 is a kernel this runtime does not have); nothing written") from None
    return [o.clone() if hasattr(o, "clone") else o for o in outs]


def reorder(source, time_limit: float | None = 10.0, alignment: int = 16,
            measure: bool = True, seed: int = 0, progress=None,
            memory_map=None) -> tuple[bytes, dict]:
    """A rewritten program: each method's instructions in memsched's order and its planned
    tensors at the exact packer's offsets (views follow their storage). Returns the new bytes
    and a report per method (planned bytes before and after, peaks, bound, optimal flags). A
    method is changed only when its planned bytes go down; every new plan passes the
    independent check. ``measure``: both programs run in ExecuTorch's runtime on the same
    random inputs and every output must be bit-equal, else `PlanCheckError` (nothing to write).
    ``progress``: called with a line of text as each method reaches each stage. Sharing equal
    values afterwards: `memsched.executorch.plan.share.share_reordered`.

    ``memory_map`` (``"NAME:SIZE:MEM_ID[,...]"`` or [(name, size, mem_id)], fastest first):
    the storages are placed across the banks (`plan.pte_banks.place_banks`: the fast bank's traffic
    first, `memsched.banks.place`) instead of packed per arena, and each tensor's mem_id is
    written too; a method is left as written only when its plan fits the map and serves the
    banks at least as well. A map that cannot hold a method raises
    `memsched.banks.BankCapacityError` (a ``ValueError``) naming the bank and the bytes missing.
    """
    from ..schedulers import schedule
    from .plan import pte_banks
    from .errors import ExecutorchError
    from .memory.model import EXECUTORCH_MODEL

    banks = pte_banks.memory_banks(memory_map)  # a malformed map: before any work
    data, name = _bytes_of(source)
    pte = read_program(data, name)
    report: dict = {}
    changed = False
    plans = pte.program.execution_plan
    for k_plan, plan in enumerate(plans):
        _stage(progress, plans, k_plan, "modelling "
               f"{sum(len(c.instructions) for c in plan.chains):,} instructions")
        before = list(plan.non_const_buffer_sizes)
        row = {"planned_before": sum(before[1:])}
        report[plan.name] = row
        try:
            graph, info = plan_graph(plan, alignment)
        except ExecutorchError as e:
            if banks:  # left as written: it must fit the map as it is
                pte_banks.require_fit(plan, banks, str(e))
            row.update(changed=False, reason=str(e), error=str(e))
            continue
        from ..memory import peak_memory

        _stage(progress, plans, k_plan, f"searching the order of {len(graph.ops):,} ops")
        s = schedule(graph, "auto", EXECUTORCH_MODEL, time_limit=time_limit)
        row.update(file_order_peak=peak_memory(graph, None, EXECUTORCH_MODEL), peak=s.peak,
                   lower_bound=s.lower_bound, order_optimal=s.optimal)
        root = _views(info)
        written = pte_banks.bank_rows(plan, info, banks) if banks else None
        if banks:
            row.update(banks_before=written["banks"], fast_bank_traffic_share_before=written[
                "fast_bank_traffic_share"], fits_before=pte_banks.fits(written["banks"], banks))
        if root is None:  # one offset per value: its instances cannot be moved apart
            why = ("a value stands for several tensors in the file's order (a program with "
                   "shared values)")
            if banks:
                pte_banks.require_fit(plan, banks, why)
            row.update(changed=False, planned_after=row["planned_before"],
                       reason=f"{why}: not re-planned", **(written or {}))
            continue
        new_mem: dict[int, int] = {}
        if banks:
            _stage(progress, plans, k_plan, f"placing {len(info['storages']):,} tensors "
                   f"across {len(banks)} banks")
            where, sizes, placed = pte_banks.place_banks(plan, graph, info, s.order, banks,
                                                         alignment, time_limit)
            row.update(placed, planned_after=sum(sizes[1:]))
            if pte_banks.fits(written["banks"], banks) and \
                    pte_banks._key(written["banks"], banks) <= \
                    pte_banks._key(placed["banks"], banks):
                row.update(written, changed=False, planned_after=row["planned_before"],
                           traffic_bound=None, fast_bank_optimal=None,
                           reason="the plan as written fits the banks and serves them as well")
                continue
            new_off = {v: off for v, (_, off) in where.items()}
            new_mem = {v: mem for v, (mem, _) in where.items()}
        else:
            new_off, sizes = _pack(plan, graph, info, s.order, alignment, time_limit, row,
                                   progress=lambda t: _stage(progress, plans, k_plan, t))
            if sum(sizes[1:]) >= sum(before[1:]):
                row.update(changed=False, reason="no smaller plan than the file's")
                row["planned_after"] = row["planned_before"]
                continue
        # views: same place relative to their storage as before
        old = {v: _alloc(plan.values[v])[1] for v in list(new_off) + list(root)}

        def find(v):
            while v in root:
                v = root[v]
            return v

        for v in root:
            r = find(v)
            new_off[v] = new_off[r] + old[v] - old[r]
            if r in new_mem:
                new_mem[v] = new_mem[r]
        for v, off in new_off.items():
            a = plan.values[v].val.allocation_info
            a.memory_offset_low, a.memory_offset_high = off & 0xFFFFFFFF, off >> 32
            if v in new_mem:
                a.memory_id = new_mem[v]
        chain = plan.chains[0]
        chain.instructions = [chain.instructions[graph.ops[v].source] for v in s.order]
        if chain.stacktrace is not None:
            chain.stacktrace = [chain.stacktrace[graph.ops[v].source] for v in s.order]
        plan.non_const_buffer_sizes = sizes
        # the independent check of what is about to be written, in the new order
        graph2, info2 = plan_graph(plan, alignment)
        check_written_plan(plan, graph2, info2)
        row["changed"] = True
        changed = True
    return _finish(data, name, pte, plans, report, changed, measure, seed, progress)


def _pack(plan, graph, info, order, alignment, time_limit, row, progress):
    """Every storage of one method packed per memory id in the op order ``order`` by the
    exact packer: ({storage value: offset}, the new ``non_const_buffer_sizes``)."""
    from ..arena import Lifetime, plan as plan_arena

    # lifetimes of every storage in the new order, packed per memory id
    by_mem: dict[int, list] = {}
    for _t, v, mem, lo, hi, size in storage_lifetimes(plan, graph, info, order, alignment):
        by_mem.setdefault(mem, []).append((v, lo, hi, size))
    sizes = list(plan.non_const_buffer_sizes)
    new_off: dict[int, int] = {}
    arenas = {}
    progress(f"packing {len(info['storages']):,} tensors")
    for mem, items in by_mem.items():
        p = plan_arena([Lifetime(sz, lo, hi) for _, lo, hi, sz in items], "auto",
                       alignment=alignment, time_limit=time_limit or 10.0)
        arenas[mem] = p
        for (v, *_), off in zip(items, p.offsets):
            new_off[v] = off
        sizes[mem] = p.arena
    row.update(planned_after=sum(sizes[1:]),
               arena_optimal=all(p.optimal for p in arenas.values()))
    return new_off, sizes


def _finish(data, name, pte, plans, report, changed, measure, seed, progress):
    """The rewritten program's bytes, loaded back and (``measure``) run bit-equal to the
    original in ExecuTorch's runtime: (bytes, report)."""
    from .errors import OutputsDifferError

    if not changed:
        return data, report
    out = write_pte(pte)
    read_program(out, f"the program written for {name}")  # what is written loads: checked
    if measure:
        for k_plan, plan in enumerate(plans):  # the written program, still in memory
            if not report[plan.name].get("changed"):
                continue
            _stage(progress, plans, k_plan, "running both programs in ExecuTorch's runtime")
            xs = random_inputs(plan, seed)
            a = run_method(data, plan.name, [x.clone() for x in xs])
            b = run_method(out, plan.name, [x.clone() for x in xs])
            import torch
            same = len(a) == len(b) and all(
                torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v
                for u, v in zip(a, b))
            if not same:
                raise OutputsDifferError(f"method {plan.name!r}: outputs differ after "
                                         "reordering; nothing written")
            report[plan.name]["bit_equal"] = True
    return out, report


def write_reordered(source, path, **options) -> dict:
    """`reorder` and write the result atomically to ``path`` (only after the measure)."""
    from ..fileio import write_atomic

    data, report = reorder(source, **options)
    write_atomic(str(path), data)
    return report

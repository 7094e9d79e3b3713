"""Reading, analyzing and rewriting ``.pte`` files, on memsched's own reader and writer
(`pte_format`, `pte_verify`): neither torch nor executorch is imported unless ``--measure``
runs both programs in ExecuTorch's runtime.

`read_program` decodes a file and makes the checks ExecuTorch's runtime makes when it loads
the program and its methods, so anything the runtime would refuse is a `PteFileError` with one
line. `planned_sizes` gives each method's ``non_const_buffer_sizes`` as written (index 0 is
reserved for constants; arenas are 1..n); `summary` the per-method facts the command line
prints (operators, instructions, planned tensors and bytes).

What a kernel call reads and writes comes from the program itself (`kernel_writes`), not from
a table of operator schemas, so every backend's kernels (``cortex_m::`` ...) are covered.
"""
from __future__ import annotations

import os
from collections import Counter

from .errors import PteFileError
from .pte_format import read_pte, write_pte
from .pte_verify import ELEMENT_BYTES, verify

MAX_PTE_BYTES = 1 << 32  # 4 GiB: above this a file is refused before it is read


def _bytes_of(source) -> tuple[bytes, str]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), "<bytes>"
    path = os.fspath(source)
    try:
        size = os.path.getsize(path)
        if size > MAX_PTE_BYTES:
            raise PteFileError(f"{path}: {size:,} bytes, more than the {MAX_PTE_BYTES:,} B limit")
        with open(path, "rb") as f:
            return f.read(), path
    except OSError as e:
        raise PteFileError(f"{path}: cannot read ({e.strerror or e})") from None


def read_program(source, label: str | None = None):
    """The decoded `pte_format.PteFile` of ``source`` (a path or the bytes; ``label`` names it
    in errors), verified as the runtime verifies it at program and method load."""
    data, name = _bytes_of(source)
    name = label or name
    pte = read_pte(data, name)
    verify(pte, name)
    return pte


def planned_sizes(source) -> dict[str, list[int]]:
    """``{method: non_const_buffer_sizes}`` as written in the file."""
    pte = read_program(source)
    return {plan.name: list(plan.non_const_buffer_sizes) for plan in pte.program.execution_plan}


def summary(source) -> dict:
    """Per method: operator counts, instructions, delegates, planned tensors and the planned
    bytes as written (``planned_bytes``: arenas 1..n summed)."""
    return _summary(read_program(source))


def _summary(pte) -> dict:
    out = {}
    for plan in pte.program.execution_plan:
        ops = [f"{o.name}.{o.overload}" if o.overload else o.name for o in plan.operators]
        calls: Counter = Counter()
        n_instr = 0
        kinds: Counter = Counter()
        for chain in plan.chains:
            for ins in chain.instructions:
                n_instr += 1
                arg = ins.instr_args
                kinds[type(arg).__name__] += 1
                if type(arg).__name__ == "KernelCall":
                    calls[ops[arg.op_index]] += 1
        planned = sum(1 for v in plan.values
                      if getattr(v.val, "allocation_info", None) is not None)
        sizes = list(plan.non_const_buffer_sizes)
        out[plan.name] = {"instructions": n_instr, "instruction_kinds": dict(kinds),
                          "operators": dict(calls), "delegates": len(plan.delegates),
                          "planned_tensors": planned, "non_const_buffer_sizes": sizes,
                          "planned_bytes": sum(sizes[1:])}
    return out


# ---------------------------------------------------------------------- the file's schedule


def _content(values, v):
    """What a kernel argument stands for when comparing it with another: a tensor list by its
    items (an out list and the returned list are two values with the same tensors)."""
    val = values[v].val
    if type(val).__name__ in ("TensorList", "OptionalTensorList"):
        return ("list", tuple(val.items))
    return v


def kernel_writes(args, values) -> list[bool]:
    """Which arguments of a kernel call it writes, read from the call itself: ExecuTorch's
    emitter passes an out-variant's outputs as its trailing arguments and then repeats them as
    the call's return (``[..., out, out]``, multi-output ``[..., o0, o1, o0, o1]``; a tensor
    list returned as another list of the same tensors); the longest such repetition is the
    written block. A call without one (a functional kernel: ``et_view``, ``sym_size``) writes
    its last argument, its return."""
    n = len(args)
    keys = [_content(values, v) for v in args]
    for k in range(n // 2, 0, -1):
        if keys[n - k:] == keys[n - 2 * k:n - k]:
            return [i >= n - 2 * k for i in range(n)]
    return [i == n - 1 for i in range(n)]


def _nbytes(tensor, alignment: int) -> int:
    from ..arena_problem import align_up

    n = ELEMENT_BYTES.get(int(tensor.scalar_type))
    if n is None:
        from .errors import UnsupportedProgramError
        raise UnsupportedProgramError(f"tensor scalar type {int(tensor.scalar_type)} unknown")
    for d in tensor.sizes:
        n *= int(d)
    return align_up(n, alignment)


def _alloc(value):
    info = getattr(value.val, "allocation_info", None)
    if info is None:
        return None
    return int(info.memory_id), int(info.memory_offset_low) | (int(info.memory_offset_high) << 32)


def plan_graph(plan, alignment: int = 16):
    """The op graph of one execution plan's instructions, in file order, under ExecuTorch's
    memory model: one op per instruction; a planned tensor lives from the instruction that
    first writes it (plan inputs: from the start) to its last reference (plan outputs: to the
    end). What a kernel call writes: `kernel_writes`. A planned tensor read before any
    instruction writes it is a view when the latest earlier tensor on its bytes has exactly
    its bytes (it is that tensor), a kernel's scratch when that call is its only reference
    (it lives for the call), a view of an earlier tensor containing its bytes, otherwise
    persistent state (a mutable buffer: the whole run). Instructions writing an already
    written tensor (``copy_`` back to a buffer, in-place kernels) and delegate calls keep
    their order relative to every other reference of that storage. Returns ``(OpGraph,
    info)``; `UnsupportedProgramError` for control flow, moves or frees.
    """
    from ..graph import GraphBuilder
    from .errors import UnsupportedProgramError

    if len(plan.chains) != 1:
        raise UnsupportedProgramError(f"method {plan.name!r} has {len(plan.chains)} chains")
    instrs = plan.chains[0].instructions
    refs: list[list[tuple[int, bool]]] = []  # per instruction: (value, written)
    for k, ins in enumerate(instrs):
        arg = ins.instr_args
        kind = type(arg).__name__
        if kind == "KernelCall":
            r = []
            for v, w in zip(arg.args, kernel_writes(arg.args, plan.values)):
                r.append((v, w))
                items = getattr(plan.values[v].val, "items", None)
                if isinstance(items, list):
                    r.extend((int(i), w) for i in items if int(i) >= 0)
            # an out tensor passed alone and again inside the returned list is written
            written = {v for v, w in r if w}
            refs.append([(v, v in written) for v, _ in r])
        elif kind == "DelegateCall":
            refs.append([(v, None) for v in arg.args])  # which are written: unknown
        else:
            raise UnsupportedProgramError(
                f"method {plan.name!r}: instruction {k} is a {kind} (control flow, moves and "
                "frees are not re-planned)")
    values = plan.values
    inputs, outputs = set(plan.inputs), set(plan.outputs)
    n = len(instrs)
    first, last, definer = {}, {}, {}
    for k, r in enumerate(refs):
        for v, w in r:
            first.setdefault(v, (k, w))
            last[v] = k
    for v in inputs:  # a plan input lives from the start (ExecuTorch: a placeholder's spec
        first[v] = (-1, True)  # starts at node 0), not from its first reader
    root: dict[int, int] = {}
    persistent, scratch = set(), set()
    writers_by_mem: dict[int, list] = {}
    kinds = [type(ins.instr_args).__name__ for ins in instrs]
    n_refs: Counter = Counter()
    for r in refs:
        n_refs.update({v for v, _ in r})
    for v, (k, w) in sorted(first.items(), key=lambda x: x[1][0]):
        a = _alloc(values[v])
        if type(values[v].val).__name__ != "Tensor" or a is None:
            continue
        size = _nbytes(values[v].val, 1)
        if v in inputs or w is not False:  # written first (or a delegate's first reference)
            definer[v] = k
            writers_by_mem.setdefault(a[0], []).append((k, a[1], a[1] + size, v))
            continue
        # read before written. A view has its base's bytes exactly (ExecuTorch's views are
        # reshapes at the base's offset): the latest earlier writer of those bytes is its base.
        # A tensor only one kernel call references and nothing writes is that call's scratch
        # (``[..., scratch, out, out]``): it lives for the call. Otherwise the latest earlier
        # tensor containing its bytes (conservative: that tensor lives on), else state.
        lap = [x for x in writers_by_mem.get(a[0], ())
               if x[0] < k and x[1] < a[1] + size and a[1] < x[2]]
        latest = max(lap, key=lambda x: x[0]) if lap else None
        if latest is not None and latest[1] == a[1] and latest[2] == a[1] + size:
            root[v] = latest[3]
            continue
        if n_refs[v] == 1 and v not in outputs and kinds[k] == "KernelCall":
            definer[v] = k
            scratch.add(v)
            writers_by_mem.setdefault(a[0], []).append((k, a[1], a[1] + size, v))
            continue
        best = None
        for kk, lo, hi, u in writers_by_mem.get(a[0], ()):
            if kk < k and lo <= a[1] and a[1] + size <= hi and (best is None or kk >= best[0]):
                best = (kk, u)
        if best is None:
            persistent.add(v)
            definer[v] = -1
        else:
            root[v] = best[1]

    def find(v):
        while v in root:
            v = root[v]
        return v

    b = GraphBuilder(plan.name)
    tid: dict[int, int] = {}
    storages: list[int] = []
    group_refs: list[set] = [set() for _ in range(n)]
    for k, r in enumerate(refs):
        for v, _ in r:
            group_refs[k].add(find(v))
    roots = {find(v) for v in first if _alloc(values[v]) is not None
             and type(values[v].val).__name__ == "Tensor"}
    for v in sorted(roots):
        if definer.get(v, 0) == -1:
            tid[v] = b.input(f"v{v}", _nbytes(values[v].val, alignment))
            storages.append(v)
            if v in persistent or v in outputs:
                b.mark_output(tid[v])
    # side effects: a second write of a storage, or a delegate call, keeps its place
    extra: list[set] = [set() for _ in range(n)]
    touching: dict[int, list] = {}
    for k in range(n):
        for v in group_refs[k]:
            touching.setdefault(v, []).append(k)
    for k, r in enumerate(refs):
        effect = any(w is None for _, w in r) or any(
            w and definer.get(find(v)) is not None and definer[find(v)] != k for v, w in r)
        if not effect:
            continue
        for v in group_refs[k]:
            for u in touching.get(v, ()):
                if u < k:
                    extra[k].add(u)
                elif u > k:
                    extra[u].add(k)
    # data dependencies over every value (planned or not): its first writer before its readers
    writer: dict[int, int] = {}
    for k, r in enumerate(refs):
        for v, w in r:
            if w is not False and v not in writer and v not in inputs:
                writer[v] = k
    for k, r in enumerate(refs):
        for v, _ in r:
            wk = writer.get(v)
            if wk is not None and wk < k:
                extra[k].add(wk)
    for k in range(n):
        ins = [tid[v] for v in sorted(group_refs[k]) if v in tid]
        outs = [v for v in sorted(group_refs[k]) if v in roots and v not in tid
                and definer.get(v) == k]
        op = b.op(f"i{k}", type(instrs[k].instr_args).__name__, ins,
                  [(f"v{v}", _nbytes(values[v].val, alignment)) for v in outs],
                  source=k, extra_preds=sorted(extra[k]))
        for v, t in zip(outs, b.ops[op].outputs):
            tid[v] = t
            storages.append(v)
            if v in outputs:
                b.mark_output(t)
    missing = [v for v in roots if v not in tid]
    if missing:
        raise UnsupportedProgramError(f"method {plan.name!r}: value {missing[0]} is read "
                                      "before the instruction that writes it")
    return b.build(), {"storages": storages, "views": len(root), "persistent": len(persistent),
                       "scratch": len(scratch),
                       "refs": refs, "root": root}


def _stage(progress, plans, k: int, text: str) -> None:
    if progress is not None:
        progress(f"method {plans[k].name!r} ({k + 1}/{len(plans)}): {text}")


def analyze(source, time_limit: float | None = 10.0, alignment: int = 16,
            keep: dict | None = None, progress=None) -> dict:
    """`summary` plus, per method, the liveness peak of the file's instruction order, the
    certified optimum over all orders and its lower bound (memsched's `auto` scheduler under
    ExecuTorch's model), and the check of the plan as written (``plan_check``: "passed", or
    the reason). A method that cannot be modelled gets ``error`` instead of those numbers.
    ``keep``: a dict that receives ``{method: (OpGraph, optimal order)}`` (for plots);
    ``progress``: called with a line of text as each method reaches each stage."""
    from ..schedulers import schedule
    from .errors import ExecutorchError
    from .model import EXECUTORCH_MODEL

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
            continue
        from ..memory import peak_memory

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


def check_written_plan(plan, graph, info) -> None:
    """Independent check of the offsets written in the file for the file's order: lifetimes
    in instruction indices (inputs from the start, outputs and state to the end), views inside
    their storage, every tensor within its arena's planned size."""
    from .check import check_intervals

    n = len(graph.ops)
    root, refs = info["root"], info["refs"]
    span: dict[int, list] = {}

    def find(v):
        while v in root:
            v = root[v]
        return v

    for t, v in zip(range(len(graph.tensors)), info["storages"]):
        ten = graph.tensors[t]
        lo = -1 if ten.producer is None else ten.producer
        hi = n if ten.is_output else max([lo] + list(ten.consumers))
        span[v] = [lo, hi]
    sizes = list(plan.non_const_buffer_sizes)
    by_mem: dict[int, list] = {}
    members: dict[int, list] = {}
    for k, r in enumerate(refs):
        for v, _ in r:
            if _alloc(plan.values[v]) is not None:
                members.setdefault(find(v), set()).add(v)
    for v in info["storages"]:
        mem, off = _alloc(plan.values[v])
        size = _nbytes(plan.values[v].val, 1)
        if not 0 < mem < len(sizes):
            from .errors import PlanCheckError
            raise PlanCheckError(f"value {v}: memory id {mem} outside the planned buffers")
        by_mem.setdefault(mem, []).append((v, span[v][0], span[v][1], off, size))
        for u in members.get(v, ()):
            umem, uoff = _alloc(plan.values[u])
            usize = _nbytes(plan.values[u].val, 1)
            if umem != mem or uoff < off or uoff + usize > off + size:
                from .errors import PlanCheckError
                raise PlanCheckError(f"value {u}: a view outside its storage")
    for mem, items in by_mem.items():
        check_intervals(items, sizes[mem], where=f"{plan.name} arena {mem}")


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
            measure: bool = True, seed: int = 0, progress=None) -> tuple[bytes, dict]:
    """A rewritten program: each method's instructions in memsched's order and its planned
    tensors at the exact packer's offsets (views follow their storage). Returns the new bytes
    and a report per method (planned bytes before and after, peaks, bound, optimal flags). A
    method is changed only when its planned bytes go down; every new plan passes the
    independent check. ``measure``: both programs run in ExecuTorch's runtime on the same
    random inputs and every output must be bit-equal, else `PlanCheckError` (nothing to write).
    ``progress``: called with a line of text as each method reaches each stage. Sharing equal
    values afterwards: `memsched.executorch.share.share_reordered`.
    """
    from ..arena import Lifetime, plan as plan_arena
    from ..schedulers import schedule
    from .errors import ExecutorchError, OutputsDifferError
    from .model import EXECUTORCH_MODEL

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
            row.update(changed=False, reason=str(e), error=str(e))
            continue
        from ..memory import peak_memory

        _stage(progress, plans, k_plan, f"searching the order of {len(graph.ops):,} ops")
        s = schedule(graph, "auto", EXECUTORCH_MODEL, time_limit=time_limit)
        row.update(file_order_peak=peak_memory(graph, None, EXECUTORCH_MODEL), peak=s.peak,
                   lower_bound=s.lower_bound, order_optimal=s.optimal)
        pos = {v: k for k, v in enumerate(s.order)}
        n = len(graph.ops)
        # lifetimes of every storage in the new order, packed per memory id
        by_mem: dict[int, list] = {}
        for t, v in zip(range(len(graph.tensors)), info["storages"]):
            ten = graph.tensors[t]
            lo = -1 if ten.producer is None else pos[ten.producer]
            hi = n if ten.is_output else max([lo] + [pos[c] for c in ten.consumers])
            mem, _off = _alloc(plan.values[v])
            by_mem.setdefault(mem, []).append((v, lo + 1, hi + 1, _nbytes(plan.values[v].val,
                                                                         alignment)))
        sizes = list(before)
        new_off: dict[int, int] = {}
        arenas = {}
        _stage(progress, plans, k_plan, f"packing {len(info['storages']):,} tensors")
        for mem, items in by_mem.items():
            p = plan_arena([Lifetime(sz, lo, hi) for _, lo, hi, sz in items], "auto",
                           alignment=alignment, time_limit=time_limit or 10.0)
            arenas[mem] = p
            for (v, *_), off in zip(items, p.offsets):
                new_off[v] = off
            sizes[mem] = p.arena
        row.update(planned_after=sum(sizes[1:]),
                   arena_optimal=all(p.optimal for p in arenas.values()))
        if sum(sizes[1:]) >= sum(before[1:]):
            row.update(changed=False, reason="no smaller plan than the file's")
            row["planned_after"] = row["planned_before"]
            continue
        # views: same place relative to their storage as before
        root = info["root"]
        old = {v: _alloc(plan.values[v])[1] for v in list(new_off) + list(root)}

        def find(v):
            while v in root:
                v = root[v]
            return v

        for v in root:
            r = find(v)
            new_off[v] = new_off[r] + old[v] - old[r]
        for v, off in new_off.items():
            a = plan.values[v].val.allocation_info
            a.memory_offset_low, a.memory_offset_high = off & 0xFFFFFFFF, off >> 32
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
                raise OutputsDifferError(f"method {plan.name!r}: outputs differ after reordering; "
                                     "nothing written")
            report[plan.name]["bit_equal"] = True
    return out, report


def write_reordered(source, path, **options) -> dict:
    """`reorder` and write the result atomically to ``path`` (only after the measure)."""
    from ..fileio import write_atomic

    data, report = reorder(source, **options)
    write_atomic(str(path), data)
    return report

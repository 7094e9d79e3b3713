"""The liveness model of a ``.pte`` method as written (`plan_graph`: one op per instruction,
a planned tensor per write, views and scratch resolved at each reference, the in-place
quantize) and the independent check of its written offsets against it
(`check_written_plan`). What a kernel call writes comes from the program itself
(`kernel_writes`), not from a table of operator schemas."""
from __future__ import annotations

from ..format.verify import ELEMENT_BYTES


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
    from ...arena_problem import align_up

    n = ELEMENT_BYTES.get(int(tensor.scalar_type))
    if n is None:
        from ..errors import UnsupportedProgramError
        raise UnsupportedProgramError(f"tensor scalar type {int(tensor.scalar_type)} unknown")
    for d in tensor.sizes:
        n *= int(d)
    return align_up(n, alignment)


def _alloc(value):
    info = getattr(value.val, "allocation_info", None)
    if info is None:
        return None
    return int(info.memory_id), int(info.memory_offset_low) | (int(info.memory_offset_high) << 32)


class _Storage:
    """One instance of planned bytes in the file's order (a tensor of `plan_graph`'s graph):
    the value whose write (or first reference) made it, its memory id and bytes ``[lo, hi)``,
    the instruction that made it (-1: before the run), how (``input``, ``state``, ``written``,
    ``scratch``) and its element size (`inplace.may_share` reads ``element_bytes``)."""

    __slots__ = ("value", "mem", "lo", "hi", "start", "kind", "element_bytes")

    def __init__(self, value, mem, lo, hi, start, kind, element_bytes):
        self.value, self.mem, self.lo, self.hi = value, mem, lo, hi
        self.start, self.kind, self.element_bytes = start, kind, element_bytes

    def __repr__(self):
        return (f"_Storage(v{self.value}, {self.kind} at {self.start}, "
                f"mem {self.mem} [{self.lo}, {self.hi}))")


def plan_graph(plan, alignment: int = 16):
    """The op graph of one execution plan's instructions, in file order, under ExecuTorch's
    memory model: one op per instruction, one tensor per instance of planned bytes. What a
    kernel call writes: `kernel_writes`. Each reference of a planned value is resolved at its
    instruction (one value may stand for several tensors: `share.share_values` leaves one
    value for the equal tensors of a patched program's copies of an operator):

    * a write starts a new instance (plan inputs: one, from the start), unless the call also
      reads the value (in place: ``copy_`` back to a buffer) or it is state;
    * a read names the latest earlier write of exactly its bytes (the value itself, or the
      base of a view: ExecuTorch's views are reshapes at the base's offset); else, for a
      one-dimensional value never written and named by kernel calls only, always right
      before the call's written block (a CMSIS-NN scratch buffer; several calls' equal ones
      shared), that call's scratch (written by the call first: lives for the call); else the
      latest earlier write containing its bytes (a view; that tensor lives on); else
      persistent state (a mutable buffer: the whole run). A value written before names its
      own latest instance -- or, when values are shared (several calls write one value), a
      later write of exactly its bytes with another description of them (a shared value
      that is, in a later patch, a layout view of a new tensor); nothing else: what
      overwrote it clobbered it, and the check says so.

    An instance lives from the instruction that makes it to its last reference (plan outputs
    and state: to the end). The Cortex-M ``quantize_per_tensor`` may write its int8 output
    over its float input (`memsched.executorch.memory.inplace`): the op's ``inplace`` input, the
    memory model credits it when the input dies there. Instructions writing in place and
    delegate calls keep their order relative to every other reference of those instances.
    Returns ``(OpGraph, info)``; `UnsupportedProgramError` for control flow, moves or frees.
    """
    from ...graph import GraphBuilder
    from ..errors import UnsupportedProgramError

    if len(plan.chains) != 1:
        raise UnsupportedProgramError(f"method {plan.name!r} has {len(plan.chains)} chains")
    instrs = plan.chains[0].instructions
    refs: list[list[tuple[int, bool]]] = []  # per instruction: (value, written)
    named: list[set] = []  # per instruction: values named outside its written block
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
            named.append({v for v, w in r if not w})  # also read (an in-place call's input)
        elif kind == "DelegateCall":
            refs.append([(v, None) for v in arg.args])  # which are written: unknown
            named.append(set())
        else:
            raise UnsupportedProgramError(
                f"method {plan.name!r}: instruction {k} is a {kind} (control flow, moves and "
                "frees are not re-planned)")
    values = plan.values
    inputs, outputs = set(plan.inputs), set(plan.outputs)
    n = len(instrs)
    kinds = [type(ins.instr_args).__name__ for ins in instrs]

    def planned(v) -> bool:
        return type(values[v].val).__name__ == "Tensor" and _alloc(values[v]) is not None

    # where each value is named: (instruction, whether it is the argument right before the
    # call's written block); None inside a list or among a delegate's arguments
    sites: dict[int, list] = {}
    for k, ins in enumerate(instrs):
        arg = ins.instr_args
        kernel = kinds[k] == "KernelCall"
        flags = kernel_writes(arg.args, values) if kernel else [None] * len(arg.args)
        block = next((i for i, w in enumerate(flags) if w), len(flags))
        for i, v in enumerate(arg.args):
            sites.setdefault(v, []).append((k, i == block - 1) if kernel else None)
            items = getattr(values[v].val, "items", None)
            if isinstance(items, list):
                for u in items:
                    if int(u) >= 0:
                        sites.setdefault(int(u), []).append(None)
    written_somewhere = {v for r in refs for v, w in r if w is not False}

    def scratch_like(v) -> bool:
        # never written, one-dimensional, and named by kernel calls only, each time as the
        # argument right before the call's written block: a kernel's scratch buffer
        # (``[..., scratch, out, out]``, what ``exir.memory.alloc`` gives a CMSIS-NN kernel),
        # or the one value `share.share_values` left for the equal scratch of several calls
        s = sites.get(v, [])
        if v in written_somewhere or v in inputs or v in outputs or not s or None in s:
            return False
        return len(values[v].val.sizes) == 1 and all(last for _, last in s)

    insts: list[_Storage] = []
    by_mem: dict[int, list] = {}  # memory id -> (instruction, lo, hi, instance) of each write
    fixed: dict[int, int] = {}  # value -> its only instance (plan inputs, state)
    created: list[list[int]] = [[] for _ in range(n)]

    def new(v, k, kind) -> int:
        mem, off = _alloc(values[v])
        t = values[v].val
        insts.append(_Storage(v, mem, off, off + _nbytes(t, 1), k, kind,
                              ELEMENT_BYTES.get(int(t.scalar_type), 1)))
        i = len(insts) - 1
        by_mem.setdefault(mem, []).append((k, off, off + _nbytes(t, 1), i))
        if k >= 0:
            created[k].append(i)
        return i

    for v in sorted(inputs):  # a plan input lives from the start (ExecuTorch: a placeholder's
        if planned(v):  # spec starts at node 0), not from its first reader
            fixed[v] = new(v, -1, "input")

    written_by: dict[int, int] = {}  # value -> the latest instance its own write made
    # values shared: a planned value that several calls write without reading it (the
    # emitter writes one value per FX node; only in-place calls write one again)
    writers: dict[int, set] = {}
    for k, r in enumerate(refs):
        for v, w in r:
            if w and v not in named[k] and planned(v):
                writers.setdefault(v, set()).add(k)
    shared = any(len(ks) > 1 for ks in writers.values())

    def holder(v, k):
        """The instance whose bytes ``v`` names at instruction ``k`` (before ``k`` writes):
        the latest earlier write of exactly its bytes (itself, or a view's base: ExecuTorch's
        views are reshapes at the base's offset), else the latest earlier write containing
        them; None if nothing wrote them."""
        mem, off = _alloc(values[v])
        end = off + _nbytes(values[v].val, 1)
        writes = [x for x in by_mem.get(mem, ()) if x[0] < k]
        lap = [x for x in writes if x[1] < end and off < x[2]]
        latest = max(lap, key=lambda x: (x[0], x[3])) if lap else None
        if latest is not None and latest[1] == off and latest[2] == end:
            return latest[3], True
        inside = [x for x in writes if x[1] <= off and end <= x[2]]
        best = max(inside, key=lambda x: (x[0], x[3])) if inside else None
        return (None if best is None else best[3]), False

    def described(v):  # what a kernel sees of a tensor value besides its bytes
        t = values[v].val
        return (int(t.scalar_type), tuple(t.sizes), tuple(t.dim_order))

    def read(v, k) -> int:
        if v in fixed:
            return fixed[v]
        i, exact = holder(v, k)
        own = written_by.get(v)
        if own is not None:
            # a value written before names its own bytes; in a program with shared values
            # (`share_values` made one value of a tensor and, in a later patch, a view of
            # equal description), also a later write of exactly its bytes with another
            # description of them. Never a tensor of its own description or one that only
            # overlaps: those clobbered it
            if exact and (insts[i].value == v or (
                    shared and described(insts[i].value)[0] == described(v)[0] and
                    described(insts[i].value) != described(v))):
                return i
            return own
        if exact:
            return i
        if scratch_like(v):  # written by the call before it reads it: lives for the call
            return new(v, k, "scratch")
        if i is not None:  # a view of an earlier tensor containing its bytes (that one lives)
            return i
        fixed[v] = new(v, -1, "state")  # read and never written before: state, the whole run
        return fixed[v]

    # each reference of a planned value resolved, at that instruction, to the instance of
    # bytes it names: a value written again (a patch's copy of an operator writing the value
    # shared by all copies) starts a new instance; a view names its base's latest instance
    resolved: list[list[tuple[int, int]]] = []
    effect = [kinds[k] == "DelegateCall" for k in range(n)]
    for k, r in enumerate(refs):
        res: dict[int, int] = {}
        for v, w in r:
            if (w is False or v in named[k]) and v not in res and planned(v):
                res[v] = read(v, k)
        read_here = set(res)
        for v, w in dict.fromkeys((v, w) for v, w in r if w is not False and planned(v)):
            if v in res and v not in read_here:  # written twice by the call: once
                continue
            if v in read_here or v in fixed:  # read and written by the call, or state
                i = res.get(v, fixed.get(v))
                effect[k] = True
                mem, off = _alloc(values[v])
                by_mem[mem].append((k, off, off + _nbytes(values[v].val, 1), i))
            elif w is None:  # a delegate's argument: what holds it, else written here
                i, _ = holder(v, k)
                if i is None:
                    i = new(v, k, "written")
                else:
                    mem, off = _alloc(values[v])
                    by_mem[mem].append((k, off, off + _nbytes(values[v].val, 1), i))
            else:
                i = written_by[v] = new(v, k, "written")
            res[v] = i
        resolved.append(sorted(res.items()))
    last_inst: dict[int, int] = {}
    refs_of: dict[int, list] = {}
    for k, res in enumerate(resolved):
        for v, i in res:
            last_inst[v] = i
            refs_of.setdefault(v, []).append((k, i))

    # order: an instruction writing bytes in place, or a delegate call, keeps its place
    # relative to every other reference of those instances
    touching: dict[int, list] = {}
    for k, res in enumerate(resolved):
        for i in {i for _, i in res}:
            touching.setdefault(i, []).append(k)
    extra: list[set] = [set() for _ in range(n)]
    for k in range(n):
        if not effect[k]:
            continue
        for i in {i for _, i in resolved[k]}:
            for u in touching.get(i, ()):
                if u < k:
                    extra[k].add(u)
                elif u > k:
                    extra[u].add(k)
    # a value that names a new instance (written again, a view of a newer base) is not made
    # so before its earlier references
    for v, seq in refs_of.items():
        group: list[int] = []  # the references of the instance ``v`` names so far
        for (k0, i0), (_, i1) in zip(seq, seq[1:]):
            group.append(k0)
            if i1 == i0:
                continue
            c = insts[i1].start
            extra[c].update(k for k in group if k < c)  # earlier groups: through these
            group = []
    # data dependencies over every value (planned or not): its latest writer before a reader
    latest_write: dict[int, int] = {}
    for k, r in enumerate(refs):
        for v, _ in r:
            wk = latest_write.get(v)
            if wk is not None and wk < k:
                extra[k].add(wk)
        for v, w in r:
            if w is not False and v not in inputs:
                latest_write[v] = k

    # the in-place Cortex-M quantize (`inplace`): its int8 output may take the bytes of the
    # float input it reads for the last time
    inplace: dict[int, tuple[int, int]] = {}
    for k, res in enumerate(resolved):
        arg = instrs[k].instr_args
        if kinds[k] != "KernelCall" or \
                plan.operators[arg.op_index].name != "cortex_m::quantize_per_tensor":
            continue
        written = [v for v, w in refs[k] if w and planned(v)]
        x = arg.args[0] if arg.args else None
        if x is None or not planned(x) or len(set(written)) != 1 or x in written:
            continue
        y = written[0]
        tx, ty = values[x].val, values[y].val
        rx = dict(res)[x]
        sx = insts[rx]
        if sx.kind in ("state", "scratch") or \
                list(tx.sizes) != list(ty.sizes) or list(tx.dim_order) != list(ty.dim_order) or \
                ELEMENT_BYTES.get(int(tx.scalar_type), 0) <= \
                ELEMENT_BYTES.get(int(ty.scalar_type), 0) or \
                (sx.lo, sx.hi) != (_alloc(values[x])[1], _alloc(values[x])[1] + _nbytes(tx, 1)) \
                or sx.element_bytes != ELEMENT_BYTES.get(int(tx.scalar_type)):
            continue
        inplace[k] = (rx, dict(res)[y])

    b = GraphBuilder(plan.name)
    tid: dict[int, int] = {}
    order: list[int] = []  # instances in graph tensor order
    for i, s in enumerate(insts):
        if s.start == -1:
            tid[i] = b.input(f"v{s.value}", _nbytes(values[s.value].val, alignment))
            order.append(i)
            if s.kind == "state":
                b.mark_output(tid[i])
    for k in range(n):
        ins = [tid[i] for i in sorted({i for _, i in resolved[k]}) if i in tid]
        outs = created[k]
        pair = inplace.get(k)
        op = b.op(f"i{k}", kinds[k], ins,
                  [(f"v{insts[i].value}", _nbytes(values[insts[i].value].val, alignment))
                   for i in outs], source=k, extra_preds=sorted(extra[k]),
                  inplace=[tid[pair[0]]] if pair is not None else [])
        for i, t in zip(outs, b.ops[op].outputs):
            tid[i] = t
            order.append(i)
    for v in outputs:
        if v in last_inst:
            b.mark_output(tid[last_inst[v]])
        elif v in fixed:
            b.mark_output(tid[fixed[v]])
    viewing = {v for res in resolved for v, i in res if insts[i].value != v}
    return b.build(), {"storages": [insts[i].value for i in order],
                       "instances": [insts[i] for i in order], "resolved": resolved,
                       "by_index": dict(enumerate(insts)),
                       "inplace": inplace, "views": len(viewing),
                       "persistent": sum(s.kind == "state" for s in insts),
                       "scratch": len({s.value for s in insts if s.kind == "scratch"}),
                       "refs": refs}


def storage_lifetimes(plan, graph, info, order, alignment: int = 16) -> list[tuple]:
    """Each storage of `plan_graph`'s graph in the op order ``order`` (graph op ids):
    ``(graph tensor, storage value, memory id, start, end, bytes)``, the steps inclusive (0:
    before the first op; ``len(order) + 1``: a method output, live to the end), the bytes
    rounded up to ``alignment``: what a packer of the new order needs."""
    pos = {v: k for k, v in enumerate(order)}
    n = len(graph.ops)
    out = []
    for t, v in enumerate(info["storages"]):
        ten = graph.tensors[t]
        lo = -1 if ten.producer is None else pos[ten.producer]
        hi = n if ten.is_output else max([lo] + [pos[c] for c in ten.consumers])
        mem, _off = _alloc(plan.values[v])
        out.append((t, v, mem, lo + 1, hi + 1, _nbytes(plan.values[v].val, alignment)))
    return out


def _views(info) -> dict | None:
    """``{view value: the value of its storage}`` when every value of `plan_graph`'s ``info``
    stands for one tensor in the file's order (then each value keeps one offset when the
    tensors are packed again); None when a value stands for several."""
    made: dict[int, int] = {}
    for s in info["instances"]:
        if made.setdefault(s.value, id(s)) != id(s):
            return None
    every = info["by_index"]
    root: dict[int, int] = {}
    for res in info["resolved"]:
        for v, i in res:
            u = every[i].value
            if u == v:
                if v in root:
                    return None
            elif root.setdefault(v, u) != u or v in made:
                return None
    return root


def check_written_plan(plan, graph, info) -> None:
    """Independent check of the offsets written in the file for the file's order: lifetimes
    in instruction indices (inputs from the start, outputs and state to the end), every
    reference of a value inside the instance it names there (`plan_graph`), every instance
    within its arena's planned size, and no two live instances overlapping in bytes -- except
    a Cortex-M quantize's int8 output over the float input it reads for the last time, where
    the kernel's rule allows (`inplace.may_share`)."""
    from .check import check_intervals
    from ..errors import PlanCheckError

    n = len(graph.ops)
    insts = info["instances"]
    sizes = list(plan.non_const_buffer_sizes)
    span: dict[int, tuple] = {}
    by_mem: dict[int, list] = {}
    for t, s in enumerate(insts):
        ten = graph.tensors[t]
        lo = -1 if ten.producer is None else ten.producer
        hi = n if ten.is_output else max([lo] + list(ten.consumers))
        span[id(s)] = (lo, hi, ten.is_output)
        if not 0 < s.mem < len(sizes):
            raise PlanCheckError(f"value {s.value}: memory id {s.mem} outside the planned "
                                 "buffers")
        by_mem.setdefault(s.mem, []).append((s, lo, hi, s.lo, s.hi - s.lo))
    by_index = {id(s): s for s in insts}
    every = info["by_index"]  # instance index (as in ``resolved``) -> `_Storage`
    for k, res in enumerate(info["resolved"]):
        for v, i in res:
            s = every[i]
            if id(s) not in by_index:
                raise PlanCheckError(f"value {v}: its storage is not in the graph")
            mem, off = _alloc(plan.values[v])
            if mem != s.mem or off < s.lo or off + _nbytes(plan.values[v].val, 1) > s.hi:
                raise PlanCheckError(f"value {v}: a view outside its storage")
    # the in-place quantizes whose float input is read for the last time by the call
    shared = []
    for k, (i_in, i_out) in info["inplace"].items():
        si, so = every[i_in], every[i_out]
        lo, hi, out = span[id(si)]
        if hi == k and not out:
            shared.append((si, so))
    for mem, items in by_mem.items():
        check_intervals(items, sizes[mem], where=f"{plan.name} arena {mem}", shared=shared)

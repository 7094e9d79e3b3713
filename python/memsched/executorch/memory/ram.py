"""The RAM an ExecuTorch program needs on a device, computed from the ``.pte`` file alone.

A loaded method holds three kinds of RAM (ExecuTorch 1.5.1, ``runtime/executor``):

* **planned buffers**: the arenas the memory plan wrote, ``non_const_buffer_sizes[1:]`` (index
  0 is reserved for constants, which stay in the program). Every planned tensor, and on the
  Cortex-M backend every CMSIS-NN scratch buffer, lives there: the backend's export pass sizes
  each ``scratch`` tensor with CMSIS-NN's ``*_get_buffer_size`` for the target ISA (MVE on the
  M55) and the kernel only checks the size; no ``cortex_m`` kernel takes memory of its own.
* **the method allocator**: everything ``Method::init`` builds, bump-allocated in this order
  and never freed:

  1. ``parse_values``: one ``EValue`` per value; one ``bool`` per method input; then per value
     in order: a tensor takes its strides (``int32`` per dimension) and a ``TensorImpl`` (a
     non-static tensor first copies its sizes, ``int32`` each, and dim order, a byte each); an
     int list takes an ``EValue*`` and an ``int64`` per item and a ``BoxedEvalueList``; a
     tensor list a ``Tensor`` and an ``EValue*`` per item and a ``BoxedEvalueList``; an
     optional-tensor list an ``EValue*`` and an ``optional<Tensor>`` per item and a
     ``BoxedEvalueList``; a bool list, double list or string one ``ArrayRef``; ``None``, ints,
     doubles and bools nothing (they live in their ``EValue``).
  2. one ``BackendDelegate`` per delegate, and per delegate its ``CompileSpec`` list; what the
     backend's ``init`` then takes is the backend's own business: not in the file.
  3. one ``Chain`` per chain; per chain an ``OpFunction`` and an ``InstructionArgs`` per
     instruction; per kernel or delegate call an ``EValue*`` per argument.

  Each allocation is aligned to its type's alignment first, so the padding counts too (the
  pools are assumed to start 8-byte aligned, as the board's and the host's do).
* **the temp allocator**: reset after every kernel, so what counts is its peak. At load,
  ``resolve_operator`` looks each kernel call's operator up with a ``TensorMeta`` per argument
  and the dim order (a byte per dimension) of each tensor argument, in the temp allocator when
  its capacity is at least ``(sizeof(TensorMeta) + 16) * n_args`` (16: the runtime's rank
  limit), else in the method allocator, where the bytes stay. While running, of the kernels
  the Cortex-M firmware registers (the ``cortex_m`` operators and the portable ones it
  lists) none calls ``allocate_temp``; in the whole portable library only ``topk.values``
  does (``size(dim)`` pairs of 16 bytes).

Sizes and alignments of the records (``sizeof`` / ``alignof``, checked by compiling the
runtime's headers with ``arm-none-eabi-g++ -mcpu=cortex-m55 -mfloat-abi=hard`` and x86-64
``g++``)::

    record               cortex-m (32-bit)   host (x86-64)
    EValue                    16 / 8             16 / 8
    TensorImpl                32 / 4             64 / 8
    Tensor, EValue*,
      OpFunction               4 / 4              8 / 8
    optional<Tensor>           8 / 4             16 / 8
    ArrayRef, InstructionArgs  8 / 4             16 / 8
    BoxedEvalueList           12 / 4             24 / 8
    TensorMeta, CompileSpec   12 / 4             24 / 8
    Chain                     16 / 4             32 / 8
    BackendDelegate           40 / 8             56 / 8
    int64                      8 / 8              8 / 8
    int32 (sizes, strides)     4 / 4              4 / 4

`program_ram` gives, per method, the planned buffers, the method allocator's bytes, the temp
allocator's peak and their sum, as the emulated Cortex-M55's firmware (``memsched.board``)
and the x86-64 runtime of the executorch wheel measure them, to the byte, with a temp pool
large enough for every operator lookup (both use 16 MiB). ``temp_pool_bytes`` is the smallest
temp pool for which that holds: a smaller pool moves lookups into the method allocator (pass
``temp_pool`` to see what they then cost). Malformed files raise `PteFileError`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UnsupportedProgramError
from ..format.verify import tensor_nbytes

TARGETS = ("cortex-m", "host")
RANK_LIMIT = 16  # kTensorDimensionLimit: resolve_operator's room per argument


@dataclass(frozen=True)
class Abi:
    """``(sizeof, alignof)`` of the runtime's records on one device."""
    evalue: tuple
    tensor_impl: tuple
    pointer: tuple  # EValue*, Tensor, OpFunction
    optional_tensor: tuple
    array_ref: tuple  # ArrayRef<T>, Span<EValue*> (InstructionArgs)
    boxed_list: tuple  # BoxedEvalueList<T>
    tensor_meta: tuple
    compile_spec: tuple
    chain: tuple
    backend_delegate: tuple
    int64: tuple = (8, 8)
    int32: tuple = (4, 4)
    byte: tuple = (1, 1)


ABIS = {
    "cortex-m": Abi(evalue=(16, 8), tensor_impl=(32, 4), pointer=(4, 4),
                    optional_tensor=(8, 4), array_ref=(8, 4), boxed_list=(12, 4),
                    tensor_meta=(12, 4), compile_spec=(12, 4), chain=(16, 4),
                    backend_delegate=(40, 8)),
    "host": Abi(evalue=(16, 8), tensor_impl=(64, 8), pointer=(8, 8),
                optional_tensor=(16, 8), array_ref=(16, 8), boxed_list=(24, 8),
                tensor_meta=(24, 8), compile_spec=(24, 8), chain=(32, 8),
                backend_delegate=(56, 8)),
}
_PAIR_BYTES = 16  # std::pair<CTYPE, int64_t> of topk.values, any real CTYPE, both ABIs


class _Bump:
    """ExecuTorch's `MemoryAllocator`: a bump pointer from an aligned base; ``peak`` is the
    most it ever held (`reset` is what the runtime does to the temp allocator)."""

    def __init__(self):
        self.cur = 0
        self.peak = 0

    def alloc(self, rec: tuple, n: int = 1) -> None:
        size, align = rec
        self.cur = -(-self.cur // align) * align + size * n
        self.peak = max(self.peak, self.cur)

    def reset(self) -> None:
        self.cur = 0


def _check_target(target: str) -> Abi:
    if target not in ABIS:
        raise ValueError(f"target {target!r}: one of {', '.join(TARGETS)}")
    return ABIS[target]


_LISTS = ("IntList", "TensorList", "OptionalTensorList")
# the value kinds of a program (`format.pte`'s KernelTypes) parse_values knows
VALUE_KINDS = ("Null", "Int", "Bool", "Double", "Tensor", "IntList", "TensorList",
               "OptionalTensorList", "BoolList", "DoubleList", "String")


def value_records(abi: Abi, kind: str, n: int = 0, static: bool = True) -> list[tuple]:
    """The ``(record, count)`` allocations ``parse_values`` makes in the method allocator
    for one value besides its `EValue` (the one statement of them: `_simulate` replays them
    and `memsched.executorch.patch.records` prices calls with them). ``kind``: a `VALUE_KINDS`
    name; ``n``: a tensor's rank or a list's length; ``static``: a tensor of static shape
    (else its sizes and dim order are copied out first)."""
    if kind == "Tensor":
        head = [(abi.int32, n), (abi.byte, n)] if not static else []  # sizes, dim order
        return head + [(abi.int32, n), (abi.tensor_impl, 1)]  # strides, then the TensorImpl
    if kind == "IntList":  # EValue*, int64 per item
        return [(abi.pointer, n), (abi.int64, n), (abi.boxed_list, 1)]
    if kind == "TensorList":  # Tensor, EValue* per item
        return [(abi.pointer, n), (abi.pointer, n), (abi.boxed_list, 1)]
    if kind == "OptionalTensorList":  # EValue*, optional<Tensor> per item
        return [(abi.pointer, n), (abi.optional_tensor, n), (abi.boxed_list, 1)]
    if kind in ("BoolList", "DoubleList", "String"):
        return [(abi.array_ref, 1)]
    return []  # None, ints, doubles and bools live in their EValue


def _simulate(plan, abi: Abi, temp_pool: int | None) -> tuple[int, int, int]:
    """(method allocator bytes, temp allocator peak, the temp capacity every operator lookup
    needs) of ``Method::init`` and ``execute`` for one method, the temp allocator of capacity
    ``temp_pool`` (None: large enough)."""
    values = plan.values
    m = _Bump()
    # 1. parse_values
    m.alloc(abi.evalue, len(values))
    if plan.inputs:
        m.alloc(abi.byte, len(plan.inputs))  # input_set_
    dims: list = [None] * len(values)  # rank of each tensor value, None otherwise
    for i, ev in enumerate(values):
        v = ev.val
        kind = type(v).__name__
        if kind not in VALUE_KINDS:
            raise UnsupportedProgramError(f"method {plan.name!r} value {i}: a {kind}")
        if kind == "Tensor":
            n = dims[i] = len(v.sizes)
        else:
            n = len(v.items) if kind in _LISTS else 0
        for rec, count in value_records(abi, kind, n,
                                        kind != "Tensor" or v.shape_dynamism == 0):
            m.alloc(rec, count)
    # 2. delegates (what each backend's init takes is not in the file)
    m.alloc(abi.backend_delegate, len(plan.delegates))
    for d in plan.delegates:
        m.alloc(abi.compile_spec, len(d.compile_specs))
    # 3. chains; operator lookups in the temp allocator (too small: in the method allocator)
    t = _Bump()
    lookup_pool = 0
    ops = [(o.name, o.overload or "") for o in plan.operators]
    m.alloc(abi.chain, len(plan.chains))
    for chain in plan.chains:
        n = len(chain.instructions)
        m.alloc(abi.pointer, n)  # OpFunction
        m.alloc(abi.array_ref, n)  # InstructionArgs
        for ins in chain.instructions:
            a = ins.instr_args
            kind = type(a).__name__
            if kind not in ("KernelCall", "DelegateCall"):
                continue
            args = a.args
            m.alloc(abi.pointer, len(args))
            if kind == "DelegateCall":
                continue
            need = (abi.tensor_meta[0] + RANK_LIMIT) * len(args)
            lookup_pool = max(lookup_pool, need)
            where = t if temp_pool is None or (temp_pool > 0 and temp_pool >= need) else m
            where.alloc(abi.tensor_meta, len(args))
            for x in args:
                if dims[x] is not None:
                    where.alloc(abi.byte, dims[x])
            t.reset()
            t.peak = max(t.peak, _kernel_temp(ops[a.op_index], args, values))
    return m.cur, t.peak, lookup_pool


def method_ram(plan, target: str = "cortex-m", temp_pool: int | None = None) -> dict:
    """The RAM of one decoded method (`format.pte.ExecutionPlan`, verified by
    `pte.read_program`) on ``target``; ``temp_pool``: the temp allocator's capacity (None: as
    large as the lookups need). See `program_ram` for the fields."""
    abi = _check_target(target)
    method, temp, lookup_pool = _simulate(plan, abi, temp_pool)
    planned = list(plan.non_const_buffer_sizes[1:])
    values = plan.values
    unplanned = [tensor_nbytes(values[i].val) for i in list(plan.inputs) + list(plan.outputs)
                 if type(values[i].val).__name__ == "Tensor"
                 and values[i].val.allocation_info is None
                 and not values[i].val.data_buffer_idx]
    pool = max(temp, lookup_pool) if temp_pool is None else temp_pool
    row = {"target": target, "planned_buffers": planned,
           "method_allocator_bytes": method, "temp_allocator_bytes": temp,
           "ram_bytes": sum(planned) + method + temp, "temp_pool_bytes": pool,
           "unplanned_io_bytes": sum(unplanned)}
    if temp_pool is None and pool > temp:  # a pool of just the peak: lookups move
        row["method_allocator_bytes_at_temp_peak"] = _simulate(plan, abi, temp)[0]
    if plan.delegates:
        row["note"] = (f"{len(plan.delegates)} delegate(s): what a backend's init and execute "
                       "take is not in the file")
    return row


def _kernel_temp(op: tuple, args, values) -> int:
    """Bytes a kernel call takes from the temp allocator while it runs: ``topk.values``
    (``topk(self, k, dim, largest, sorted, *, values, indices)``) is the only one."""
    if op != ("aten::topk", "values") or len(args) < 3:
        return 0
    x, k, dim = (values[i].val for i in args[:3])
    if type(x).__name__ != "Tensor" or type(dim).__name__ != "Int":
        return 0
    sizes = list(x.sizes)
    numel = 1
    for s in sizes:
        numel *= s
    kv = getattr(k, "int_val", 1)
    if numel == 0 or (kv == 0 and sizes):
        return 0
    d = dim.int_val + len(sizes) if dim.int_val < 0 else dim.int_val
    n = sizes[d] if sizes and 0 <= d < len(sizes) else 1
    return n * _PAIR_BYTES  # allocate_temp at the default alignment from a reset allocator


def program_ram(data, target: str = "cortex-m", temp_pool: int | None = None) -> dict:
    """``{method: row}`` for a ``.pte`` (bytes or a path), each row: ``planned_buffers`` (the
    arenas' sizes), ``method_allocator_bytes``, ``temp_allocator_bytes`` (its peak),
    ``ram_bytes`` (their sum: what ``Program::load_method`` and ``Method::execute`` need
    besides the program itself), ``temp_pool_bytes`` (the smallest temp pool that keeps those
    figures), ``unplanned_io_bytes`` (inputs and outputs the caller provides: not in the
    plan), ``target`` and, for programs with delegates, a ``note``. ``target``: ``cortex-m``
    (32-bit Arm, as on the Cortex-M55) or ``host`` (x86-64). Raises `PteFileError` for a
    file the runtime would refuse."""
    from ..format.read import read_program

    _check_target(target)
    pte = read_program(data)
    return {plan.name: method_ram(plan, target, temp_pool)
            for plan in pte.program.execution_plan}


__all__ = ["ABIS", "TARGETS", "Abi", "method_ram", "program_ram", "value_records"]

"""The checks ExecuTorch's runtime makes when it loads a program and its methods, made on a
decoded `format.pte.PteFile` so that a file the runtime would refuse is refused here without
importing the runtime.

What the runtime checks (executorch 1.5.1, ``runtime/executor``: ``program.cpp``,
``method.cpp``, ``tensor_parser_*.cpp``, ``program_validation.cpp``) and this module repeats:

- program load: schema version 0; the constant segment (when its offsets list more than the
  placeholder) is a segment inside the file and the inline constant buffers are empty; every
  tensor's sizes are non-negative, its scalar type known, its element count and byte size
  without overflow; every ``TensorList`` item indexes a tensor value;
- method load: name, inputs, outputs, ``non_const_buffer_sizes``, values and at least one
  chain present; every value non-null with its payload (lists with items, strings with text);
  tensors: storage offset 0, not fully dynamic, rank at most 16, ``dim_order`` a permutation of
  the dimensions, planned tensors inside their arena (memory id 1..n, offset + bytes within the
  arena's size), constants inside the constant segment or buffer, mutable state inside the
  mutable data segment, no external (``.ptd``) data; list items index values of the right
  type; every instruction known, its value indices in range, a kernel's operator index in
  range with a name that fits the runtime's 100-character buffer; every delegate with an id,
  compile specs and its data (inline or a segment inside the file).

Stricter than the runtime in a few places that only a broken file reaches: a list item must
index an earlier value (the runtime reads it while parsing), method names unique, ids of
delegate calls and jump targets in range at load (the runtime finds out when it runs), every
arena at most `MAX_ARENA_BYTES`. What cannot be checked without the runtime: whether a kernel
or a backend is registered in it, and what a delegate's blob holds.
"""
from __future__ import annotations

from ..errors import PteFileError

MAX_ARENA_BYTES = 1 << 32  # a planned arena above 4 GiB: refused (the runtime would allocate it)
MAX_VERSION = 0  # the newest Program.version the 1.5.1 runtime loads
MAX_RANK = 16  # the runtime's kTensorDimensionLimit
_NAME_BUFFER = 100  # the runtime's buffer for "name.overload"
_SSIZE_MAX = (1 << 63) - 1

# ExecuTorch ScalarType -> bytes per element: the types the schema names
ELEMENT_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 12: 1, 13: 1, 14: 4,
                 15: 2, 16: 1, 17: 1, 22: 2, 23: 1, 24: 1, 25: 1, 26: 1, 27: 2, 28: 4, 29: 8}


class _Bad(Exception):
    pass


def tensor_nbytes(t) -> int:
    """Bytes of a schema `Tensor` (no alignment); assumes `verify` passed."""
    n = ELEMENT_BYTES[t.scalar_type]
    for d in t.sizes:
        n *= d
    return n


def _segment(pte, index: int, what: str) -> int:
    """Size of segment ``index``, checked to lie inside the file's segment data."""
    segs = pte.program.segments or []
    if not pte.segment_base_offset:
        raise _Bad(f"{what}: segment {index} but the file has no segments")
    if not 0 <= index < len(segs):
        raise _Bad(f"{what}: segment {index} of {len(segs)}")
    s = segs[index]
    if s.offset + s.size > len(pte.segment_data):
        raise _Bad(f"{what}: segment {index} ({s.offset}+{s.size}) past the file's end")
    return s.size


def _program(pte) -> None:
    p = pte.program
    if p.version > MAX_VERSION:
        raise _Bad(f"program schema version {p.version}, newer than the runtime's "
                   f"{MAX_VERSION}")
    if not p.execution_plan:
        raise _Bad("the program has no methods")
    cs = p.constant_segment
    if cs is not None and cs.offsets is not None and len(cs.offsets) > 1:
        if p.constant_buffer:
            raise _Bad("constants both inline and in a segment")
        if p.segments is None:
            raise _Bad("a constant segment but no segments")
        _segment(pte, cs.segment_index, "constant segment")
    for k, nd in enumerate(p.named_data or []):
        if nd.key is None:
            raise _Bad(f"named data {k} without a key")
        _segment(pte, nd.segment_index, f"named data {nd.key!r}")
    names = set()
    for plan in p.execution_plan:
        if plan.name is None:
            raise _Bad("a method without a name")
        if plan.name in names:
            raise _Bad(f"two methods named {plan.name!r}")
        names.add(plan.name)


def _constant_size(pte, idx: int, nbytes: int, where: str) -> None:
    p = pte.program
    cs = p.constant_segment
    if cs is not None and cs.offsets is not None and len(cs.offsets) > 1:
        if idx >= len(cs.offsets):
            raise _Bad(f"{where}: constant {idx} of {len(cs.offsets)}")
        size = _segment(pte, cs.segment_index, where)
        if cs.offsets[idx] + nbytes > size:
            raise _Bad(f"{where}: constant {idx} past the constant segment's end")
        return
    bufs = p.constant_buffer or []
    if idx >= len(bufs):
        raise _Bad(f"{where}: constant buffer {idx} of {len(bufs)}")
    if len(bufs[idx].storage or b"") > nbytes:
        raise _Bad(f"{where}: constant buffer {idx} larger than the tensor")


def _mutable(pte, idx: int, nbytes: int, where: str) -> None:
    segs = pte.program.mutable_data_segments
    if not segs:
        raise _Bad(f"{where}: initial state but no mutable data segment")
    sub = segs[0]
    offs = sub.offsets or []
    if idx >= len(offs):
        raise _Bad(f"{where}: mutable data {idx} of {len(offs)}")
    if offs[idx] + nbytes > _segment(pte, sub.segment_index, where):
        raise _Bad(f"{where}: mutable data {idx} past its segment's end")


def _tensor(pte, t, arenas: list, where: str) -> None:
    if t.sizes is None or t.dim_order is None:
        raise _Bad(f"{where}: a tensor without sizes or dim order")
    if t.scalar_type not in ELEMENT_BYTES:
        raise _Bad(f"{where}: unknown scalar type {t.scalar_type}")
    if t.storage_offset != 0:
        raise _Bad(f"{where}: storage offset {t.storage_offset} (the runtime needs 0)")
    if t.shape_dynamism not in (0, 1):
        raise _Bad(f"{where}: shape dynamism {t.shape_dynamism} (the runtime loads 0 or 1)")
    if len(t.sizes) > MAX_RANK:
        raise _Bad(f"{where}: rank {len(t.sizes)} above {MAX_RANK}")
    if sorted(t.dim_order) != list(range(len(t.sizes))):
        raise _Bad(f"{where}: dim order {t.dim_order} is not a permutation of the dimensions")
    numel = 1
    for d in t.sizes:
        if d < 0:
            raise _Bad(f"{where}: negative size {d}")
        numel *= d
        if numel > _SSIZE_MAX:
            raise _Bad(f"{where}: element count overflows")
    nbytes = numel * ELEMENT_BYTES[t.scalar_type]
    if nbytes > _SSIZE_MAX:
        raise _Bad(f"{where}: byte size overflows")
    extra = t.extra_tensor_info
    if extra is not None and extra.location not in (0,):
        raise _Bad(f"{where}: tensor data outside the program (needs a .ptd file)")
    a = t.allocation_info
    if a is not None:
        mem = a.memory_id
        off = a.memory_offset_low | (a.memory_offset_high << 32)
        if not 1 <= mem <= len(arenas):
            raise _Bad(f"{where}: memory id {mem} outside the {len(arenas)} planned arenas")
        if off + nbytes > arenas[mem - 1]:
            raise _Bad(f"{where}: {nbytes} B at offset {off} past arena {mem}'s "
                       f"{arenas[mem - 1]} B")
        if t.data_buffer_idx > 0:
            _mutable(pte, t.data_buffer_idx, nbytes, where)
    elif t.data_buffer_idx > 0:
        _constant_size(pte, t.data_buffer_idx, nbytes, where)


_LIST_ITEM = {"TensorList": ("Tensor",), "OptionalTensorList": ("Tensor", "Null"),
              "IntList": ("Int",)}


def _values(pte, plan, arenas: list) -> None:
    values = plan.values
    kinds = []
    for i, ev in enumerate(values):
        where = f"method {plan.name!r} value {i}"
        v = None if ev is None else ev.val
        if v is None:
            raise _Bad(f"{where}: empty")
        kind = type(v).__name__
        kinds.append(kind)
        if kind == "Tensor":
            _tensor(pte, v, arenas, where)
        elif kind == "String" and v.string_val is None:
            raise _Bad(f"{where}: a string without text")
        elif kind.endswith("List"):
            if v.items is None:
                raise _Bad(f"{where}: a list without items")
            need = _LIST_ITEM.get(kind)
            if need is None:
                continue
            for j in v.items:
                if kind == "OptionalTensorList" and j == -1:
                    continue
                if not 0 <= j < i:
                    raise _Bad(f"{where}: list item {j} is not an earlier value")
                if kinds[j] not in need:
                    raise _Bad(f"{where}: list item {j} is a {kinds[j]}, not a {need[0]}")


def _index(v, n: int, where: str) -> None:
    if not 0 <= v < n:
        raise _Bad(f"{where}: value index {v} outside 0..{n - 1}")


def _method(pte, plan) -> None:
    name = plan.name
    for f in ("inputs", "outputs", "non_const_buffer_sizes", "values", "delegates",
              "operators", "container_meta_type"):
        if getattr(plan, f) is None:
            raise _Bad(f"method {name!r}: no {f}")
    meta = plan.container_meta_type
    if meta.encoded_inp_str is None or meta.encoded_out_str is None:
        raise _Bad(f"method {name!r}: container metadata without its strings")
    sizes = plan.non_const_buffer_sizes
    for s in sizes:
        if not 0 <= s <= MAX_ARENA_BYTES:
            raise _Bad(f"method {name!r}: planned arena of {s} B (at most "
                       f"{MAX_ARENA_BYTES:,} B here)")
    _values(pte, plan, sizes[1:])
    n = len(plan.values)
    for v in list(plan.inputs) + list(plan.outputs):
        _index(v, n, f"method {name!r} inputs/outputs")
    for k, op in enumerate(plan.operators):
        if op.name is None:
            raise _Bad(f"method {name!r}: operator {k} without a name")
        full = op.name + (f".{op.overload}" if op.overload else "")
        if len(full.encode()) >= _NAME_BUFFER:
            raise _Bad(f"method {name!r}: operator name {full[:40]!r}... longer than the "
                       f"runtime's {_NAME_BUFFER - 1} characters")
    p = pte.program
    for k, d in enumerate(plan.delegates):
        where = f"method {name!r} delegate {k}"
        if d.id is None or d.processed is None or d.compile_specs is None:
            raise _Bad(f"{where}: no id, data or compile specs")
        if any(c.key is None or c.value is None for c in d.compile_specs):
            raise _Bad(f"{where}: a compile spec without key or value")
        loc, idx = d.processed.location, d.processed.index
        if loc == 0:
            inline = p.backend_delegate_data or []
            if idx >= len(inline) or inline[idx].data is None:
                raise _Bad(f"{where}: inline data {idx} of {len(inline)}")
        elif loc == 1:
            _segment(pte, idx, where)
        else:
            raise _Bad(f"{where}: data location {loc}")
    if not plan.chains:
        raise _Bad(f"method {name!r}: no chains")
    for c, chain in enumerate(plan.chains):
        if chain.instructions is None:
            raise _Bad(f"method {name!r} chain {c}: no instructions")
        n_instr = len(chain.instructions)
        for k, ins in enumerate(chain.instructions):
            where = f"method {name!r} instruction {k}"
            a = None if ins is None else ins.instr_args
            kind = type(a).__name__
            if a is None:
                raise _Bad(f"{where}: empty")
            if kind in ("KernelCall", "DelegateCall"):
                if a.args is None:
                    raise _Bad(f"{where}: no arguments")
                for v in a.args:
                    _index(v, n, where)
                if kind == "KernelCall" and not 0 <= a.op_index < len(plan.operators):
                    raise _Bad(f"{where}: operator {a.op_index} of {len(plan.operators)}")
                if kind == "DelegateCall" and not 0 <= a.delegate_index < len(plan.delegates):
                    raise _Bad(f"{where}: delegate {a.delegate_index} of "
                               f"{len(plan.delegates)}")
            elif kind == "MoveCall":
                _index(a.move_from, n, where)
                _index(a.move_to, n, where)
            elif kind == "FreeCall":
                _index(a.value_index, n, where)
            elif kind == "JumpFalseCall":
                _index(a.cond_value_index, n, where)
                if not 0 <= a.destination_instruction <= n_instr:
                    raise _Bad(f"{where}: jump to {a.destination_instruction} of {n_instr}")


def verify(pte, label: str = "<bytes>") -> None:
    """`PteFileError` (one line naming ``label``) when ExecuTorch's runtime would refuse to
    load the program or one of its methods."""
    try:
        _program(pte)
        for plan in pte.program.execution_plan:
            _method(pte, plan)
    except _Bad as e:
        raise PteFileError(f"{label}: ExecuTorch's runtime would refuse this program: "
                           f"{e}") from None

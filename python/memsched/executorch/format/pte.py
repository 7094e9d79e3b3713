"""The ``.pte`` file format, read and written here: ExecuTorch's flatbuffer schema
(``program.fbs``, file identifier ``ET12``, as shipped in the executorch 1.5.1 wheel) as plain
dataclasses, and the container around it.

Nothing here imports torch or executorch: reading a program costs milliseconds, not the 5 s
import of ``executorch.exir``.

The container (what ExecuTorch's serializer writes):

- bytes 0..8: the flatbuffer's root offset and its file identifier ``ET12``;
- bytes 8..40, when the program has segments: the extended header, magic ``eh00``, its length
  (32), the program's size (flatbuffer plus header), the offset of the first segment and the
  size of the segment data (little-endian u32, u32, u64, u64, u64);
- the flatbuffer's tables;
- padding to the segment alignment, then the segment data (constants, delegate blobs, mutable
  state, named data), which `Program.segments` locates relative to the first segment.

`read_pte` decodes and verifies everything the runtime's flatbuffer verifier checks at program
load (every offset and vector inside the buffer and aligned, strings terminated, known union
types, at most a million tables) and raises `PteFileError` with one line otherwise.
`write_pte` encodes a `PteFile` back; the segment data is copied byte for byte, so only the
flatbuffer part is new. The tables are laid out front to back (each table after its vtable,
children after their parent): another layout than ``flatc``'s, the same program to every
flatbuffer reader.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field, make_dataclass

from ..errors import PteFileError

IDENTIFIER = b"ET12"
HEADER_MAGIC = b"eh00"
HEADER_LENGTH = 32  # the extended header ExecuTorch writes: magic, length, 3 x u64
_HEADER_MIN_LENGTH = 24  # older headers have no segment data size
MAX_TABLES = 1_000_000  # the runtime verifier's default limit
MAX_FLATBUFFER = (1 << 31) - 1  # flatbuffers' limit on a buffer the verifier accepts
BYTES_ALIGNMENT = 16  # force_align of Buffer.storage and BackendDelegateInlineData.data

# ---------------------------------------------------------------------------- the schema
# Each table: its fields in vtable slot order as (name, kind, default). Kinds: a struct code
# for a scalar ('b' byte, 'B' ubyte, '?' bool, 'i' int, 'I' uint, 'q' long, 'Q' ulong, 'd'
# double), 'str', 'bytes' / 'bytes16' (a [ubyte] read as bytes; 16: force_align 16), '[x' a
# vector of scalar x, '[Name' a vector of tables, 'Name' a table, '|Union' a union (two slots:
# the type byte, then the value).
_TABLES: dict[str, list] = {
    "ContainerMetadata": [("encoded_inp_str", "str", None), ("encoded_out_str", "str", None)],
    "Null": [],
    "AllocationDetails": [("memory_id", "I", 0), ("memory_offset_low", "I", 0),
                          ("memory_offset_high", "I", 0)],
    "ExtraTensorInfo": [("mutable_data_segments_idx", "Q", 0),
                        ("fully_qualified_name", "str", None), ("location", "b", 0),
                        ("device_type", "b", 0), ("device_index", "b", 0)],
    "Tensor": [("scalar_type", "b", 0), ("storage_offset", "i", 0), ("sizes", "[i", None),
               ("dim_order", "[B", None), ("requires_grad", "?", False),
               ("data_buffer_idx", "I", 0), ("allocation_info", "AllocationDetails", None),
               ("layout", "b", 0), ("shape_dynamism", "b", 0),
               ("extra_tensor_info", "ExtraTensorInfo", None)],
    "Int": [("int_val", "q", 0)],
    "Bool": [("bool_val", "?", False)],
    "Double": [("double_val", "d", 0.0)],
    "String": [("string_val", "str", None)],
    "IntList": [("items", "[q", None)],
    "DoubleList": [("items", "[d", None)],
    "BoolList": [("items", "[?", None)],
    "TensorList": [("items", "[i", None)],
    "OptionalTensorList": [("items", "[i", None)],
    "EValue": [("val", "|KernelTypes", None)],
    "Operator": [("name", "str", None), ("overload", "str", None)],
    "KernelCall": [("op_index", "i", 0), ("args", "[i", None)],
    "DelegateCall": [("delegate_index", "i", 0), ("args", "[i", None)],
    "MoveCall": [("move_from", "i", 0), ("move_to", "i", 0)],
    "JumpFalseCall": [("cond_value_index", "i", 0), ("destination_instruction", "i", 0)],
    "FreeCall": [("value_index", "i", 0)],
    "Instruction": [("instr_args", "|InstructionArguments", None)],
    "Frame": [("filename", "str", None), ("lineno", "i", 0), ("name", "str", None),
              ("context", "str", None)],
    "FrameList": [("items", "[Frame", None)],
    "BackendDelegateDataReference": [("location", "b", 0), ("index", "I", 0)],
    "CompileSpec": [("key", "str", None), ("value", "bytes", None)],
    "BackendDelegate": [("id", "str", None), ("processed", "BackendDelegateDataReference", None),
                        ("compile_specs", "[CompileSpec", None)],
    "Chain": [("inputs", "[i", None), ("outputs", "[i", None),
              ("instructions", "[Instruction", None), ("stacktrace", "[FrameList", None)],
    "ExecutionPlan": [("name", "str", None), ("container_meta_type", "ContainerMetadata", None),
                      ("values", "[EValue", None), ("inputs", "[i", None),
                      ("outputs", "[i", None), ("chains", "[Chain", None),
                      ("operators", "[Operator", None), ("delegates", "[BackendDelegate", None),
                      ("non_const_buffer_sizes", "[q", None),
                      ("non_const_buffer_device", "[NonConstBufferDevice", None)],
    "NonConstBufferDevice": [("buffer_idx", "i", 0), ("device_type", "b", 0),
                             ("device_index", "b", 0)],
    "Buffer": [("storage", "bytes16", None)],
    "BackendDelegateInlineData": [("data", "bytes16", None)],
    "DataSegment": [("offset", "Q", 0), ("size", "Q", 0)],
    "SubsegmentOffsets": [("segment_index", "I", 0), ("offsets", "[Q", None)],
    "NamedData": [("key", "str", None), ("segment_index", "I", 0)],
    "Program": [("version", "I", 0), ("execution_plan", "[ExecutionPlan", None),
                ("constant_buffer", "[Buffer", None),
                ("backend_delegate_data", "[BackendDelegateInlineData", None),
                ("segments", "[DataSegment", None),
                ("constant_segment", "SubsegmentOffsets", None),
                ("mutable_data_segments", "[SubsegmentOffsets", None),
                ("named_data", "[NamedData", None)],
}
# union members in type-id order (id 0 is NONE)
UNIONS: dict[str, list[str]] = {
    "KernelTypes": ["Null", "Int", "Bool", "Double", "Tensor", "String", "IntList",
                    "DoubleList", "BoolList", "TensorList", "OptionalTensorList"],
    "InstructionArguments": ["KernelCall", "DelegateCall", "MoveCall", "JumpFalseCall",
                             "FreeCall"],
}

# One dataclass per table, named as in the schema (``format.pte.Tensor`` ...); every field
# optional (a flatbuffer may leave any out: `verify` in format.verify says which the runtime needs).
_CLASSES: dict[str, type] = {
    name: make_dataclass(name, [(f, object, field(default=d)) for f, _, d in fields],
                         slots=True, namespace={"__module__": __name__})
    for name, fields in _TABLES.items()}
globals().update(_CLASSES)
_UNION_IDS = {u: {_CLASSES[m]: i + 1 for i, m in enumerate(ms)} for u, ms in UNIONS.items()}


@dataclass
class PteFile:
    """A decoded ``.pte``: the `Program` and what the container holds around it.

    ``segment_data``: the bytes from the first segment to the end of the file (``b""`` when
    there is no extended header); ``segment_alignment``: the alignment the first segment had
    in the file (kept when writing); ``program_size``: the flatbuffer's size in the file."""
    program: object
    segment_data: bytes = b""
    segment_alignment: int = 128
    program_size: int = 0
    segment_base_offset: int = 0
    has_header: bool = False


# ---------------------------------------------------------------------------- reading
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")
_SIZE = {c: struct.calcsize("<" + c) for c in "bB?iIqQd"}


class _Bad(Exception):
    """A defect of the bytes (becomes one `PteFileError` line)."""


def _what(what) -> str:
    """A place in an error message (a name, or (table, field) formatted only on error)."""
    return what if isinstance(what, str) else ".".join(what)


# Per table, its fields as (name, handler, argument, slot), slots counted with a union as
# two (its type byte takes the slot before its value). Handlers: 0 scalar (a struct), 1
# string, 2 bytes, 3 vector of scalars (the code), 4 vector of tables, 5 table, 6 union.
_LAYOUT: dict[str, list] = {}
for _name, _fields in _TABLES.items():
    _slots, _s = [], 0
    for _f, _kind, _d in _fields:
        if _kind[0] == "|":
            _s += 1
            _slots.append((_f, 6, UNIONS[_kind[1:]], _s))
        elif _kind in _SIZE:
            _slots.append((_f, 0, (struct.Struct("<" + _kind), _SIZE[_kind]), _s))
        elif _kind == "str":
            _slots.append((_f, 1, None, _s))
        elif _kind.startswith("bytes"):
            _slots.append((_f, 2, None, _s))
        elif _kind[0] == "[":
            _slots.append((_f, 3 if _kind[1:] in _SIZE else 4, _kind[1:], _s))
        else:
            _slots.append((_f, 5, _kind, _s))
        _s += 1
    _LAYOUT[_name] = _slots


# Per table, for the writer: (field, slot, size, struct or None for an offset, kind,
# default), largest first. A union is two entries: its type byte (kind "|", default: the
# union's name) and its value (an offset, kind "union").
_WRITE_ORDER: dict[str, list] = {}
for _name, _fields in _TABLES.items():
    _items, _s = [], 0
    for _f, _kind, _d in _fields:
        if _kind[0] == "|":
            _items.append((_f, _s, 1, struct.Struct("<B"), "|", _kind[1:]))
            _items.append((_f, _s + 1, 4, None, "union", None))
            _s += 2
            continue
        if _kind in _SIZE:
            _items.append((_f, _s, _SIZE[_kind], struct.Struct("<" + _kind), _kind, _d))
        else:
            _items.append((_f, _s, 4, None, _kind, None))
        _s += 1
    _WRITE_ORDER[_name] = sorted(_items, key=lambda x: -x[2])


_SLOT_STRUCTS: dict[int, struct.Struct] = {}


def _slots(n: int) -> struct.Struct:
    """The (cached) struct of a vtable's ``n`` field offsets."""
    st = _SLOT_STRUCTS.get(n)
    if st is None:
        st = _SLOT_STRUCTS[n] = struct.Struct(f"<{n}H")
    return st


class _Reader:
    """Decodes tables from ``buf`` and checks what flatbuffers' verifier checks: every
    table, vtable, scalar, offset, string and vector inside the buffer and aligned to its
    size; offsets non-zero and below 2^31; strings NUL-terminated; at most `MAX_TABLES`."""

    def __init__(self, buf: bytes):
        self.buf = buf
        self.n = len(buf)
        self.tables = 0

    def _check(self, pos: int, size: int, align: int, what) -> None:
        if pos < 0 or pos + size > self.n:
            raise _Bad(f"{_what(what)} at byte {pos} outside the {self.n}-byte program")
        if pos % align:
            raise _Bad(f"{_what(what)} at byte {pos} not aligned to {align}")

    def _offset(self, pos: int, what) -> int:
        if pos < 0 or pos + 4 > self.n or pos % 4:
            self._check(pos, 4, 4, what)
        o = _U32.unpack_from(self.buf, pos)[0]
        if o == 0 or o >= 1 << 31 or pos + o >= self.n:
            raise _Bad(f"{_what(what)}: offset {o} at byte {pos} points outside the program")
        return pos + o

    def table(self, pos: int, name: str):
        self.tables += 1
        if self.tables > MAX_TABLES:
            raise _Bad(f"more than {MAX_TABLES:,} tables")
        buf, n = self.buf, self.n
        if pos < 0 or pos + 4 > n or pos % 4:
            self._check(pos, 4, 4, name)
        vt = pos - _I32.unpack_from(buf, pos)[0]
        if vt < 0 or vt + 2 > n or vt % 2:
            self._check(vt, 2, 2, (name, "vtable"))
        vt_size = _U16.unpack_from(buf, vt)[0]
        if vt_size % 2:
            raise _Bad(f"{name} vtable size {vt_size}")
        if vt + vt_size > n:
            self._check(vt, vt_size, 2, (name, "vtable"))
        n_slots = max(0, (vt_size - 4) // 2)  # a vtable under 4 bytes: no fields
        vo_all = _slots(n_slots).unpack_from(buf, vt + 4) if n_slots else ()
        values = {}
        for f, handler, arg, slot in _LAYOUT[name]:
            if slot >= n_slots:
                continue
            vo = vo_all[slot]
            if handler == 6:  # union: the type byte, then the value
                vo_t = vo_all[slot - 1]
                t = 0
                if vo_t:
                    self._check(pos + vo_t, 1, 1, (name, f))
                    t = buf[pos + vo_t]
                if not vo:
                    if t:
                        raise _Bad(f"{name}.{f}: union type {t} without a value")
                    continue
                if not 1 <= t <= len(arg):
                    raise _Bad(f"{name}.{f}: unknown union type {t}")
                values[f] = self.table(self._offset(pos + vo, (name, f)), arg[t - 1])
                continue
            if not vo:
                continue
            p = pos + vo
            if handler == 0:
                st, size = arg
                if p + size > n or p % size:
                    self._check(p, size, size, (name, f))
                values[f] = st.unpack_from(buf, p)[0]
            elif handler == 1:
                values[f] = self.string(self._offset(p, (name, f)), (name, f))
            elif handler == 2:
                values[f] = self.bytes_(self._offset(p, (name, f)), (name, f))
            elif handler == 5:
                values[f] = self.table(self._offset(p, (name, f)), arg)
            else:
                values[f] = self.vector(self._offset(p, (name, f)), arg, (name, f))
        return _CLASSES[name](**values)

    def _length(self, pos: int, elem: int, what: str) -> int:
        self._check(pos, 4, 4, what)
        n = _U32.unpack_from(self.buf, pos)[0]
        if pos + 4 + n * elem > self.n:
            raise _Bad(f"{_what(what)}: {n} elements at byte {pos} run past the program's "
                       "end")
        return n

    def string(self, pos: int, what: str) -> str:
        n = self._length(pos, 1, what)
        if pos + 4 + n >= self.n or self.buf[pos + 4 + n] != 0:
            raise _Bad(f"{_what(what)}: string at byte {pos} not terminated")
        # the C++ runtime takes any bytes, but its Python binding aborts the process on an
        # operator name that is not UTF-8: refused
        try:
            return self.buf[pos + 4:pos + 4 + n].decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(f"{_what(what)}: string at byte {pos} is not UTF-8") from None

    def bytes_(self, pos: int, what: str) -> bytes:
        n = self._length(pos, 1, what)
        return bytes(self.buf[pos + 4:pos + 4 + n])

    def vector(self, pos: int, elem: str, what: str) -> list:
        if elem in _SIZE:
            size = _SIZE[elem]
            n = self._length(pos, size, what)
            return list(struct.unpack_from(f"<{n}{elem}", self.buf, pos + 4))
        n = self._length(pos, 4, what)
        return [self.table(self._offset(pos + 4 + 4 * i, what), elem) for i in range(n)]


def read_header(data: bytes) -> tuple[int, int, int, bool]:
    """``(program_size, segment_base_offset, segment_data_size, has_header)`` of a file (no
    header: the whole file is the program). Raises `_Bad` for a header the runtime refuses."""
    if len(data) < 8 or data[4:8] != IDENTIFIER:
        got = data[4:8] if len(data) >= 8 else b""
        if got[:2] == b"ET":
            raise _Bad(f"ExecuTorch program version {got.decode('ascii', 'replace')!r}, "
                       f"this reader knows {IDENTIFIER.decode()!r}")
        raise _Bad("not an ExecuTorch program (no 'ET12' file identifier)")
    if len(data) < 8 + _HEADER_MIN_LENGTH or data[8:12] != HEADER_MAGIC:
        return len(data), 0, 0, False
    length = _U32.unpack_from(data, 12)[0]
    if length < _HEADER_MIN_LENGTH:
        raise _Bad(f"extended header length {length} < {_HEADER_MIN_LENGTH}")
    program_size, base = struct.unpack_from("<QQ", data, 16)
    seg_size = struct.unpack_from("<Q", data, 32)[0] if length >= 32 and len(data) >= 40 else 0
    if not 8 < program_size <= len(data):
        raise _Bad(f"extended header: program size {program_size} outside the "
                   f"{len(data)}-byte file")
    if base and not program_size <= base <= len(data):
        raise _Bad(f"extended header: segments at byte {base}, outside the file or inside "
                   "the program")
    if base + seg_size > len(data):  # the runtime's check of the file's size
        raise _Bad(f"extended header: {seg_size:,} B of segments at byte {base}, past the "
                   f"{len(data):,}-byte file")
    return program_size, base, seg_size, True


def read_pte(data: bytes, label: str = "<bytes>") -> PteFile:
    """The `PteFile` of ``data``; `PteFileError` (one line naming ``label``) when the bytes
    are not a flatbuffer program the runtime's verifier accepts."""
    try:
        program_size, base, _seg_size, has_header = read_header(data)
        if program_size > MAX_FLATBUFFER:
            raise _Bad(f"program of {program_size:,} bytes, above flatbuffers' 2 GiB limit")
        buf = data[:program_size] if program_size < len(data) else data
        r = _Reader(buf)
        program = r.table(r._offset(0, "root"), "Program")
    except _Bad as e:
        raise PteFileError(f"{label}: not a valid ExecuTorch program: {e}") from None
    except (struct.error, RecursionError, MemoryError, OverflowError) as e:
        raise PteFileError(f"{label}: not a valid ExecuTorch program "
                           f"({type(e).__name__})") from None
    align = 128
    if base:
        align = base & -base  # the largest power of two the first segment was aligned to
    return PteFile(program=program, segment_data=bytes(data[base:]) if base else b"",
                   segment_alignment=min(align, 4096), program_size=program_size,
                   segment_base_offset=base, has_header=has_header)


# ---------------------------------------------------------------------------- writing
class _Writer:
    """Lays tables out front to back: a vtable, its table, then the table's children."""

    def __init__(self):
        self.buf = bytearray()
        self.vtables: dict[bytes, int] = {}  # shared, as flatc shares them: smaller files

    def pad(self, align: int, extra: int = 0) -> None:
        """Pad so that ``len + extra`` is a multiple of ``align``."""
        self.buf.extend(b"\0" * (-(len(self.buf) + extra) % align))

    def table(self, obj) -> int:
        # present fields in the order they are laid out (largest first, so each is aligned
        # to its size after the 4-byte soffset): (slot, size, struct or None, value, kind)
        placed, cursor, n_slots = [], 4, 0
        for f, slot, size, st, kind, default in _WRITE_ORDER[type(obj).__name__]:
            v = getattr(obj, f)
            if v is None or (st is not None and v == default):
                continue
            if kind == "|":  # the union's type byte: the value's table id
                v = _UNION_IDS[default][type(v)]
            cursor += -cursor % size
            placed.append((cursor, slot, st, v, kind))
            cursor += size
            if slot >= n_slots:
                n_slots = slot + 1
        vtable = [0] * n_slots
        align = 4
        for off, slot, st, v, kind in placed:
            vtable[slot] = off
            if st is not None and st.size > align:
                align = st.size
        vt = struct.pack(f"<HH{n_slots}H", 4 + 2 * n_slots, cursor, *vtable)
        vt_pos = self.vtables.get(vt)
        if vt_pos is None:
            self.pad(2)
            vt_pos = self.vtables[vt] = len(self.buf)
            self.buf += vt
        self.pad(align)
        pos = len(self.buf)
        body = bytearray(cursor)
        _I32.pack_into(body, 0, pos - vt_pos)
        for off, slot, st, v, kind in placed:
            if st is not None:
                st.pack_into(body, off, v)
        self.buf += body
        for off, slot, st, v, kind in placed:
            if st is None:
                at = pos + off
                _U32.pack_into(self.buf, at, self.child(v, kind) - at)
        return pos

    def child(self, v, kind: str) -> int:
        if kind == "str":
            data = v.encode("utf-8")
            self.pad(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(data)) + data + b"\0"
            return pos
        if kind.startswith("bytes"):
            self.pad(BYTES_ALIGNMENT if kind == "bytes16" else 4, 4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(v)) + bytes(v)
            return pos
        if kind[0] == "[":
            elem = kind[1:]
            if elem in _SIZE:
                self.pad(max(4, _SIZE[elem]), 4)
                pos = len(self.buf)
                self.buf += struct.pack(f"<I{len(v)}{elem}", len(v), *v)
                return pos
            self.pad(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(v)) + bytes(4 * len(v))
            for i, item in enumerate(v):
                at = pos + 4 + 4 * i
                struct.pack_into("<I", self.buf, at, self.table(item) - at)
            return pos
        return self.table(v)  # a table or a union's value


def encode_program(program, header: bool) -> bytearray:
    """The flatbuffer of ``program``; with ``header``, 32 zero bytes after the identifier
    where `write_pte` puts the extended header."""
    w = _Writer()
    w.buf += bytes(8)
    w.buf[4:8] = IDENTIFIER
    if header:
        w.buf += bytes(HEADER_LENGTH)
    root = w.table(program)
    struct.pack_into("<I", w.buf, 0, root)
    w.pad(16)
    return w.buf


def write_pte(pte: PteFile) -> bytes:
    """The bytes of ``pte``: the program's flatbuffer, then, when the program has segments,
    the segment data byte for byte at the segment alignment the file had (the program's
    `segments` offsets are relative to the first segment, so they stay valid)."""
    segments = getattr(pte.program, "segments", None) or []
    header = bool(segments) and bool(pte.segment_data)
    out = encode_program(pte.program, header)
    if not header:
        return bytes(out)
    program_size = len(out)
    out.extend(b"\0" * (-program_size % pte.segment_alignment))
    base = len(out)
    struct.pack_into("<4sIQQQ", out, 8, HEADER_MAGIC, HEADER_LENGTH, program_size, base,
                     len(pte.segment_data))
    out += pte.segment_data
    return bytes(out)

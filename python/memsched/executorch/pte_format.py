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

from .errors import PteFileError

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

# One dataclass per table, named as in the schema (``pte_format.Tensor`` ...); every field
# optional (a flatbuffer may leave any out: `verify` in pte_verify says which the runtime needs).
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


class _Reader:
    """Decodes tables from ``buf`` and checks what flatbuffers' verifier checks."""

    def __init__(self, buf: bytes):
        self.buf = buf
        self.n = len(buf)
        self.tables = 0
        # per table kind: [(name, kind, default, slot)], slots counted with unions as two
        self.layout = {}
        for name, fields in _TABLES.items():
            slots, s = [], 0
            for f, kind, d in fields:
                if kind.startswith("|"):
                    s += 1  # the union's type byte takes the slot before its value
                slots.append((f, kind, d, s))
                s += 1
            self.layout[name] = slots

    def _check(self, pos: int, size: int, align: int, what: str) -> None:
        if pos < 0 or pos + size > self.n:
            raise _Bad(f"{what} at byte {pos} outside the {self.n}-byte program")
        if pos % align:
            raise _Bad(f"{what} at byte {pos} not aligned to {align}")

    def _offset(self, pos: int, what: str) -> int:
        self._check(pos, 4, 4, what)
        o = _U32.unpack_from(self.buf, pos)[0]
        if o == 0 or o >= 1 << 31 or pos + o >= self.n:
            raise _Bad(f"{what}: offset {o} at byte {pos} points outside the program")
        return pos + o

    def table(self, pos: int, name: str):
        self.tables += 1
        if self.tables > MAX_TABLES:
            raise _Bad(f"more than {MAX_TABLES:,} tables")
        buf = self.buf
        self._check(pos, 4, 4, name)
        vt = pos - _I32.unpack_from(buf, pos)[0]
        self._check(vt, 2, 2, f"{name} vtable")
        vt_size = _U16.unpack_from(buf, vt)[0]
        if vt_size % 2:
            raise _Bad(f"{name} vtable size {vt_size}")
        self._check(vt, vt_size, 2, f"{name} vtable")
        n_slots = max(0, (vt_size - 4) // 2)  # a vtable under 4 bytes: no fields
        values = {}
        for f, kind, d, slot in self.layout[name]:
            where = f"{name}.{f}"
            if kind[0] == "|":
                if slot >= n_slots:
                    continue
                vo_t = _U16.unpack_from(buf, vt + 4 + 2 * (slot - 1))[0]
                vo = _U16.unpack_from(buf, vt + 4 + 2 * slot)[0]
                t = 0
                if vo_t:
                    self._check(pos + vo_t, 1, 1, where)
                    t = buf[pos + vo_t]
                if not vo:
                    if t:
                        raise _Bad(f"{where}: union type {t} without a value")
                    continue
                members = UNIONS[kind[1:]]
                if not 1 <= t <= len(members):
                    raise _Bad(f"{where}: unknown union type {t}")
                values[f] = self.table(self._offset(pos + vo, where), members[t - 1])
                continue
            if slot >= n_slots:
                continue
            vo = _U16.unpack_from(buf, vt + 4 + 2 * slot)[0]
            if not vo:
                continue
            p = pos + vo
            if kind in _SIZE:
                size = _SIZE[kind]
                self._check(p, size, size, where)
                v = struct.unpack_from("<" + kind, buf, p)[0]
                values[f] = v
            elif kind == "str":
                values[f] = self.string(self._offset(p, where), where)
            elif kind.startswith("bytes"):
                values[f] = self.bytes_(self._offset(p, where), where)
            elif kind[0] == "[":
                values[f] = self.vector(self._offset(p, where), kind[1:], where)
            else:
                values[f] = self.table(self._offset(p, where), kind)
        return _CLASSES[name](**values)

    def _length(self, pos: int, elem: int, what: str) -> int:
        self._check(pos, 4, 4, what)
        n = _U32.unpack_from(self.buf, pos)[0]
        if pos + 4 + n * elem > self.n:
            raise _Bad(f"{what}: {n} elements at byte {pos} run past the program's end")
        return n

    def string(self, pos: int, what: str) -> str:
        n = self._length(pos, 1, what)
        if pos + 4 + n >= self.n or self.buf[pos + 4 + n] != 0:
            raise _Bad(f"{what}: string at byte {pos} not terminated")
        # the C++ runtime takes any bytes, but its Python binding aborts the process on an
        # operator name that is not UTF-8: refused
        try:
            return self.buf[pos + 4:pos + 4 + n].decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(f"{what}: string at byte {pos} is not UTF-8") from None

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
        name = type(obj).__name__
        fields = _TABLES[name]
        inline = []  # (slot, size, struct code or None for an offset, value, kind)
        slot = 0
        for f, kind, d in fields:
            v = getattr(obj, f)
            if kind[0] == "|":
                if v is not None:
                    inline.append((slot, 1, "B", _UNION_IDS[kind[1:]][type(v)], kind))
                    inline.append((slot + 1, 4, None, v, "union"))
                slot += 2
                continue
            if kind in _SIZE:
                if v is not None and v != d:
                    inline.append((slot, _SIZE[kind], kind, v, kind))
            elif v is not None:
                inline.append((slot, 4, None, v, kind))
            slot += 1
        # field positions inside the table: the soffset at 0, then largest fields first
        placed, cursor = [], 4
        for item in sorted(inline, key=lambda x: -x[1]):
            cursor += -cursor % item[1]
            placed.append((cursor, item))
            cursor += item[1]
        align = max([4] + [it[1] for _, it in placed])
        n_slots = max([it[0] for _, it in placed], default=-1) + 1
        vtable = [0] * n_slots
        for off, it in placed:
            vtable[it[0]] = off
        vt = struct.pack(f"<HH{n_slots}H", 4 + 2 * n_slots, cursor, *vtable)
        vt_pos = self.vtables.get(vt)
        if vt_pos is None:
            self.pad(2)
            vt_pos = self.vtables[vt] = len(self.buf)
            self.buf += vt
        self.pad(align)
        pos = len(self.buf)
        body = bytearray(cursor)
        struct.pack_into("<i", body, 0, pos - vt_pos)
        for off, (_slot, _size, code, v, _kind) in placed:
            if code is not None:
                struct.pack_into("<" + code, body, off, v)
        self.buf += body
        for off, (_slot, _size, code, v, kind) in placed:
            if code is None:
                child = self.child(v, kind)
                struct.pack_into("<I", self.buf, pos + off, child - (pos + off))
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

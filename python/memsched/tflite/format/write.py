"""Writing a rewritten .tflite model so that nothing in it is stale.

Every writer of the project (reorder, pipeline segments, the patch rewrite) ends here:

* `finish_model` makes the model self-consistent before it is serialized: buffers stored outside
  the flatbuffer (``offset``/``size``, models over 2 GB) are pulled inline (a repacked file has
  other offsets), buffers nothing references any more are dropped and the indices of the others
  remapped, then the bytes are read back by the independent checker
  (`memsched.tflite.format.check`): topological operator order, buffer references, and an
  offline plan whose co-live tensors never share bytes;
* `read_offline_plan` / `set_offline_plan` / `remove_offline_plan` read and write TFLite Micro's
  ``OfflineMemoryAllocation`` metadata (int32 ``[version 1, subgraph 0, n, offset of tensor
  0 .. n-1]``, ``-1`` = planned by TFLM at run time); replacing a plan drops the old plan's
  buffer instead of leaving it behind;
* `write_model` packs, checks and writes atomically with the user's umask (`memsched.fileio`).
"""
from __future__ import annotations

import numpy as np

from ... import fileio
# the plan is read where the file is read (the checker reads it too)
from .read import (OFFLINE_METADATA, TFLiteModelError, _plan_entries,  # noqa: F401
                           read_offline_plan, schema)

FLATBUFFER_LIMIT = (1 << 31) - (1 << 20)  # a flatbuffer addresses 2 GiB; keep room for tables


def pack_model(model) -> bytes:
    """Serialize a ``ModelT`` with the schema's ``Pack``, buffer data aligned to 16 bytes (as the
    TFLite converter writes them, so weights can be used in place)."""
    import flatbuffers

    builder = flatbuffers.Builder(1 << 20)
    saved = model.buffers
    try:
        model.buffers = [_AlignedBuffer(b) for b in (saved or [])]
        root = model.Pack(builder)
    finally:
        model.buffers = saved
    builder.Finish(root, file_identifier=b"TFL3")
    return bytes(builder.Output())


class _AlignedBuffer:
    """``BufferT.Pack`` with its data vector aligned to 16 bytes."""

    def __init__(self, buf):
        self.buf = buf

    def Pack(self, builder):
        s = schema()
        data = self.buf.data
        vec = None
        if data is not None:
            raw = np.asarray(data, dtype=np.uint8).tobytes()
            builder.StartVector(1, len(raw), 16)
            builder.head = builder.head - len(raw)
            builder.Bytes[builder.head:builder.head + len(raw)] = raw
            vec = builder.EndVector()  # StartVector recorded the length
        s.BufferStart(builder)
        if vec is not None:
            s.BufferAddData(builder, vec)
        s.BufferAddOffset(builder, 0)
        s.BufferAddSize(builder, 0)
        return s.BufferEnd(builder)


def remove_offline_plan(model) -> bool:
    """Drop every ``OfflineMemoryAllocation`` entry (its buffer goes with `drop_orphan_buffers`).
    Returns whether there was one."""
    entries = set(_plan_entries(model))
    if entries:
        model.metadata = [m for i, m in enumerate(model.metadata) if i not in entries]
    return bool(entries)


def set_offline_plan(model, offsets: list[int]) -> None:
    """Replace the model's offline plan by ``offsets`` (one int per tensor of subgraph 0)."""
    s = schema()
    remove_offline_plan(model)
    payload = np.asarray([1, 0, len(offsets)] + [int(x) for x in offsets], dtype="<i4")
    model.buffers = list(model.buffers or [])
    model.buffers.append(s.BufferT())
    model.buffers[-1].data = np.frombuffer(payload.tobytes(), dtype=np.uint8)
    meta = s.MetadataT()
    meta.name = OFFLINE_METADATA
    meta.buffer = len(model.buffers) - 1
    model.metadata = list(model.metadata or []) + [meta]


def inline_buffers(model, file_data: bytes) -> None:
    """Copy buffers stored by offset into the file (``offset``/``size``) inline: a repacked
    model has different offsets, so such references would point at other bytes."""
    total = 0
    for buf in model.buffers or []:
        if (buf.data is None or not len(buf.data)) and buf.offset > 1 and buf.size:
            if buf.offset + buf.size > len(file_data):
                raise TFLiteModelError("a buffer's data lies beyond the end of the file")
            buf.data = np.frombuffer(file_data, dtype=np.uint8, count=buf.size,
                                     offset=buf.offset)
        buf.offset, buf.size = 0, 0
        total += 0 if buf.data is None else len(buf.data)
    if total > FLATBUFFER_LIMIT:
        raise TFLiteModelError(f"its buffers hold {total:,} bytes: too large to rewrite as one "
                               "flatbuffer")


def drop_orphan_buffers(model) -> int:
    """Remove buffers that no tensor and no metadata entry references; returns how many.

    Buffer 0 stays: by convention it is the empty buffer of every non-constant tensor."""
    buffers = list(model.buffers or [])
    used = {0}
    for sg in model.subgraphs or []:
        for t in sg.tensors or []:
            used.add(int(t.buffer))
    for m in model.metadata or []:
        used.add(int(m.buffer))
    for b in (model.metadataBuffer if model.metadataBuffer is not None else []):
        used.add(int(b))
    keep = [i for i in range(len(buffers)) if i in used]
    if len(keep) == len(buffers):
        return 0
    new = {old: i for i, old in enumerate(keep)}
    for sg in model.subgraphs or []:
        for t in sg.tensors or []:
            t.buffer = new.get(int(t.buffer), 0)
    for m in model.metadata or []:
        m.buffer = new[int(m.buffer)]
    if model.metadataBuffer is not None:
        model.metadataBuffer = [new[int(b)] for b in model.metadataBuffer]
    model.buffers = [buffers[i] for i in keep]
    return len(buffers) - len(keep)


def finish_model(model, label: str = "model.tflite", operators: int | None = None) -> bytes:
    """Drop orphaned buffers, serialize, and check the bytes with the independent checker (the
    one check of the written bytes: it parses them back).

    Raises `TFLiteModelError` (from the checker) if the written model would be inconsistent, or
    has another number of operators than ``operators``: that is a bug of the writer, and the
    file must not reach the user."""
    from .check import check_tflite

    drop_orphan_buffers(model)
    data = pack_model(model)
    report = check_tflite(data, label=label).raise_if_invalid()
    if operators is not None and report.operators != operators:
        raise TFLiteModelError(f"internal error: the written model has {report.operators} "
                               f"operators, not {operators}")
    return data


def write_model(path: str, data: bytes) -> None:
    """Write checked model bytes atomically (mode: a new file under the umask)."""
    fileio.write_atomic(path, data)

"""An independent check of a .tflite file the project wrote (or is about to write).

It reads the bytes back with the flatbuffer schema (not through `TFLiteGraph`, and without the
writer's lifetime code) and checks what a runtime relies on:

* every tensor, buffer and metadata reference is in range; no buffer is orphaned;
* subgraph 0's operators are in a runnable order: an operator reads only constants, variables,
  subgraph inputs and tensors written by an earlier operator;
* the ``OfflineMemoryAllocation`` plan, if any, is one TFLite Micro uses as intended: one
  offset per tensor, each ``-1`` or non-negative, and no two tensors that are live at the same
  time under TFLM's rules (`tflm_lifetimes`) share a byte; the plan's extent fits ``arena``
  when one is given (e.g. the head section TFLM reports).

TFLM's rules (its ``AllocationInfoBuilder``): a non-constant, non-variable tensor is live from
the operator that writes it (subgraph inputs: from operator 0) to the last operator that reads
it; subgraph outputs live to the last operator; an output nobody reads lives during its own
operator. Only subgraph 0 is checked (the plan of a control-flow model's other subgraphs is not
interpreted here).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .read import TFLiteModelError, read_offline_plan, schema

# bytes per element of the schema's TensorType (sub-byte types rounded up per tensor)
_ELEMENT_BITS = {0: 32, 1: 16, 2: 32, 3: 8, 4: 64, 6: 8, 7: 16, 8: 64, 9: 8, 10: 64, 11: 128,
                 12: 64, 15: 32, 16: 16, 17: 4, 18: 16, 19: 2, 20: 4, 21: 8, 22: 8}


class TFLiteCheckError(TFLiteModelError):
    """A written .tflite file failed the consistency check; the message names the first problem."""


@dataclass
class CheckReport:
    """What `check_tflite` found. ``problems`` is empty when the file is consistent."""

    label: str
    operators: int = 0
    tensors: int = 0
    buffers: int = 0
    has_plan: bool = False
    planned: int = 0  # tensors with an offline offset that TFLM plans
    plan_extent: int | None = None  # max(offset + size) over those tensors
    overlaps: int = 0  # pairs of co-live planned tensors sharing bytes
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_if_invalid(self) -> "CheckReport":
        if self.problems:
            more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
            raise TFLiteCheckError(f"{self.label}: {self.problems[0]}{more}")
        return self

    def as_dict(self) -> dict:
        return {"ok": self.ok, "operators": self.operators, "tensors": self.tensors,
                "buffers": self.buffers, "offline_plan": self.has_plan,
                "planned_tensors": self.planned, "plan_extent_bytes": self.plan_extent,
                "overlapping_pairs": self.overlaps, "problems": self.problems[:5]}


def _nbytes(tensor) -> int:
    elems = 1
    for d in (tensor.shape if tensor.shape is not None else []):
        elems *= max(int(d), 1)
    return -(-elems * _ELEMENT_BITS.get(int(tensor.type), 32) // 8)


def _text(x) -> str:
    return x.decode("utf-8", "replace") if isinstance(x, (bytes, bytearray)) else str(x or "")


def tflm_lifetimes(model) -> dict[int, tuple[int, int]]:
    """{tensor index: (first, last) operator} of every tensor TFLM plans in subgraph 0."""
    sg = model.subgraphs[0]
    tensors = sg.tensors or []
    buffers = model.buffers or []
    ops = sg.operators or []
    last_op = max(len(ops) - 1, 0)

    def planned(t: int) -> bool:
        ten = tensors[t]
        if ten.isVariable:
            return False
        b = int(ten.buffer)
        buf = buffers[b] if 0 <= b < len(buffers) else None
        const = buf is not None and ((buf.data is not None and len(buf.data) > 0)
                                     or (buf.offset > 1 and buf.size > 0))
        return not const

    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for t in (sg.inputs if sg.inputs is not None else []):
        if t >= 0 and planned(int(t)):
            first[int(t)] = 0
    for v, op in enumerate(ops):
        for t in (op.inputs if op.inputs is not None else []):
            if t >= 0 and int(t) in first:
                last[int(t)] = v
        for t in (op.outputs if op.outputs is not None else []):
            if t >= 0 and planned(int(t)):
                first.setdefault(int(t), v)
                last[int(t)] = max(last.get(int(t), v), v)
    for t in (sg.outputs if sg.outputs is not None else []):
        if int(t) in first:
            last[int(t)] = last_op
    return {t: (f, max(f, last.get(t, f))) for t, f in first.items()}


def _first_overlap(spans: list[tuple[int, int, int, int, int]], n_steps: int,
                   allowed=frozenset()):
    """Co-live pairs sharing bytes: (count, first pair). ``spans``: (tensor, first, last,
    offset, size); ``allowed``: (low, high) tensor pairs that may share bytes. A sweep over
    steps: within one step's live set sorted by offset, a tensor overlaps an earlier one iff
    it starts below the running maximum end."""
    seen: set[tuple[int, int]] = set()
    first_pair = None
    by_step: list[list[int]] = [[] for _ in range(n_steps)]
    for i, (_, first, last, _, _) in enumerate(spans):
        for s in range(first, last + 1):
            by_step[s].append(i)
    for live in by_step:
        live = sorted(live, key=lambda i: (spans[i][3], -spans[i][4]))
        active: list[int] = []  # tensors whose bytes may still reach further up
        for i in live:
            off, size = spans[i][3], spans[i][4]
            if size <= 0:
                continue
            active = [j for j in active if spans[j][3] + spans[j][4] > off]
            for j in active:
                pair = (min(spans[i][0], spans[j][0]), max(spans[i][0], spans[j][0]))
                if pair not in seen and pair not in allowed:
                    seen.add(pair)
                    first_pair = first_pair or pair
            active.append(i)
    return len(seen), first_pair


def _view_pairs(model, offsets) -> set[tuple[int, int]]:
    """Pairs of tensors joined by in-place RESHAPEs (output at its input's offset, same bytes,
    neither constant nor a subgraph output: `aliases.reshape_aliases`), every pair of each
    such chain. A group holding a tensor an in-place QUANTIZE overwrites (its output at the
    input's offset) is left out: its other tensors would see the new bytes."""
    from .aliases import quantize_aliases, reshape_aliases

    parent: dict[int, int] = {}

    def find(t: int) -> int:
        while parent.get(t, t) != t:
            t = parent[t]
        return t

    for x, y, _ in reshape_aliases(model, named_only=False):
        if 0 <= offsets[x] == offsets[y]:
            parent[find(y)] = find(x)
    groups: dict[int, list[int]] = {}
    for t in parent:
        groups.setdefault(find(t), []).append(t)
    overwritten = {x for x, y, _ in quantize_aliases(model) if 0 <= offsets[x] == offsets[y]}
    pairs = set()
    for root, members in groups.items():
        members = sorted(set(members) | {root})
        if overwritten & set(members):
            continue
        pairs |= {(a, b) for i, a in enumerate(members) for b in members[i + 1:]}
    return pairs


def check_model(model, label: str = "model.tflite", arena: int | None = None) -> CheckReport:
    """Check an unpacked ``ModelT`` (see the module docstring)."""
    rep = CheckReport(label)
    subgraphs = model.subgraphs or []
    buffers = model.buffers or []
    rep.buffers = len(buffers)
    if not subgraphs:
        rep.problems.append("no subgraph")
        return rep
    used = {0}
    for k, sg in enumerate(subgraphs):
        for t, ten in enumerate(sg.tensors or []):
            if not 0 <= int(ten.buffer) < len(buffers):
                rep.problems.append(f"subgraph {k} tensor {t} uses buffer {ten.buffer} of "
                                    f"{len(buffers)}")
            used.add(int(ten.buffer))
    for m in model.metadata or []:
        if not 0 <= int(m.buffer) < len(buffers):
            rep.problems.append(f"metadata {_text(m.name)!r} uses buffer {m.buffer} of "
                                f"{len(buffers)}")
        used.add(int(m.buffer))
    used.update(int(b) for b in (model.metadataBuffer if model.metadataBuffer is not None
                                 else []))
    orphans = [i for i in range(len(buffers)) if i not in used]
    if orphans:
        rep.problems.append(f"{len(orphans)} orphaned buffer(s) (first: {orphans[0]})")
    sg = subgraphs[0]
    tensors = sg.tensors or []
    ops = sg.operators or []
    rep.operators, rep.tensors = len(ops), len(tensors)
    written = {int(t) for t in (sg.inputs if sg.inputs is not None else [])}
    for v, op in enumerate(ops):
        for t in list(op.inputs if op.inputs is not None else []) + list(
                op.outputs if op.outputs is not None else []):
            if not -1 <= int(t) < len(tensors):
                rep.problems.append(f"operator {v} refers to tensor {t} of {len(tensors)}")
                return rep
    producer = {int(t): v for v, op in enumerate(ops)
                for t in (op.outputs if op.outputs is not None else []) if t >= 0}
    for v, op in enumerate(ops):
        for t in (op.inputs if op.inputs is not None else []):
            t = int(t)
            if t >= 0 and t in producer and t not in written:
                rep.problems.append(f"operator {v} reads tensor {t} before operator "
                                    f"{producer[t]} writes it")
                return rep
        written.update(int(t) for t in (op.outputs if op.outputs is not None else []))
    try:
        offsets = read_offline_plan(model)
    except TFLiteModelError as e:
        rep.has_plan = True
        rep.problems.append(str(e).removeprefix("its "))
        return rep
    if offsets is None:
        return rep
    rep.has_plan = True
    n_total = sum(len(g.tensors or []) for g in subgraphs)
    if len(offsets) not in (len(tensors), n_total):
        rep.problems.append(f"offline plan has {len(offsets)} offsets for {len(tensors)} "
                            "tensors")
        return rep
    bad = [t for t, o in enumerate(offsets[:len(tensors)]) if o < -1]
    if bad:
        rep.problems.append(f"offline plan gives tensor {bad[0]} offset {offsets[bad[0]]}")
    spans = []
    for t, (first, last) in tflm_lifetimes(model).items():
        if offsets[t] >= 0:
            spans.append((t, first, last, offsets[t], _nbytes(tensors[t])))
    # a float-to-int8 QUANTIZE whose output starts at its input's offset runs in place in
    # TFLite Micro (its kernel reads element i before writing it:
    # `aliases.quantize_aliases`): that one pair may share bytes
    from .aliases import quantize_aliases

    allowed = {(min(x, y), max(x, y)) for x, y, _ in quantize_aliases(model)
               if 0 <= offsets[x] == offsets[y]}
    # a RESHAPE whose output starts at its input's offset copies nothing (TFLite Micro's
    # kernel: ``if (input->data.raw != output->data.raw) memcpy``) and nothing writes either
    # afterwards: the tensors of a chain of such views (all at one offset) may share bytes
    allowed |= _view_pairs(model, offsets)
    rep.planned = len(spans)
    rep.plan_extent = max((o + s for _, _, _, o, s in spans), default=0)
    rep.overlaps, pair = _first_overlap(spans, max(len(ops), 1), allowed)
    if pair:
        a, b = pair
        rep.problems.insert(  # the problem that changes results goes first
            0, f"offline plan puts co-live tensors {a} ({_text(tensors[a].name)!r}) and {b} "
            f"({_text(tensors[b].name)!r}) at overlapping bytes ({rep.overlaps} pair(s) in "
            "all): TFLite Micro would compute something else")
    if arena is not None and rep.plan_extent > arena:
        rep.problems.append(f"offline plan needs {rep.plan_extent:,} B, more than the arena's "
                            f"{arena:,} B")
    return rep


def check_tflite(path_or_bytes, label: str | None = None,
                 arena: int | None = None) -> CheckReport:
    """Read a .tflite file (path or bytes) back and check it (see the module docstring)."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = bytes(path_or_bytes)
        label = label or "model.tflite"
    else:
        label = label or str(path_or_bytes)
        with open(path_or_bytes, "rb") as f:
            data = f.read()
    if len(data) < 8 or data[4:8] != b"TFL3":
        return CheckReport(label, problems=["not a .tflite flatbuffer (missing TFL3)"])
    try:
        model = schema().ModelT.InitFromPackedBuf(data, 0)
    except Exception as e:  # noqa: BLE001 - a corrupt flatbuffer raises anything
        return CheckReport(label, problems=[f"corrupt flatbuffer ({type(e).__name__})"])
    return check_model(model, label, arena)


__all__ = ["CheckReport", "TFLiteCheckError", "check_model", "check_tflite", "tflm_lifetimes"]

"""Values shared in a ``.pte``: one `EValue` where the emitter wrote several equal ones.

ExecuTorch's emitter writes a new value for every scalar, ``None`` and list argument of every
call and a new tensor value for every FX node, and ``Method::init`` takes an `EValue` (16 B)
for each value from the method allocator, plus a list's boxed and unboxed arrays and a
tensor's ``TensorImpl`` and strides (`memsched.executorch.memory.ram`). A patched program repeats
its calls once per patch, with the same arguments, so the records, not the activations, grew with
the number of patches (issue 52). Sharing keeps one value per distinct content, which
ExecuTorch allows as it stands:

* the runtime binds an instruction's arguments as pointers into the value table
  (``InstructionArgs``), so two calls may name the same value; its own emitter shares a
  tensor value between FX nodes that have one ``TensorSpec`` (an in-place result aliased onto
  its input);
* two values are shared only if they are indistinguishable to every kernel: scalars, ``None``,
  strings and bool/double lists of equal content; int and tensor lists whose items are the
  same (shared) values; tensors with equal dtype, sizes, dim order, storage offset and
  planned place (memory id and offset) of static shape: the same ``TensorImpl`` over the same
  bytes. A kernel never sees that two of its arguments became one object: it reads and writes
  the same bytes through either;
* never shared: anything a call writes that is not a planned tensor (``sym_size``'s ints, a
  functional kernel's return), a tensor outside the plan (user inputs and outputs whose data
  pointer the caller sets, ``et_view`` results whose pointer a kernel sets), the method's
  inputs and outputs, delegate, move, free and jump arguments, tensors of dynamic shape or
  with extra tensor info (mutable state, external data).

Values keep their order (a tensor list's items are parsed before it), so the runtime parses
the shared table as it did the emitter's. `check_shared` is the independent proof, from the
two programs alone: every argument of every instruction, every input and output, stands for
the same content before and after, and every value that now stands for several only stands
for values that may be shared.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..errors import PlanCheckError

_LISTS = ("IntList", "TensorList", "OptionalTensorList")


@dataclass
class ShareReport:
    """What `share_plan` did to one method: values before and after, by kind."""
    method: str
    values_before: int
    values_after: int
    shared: dict = field(default_factory=dict)  # kind -> values removed

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.shared.items()) if n)
        return (f"{self.method}: {self.values_before:,} -> {self.values_after:,} values"
                + (f" ({kinds} shared)" if kinds else ""))


def _kind(ev) -> str:
    return type(ev.val).__name__


def pinned_values(plan) -> set[int]:
    """Values that keep their own `EValue`: the method's inputs and outputs, the arguments of
    delegate, move, free and jump instructions, and what a kernel call writes unless it is a
    planned tensor (`memory.liveness.kernel_writes`)."""
    from ..memory.liveness import kernel_writes

    values = plan.values
    pinned = set(int(v) for v in list(plan.inputs or []) + list(plan.outputs or []))
    for chain in plan.chains or []:
        for ins in chain.instructions or []:
            a = ins.instr_args
            kind = type(a).__name__
            if kind == "KernelCall":
                args = list(a.args or [])
                for v, w in zip(args, kernel_writes(args, values)):
                    if w and not (_kind(values[v]) == "Tensor" and _planned(values[v].val)):
                        pinned.add(int(v))
            elif kind == "DelegateCall":
                pinned.update(int(v) for v in a.args or [])
            elif kind == "MoveCall":
                pinned.update((int(a.move_from), int(a.move_to)))
            elif kind == "JumpFalseCall":
                pinned.add(int(a.cond_value_index))
            elif kind == "FreeCall":
                pinned.add(int(a.value_index))
    return pinned


def _planned(t) -> bool:
    return t.allocation_info is not None or bool(t.data_buffer_idx)


def _tensor_key(t):
    """A tensor's identity to a kernel, or None when it may not be shared."""
    if t.extra_tensor_info is not None or int(t.shape_dynamism or 0) != 0 or not _planned(t):
        return None
    a = t.allocation_info
    place = None if a is None else (int(a.memory_id), int(a.memory_offset_low),
                                    int(a.memory_offset_high))
    return ("Tensor", int(t.scalar_type), int(t.storage_offset or 0),
            tuple(int(s) for s in t.sizes or ()), tuple(int(d) for d in t.dim_order or ()),
            bool(t.requires_grad), int(t.data_buffer_idx or 0), place, int(t.layout or 0))


def _scalar_key(kind: str, v):
    if kind == "Null":
        return ("Null",)
    if kind == "Int":
        return ("Int", int(v.int_val))
    if kind == "Bool":
        return ("Bool", bool(v.bool_val))
    if kind == "Double":  # by its bits: -0.0 and 0.0, NaNs, stay apart
        return ("Double", struct.pack("<d", float(v.double_val)))
    if kind == "String":
        return ("String", v.string_val)
    if kind == "BoolList":
        return ("BoolList", tuple(bool(x) for x in v.items or ()))
    if kind == "DoubleList":
        return ("DoubleList", tuple(struct.pack("<d", float(x)) for x in v.items or ()))
    return None


def _groups(plan) -> list[int]:
    """``rep[i]``: the first value with value ``i``'s content that may stand for it."""
    values = plan.values
    pinned = pinned_values(plan)
    rep = list(range(len(values)))
    first: dict = {}
    for i, ev in enumerate(values):
        if i in pinned:
            continue
        kind = _kind(ev)
        v = ev.val
        if kind == "Tensor":
            key = _tensor_key(v)
        elif kind in _LISTS:
            items = [int(x) for x in v.items or ()]
            if any(x >= i for x in items):  # only items parsed before the list
                continue
            key = (kind, tuple(rep[x] if x >= 0 else x for x in items))
        else:
            key = _scalar_key(kind, v)
        if key is None:
            continue
        rep[i] = first.setdefault(key, i)
    return rep


def _remap(plan, new_index: list[int]) -> None:
    f = lambda v: new_index[int(v)]  # noqa: E731
    for ev in plan.values:
        if _kind(ev) in _LISTS:
            ev.val.items = [f(x) if int(x) >= 0 else int(x) for x in ev.val.items or ()]
    plan.inputs = [f(v) for v in plan.inputs or []]
    plan.outputs = [f(v) for v in plan.outputs or []]
    for chain in plan.chains or []:
        chain.inputs = [f(v) for v in chain.inputs or []]
        chain.outputs = [f(v) for v in chain.outputs or []]
        for ins in chain.instructions or []:
            a = ins.instr_args
            kind = type(a).__name__
            if kind in ("KernelCall", "DelegateCall"):
                a.args = [f(v) for v in a.args or []]
            elif kind == "MoveCall":
                a.move_from, a.move_to = f(a.move_from), f(a.move_to)
            elif kind == "JumpFalseCall":
                a.cond_value_index = f(a.cond_value_index)
            elif kind == "FreeCall":
                a.value_index = f(a.value_index)


def share_plan(plan) -> ShareReport:
    """Share equal values of one decoded method (`format.pte.ExecutionPlan`) in place."""
    values = list(plan.values or [])
    rep = _groups(plan)
    keep = [i for i in range(len(values)) if rep[i] == i]
    position = {old: new for new, old in enumerate(keep)}
    new_index = [position[rep[i]] for i in range(len(values))]
    report = ShareReport(plan.name, len(values), len(keep))
    for i in range(len(values)):
        if rep[i] != i:
            k = _kind(values[i])
            report.shared[k] = report.shared.get(k, 0) + 1
    plan.values = [values[i] for i in keep]
    _remap(plan, new_index)
    return report


def share_values(program) -> tuple[bytes, list[ShareReport]]:
    """``program`` (a ``.pte``'s bytes, or what ``to_executorch`` returned: its ``buffer``)
    with equal values shared in every method, proven by `check_shared` against the
    original, and the per-method reports. A program with nothing to share comes back as it
    was (the same bytes). Malformed bytes raise `PteFileError`."""
    from ..format.read import read_program
    from ..format.pte import write_pte

    data = program.buffer if hasattr(program, "buffer") else program
    before = read_program(data)
    after = read_program(data)
    reports = [share_plan(plan) for plan in after.program.execution_plan]
    if all(r.values_after == r.values_before for r in reports):
        return bytes(data), reports
    out = write_pte(after)
    check_shared(before, read_program(out))
    return out, reports


def share_reordered(original: bytes, data: bytes, report: dict, measure: bool = False,
                    seed: int = 0) -> bytes:
    """``data`` (`pte.reorder`'s program for ``original``) with its equal values shared; each
    method's row of ``report`` gets ``values_before`` / ``values_after`` and
    ``method_bytes_before`` / ``method_bytes_after`` (the method allocator at the 32-bit
    Cortex-M ABI, `ram.program_ram`). ``measure``: a method whose values were shared runs in
    ExecuTorch's runtime against ``original`` on the same random inputs (`pte.run_method`);
    any output that differs raises `OutputsDifferError` (nothing to write)."""
    from ..errors import OutputsDifferError
    from ..pte import random_inputs, run_method
    from ..format.read import read_program
    from ..memory.ram import program_ram

    out, reps = share_values(data)
    before, after = program_ram(data), program_ram(out)
    for r in reps:
        report.setdefault(r.method, {}).update(
            values_before=r.values_before, values_after=r.values_after,
            method_bytes_before=before[r.method]["method_allocator_bytes"],
            method_bytes_after=after[r.method]["method_allocator_bytes"])
    if out == data:
        return data
    if measure:
        import torch

        for plan in read_program(out).program.execution_plan:
            row = report[plan.name]
            if row["values_after"] == row["values_before"]:
                continue
            xs = random_inputs(plan, seed)
            a = run_method(original, plan.name, [x.clone() for x in xs])
            b = run_method(out, plan.name, [x.clone() for x in xs])
            if len(a) != len(b) or not all(
                    torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v
                    for u, v in zip(a, b)):
                raise OutputsDifferError(f"method {plan.name!r}: outputs differ after sharing "
                                         "values; nothing written")
            row["bit_equal"] = True
    return out


# ---------------------------------------------------------------------- the independent check

def _content(values, v, seen=()):
    """What value ``v`` is, followed through list items (the identity of values aside)."""
    ev = values[v]
    kind = _kind(ev)
    x = ev.val
    if kind == "Tensor":
        a = x.allocation_info
        return ("Tensor", int(x.scalar_type), int(x.storage_offset or 0), tuple(x.sizes or ()),
                tuple(x.dim_order or ()), bool(x.requires_grad), int(x.data_buffer_idx or 0),
                None if a is None else (a.memory_id, a.memory_offset_low, a.memory_offset_high),
                int(x.layout or 0), int(x.shape_dynamism or 0), x.extra_tensor_info is None)
    if kind in _LISTS:
        return (kind, tuple(_content(values, int(i)) if int(i) >= 0 else None
                            for i in x.items or ()))
    return (kind, _scalar_key(kind, x))


def _references(plan):
    """Every place a method names a value, in a fixed order, as (place, value)."""
    for n, v in enumerate(plan.inputs or []):
        yield ("input", n), int(v)
    for n, v in enumerate(plan.outputs or []):
        yield ("output", n), int(v)
    for c, chain in enumerate(plan.chains or []):
        for k, ins in enumerate(chain.instructions or []):
            a = ins.instr_args
            kind = type(a).__name__
            names = {"KernelCall": ("args",), "DelegateCall": ("args",),
                     "MoveCall": ("move_from", "move_to"),
                     "JumpFalseCall": ("cond_value_index",),
                     "FreeCall": ("value_index",)}[kind]
            for name in names:
                got = getattr(a, name)
                for j, v in enumerate(got if isinstance(got, list) else [got]):
                    yield (c, k, kind, name, j), int(v)


def check_shared(before, after) -> None:
    """Raise `PlanCheckError` unless ``after`` (a decoded program) is ``before`` with values
    shared: the same methods, instructions, operators and delegates; every reference of a
    value (instruction arguments, inputs, outputs, followed into list items) names the same
    content; values named by one reference each before stay alone; and a value that now
    stands for several stands only for values that may be shared (`pinned_values` of
    ``before``: none of them; tensors: planned, static, no extra info)."""
    b_plans, a_plans = before.program.execution_plan, after.program.execution_plan
    if len(b_plans) != len(a_plans):
        raise PlanCheckError("shared program: methods differ")
    for bp, ap in zip(b_plans, a_plans):
        name = bp.name
        if ap.name != name or [(o.name, o.overload) for o in bp.operators or []] != \
                [(o.name, o.overload) for o in ap.operators or []] or \
                list(bp.non_const_buffer_sizes or []) != list(ap.non_const_buffer_sizes or []):
            raise PlanCheckError(f"shared program: method {name!r} changed beyond its values")
        if len(bp.delegates or []) != len(ap.delegates or []):
            raise PlanCheckError(f"shared program: method {name!r}'s delegates changed")
        b_refs, a_refs = list(_references(bp)), list(_references(ap))
        if [p for p, _ in b_refs] != [p for p, _ in a_refs]:
            raise PlanCheckError(f"shared program: method {name!r}'s instructions changed")
        for c, (bc, ac) in enumerate(zip(bp.chains or [], ap.chains or [])):
            for k, (bi, ai) in enumerate(zip(bc.instructions, ac.instructions)):
                bx, ax = bi.instr_args, ai.instr_args
                if getattr(bx, "op_index", None) != getattr(ax, "op_index", None) or \
                        getattr(bx, "delegate_index", None) != getattr(ax, "delegate_index",
                                                                       None) or \
                        getattr(bx, "destination_instruction", None) != \
                        getattr(ax, "destination_instruction", None):
                    raise PlanCheckError(f"shared program: method {name!r} instruction {k} "
                                         "changed")
        pinned = pinned_values(bp)
        stands_for: dict[int, set] = {}
        for (place, vb), (_, va) in zip(b_refs, a_refs):
            if _content(bp.values, vb) != _content(ap.values, va):
                raise PlanCheckError(f"shared program: method {name!r} {place}: value {va} "
                                     f"is not what value {vb} was")
            stands_for.setdefault(va, set()).add(vb)
            # a list's items name values too
            bl, al = bp.values[vb].val, ap.values[va].val
            if _kind(bp.values[vb]) in _LISTS:
                for x, y in zip(bl.items or (), al.items or ()):
                    if int(x) >= 0:
                        stands_for.setdefault(int(y), set()).add(int(x))
        for va, olds in stands_for.items():
            if len(olds) < 2:
                continue
            for vb in olds:
                ev = bp.values[vb]
                bad = vb in pinned or (_kind(ev) == "Tensor" and _tensor_key(ev.val) is None)
                if bad:
                    raise PlanCheckError(f"shared program: method {name!r} value {va} stands "
                                         f"for value {vb}, which may not be shared")


__all__ = ["ShareReport", "check_shared", "pinned_values", "share_plan", "share_reordered",
           "share_values"]

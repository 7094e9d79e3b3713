"""Patch regions: what a region is and which regions a model has.

A *region* is a run of operators ``[start, length)`` of the model in file order made only of
spatially local operators (`geometry.SOp` classes ``window``, ``eltwise``, ``concat``); it may
be a DAG (residual adds, concat of branches). With ``start = 0`` it begins at the model inputs;
with ``start > 0`` the operators before it run whole (e.g. a leading QUANTIZE of a float input,
which then dies before the patches) and the region reads their outputs as its *inputs*, sliced
per patch like model inputs. Its *split tensors* are the tensors it produces that are read after
it or are model outputs; all must share one spatial size, on which the grid of patches is laid.

Squeeze-and-excitation (opt-in: ``regions(..., se=True)``): a region may contain operators of
classes ``reduce`` (a global sum/mean over H and W), ``vector`` (operators on its result, run
once) and ``scale`` (a feature map times such a vector). Each tensor has a *stage*: the number
of reductions it depends on (`stages`). The patches then run in passes (`plans`): pass ``p``
computes the tensors of stage ``p`` that a reduction reads, the last pass the split tensors
(`pass_targets`).

Exact or refused (`geometry.inexact_reduction`, applied by `regions`): a region runs through
a reduction only if the partial sums combine to the whole sum's bits (an integer accumulator
that cannot overflow, or the original's order); float sums only with
``exact_reductions=False`` (they differ from the whole sum by rounding).
"""
from __future__ import annotations

from dataclasses import dataclass

from .geometry import SpatialModel, inexact_reduction

SPATIAL = ("window", "eltwise", "concat")
SE_CLASSES = ("reduce", "vector", "scale")  # squeeze-and-excitation (regions opt in: se=True)
VECTOR = ("reduce", "vector")  # operators whose outputs are vectors (computed once, whole)


@dataclass
class Region:
    """Operators ``start .. length - 1`` of the model (file order)."""

    length: int
    split: list[int]  # tensor indices reassembled after the patches
    inputs: list[int]  # tensors the region reads and does not produce (sliced per patch)
    hw: tuple[int, int]  # spatial size of the split tensors
    start: int = 0  # the operators before it run whole

    @property
    def ops(self) -> range:
        return range(self.start, self.length)


def regions(sm: SpatialModel, starts=(0,), se: bool = False, exact_reductions: bool = True
            ) -> tuple[list[Region], str]:
    """Candidate regions: for each ``start`` (default: the model inputs only), each run of
    spatial operators from ``start`` whose split tensors share one spatial size; and why the
    spatial prefix from operator 0 ends (the first operator that is not spatial). ``se``: runs
    may contain squeeze-and-excitation blocks (``reduce`` / ``vector`` / ``scale`` operators);
    a run whose vectors are read after it is not a region; a run ends before a reduction whose
    partial sums do not combine exactly (`geometry.inexact_reduction`; a float sum passes when
    ``exact_reductions`` is False)."""
    out = []
    why = "every operator is spatially local"
    why_se = ""
    model_out = set(sm.outputs)
    allowed = SPATIAL + SE_CLASSES if se else SPATIAL
    for start in starts:
        if start >= len(sm.ops):
            continue
        avail = set(sm.inputs) | {sm.ops[k].output for k in range(start)}
        produced: set[int] = set()
        vec: set[int] = set()
        for k in range(start, len(sm.ops)):
            op = sm.ops[k]
            if op.cls not in allowed:
                if start == 0:
                    reason = op.reason or (f"{op.cls} of a squeeze-and-excitation block "
                                           "(regions through it: se=True)")
                    why = f"operator {op.index} ({op.kind}): {reason}"
                break
            if any(t not in produced and t not in avail for t in op.inputs):
                if start == 0:
                    why = f"operator {op.index} ({op.kind}) reads a tensor not produced before it"
                break
            bad = ""
            if op.cls == "vector" and any(t not in vec for t in op.inputs):
                bad = "a vector operator reads a tensor that is not a vector of the region"
            elif op.cls == "scale" and (len(op.inputs) != 2 or op.inputs[0] in vec or
                                        op.inputs[1] not in vec):
                bad = "a scale that does not multiply a feature map by a vector of the region"
            elif op.cls == "reduce" and op.inputs[0] in vec:
                bad = "a reduction of a vector"
            elif op.cls == "reduce":
                h, w = sm.tensors[op.inputs[0]].hw
                bad = inexact_reduction(op, h * w, float_sums=not exact_reductions)
            elif op.cls in SPATIAL and any(t in vec for t in op.inputs):
                bad = "a spatial operator reads a vector"
            if bad:
                if start == 0:
                    why = f"operator {op.index} ({op.kind}): {bad}"
                break
            produced.add(op.output)
            if op.cls in VECTOR:
                vec.add(op.output)
            length = k + 1
            if vec and any(t in model_out or any(c >= length for c in sm.consumers.get(t, []))
                           for t in vec):
                if start == 0 and not why_se:
                    why_se = (f"operator {op.index} ({op.kind}): a global reduction whose "
                              "result is read after every region through it")
                continue
            split = [t for t in sorted(produced - vec, key=lambda t: sm.producer[t])
                     if t in model_out or any(c >= length for c in sm.consumers.get(t, []))]
            if not split:
                continue
            hws = {sm.tensors[t].hw for t in split}
            if len(hws) != 1:
                continue
            ins = sorted({t for j in range(start, length) for t in sm.ops[j].inputs
                          if t not in produced}, key=lambda t: (sm.producer.get(t, -1), t))
            out.append(Region(length, split, ins, hws.pop(), start))
            if start == 0:
                why_se = ""  # a region reaches past that reduction
    if why_se and why == "every operator is spatially local":
        why = why_se
    return out, why


def stages(sm: SpatialModel, region: Region) -> dict[int, int]:
    """Per tensor of the region (inputs included): how many reductions it depends on (kept
    on the model per region: the search asks for it once per plan and grid; read only)."""
    known = sm.__dict__.setdefault("_stages", {})
    key = (region.start, region.length, tuple(region.inputs))
    st = known.get(key)
    if st is None:
        st = known[key] = _stages(sm, region)
    return st


def _stages(sm: SpatialModel, region: Region) -> dict[int, int]:
    st = {t: 0 for t in region.inputs}
    for k in region.ops:
        op = sm.ops[k]
        s = max((st.get(t, 0) for t in op.inputs), default=0)
        st[op.output] = s + 1 if op.cls == "reduce" else s
    return st


def pass_targets(sm: SpatialModel, region: Region) -> list[list[int]]:
    """The tensors each pass over the patches computes patch by patch: pass ``p`` < last the
    inputs of the reductions of stage ``p``, the last pass the split tensors (one pass when
    the region has no reduction)."""
    reduces = [k for k in region.ops if sm.ops[k].cls == "reduce"]
    if not reduces:
        return [list(region.split)]
    st = stages(sm, region)
    last = max(st.values())
    out: list[list[int]] = [[] for _ in range(last)]
    for k in reduces:
        t = sm.ops[k].inputs[0]
        if t not in out[st[t]]:
            out[st[t]].append(t)
    return out + [list(region.split)]


def is_se(sm: SpatialModel, region: Region) -> bool:
    """Does the region contain a squeeze-and-excitation block (passes over the patches)?"""
    return any(sm.ops[k].cls == "reduce" for k in region.ops)

"""Squeeze-and-excitation blocks as the patch search sees them, classified once for every
adapter.

A block is a global reduction of a feature map over H and W (``reduce``), the operators on its
vector (``vector``: run once, whole), and a feature map times (plus, minus, divided by) that
vector broadcast over space (``scale``). The adapters know their own operators (which call is
a mean over H and W, which binary op broadcasts a vector); the walk over the graph, the vector
set and the rule that only *whole* blocks count are here (`classify_se`). A reduction whose
vector reaches a model output or an operator that is neither a vector nor a scale one (a
classifier head's mean) is not a block: it and its vector operators keep the class the adapter
gave them (`partial_se_blocks`), so a region ends before them with their own reason.
"""
from __future__ import annotations

from typing import Callable

from .geometry import SOp, STensor
from .regions import VECTOR


def classify_se(ops: list[SOp], tensors: dict[int, STensor], outputs, macs: list[int], *,
                reduce_of: Callable[[int, SOp], SOp | None],
                is_scale: Callable[[int], bool],
                scale_ok: Callable[[int, int], bool],
                may_be_vector: Callable[[int], bool] = lambda k: True) -> dict[int, int]:
    """Reclassify, in place, the operators of whole squeeze-and-excitation blocks of ``ops``
    (the adapter's classification, file order; ``macs`` per operator, ``outputs`` the model
    outputs). The adapter answers, per operator ``k``: ``reduce_of(k, op)``: its ``reduce``
    `SOp` if it is a global reduction of a feature map (else None); ``is_scale(k)``: it is a
    binary operator that may scale a feature map by a vector; ``scale_ok(k, pos)``: it does,
    its feature map at input position ``pos`` (the vector broadcast over space, the operator
    defined for that order); ``may_be_vector(k)``: it may run once on vectors. Returns, per
    ``scale`` operator, the position ``pos`` of its feature map: its inputs are reordered
    (feature map first), and the adapter reorders whatever it keeps per input alike."""
    orig = list(ops)
    vec: set[int] = set()
    swapped: dict[int, int] = {}
    for k, op in enumerate(ops):
        o = tensors[op.output]
        red = reduce_of(k, op) if len(op.inputs) == 1 and op.inputs[0] not in vec else None
        if red is not None:
            ops[k] = red
            vec.add(op.output)
        elif op.inputs and all(t in vec for t in op.inputs) and may_be_vector(k):
            cells = max(o.nbytes // max(o.itemsize, 1), 1)
            ops[k] = SOp(k, op.kind, "vector", op.inputs, op.output,
                         macs_per_out=max(1, macs[k] // cells),
                         cout=int(o.shape[-1]) if o.shape else 0)
            vec.add(op.output)
        elif is_scale(k) and len(op.inputs) == 2 and \
                sum(t in vec for t in op.inputs) == 1 and o.spatial:
            pos = 0 if op.inputs[1] in vec else 1
            x, v = op.inputs[pos], op.inputs[1 - pos]
            if tensors[x].spatial and tensors[x].shape == o.shape and scale_ok(k, pos):
                ops[k] = SOp(k, op.kind, "scale", (x, v), op.output, macs_per_out=1,
                             cout=o.channels)
                swapped[k] = pos
        elif any(t in vec for t in op.inputs):
            ops[k] = SOp(k, op.kind, "other", op.inputs, op.output,
                         reason="reads a squeeze-and-excitation vector and a feature map")
    # whole blocks only (a classifier head's mean keeps its own class)
    for k in partial_se_blocks(ops, outputs):
        ops[k] = orig[k]
        swapped.pop(k, None)
    return swapped


def partial_se_blocks(ops, outputs) -> set[int]:
    """Operators classified ``reduce`` / ``vector`` / ``scale`` that are not part of a whole
    squeeze-and-excitation block, to be given back their own class: a reduction or vector
    whose result reaches a model output (``outputs``) or an operator other than a vector one
    or the vector side of a scale (a classifier head's mean), a vector fed by anything else,
    a scale whose vector is no longer one; to a fixpoint."""
    cls = [op.cls for op in ops]
    producer = {op.output: k for k, op in enumerate(ops)}
    consumers: dict[int, list[int]] = {}
    for k, op in enumerate(ops):
        for t in op.inputs:
            consumers.setdefault(t, []).append(k)
    outputs = set(outputs)
    partial: set[int] = set()
    changed = True
    while changed:
        changed = False
        for k, op in enumerate(ops):
            if k in partial:
                continue
            if cls[k] in VECTOR:
                bad = op.output in outputs or any(
                    cls[c] not in ("vector", "scale") or
                    (cls[c] == "scale" and ops[c].inputs[1] != op.output)
                    for c in consumers.get(op.output, [])) or (cls[k] == "vector" and any(
                        cls[producer[t]] not in VECTOR for t in op.inputs))
            else:
                bad = cls[k] == "scale" and cls[producer[op.inputs[1]]] not in VECTOR
            if bad:
                partial.add(k)
                cls[k] = "other"
                changed = True
    return partial

"""Patches with margins: every operator copied with its own padding rule, on a wider window.

`plans.plan_patches` computes each patch exactly: operators VALID on windows that shrink
layer by layer, explicit PADs on true borders, and a crop wherever an element-wise operator's
operands come with different halos (a residual ADD: the block input was computed for the
first convolution's halo). Where a runtime pays for every inserted node (TFLite Micro keeps
~180-260 B of persistent memory per PAD or STRIDED_SLICE, besides the activation copy) those
nodes can cost more than the patches save (CIFAR ResNets, `benchmarks/tflite/patches_resnet.py
--what-binds`).

`plan_margins` builds the other plan: each operator runs with its own padding rule (TFLite's
SAME or VALID) on the window its input has, so an interior side of a patch is padded where the
whole model reads real cells: the outputs near that side are *garbage* and the window carries
them as a margin. Through a stride-1 stage every tensor keeps its producer's window, so the
operands of a residual ADD share one window and no crop is needed; a patch needs no PAD at
all; one crop per split tensor cuts the patch's cell out of its window at the end. The cost:
windows do not shrink (more activation bytes and MACs than the exact plan). The search prices
both plans (`runtime.Runtime.implicit_padding`: the adapter can write an operator with its
own padding on a window) and keeps whichever its evaluator prefers.

Per axis (a window is the product of its row range and its column range), `axis_margins`
takes the exact plan's input ranges (`windows.axis_windows`) and propagates forward, per
tensor, its window and its *valid* range (the cells equal to the whole model's): a window
operator's output cell is valid when each of its taps lands on a valid cell or outside the
tensor (true padding, padded alike). The local padding must map the window onto the whole
model's grid (for stride ``s``: ``(a - pad_before + P) % s == 0``, TFLite's SAME pads
depending on the window's parity), so the input windows are widened by up to the region's
stride product on either side until every split tensor is valid over its cell.
"""
from __future__ import annotations

import numpy as np

from .errors import Refused
from .geometry import SOp, SpatialModel, Win, same_padding
from .plans import PNode, PatchPlan, reassemble
from .regions import Region
from .windows import axis_windows, grid_cells

# classes a margin plan runs (squeeze-and-excitation regions keep the exact plan)
MARGIN_CLASSES = ("window", "eltwise", "concat")


def pad_rule(op: SOp, size: int, axis: int, rule: str) -> str:
    """How window operator ``op`` pads along ``axis`` of an input of ``size`` cells under the
    runtime's ``rule`` (`runtime.Runtime.padding_rule`): ``same`` (its padding is TFLite's SAME
    rule for that size), ``valid`` (none), ``fixed`` (its own amounts on both sides, whatever
    the size: torch), ``explicit`` (a PAD operator), or "" (no margin plan)."""
    if op.is_pad:
        return "explicit"
    if rule in ("fixed", "declared"):
        return rule
    p, pa = op.pad[axis], op.pad_after[axis]
    if p == 0 and pa == 0:
        return "valid"
    _, pb, pe = same_padding(size, op.kernel[axis], op.stride[axis], op.dilation[axis])
    return "same" if (p, pa) == (pb, pe) else ""


def _forward(sm: SpatialModel, region: Region, axis: int, start: dict, rule: str):
    """Windows, valid ranges and pads along ``axis`` with the region inputs' windows
    ``start`` (tensor -> (a, b)); None when the local padding does not map onto the model's
    grid or a window is empty."""
    win: dict[int, tuple[int, int]] = dict(start)
    valid: dict[int, tuple[int, int]] = dict(start)
    pads: dict[int, tuple[int, int]] = {}
    for k in region.ops:
        op = sm.ops[k]
        size_out = sm.tensors[op.output].shape[1 + axis]
        if op.cls != "window":
            ws = {win[t] for t in op.inputs}
            if len(ws) != 1:
                return None  # operands on different windows would need a crop
            win[op.output] = ws.pop()
            vs = [valid[t] for t in op.inputs]
            valid[op.output] = (max(v[0] for v in vs), min(v[1] for v in vs))
            continue
        x = op.inputs[0]
        a, b = win[x]
        va, vb = valid[x]
        n = b - a
        size_in = sm.tensors[x].shape[1 + axis]
        k_, s, d = op.kernel[axis], op.stride[axis], op.dilation[axis]
        eff = (k_ - 1) * d + 1
        P = op.pad[axis]
        how = pad_rule(op, size_in, axis, rule)
        if how == "explicit":
            pb, pe = P, op.pad_after[axis]
            o0, m = a, n + pb + pe  # output o holds input o - P
            taps = [-P]
            s, d = 1, 1
        else:
            if how == "same":
                m, pb, pe = same_padding(n, k_, s, d)
            elif how in ("fixed", "declared"):
                pb, pe = P, (P if how == "fixed" else op.pad_after[axis])
                m = (n + pb + pe - eff) // s + 1
            elif how == "valid":
                pb = pe = 0
                m = (n - eff) // s + 1
            else:
                return None
            if (a - pb + P) % s:
                return None  # local outputs fall between the model's
            o0 = (a - pb + P) // s
            taps = [j * d - P for j in range(k_)]
        if m <= 0 or o0 < 0 or o0 + m > size_out:
            return None
        x = np.arange(o0, o0 + m)[:, None] * s + np.asarray(taps)[None, :]
        good = np.flatnonzero((((x >= va) & (x < vb)) | (x < 0) | (x >= size_in)).all(axis=1))
        if not good.size or good[-1] - good[0] + 1 != good.size:
            return None
        win[op.output] = (o0, o0 + m)
        valid[op.output] = (o0 + int(good[0]), o0 + int(good[-1]) + 1)
        pads[k] = (pb, pe)
    return win, valid, pads


def axis_margins(sm: SpatialModel, region: Region, axis: int, lo: int, hi: int, rule: str):
    """(window per tensor, pads (before, after) per window operator) along ``axis`` for the
    band ``[lo, hi)`` of the split tensors: the narrowest widening of the exact plan's input
    windows whose split tensors are valid over the band; `Refused` when none is."""
    for k in region.ops:
        op = sm.ops[k]
        if op.cls not in MARGIN_CLASSES:
            raise Refused(f"operator {op.index} ({op.kind}): no margin plan through a "
                          f"{op.cls} operator")
        if op.cls == "window" and not pad_rule(op, sm.tensors[op.inputs[0]].shape[1 + axis],
                                               axis, rule):
            raise Refused(f"operator {op.index} ({op.kind}): padding that is neither SAME "
                          "nor VALID")
    held = axis_windows(sm, region, axis, lo, hi)  # the exact plan's ranges, inputs too
    reach = 1
    for k in region.ops:
        reach *= sm.ops[k].stride[axis] if sm.ops[k].cls == "window" else 1
    reach = min(reach, 8)
    best = None
    for widen in range(2 * reach + 1):  # the narrowest first
        for left in range(widen + 1):
            start = {}
            for t in region.inputs:
                a, b = held.get(t, (0, 0))
                size = sm.tensors[t].shape[1 + axis]
                start[t] = (max(a - left, 0), min(b + widen - left, size))
            got = _forward(sm, region, axis, start, rule)
            if got is None:
                continue
            win, valid, pads = got
            if all(valid[t][0] <= lo and hi <= valid[t][1] for t in region.split):
                best = (win, pads)
                break
        if best is not None:
            return best
    raise Refused(f"no margin window along axis {axis} maps band [{lo}, {hi}) onto the "
                  "model's grid")


def _bands(sm: SpatialModel, region: Region, axis: int, n: int, cache: dict | None,
           rule: str):
    key = ("margins", region.start, region.length, axis, n, rule)
    if cache is not None and key in cache:
        return cache[key]
    size = region.hw[axis]
    if n > size:
        raise Refused(f"{n} bands do not fit a size of {size}")
    out = [axis_margins(sm, region, axis, round(i * size / n), round((i + 1) * size / n),
                        rule) for i in range(n)]
    if cache is not None:
        cache[key] = out
    return out


def margin_macs(sm: SpatialModel, region: Region, grid: tuple[int, int],
                cache: dict | None = None, *, rule: str) -> int:
    """MACs of `plan_margins` over all patches of ``grid`` (= its ``macs``), per axis as
    `windows.grid_macs`."""
    rows, cols = (_bands(sm, region, 0, grid[0], cache, rule),
                  _bands(sm, region, 1, grid[1], cache, rule))
    total = 0
    for k in region.ops:
        op = sm.ops[k]
        if op.is_pad:
            continue
        t = op.output
        sh = sum(w[t][1] - w[t][0] for w, _ in rows)
        sw = sum(w[t][1] - w[t][0] for w, _ in cols)
        total += sh * sw * sm.tensors[t].channels * op.macs_per_out
    return total


def plan_margins(sm: SpatialModel, region: Region, grid: tuple[int, int],
                 cache: dict | None = None, *, rule: str,
                 max_concat: int | None = None) -> PatchPlan:
    """The region patched with margins (module docstring): per patch, slices of the region
    inputs, every operator on its window with its own padding (``PNode.implicit``), a crop of
    each split tensor to the patch's cell; then the reassembly of `plans.plan_patches`.
    ``rule``: how the runtime's window operators pad a window (`Runtime.padding_rule`: only
    runtimes with `Runtime.implicit_padding` write these plans); ``max_concat``: as
    `plans.plan_patches`."""
    rows_n, cols_n = grid
    cells = grid_cells(*region.hw, rows_n, cols_n)
    rows = _bands(sm, region, 0, rows_n, cache, rule)
    cols = _bands(sm, region, 1, cols_n, cache, rule)
    plan = PatchPlan(region, (rows_n, cols_n), cells, margins=True)
    nodes = plan.nodes

    def add(nd: PNode) -> int:
        nodes.append(nd)
        return len(nodes) - 1

    for p, cell in enumerate(cells):
        (hw_, hp), (ww_, wp) = rows[p // cols_n], cols[p % cols_n]
        win = {t: Win(*hw_[t], *ww_[t]) for t in hw_}
        node_of: dict = {}
        for t in region.inputs:
            h, w = sm.tensors[t].hw
            whole = Win(0, h, 0, w)
            node_of[t] = ("t", t) if win[t] == whole else add(
                PNode("slice", t, win[t], (("t", t),), patch=p, base=whole))
        for k in region.ops:
            op = sm.ops[k]
            pads = (*hp[k], *wp[k]) if k in hp else (0, 0, 0, 0)
            node_of[op.output] = add(PNode("op", op.output, win[op.output],
                                           tuple(node_of[t] for t in op.inputs), op=k,
                                           pads=pads, patch=p, implicit=True))
            if not op.is_pad:
                plan.macs += sm.op_macs(op, win[op.output])
        for t in region.split:
            nd = node_of[t]
            if win[t] != cell:
                nd = add(PNode("slice", t, cell, (nd,), patch=p, base=win[t]))
            plan.result.setdefault(t, []).append(nd)
    plan.region_macs = sum(sm.op_macs(sm.ops[k]) for k in region.ops)
    reassemble(plan, max_concat)
    return plan

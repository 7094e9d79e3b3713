"""`windows.grid_macs`' band sums (issue 60 item 4: every band of every count walked at once,
numpy lanes, shared between keep modes and square axes) against `axis_windows` band by band,
the reference they replace: same sums, same tensors, same refusals; on random stacks with and
without squeeze-and-excitation blocks, dilated and strided windows, VALID padding, rows and
columns of different sizes, band counts past the walked batch."""
from __future__ import annotations

import numpy as np
import pytest

from memsched.patches import windows as W
from memsched.patches.errors import Refused
from memsched.patches.regions import pass_targets, regions
from patch_reference import stack_model

KINDS = ("CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "AVERAGE_POOL_2D", "SE")


def _reference(sm, region, axis, n, groups):
    """`_band_sums` as first written: `axis_windows` for each band."""
    out = []
    for group in groups:
        sums = {}
        for i in range(n):
            if group is None:
                size = region.hw[axis]
                if n > size:
                    raise Refused(f"{n} bands do not fit a size of {size}")
                held = W.axis_windows(sm, region, axis, round(i * size / n),
                                      round((i + 1) * size / n))
            else:
                rng = {}
                for t in group:
                    size = sm.tensors[t].hw[axis]
                    if n > size:
                        raise Refused(f"{n} bands do not fit a size of {size}")
                    rng[t] = (round(i * size / n), round((i + 1) * size / n))
                held = W.axis_windows(sm, region, axis, 0, 0, rng)
            if i == 0:
                sums = {t: 0 for t in held}
            for t in sums:
                a, b = held.get(t, (0, 0))
                sums[t] += b - a
        out.append(sums)
    return out


def _answer(f):
    try:
        return f()
    except Refused as e:
        return ("refused", str(e))


def _random_model(rng, se: bool):
    while True:
        specs = []
        for _ in range(int(rng.integers(2, 8))):
            kind = KINDS[int(rng.integers(len(KINDS) - (not se)))]
            if kind == "SE":
                specs.append(("SE", int(rng.integers(1, 4)), 1, 1, "SAME"))
                continue
            k = int(rng.integers(1, 4))
            if rng.random() < 0.2:  # a non-square kernel: the axes walk apart
                k = (k, int(rng.integers(1, 4)))
            specs.append((kind, k, int(rng.integers(1, 3)),
                           int(rng.integers(1, 3)) if rng.random() < 0.2 else 1,
                           "SAME" if rng.random() < 0.8 else "VALID"))
        try:
            side = int(rng.integers(6, 24))  # square maps half the time: one walk for both
            return stack_model(specs, side, side if rng.random() < 0.5 else
                               int(rng.integers(6, 24)), int(rng.integers(1, 4)),
                               residual=bool(rng.random() < 0.5))
        except ValueError:
            continue


@pytest.mark.parametrize("seed", range(16))
def test_band_sums_equal_band_by_band(seed):
    rng = np.random.default_rng(seed)
    sm = _random_model(rng, se=seed % 2 == 0)
    # regions from every start: those with one end share their walk (`_SharedWalk`), the
    # later starts reading the first steps of the earlier ones' (and the other way round)
    starts = list(range(len(sm.ops)))
    rng.shuffle(starts)
    regs, _ = regions(sm, starts=starts, se=True, exact_reductions=False)
    assert regs
    walks: dict = {}
    for r in regs:
        passes = pass_targets(sm, r)
        se = len(passes) > 1
        # one per region, both keep modes, the walks shared, as the evaluator keeps it
        cache: dict = {"walks": walks}
        for keep in (False, True):
            groups = (W._keep_targets(passes) if keep else passes) if se else [None]
            for axis in (0, 1):
                for n in (3, 1, 2, 8, 4, 10, 5, 16, 30):
                    got = _answer(lambda: W._band_sums(sm, r, axis, n, groups, keep, cache))
                    want = _answer(lambda: _reference(sm, r, axis, n, groups))
                    assert got == want, (seed, r.start, r.length, keep, axis, n)
                    if not isinstance(want, tuple):  # the same tensors, in the same order
                        assert [list(s) for s in got] == [list(s) for s in want]



@pytest.mark.parametrize("seed", range(12))
def test_shared_suffix_macs_equal_per_region(seed):
    """The search's MACs (`_GroupMacs`: walks from each region end and each pass's targets,
    shared by every region, suffix sums) against the per-region walk, grid by grid and in
    both keep modes: the same MACs and the same refusals, whatever order the regions come
    in (later regions read walks earlier ones began, deeper or shallower)."""
    rng = np.random.default_rng(100 + seed)
    sm = _random_model(rng, se=seed % 3 != 0)
    starts = list(range(len(sm.ops)))
    rng.shuffle(starts)
    regs, _ = regions(sm, starts=starts, se=True, exact_reductions=False)
    assert regs
    order = list(range(len(regs)))
    rng.shuffle(order)
    walks: dict = {}
    grids = [(1, 1), (1, 2), (2, 1), (2, 3), (3, 3), (8, 8), (10, 1), (16, 1), (5, 2), (30, 1)]
    seen = 0
    for i in order:
        r = regs[i]
        cache: dict = {"walks": walks}  # one per region, as the evaluator keeps it
        for g in grids:
            for keep in (False, True):
                got = _answer(lambda: W.grid_macs(sm, r, g, keep, cache))
                want = _answer(lambda: W.grid_macs(sm, r, g, keep))
                assert got == want, (seed, r.start, r.length, g, keep)
                seen += not isinstance(want, tuple)
    assert seen

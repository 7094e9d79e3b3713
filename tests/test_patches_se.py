"""Patch regions through squeeze-and-excitation blocks (issue 33, item 3): the generic
geometry (`memsched.patches`: reduce / vector / scale operators, passes over the patches,
partial sums) against the numpy reference, and TVM's `TilePatches` on MobileNetV3-like Relax
models (outputs equal, planned bytes lower)."""
from __future__ import annotations

import numpy as np
import pytest

from memsched.patches.errors import Refused
from memsched.patches.plans import plan_patches
from patch_reference import random_weights, run_plan, run_whole, stack_model
from memsched.patches.regions import is_se, pass_targets, regions
from memsched.patches.windows import grid_macs

KINDS = ("CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "SE")


def _random_stack(rng):
    specs = []
    for _ in range(int(rng.integers(2, 7))):
        kind = KINDS[int(rng.integers(len(KINDS)))]
        if kind == "SE":
            specs.append(("SE", int(rng.integers(1, 4)), 1, 1, "SAME"))
            continue
        k = int(rng.integers(1, 4))
        s = int(rng.integers(1, 3))
        specs.append((kind, k, s, 1, "SAME" if rng.random() < 0.8 else "VALID"))
    if not any(sp[0] == "SE" for sp in specs):
        specs.insert(int(rng.integers(len(specs) + 1)), ("SE", 2, 1, 1, "SAME"))
    return specs


def _check(sm, rng, floating: bool):
    regs, _ = regions(sm, se=True)
    weights = random_weights(sm, rng)
    h, w = sm.tensors[0].hw
    if floating:
        x = rng.standard_normal((h, w, sm.tensors[0].channels))
    else:
        x = rng.integers(-8, 9, (h, w, sm.tensors[0].channels))
    checked = 0
    for r in regs:
        whole = run_whole(sm, r.length, weights, {0: x})
        for g in ((1, 2), (2, 1), (2, 2), (3, 2), (3, 3)):
            for keep in (False, True) if is_se(sm, r) else (False,):
                try:
                    plan = plan_patches(sm, r, g, keep=keep)
                except Refused:
                    continue
                assert plan.macs == grid_macs(sm, r, g, keep=keep)
                got = run_plan(sm, plan, weights, {0: x})
                for t in r.split:
                    if floating:
                        np.testing.assert_allclose(got[t], whole[t], rtol=1e-5, atol=1e-5)
                    else:
                        assert np.array_equal(got[t], whole[t]), (r.length, g, t, keep)
                if keep:
                    # every operator once per patch: never more MACs than recomputing
                    assert plan.macs <= grid_macs(sm, r, g)
                    assert plan.se_mode == "keep"
                checked += is_se(sm, r)
    return checked


@pytest.mark.parametrize("seed", range(24))
def test_random_se_stacks_patched_equal_whole(seed):
    rng = np.random.default_rng(seed)
    while True:
        try:
            sm = stack_model(_random_stack(rng), int(rng.integers(8, 20)),
                             int(rng.integers(8, 20)), int(rng.integers(1, 4)),
                             residual=bool(rng.random() < 0.5))
            break
        except ValueError:
            continue
    _check(sm, rng, floating=False)
    _check(sm, rng, floating=True)


def test_two_se_blocks_three_passes():
    specs = [("CONV_2D", 3, 2, 1, "SAME"), ("DEPTHWISE_CONV_2D", 3, 1, 1, "SAME"),
             ("SE", 2, 1, 1, ""), ("CONV_2D", 1, 1, 1, "SAME"),
             ("DEPTHWISE_CONV_2D", 3, 2, 1, "SAME"), ("SE", 3, 1, 1, ""),
             ("CONV_2D", 1, 1, 1, "SAME")]
    sm = stack_model(specs, 16, 16, 3)
    regs, _ = regions(sm, se=True)
    last = max(regs, key=lambda r: r.length)
    assert last.length == len(sm.ops)
    assert len(pass_targets(sm, last)) == 3
    plan = plan_patches(sm, last, (2, 2))
    kinds = {nd.kind for nd in plan.nodes}
    assert {"partial", "accumulate", "reduce", "vector"} <= kinds
    # one reduce node per SE block, the partials over each patch's own cells only
    assert sum(nd.kind == "reduce" for nd in plan.nodes) == 2
    for nd in plan.nodes:
        if nd.kind == "partial":
            assert sum(nd.win.area for n2 in plan.nodes if n2.kind == "partial"
                       and n2.op == nd.op and n2.win == nd.win) == nd.win.area
    assert plan.macs > plan.region_macs  # the passes recompute
    assert _check(sm, np.random.default_rng(0), floating=False)
    assert _check(sm, np.random.default_rng(1), floating=True) >= 0


def test_se_is_opt_in():
    sm = stack_model([("CONV_2D", 3, 1, 1, "SAME"), ("SE", 2, 1, 1, ""),
                      ("CONV_2D", 3, 1, 1, "SAME")], 8, 8, 2)
    regs, why = regions(sm)
    assert max(r.length for r in regs) == 1  # stops at the mean, as before
    assert "se=True" in why
    regs, why = regions(sm, se=True)
    assert max(r.length for r in regs) == len(sm.ops)


def _graph_of(sm):
    """The `OpGraph` of a stack model (op v = operator v) and its tensor index."""
    from memsched.graph import GraphBuilder

    b = GraphBuilder("se")
    tid = {0: b.input("x", sm.tensors[0].nbytes)}
    index = [0]
    for op in sm.ops:
        v = b.op(f"op{op.index}", op.kind, [tid[t] for t in dict.fromkeys(op.inputs)],
                 [(sm.tensors[op.output].name, sm.tensors[op.output].nbytes)])
        tid[op.output] = b.ops[v].outputs[0]
        index.append(op.output)
    b.mark_output(tid[sm.outputs[0]])
    return b.build(), index


def search(sm, graph, index, runtime, *, se: bool | None = None, starts=(0,),
           frontier_overhead: float | None = None, **options):
    """The patch search of `memsched.patches.search_model` (the options resolved into one
    request, one evaluator, the sequence search over it) on a model described by hand: regions
    from ``starts`` (default: the model inputs only, not `region_starts`); ``se``: the
    runtime rewrites squeeze-and-excitation blocks (`Runtime.se`); ``frontier_overhead``: the
    MAC cap (brute force: the whole frontier); ``options``: `PatchOptions` fields
    (``max_regions=1``: the one-region search)."""
    import dataclasses

    from memsched.patches import Described
    from memsched.patches.evaluator import Evaluator, resolve
    from memsched.patches.runtime import runtime_of
    from memsched.patches.sequence import search_sequence

    rt = runtime_of(runtime)
    if se is not None:
        rt = dataclasses.replace(rt, se=se)
    request = resolve(options, rt, sm, starts=starts, frontier_overhead=frontier_overhead)
    return search_sequence(Evaluator(Described(sm, graph, index), rt, request))


SE_STACK = [("CONV_2D", 3, 2, 1, "SAME"), ("DEPTHWISE_CONV_2D", 3, 1, 1, "SAME"),
            ("SE", 2, 1, 1, ""), ("CONV_2D", 1, 1, 1, "SAME"), ("CONV_2D", 3, 2, 1, "SAME"),
            ("CONV_2D", 3, 2, 1, "SAME")]


def test_search_prices_se_regions():
    from memsched.memory import MemoryModel
    from memsched.patches import RuntimeMemory

    sm = stack_model(SE_STACK, 32, 32, 3)
    graph, index = _graph_of(sm)
    mem = RuntimeMemory("test", MemoryModel.get("tvm"))
    plain = search(sm, graph, index, mem, time_limit=2.0, max_regions=1)
    se = search(sm, graph, index, mem, time_limit=2.0, se=True, max_regions=1)
    assert all(c.region_ops <= 2 for c in plain.frontier)
    # regions through the SE block were planned and priced by the one evaluator
    priced = [k for k, p in se.plans.items() if len(pass_targets(sm, p.region)) > 1]
    assert priced and se.evaluated > plain.evaluated
    assert se.choice is None or se.choice.total < se.reordered.total
    # both ways through the SE block were priced, keeping never costs more MACs
    keys = {k[:3] for k, p in se.plans.items() if len(pass_targets(sm, p.region)) > 1}
    for k in keys:
        if (*k, True) in se.plans and (*k, False) in se.plans:
            assert se.plans[(*k, True)].macs <= se.plans[(*k, False)].macs


@pytest.mark.parametrize("seed", range(4))
def test_search_takes_the_cheaper_se_variant(seed):
    """Region and grid forced through an SE block: left to itself the search returns the
    lower total of the two variants (recompute, keep), each forced on its own."""
    from memsched.memory import MemoryModel
    from memsched.patches import RuntimeMemory

    rng = np.random.default_rng(seed)
    sm = stack_model(SE_STACK, int(rng.integers(16, 40)), int(rng.integers(16, 40)),
                     int(rng.integers(1, 4)), residual=bool(seed % 2))
    graph, index = _graph_of(sm)
    mem = RuntimeMemory("test", MemoryModel.get("tvm"))
    split = sm.tensors[sm.ops[-2].output].name
    grid = ((2, 2), (3, 1), (2, 3), (4, 4))[seed]
    got = {mode: search(sm, graph, index, mem, grid=grid, split=split, se=True,
                        time_limit=4.0, se_patches=mode).choice
           for mode in (None, "recompute", "keep")}
    assert got["keep"].keep and not got["recompute"].keep
    assert got[None].total == min(got["keep"].total, got["recompute"].total)
    assert got[None].keep == (got["keep"].total < got["recompute"].total) or \
        got["keep"].total == got["recompute"].total
    assert got["keep"].macs < got["recompute"].macs  # the halo'd pass is not run again


# ---------------------------------------------------------------------------- TVM
def _tvm_run(mod, x, pipe=None):
    import tvm
    from tvm import relax

    ex = tvm.compile(mod, target="llvm", relax_pipeline=pipe) if pipe is not None \
        else tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.heavy
@pytest.mark.parametrize("integer,layout", [(True, "NCHW"), (False, "NHWC")])
def test_tile_patches_through_se_small(integer, layout):
    from tvm import relax

    from memsched.generators.relax_cnn import mobilenet_v3_small, random_input
    from memsched.transform.tile_patches import TilePatches

    mod = mobilenet_v3_small(alpha=0.5, size=48, layout=layout, integer=integer, classes=10)
    folded = relax.transform.FoldConstant()(mod)
    # force a region through the first SE block: up to its scale (multiply)
    seen_mean, split = False, None
    for b in folded["main"].body.blocks[0].bindings:
        name = getattr(getattr(b.value, "op", None), "name", "")
        seen_mean |= name == "relax.mean"
        if seen_mean and name == "relax.multiply" and \
                int(b.var.ty.shape.values[1 if layout == "NHWC" else 2]) > 1:
            split = b.var.name
            break
    # float sums only with the opt-in (equal up to rounding); integer ones by default
    tiled = TilePatches(grid=(2, 2), split=split, time_limit=3.0,
                        exact_reductions=integer)(folded)
    attrs = tiled["main"].attrs
    assert "memsched.patches_grid" in attrs, attrs.get("memsched.patches_skipped")
    names = [b.var.name for b in tiled["main"].body.blocks[0].bindings]
    assert any(n.startswith("part") for n in names)  # partial sums emitted
    x = random_input(mod, 3)
    ref = _tvm_run(mod, x)
    out = _tvm_run(tiled, x)
    if integer:
        assert np.array_equal(ref, out)
    else:
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.heavy
def test_mbv3_small_int_planned_bytes_halved():
    import memsched
    from tvm import relax

    from memsched.generators.relax_cnn import mobilenet_v3_small, random_input
    from memsched.transform.tile_patches import TilePatches

    mod = mobilenet_v3_small(alpha=1.0, size=128, integer=True)
    folded = relax.transform.FoldConstant()(mod)
    tiled = TilePatches(time_limit=10.0)(folded)
    assert int(tiled["main"].attrs["memsched.patches_region_ops"]) > 0
    before = memsched.planned_bytes(mod)
    after = memsched.planned_bytes(tiled)
    assert before >= 2 * after, (before, after)
    x = random_input(mod, 1)
    assert np.array_equal(_tvm_run(mod, x), _tvm_run(tiled, x, memsched.pipeline()))


def _last_spatial(func, layout: str) -> str:
    """The last binding with H > 1 (the region's end: everything before the head)."""
    ax = 2 if layout == "NCHW" else 1
    names = [b.var.name for b in func.body.blocks[0].bindings
             if getattr(b.var.ty, "shape", None) is not None and
             len(b.var.ty.shape.values) == 4 and int(b.var.ty.shape.values[ax]) > 1]
    return names[-1]


# two random stacks in the suite, four more with -m heavy (each a TVM build and run, ~30 s)
@pytest.mark.parametrize("seed", [0, 1] + [pytest.param(s, marks=pytest.mark.heavy)
                                          for s in range(2, 6)])
def test_random_se_stacks_through_tvm(seed):
    """Random conv / depthwise / pool / SE stacks (`relax_cnn.random_se_stack`) through
    TVM's `TilePatches`, the region forced to end before the head (so through every SE
    block) with either way of getting the feature maps after a mean: built and run in TVM's
    VM, outputs equal to the unpatched module's (integer, exact by default: bit-equal; float,
    refused by default -- the grid asked for is then an error that says why -- and with
    ``exact_reductions=False`` within 1e-5)."""
    from tvm import relax

    from memsched.generators.relax_cnn import random_input, random_se_stack
    from memsched.transform.tile_patches import TilePatches

    integer = seed % 2 == 0
    layout = "NCHW" if seed % 3 else "NHWC"
    mod = random_se_stack(seed, layout, integer)
    folded = relax.transform.FoldConstant()(mod)
    x = random_input(mod, seed)
    ref = _tvm_run(mod, x)
    split = _last_spatial(folded["main"], layout)
    grid = ((2, 2), (1, 3), (3, 1))[seed % 3]
    if not integer:  # a float mean: refused by default; a grid asked for is an error, why
        from memsched.patches import PatchOptionsError

        with pytest.raises(PatchOptionsError, match="float32 sum"):
            TilePatches(grid=grid, split=split, time_limit=2.0)(folded)
    for mode in ("recompute", "keep"):
        tiled = TilePatches(grid=grid, split=split, time_limit=2.0, se_patches=mode,
                            exact_reductions=integer)(folded)
        attrs = tiled["main"].attrs
        assert "memsched.patches_grid" in attrs, attrs.get("memsched.patches_skipped")
        assert str(attrs["memsched.patches_se"]) == mode
        out = _tvm_run(tiled, x)
        if integer:
            assert np.array_equal(ref, out), mode
        else:
            np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- exact or refused
def test_inexact_reduction_rule():
    """`geometry.inexact_reduction`: an integer sum passes only when no sum of the cells can
    overflow its accumulator; a float sum only with ``float_sums``; an ordered combine always;
    an unknown accumulation never."""
    from memsched.patches.geometry import SOp, inexact_reduction

    def red(**kw):
        return SOp(0, "MEAN", "reduce", (0,), 1, **kw)

    i8 = (-128, 127)
    assert inexact_reduction(red(acc_dtype="int32", acc_range=i8), 32 * 32) == ""
    # 2**31 // 128 cells of -128 reach int32's minimum exactly; one more overflows
    assert inexact_reduction(red(acc_dtype="int32", acc_range=i8), (1 << 31) // 128) == ""
    assert "overflow" in inexact_reduction(red(acc_dtype="int32", acc_range=i8),
                                           (1 << 31) // 128 + 1)
    assert "overflow" in inexact_reduction(red(acc_dtype="int32"), 4)  # its own range
    assert inexact_reduction(red(acc_dtype="int32"), 1) == ""
    assert "overflow" in inexact_reduction(red(acc_dtype="uint8", acc_range=(0, 255)), 2)
    why = inexact_reduction(red(acc_dtype="float32"), 16)
    assert "float32 sum" in why and "exact_reductions=False" in why
    assert inexact_reduction(red(acc_dtype="float32"), 16, float_sums=True) == ""
    assert inexact_reduction(red(acc_dtype="float32", acc_ordered=True), 16) == ""
    assert "not known" in inexact_reduction(red(), 16)
    assert "not known" in inexact_reduction(red(), 16, float_sums=True)


@pytest.mark.parametrize("acc,through", [("int64", True), ("float32", False),
                                         ("int32", False)])
def test_search_never_through_an_inexact_reduction(acc, through):
    """Regions and the search stop before a reduction whose partial sums do not combine
    exactly (a float sum; an int32 sum of int32-range values, which may overflow), the reason
    in ``prefix_end``; ``exact_reductions=False`` lets a float sum through, not an overflow."""
    from memsched.memory import MemoryModel
    from memsched.patches import RuntimeMemory

    sm = stack_model(SE_STACK, 32, 32, 3, se_acc=acc)
    mean = next(k for k, op in enumerate(sm.ops) if op.cls == "reduce")
    regs, why = regions(sm, se=True)
    assert (max(r.length for r in regs) > mean) == through
    graph, index = _graph_of(sm)
    mem = RuntimeMemory("test", MemoryModel.get("tvm"))
    res = search(sm, graph, index, mem, time_limit=2.0, se=True, max_regions=1)
    assert res.candidates or res.frontier
    assert all((c.region_ops > mean) <= through for c in res.frontier)
    if not through:
        assert all(c.region_ops <= mean for c in res.candidates)
        assert f"operator {mean} (MEAN)" in res.prefix_end and res.prefix_end == why
        assert ("overflow" if acc.startswith("int") else "float32 sum") in why
        split = sm.tensors[sm.ops[-2].output].name  # past the SE block
        with pytest.raises(Refused, match="float32 sum|overflow"):
            search(sm, graph, index, mem, grid=(2, 2), split=split, se=True, time_limit=1.0)
    loose, _ = regions(sm, se=True, exact_reductions=False)
    assert (max(r.length for r in loose) > mean) == (acc != "int32")


def _int_se_module(from_int8: bool):
    """x (int8) -> astype int32 -> (from_int8: nothing; else a 1x1 int32 conv, whose values
    span int32) -> sum over H, W -> multiply back: an integer SE block in Relax (NHWC)."""
    import tvm
    from tvm import relax

    x = relax.Var("x", relax.TensorType((1, 8, 8, 4), "int8"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            c = bb.emit(relax.op.nn.conv2d(x, relax.const(np.ones((1, 1, 4, 4), "int8")), 1,
                                           0, data_layout="NHWC", kernel_layout="HWIO",
                                           out_dtype="int32"))
            t = bb.emit(relax.op.astype(bb.emit(relax.op.clip(c, -128, 127)), "int8"))
            xi = bb.emit(relax.op.astype(t, "int32"))
            if not from_int8:
                xi = bb.emit(relax.op.nn.conv2d(
                    xi, relax.const(np.ones((1, 1, 4, 4), "int32")), 1, 0,
                    data_layout="NHWC", kernel_layout="HWIO", out_dtype="int32"))
            # a sum (TVM's legalized int32 mean divides by an int64 count: an int64 vector)
            m = bb.emit(relax.op.sum(xi, axis=[1, 2], keepdims=True))
            y = bb.emit(relax.op.multiply(xi, m))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return tvm.IRModule({"main": bb.get()["main"]})


@pytest.mark.parametrize("from_int8", [True, False])
def test_tvm_integer_sum_range(from_int8):
    """`TilePatches`' description reads the summands' range off the graph: an int32 sum of
    int8 values (an ``astype``) is exact and carried through (built and run in TVM's VM:
    bit-equal); one of a conv's int32 outputs (any int32 value) may overflow and ends the
    region: the grid asked for is then an error that gives the reason."""
    from memsched.transform.tile_patches import TilePatches
    from memsched.transform.tile_patches_describe import describe_block

    mod = _int_se_module(from_int8)
    f = mod["main"]
    mean = next(op for op in describe_block(f, f.body.blocks[0]).sm.ops if op.cls == "reduce")
    assert mean.acc_dtype == "int32"
    assert mean.acc_range == ((-128, 127) if from_int8 else (-(1 << 31), (1 << 31) - 1))
    split = next(b.var.name for b in f.body.blocks[0].bindings
                 if getattr(getattr(b.value, "op", None), "name", "") == "relax.multiply")
    if from_int8:
        tiled = TilePatches(grid=(2, 2), split=split, time_limit=1.0)(mod)
        attrs = tiled["main"].attrs
        assert "memsched.patches_grid" in attrs, attrs.get("memsched.patches_skipped")
        x = np.random.default_rng(0).integers(-128, 128, (1, 8, 8, 4)).astype("int8")
        assert np.array_equal(_tvm_run(mod, x), _tvm_run(tiled, x))  # built, run: bit-equal
    else:  # the grid asked for cannot be applied: an error that says why
        from memsched.patches import PatchOptionsError

        with pytest.raises(PatchOptionsError, match="overflow"):
            TilePatches(grid=(2, 2), split=split, time_limit=1.0)(mod)


def _se_tflite_relax(tmp_path):
    from memsched.generators.tflite_synth import se_model
    from memsched.importers.load import load_relax

    path = tmp_path / "se_int8.tflite"
    path.write_bytes(se_model(quantized=True, size=16, width=8))
    return load_relax(str(path), None)


@pytest.mark.heavy
def test_int8_se_through_tvm_tflite_frontend(tmp_path):
    """An int8 SE .tflite imported by TVM's TFLite frontend: its MEAN is a float32 sum of
    dequantized values, so by default no region goes through it (the reason in
    ``memsched.patches_prefix_end``, a forced split past it refused); with
    ``exact_reductions=False`` the region runs through it as before and the int8 outputs
    stay within one quantization step (equal on this input; not guaranteed)."""
    from memsched.generators.relax_cnn import random_input
    from memsched.patches import PatchOptionsError
    from memsched.transform.tile_patches import TilePatches
    from memsched.transform.tile_patches_describe import describe_block

    mod = _se_tflite_relax(tmp_path)
    f = mod["main"]
    sm = describe_block(f, f.body.blocks[0]).sm
    mean = next(k for k, op in enumerate(sm.ops) if op.cls == "reduce")
    assert sm.ops[mean].acc_dtype == "float32"
    scale = next(k for k, op in enumerate(sm.ops) if op.cls == "scale")
    split = f.body.blocks[0].bindings[scale + 1].var.name  # the quantized scaled map
    attrs = TilePatches(time_limit=2.0)(mod)["main"].attrs
    assert "float32 sum" in str(attrs["memsched.patches_prefix_end"])
    assert int(attrs.get("memsched.patches_region_ops", 0)) <= mean
    with pytest.raises(PatchOptionsError, match="float32 sum"):  # the forced grid: an error
        TilePatches(grid=(2, 2), split=split, time_limit=2.0)(mod)
    tiled = TilePatches(grid=(2, 2), split=split, time_limit=2.0,
                        exact_reductions=False)(mod)
    attrs = tiled["main"].attrs
    assert "memsched.patches_grid" in attrs, attrs.get("memsched.patches_skipped")
    assert int(attrs["memsched.patches_region_ops"]) > scale
    x = random_input(mod, 0)
    ref, out = _tvm_run(mod, x), _tvm_run(tiled, x)
    assert np.abs(ref.astype(int) - out.astype(int)).max() <= 1

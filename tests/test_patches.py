"""Patch-based execution: window geometry against brute force, patched regions against the whole
computation (numpy reference), the search, and the .tflite rewrite run in LiteRT / TFLite Micro."""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from board_checks import assert_tflite_equal_on_board  # noqa: E402

from memsched.patches.errors import Refused
from memsched.patches.geometry import Win, bbox, read_cells
from memsched.patches.plans import pad_sources, plan_patches
from patch_reference import random_weights, run_plan, run_whole, stack_model
from memsched.patches.regions import regions
from memsched.patches.windows import grid_macs, windows

KINDS = ["CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D", "AVERAGE_POOL_2D", "PAD"]


@st.composite
def stacks(draw, max_ops=4):
    n = draw(st.integers(1, max_ops))
    specs = []
    for _ in range(n):
        kind = draw(st.sampled_from(KINDS))
        if kind == "PAD":
            specs.append(("PAD", draw(st.integers(1, 2)), 1, 1, ""))
            continue
        k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))  # rectangular kernels,
        s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))  # strides and dilations too
        d = (draw(st.integers(1, 3)), draw(st.integers(1, 3))) \
            if kind in ("CONV_2D", "DEPTHWISE_CONV_2D") else 1
        specs.append((kind, k, s, d, draw(st.sampled_from(["SAME", "VALID"]))))
    h = draw(st.integers(3, 20))
    w = draw(st.integers(3, 20))
    residual = draw(st.booleans())
    concat = draw(st.booleans())
    try:
        sm = stack_model(specs, h, w, 2, residual=residual, concat=concat)
    except ValueError:
        assume(False)
    return sm


def _brute_window(op, out: Win, in_hw) -> Win | None:
    cells = set()
    for oh in range(out.h0, out.h1):
        for ow in range(out.w0, out.w1):
            cells |= read_cells(op, 0, 0, in_hw[0], in_hw[1], oh, ow)
    if not cells:
        return None
    hs = [c[0] for c in cells]
    ws = [c[1] for c in cells]
    return Win(min(hs), max(hs) + 1, min(ws), max(ws) + 1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks(), st.data())
def test_window_rule_equals_brute_force(sm, data):
    """Every op: the clipped window of an output window is the bounding box of the input cells
    its output cells read, tap by tap; a whole stack back-propagates layer by layer so."""
    for op in sm.ops:
        if op.cls != "window":
            continue
        oh, ow = sm.tensors[op.output].hw
        ih, iw = sm.tensors[op.inputs[0]].hw
        h0 = data.draw(st.integers(0, oh - 1))
        h1 = data.draw(st.integers(h0 + 1, oh))
        w0 = data.draw(st.integers(0, ow - 1))
        w1 = data.draw(st.integers(w0 + 1, ow))
        out = Win(h0, h1, w0, w1)
        brute = _brute_window(op, out, (ih, iw))
        got = op.read_window(out, (ih, iw))
        if brute is None:
            assert got.area == 0
        else:
            assert got == brute
    regs, _ = regions(sm)
    r = regs[-1]
    h, w = r.hw
    cell = Win(h // 3, max(h // 3 + 1, 2 * h // 3), w // 3, max(w // 3 + 1, 2 * w // 3))
    try:
        held, reads = windows(sm, r, cell)
    except Refused:
        return
    for k in r.ops:  # each layer's held input window: brute force over the held output window
        op = sm.ops[k]
        for t in op.inputs:
            if op.cls != "window":
                continue
            consumers = [c for c in sm.consumers[t] if c < r.length]
            wins = []
            for c in consumers:
                cop = sm.ops[c]
                if cop.cls == "window":
                    wins.append(_brute_window(cop, held[cop.output], sm.tensors[t].hw))
                else:
                    wins.append(held[cop.output])
            if all(x is not None for x in wins):
                assert held[t] == bbox(wins)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks(), st.integers(1, 4), st.integers(1, 4), st.integers(0, 2 ** 16))
def test_patched_region_computes_the_same(sm, rows, cols, seed):
    """Patch by patch (slices, explicit border pads, VALID ops, concatenations) the split
    tensors equal the whole computation, for every region and grid; MACs from the per-axis
    windows equal the plan's."""
    rng = np.random.default_rng(seed)
    weights = random_weights(sm, rng)
    x = {0: rng.integers(-5, 6, (*sm.tensors[0].hw, sm.tensors[0].channels))}
    regs, _ = regions(sm)
    whole = run_whole(sm, len(sm.ops), weights, x)
    for r in regs:
        g = (min(rows, r.hw[0]), min(cols, r.hw[1]))
        try:
            plan = plan_patches(sm, r, g)
        except Refused as e:
            assert "AVERAGE_POOL_2D" in str(e) or "only padding" in str(e)
            continue
        got = run_plan(sm, plan, weights, x)
        for t in r.split:
            assert np.array_equal(got[t], whole[t]), (r.length, g, t)
        assert grid_macs(sm, r, g) == plan.macs


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks(), st.integers(1, 24), st.integers(1, 3), st.integers(0, 2 ** 16))
def test_regions_after_the_input_and_many_bands(sm, rows, cols, seed):
    """Regions that start after operator 0..n-1 (the operators before run whole, the region
    slices their outputs) and grids of up to 24 height bands (reassembled by chained
    CONCATENATIONs of at most TFLite Micro's 10 inputs) compute the split tensors exactly."""
    max_inputs = 10

    rng = np.random.default_rng(seed)
    weights = random_weights(sm, rng)
    x = {0: rng.integers(-5, 6, (*sm.tensors[0].hw, sm.tensors[0].channels))}
    whole = run_whole(sm, len(sm.ops), weights, x)
    regs, _ = regions(sm, starts=range(len(sm.ops)))
    for r in regs:
        assert all(t not in {sm.ops[k].output for k in r.ops} for t in r.inputs)
        g = (min(rows, r.hw[0]), min(cols, r.hw[1]))
        try:
            plan = plan_patches(sm, r, g, max_concat=max_inputs)
        except Refused as e:
            assert "AVERAGE_POOL_2D" in str(e) or "only padding" in str(e)
            continue
        assert all(len(nd.inputs) <= max_inputs for nd in plan.nodes)
        # without a limit: one concatenation per row and one of the rows
        free = plan_patches(sm, r, g)
        assert sum(nd.kind == "concat" for nd in free.nodes) <= len(r.split) * (g[0] + 1)
        assert all(sm.producer.get(ref[1], -1) < r.start for nd in plan.nodes
                   for ref in nd.inputs if isinstance(ref, tuple))
        got = run_plan(sm, plan, weights, whole)  # region inputs: the whole tensors before it
        for t in r.split:
            assert np.array_equal(got[t], whole[t]), (r.start, r.length, g, t)
        assert grid_macs(sm, r, g) == plan.macs
        # the region inputs padded once, whole (issue 58 item 3): fewer pads, the same values
        padded = pad_sources(plan)
        if padded is not None:
            assert padded.padded_sources and padded.macs == plan.macs
            pads = [sum(nd.kind == "pad" for nd in p.nodes) for p in (plan, padded)]
            assert pads[1] < pads[0]
            got = run_plan(sm, padded, weights, whole)
            for t in r.split:
                assert np.array_equal(got[t], whole[t]), ("padded", r.start, r.length, g, t)


def test_refused_grid_and_reason():
    sm = stack_model([("AVERAGE_POOL_2D", 3, 1, 1, "SAME")], 8, 8, 2)
    r = regions(sm)[0][0]
    with pytest.raises(Refused, match="AVERAGE_POOL_2D"):
        plan_patches(sm, r, (2, 2))
    with pytest.raises(Refused, match="does not fit"):
        plan_patches(sm, r, (9, 1))


# ---------------------------------------------------------------------------- .tflite
tflite = pytest.importorskip("ai_edge_litert")


def _small_mobilenet():
    from memsched.generators.tflite_synth import mobilenet_like

    return mobilenet_like(blocks=4, width=8, size=32)


def _pool_model() -> bytes:
    """int8 conv -> MAX_POOL_2D 3x3/2 SAME (border pads: PADV2 with -128) -> depthwise 5x5 ->
    AVERAGE_POOL_2D 2x2/2 VALID -> conv -> RESHAPE -> FULLY_CONNECTED."""
    from memsched.generators.tflite_synth import _Net

    net = _Net("pools", True, 0)
    s = net.s

    def pool(x, shape, kind, k, st, same):
        oh, ow = ((-(-shape[1] // st), -(-shape[2] // st)) if same else
                  ((shape[1] - k) // st + 1, (shape[2] - k) // st + 1))
        net.n += 1
        o = net.act(f"pool{net.n}", [1, oh, ow, shape[3]], like=x)
        po = s.Pool2DOptionsT()
        po.padding = s.Padding.SAME if same else s.Padding.VALID
        po.strideW = po.strideH = st
        po.filterWidth = po.filterHeight = k
        net.b.op(kind, [x], [o], s.BuiltinOptions.Pool2DOptions, po)
        return o, [1, oh, ow, shape[3]]

    x = net.act("x", [1, 22, 22, 3], 0.05, 0)
    net.b.inputs = [x]
    t, sh = net.conv(x, [1, 22, 22, 3], 8)
    t, sh = pool(t, sh, "MAX_POOL_2D", 3, 2, True)
    t, sh = net.conv(t, sh, 8, k=5, depthwise=True)
    t, sh = pool(t, sh, "AVERAGE_POOL_2D", 2, 2, False)
    t, sh = net.conv(t, sh, 8)
    n = sh[1] * sh[2] * sh[3]
    r, _ = net.reshape(t, [1, n])
    net.b.outputs = [net.fc(r, n, 4)]
    return net.b.finish()


def test_search_frontier_and_choice():
    from memsched.tflite.format.read import read_tflite
    from memsched.tflite.patch.describe import spatial_model
    from memsched.tflite.memory.model import TFLMMemory
    from test_patches_se import search

    tg = read_tflite(_small_mobilenet())
    sm = spatial_model(tg)
    res = search(sm, tg.graph, tg.tensor_index, TFLMMemory(n_tensors=len(tg.subgraph.tensors)),
                 time_limit=2.0, max_regions=1)
    assert res.frontier
    macs = [c.macs for c in res.frontier]
    totals = [c.total for c in res.frontier]
    assert macs == sorted(macs) and totals == sorted(totals, reverse=True)
    if res.choice is not None:
        assert res.choice.overhead <= 0.3 and res.choice.total < res.reordered.total
    assert res.reordered.total <= res.original.total
    d = res.as_dict()
    assert d["original"]["grid"] == "1x1" and "frontier" in d


@pytest.mark.parametrize("model,kw", [("mobilenet", {"grid": "2x2"}),
                                      ("pad_slice", {"grid": "3x3", "split": "conv2"}),
                                      ("residual_concat", {"grid": "3x2", "split": "sum"}),
                                      ("pools", {"grid": "3x3", "region_start": 0,
                                                 "padding": "explicit"}),
                                      ("pools", {"grid": "3x3", "region_start": 0,
                                                 "padding": "margins"}),
                                      ("residual_concat", {"grid": "2x3", "split": "sum",
                                                           "padding": "margins"})])
def test_tile_tflite_outputs_equal(tmp_path, model, kw):
    """The rewrite runs in stock LiteRT and TFLite Micro with bit-equal outputs."""
    from memsched.generators.tflite_synth import pad_slice_model, residual_concat_model
    from memsched.tflite.format.read import read_tflite
    from memsched.tflite.patch.tile import compare_outputs, tile_tflite
    from memsched.tflite import tflm

    data = {"mobilenet": _small_mobilenet, "pad_slice": lambda: pad_slice_model(size=12),
            "residual_concat": lambda: residual_concat_model(quantized=True, size=12),
            "pools": _pool_model}[model]()
    src = tmp_path / "m.tflite"
    src.write_bytes(data)
    dst = tmp_path / "m_tiled.tflite"
    # the rewrite's structure for these forced choices: priced on tensors only (target=None;
    # the Cortex-M prices, with CMSIS-NN's scratch, pick smaller regions on these tiny models)
    out, res = tile_tflite(str(src), str(dst), offline_plan=True, time_limit=2.0, target=None,
                           **kw)
    assert dst.read_bytes() == out
    assert res.choice is not None and res.ops_after > res.ops_before
    kinds = {op.kind for op in read_tflite(out).graph.ops}
    assert "STRIDED_SLICE" in kinds and "CONCATENATION" in kinds
    if model == "pools" and kw["padding"] == "explicit":  # MAX_POOL_2D's border padding:
        assert "PADV2" in kinds  # PADV2 with the int8 minimum
    if kw.get("padding") == "margins":  # no PAD: operators keep their own padding
        assert res.choice.margins and not kinds & {"PAD", "PADV2"}
    # the search priced the constants the writer adds: one tensor per distinct value
    from memsched.tflite.patch.describe import spatial_model
    from memsched.tflite.memory.model import new_constants

    sm = spatial_model(read_tflite(data))
    priced = [new_constants(sm, p.nodes) for p in res.search.plans_of(res.choice)]
    names = [t.name.decode() if isinstance(t.name, bytes) else t.name
             for t in read_tflite(out).subgraph.tensors]
    written = sum(n.endswith(("/begin", "/end", "/paddings", "/value")) or
                  n == "memsched/patch_strides" for n in names)
    assert written == priced[0] if len(priced) == 1 else 0 < written <= sum(priced)
    d = res.as_dict(curves=True)
    assert d["patched"] is True
    assert max(d["curves"]["patched"]) == res.peak == d["peak_bytes"]
    assert len(d["curves"]["original"]) == res.ops_before
    cmp = compare_outputs(str(src), str(dst), count=1, tflm=tflm.available())
    assert cmp["litert_equal"]
    assert cmp["tflm_equal"] in (True, None)
    # a forced grid on a tiny model may cost more than it saves: outputs only
    assert_tflite_equal_on_board(src, dst, tmp_path, never_larger=False)


def test_rewrite_applies_regions_in_sequence(tmp_path):
    """Two regions in one file (each its own grid; the second slices the first's reassembled
    split tensor, numbered as in the original file): bit-equal in LiteRT and TFLite Micro."""
    from memsched.patches.plans import plan_patches
    from memsched.patches.regions import regions
    from memsched.tflite.format.read import read_tflite
    from memsched.tflite.patch.describe import spatial_model
    from memsched.tflite.patch.tile import compare_outputs, rewrite_model
    from memsched.tflite.format.write import finish_model
    from memsched.tflite import tflm

    src = tmp_path / "m.tflite"
    src.write_bytes(_small_mobilenet())
    tg = read_tflite(str(src))
    sm = spatial_model(tg)
    first = min((r for r in regions(sm)[0] if r.length >= 3), key=lambda r: r.length)
    second = max(regions(sm, [first.length])[0], key=lambda r: r.length)
    plans = [plan_patches(sm, first, (3, 3)), plan_patches(sm, second, (2, 1))]
    dst = tmp_path / "two.tflite"
    dst.write_bytes(finish_model(rewrite_model(tg, sm, plans)))
    ops = read_tflite(str(dst)).graph.ops
    assert len(ops) == len(sm.ops) - second.length + sum(len(p.nodes) for p in plans) + \
        (second.start - first.length)
    cmp = compare_outputs(str(src), str(dst), count=1, tflm=tflm.available())
    assert cmp["litert_equal"] and cmp["tflm_equal"] in (True, None)
    assert_tflite_equal_on_board(src, dst, tmp_path, never_larger=False)  # no offline plan


def _float_input_model(size: int = 48) -> bytes:
    """float32 input -> QUANTIZE (operator 0) -> int8 conv 3x3/2 -> depthwise -> conv 1x1 ->
    depthwise -> RESHAPE -> FULLY_CONNECTED: the MCU-style model whose float input a region
    starting at the model input would keep live through every patch."""
    from memsched.generators.tflite_synth import _Net

    net = _Net("float_in", True, 0)
    s = net.s
    shape = [1, size, size, 3]
    xf = net.b.tensor("input", shape, s.TensorType.FLOAT32)
    net.b.inputs = [xf]
    x = net.act("input_q", shape, 0.02, 0)
    net.b.op("QUANTIZE", [xf], [x], s.BuiltinOptions.QuantizeOptions, s.QuantizeOptionsT())
    t, sh = net.conv(x, shape, 8, k=3, stride=2)
    t, sh = net.conv(t, sh, 8, depthwise=True)
    t, sh = net.conv(t, sh, 12, k=1)
    t, sh = net.conv(t, sh, 12, depthwise=True, stride=2)
    n = sh[1] * sh[2] * sh[3]
    r, _ = net.reshape(t, [1, n])
    net.b.outputs = [net.fc(r, n, 4)]
    return net.b.finish()


@pytest.mark.parametrize("kw", [{"grid": "3x1"}, {"grid": "12x1", "split": "conv2"},
                                {"grid": "21x1", "split": "conv3"}])
def test_tile_float_input_region_after_quantize(tmp_path, kw):
    """A float-input model: the region starts after the QUANTIZE (which runs whole, so the
    float input dies before the patches; nothing slices it), and height bands beyond
    CONCATENATION's 10 inputs are reassembled by chained CONCATENATIONs; the file runs
    bit-equal in LiteRT and TFLite Micro."""
    from memsched.tflite.format.read import read_tflite
    from memsched.tflite.patch.tile import compare_outputs, tile_tflite
    from memsched.tflite import tflm

    src = tmp_path / "m.tflite"
    src.write_bytes(_float_input_model())
    dst = tmp_path / "m_tiled.tflite"
    out, res = tile_tflite(str(src), str(dst), offline_plan=True, time_limit=4.0, target=None,
                           **kw)
    c = res.choice
    assert c is not None and c.region_start >= 1
    tg = read_tflite(out)
    g = tg.graph
    assert g.ops[0].kind == "QUANTIZE"
    (inp,) = g.input_tensors
    assert [g.ops[v].kind for v in g.tensors[inp].consumers] == ["QUANTIZE"]
    concats = [op for op in g.ops if op.kind == "CONCATENATION"]
    assert all(len(op.inputs) <= 10 for op in concats)
    if kw.get("grid") in ("12x1", "21x1"):
        assert len(concats) >= 2  # chained
    b = res.as_dict()["bound"]
    assert b["floor"] <= c.total and b["bound_by"] in ("model_input", "before_region",
                                                       "after_region")
    cmp = compare_outputs(str(src), str(dst), count=2, tflm=tflm.available())
    assert cmp["litert_equal"]
    assert cmp["tflm_equal"] in (True, None)
    assert_tflite_equal_on_board(src, dst, tmp_path, never_larger=False)  # forced grids


def test_inplace_quantize_offline_plan(tmp_path):
    """With an offline plan the leading float-to-int8 QUANTIZE runs in place: its output starts
    at the float input's offset (TFLM's kernel reads element i before writing it), the checker
    accepts exactly that pair, TFLite Micro runs the file bit-equal in a smaller arena than
    without the alias; any other overlap of the pair is still refused."""
    from memsched.tflite import tflm
    from memsched.tflite.format.check import check_model
    from memsched.tflite.format.read import read_tflite
    from memsched.tflite.memory.model import quantize_aliases
    from memsched.tflite.patch.tile import compare_outputs, tile_tflite
    from memsched.tflite.format.write import read_offline_plan, set_offline_plan

    src = tmp_path / "m.tflite"
    src.write_bytes(_float_input_model())
    dst = tmp_path / "m_tiled.tflite"
    out, res = tile_tflite(str(src), str(dst), offline_plan=True, time_limit=4.0, grid="3x1")
    model = read_tflite(out).model
    (x, y, v), = quantize_aliases(model)
    offsets = read_offline_plan(model)
    assert offsets[x] == offsets[y] >= 0
    assert check_model(model).ok
    cmp = compare_outputs(str(src), str(dst), count=2, tflm=tflm.available())
    assert cmp["litert_equal"] and cmp["tflm_equal"] in (True, None)
    # the same file planned without the alias needs more
    plain = tmp_path / "plain.tflite"
    plain.write_bytes(tile_tflite(str(src), None, offline_plan=False, time_limit=4.0,
                                  grid="3x1")[0])
    if tflm.available():
        assert tflm.min_arena_bytes(str(dst)) < tflm.min_arena_bytes(str(plain))
    # an output 16 bytes above the input's start overlaps bytes not yet read: refused
    bad = list(offsets)
    bad[y] = offsets[x] + 16
    set_offline_plan(model, bad)
    assert not check_model(model).ok
    assert_tflite_equal_on_board(src, dst, tmp_path, count=2, never_larger=False)  # forced


def test_tile_row_views(tmp_path):
    """Windows of a narrow-channel map read as rows (issue 58 item 3): a RESHAPE views the
    3-channel input as [1, H, W*C], each STRIDED_SLICE cuts rows x columns (one memcpy per
    row) and a RESHAPE views its cut as the NHWC window. Under the offline plan every such
    RESHAPE's output sits at its input's offset (TFLite Micro's kernel then copies nothing):
    the independent checker accepts exactly those pairs, the search's instructions and
    persistent bytes equal the written file's, outputs are bit-equal in LiteRT, TFLite Micro
    and on the board, where the same plan runs fewer instructions than with 4-D slices."""
    from memsched.generators.tflite_synth import mobilenet_like
    from memsched.tflite import tflm
    from memsched.tflite.format.check import check_model
    from memsched.tflite.format.read import read_tflite
    from memsched.tflite.memory.arena import arena
    from memsched.tflite.memory.instructions import model_instructions
    from memsched.tflite.memory.model import VIEW_SUFFIX, reshape_aliases
    from memsched.tflite.patch.tile import TileError, compare_outputs, tile_tflite
    from memsched.tflite.format.write import read_offline_plan, set_offline_plan

    src = tmp_path / "m.tflite"
    src.write_bytes(mobilenet_like(blocks=4, size=48, width=8))
    dst, plain = tmp_path / "views.tflite", tmp_path / "plain.tflite"
    out, res = tile_tflite(str(src), str(dst), offline_plan=True, grid="2x2", views=True,
                           padding="explicit")
    flat, res0 = tile_tflite(str(src), str(plain), offline_plan=True, grid="2x2",
                             views=False, padding="explicit")
    assert res.choice is not None and res.choice.label == res0.choice.label  # the same plan
    model = read_tflite(out).model
    aliases = reshape_aliases(model)
    slices = sum(op.kind == "STRIDED_SLICE" for op in read_tflite(out).graph.ops)
    assert len(aliases) == slices + 1  # one per cut, one view of the input they share
    offsets = read_offline_plan(model)
    assert all(0 <= offsets[x] == offsets[y] for x, y, _ in aliases)
    assert check_model(model).ok
    assert res.views and any("RESHAPE view" in n for n in res.notes) and not res0.views
    # the search priced what was written: instructions and the total arena's persistent part
    assert model_instructions(out).total == res.choice.instructions
    assert model_instructions(flat).total == res0.choice.instructions
    assert res.choice.instructions < res0.choice.instructions
    assert res.arena_bytes == arena(out).arena_bytes
    assert res.choice.total - res0.choice.total == arena(out).tail_bytes - arena(flat).tail_bytes
    # a view moved off its input's offset overlaps it: refused
    x, y, _ = aliases[0]
    bad = list(offsets)
    bad[y] = offsets[x] + 16
    set_offline_plan(model, bad)
    assert not check_model(model).ok
    # views are written under an offline plan on the Cortex-M only
    with pytest.raises(TileError, match="offline_plan"):
        tile_tflite(str(src), None, grid="2x2", views=True)
    names = [t.name.decode() if isinstance(t.name, bytes) else t.name
             for t in read_tflite(out).subgraph.tensors]
    assert sum(n.endswith(VIEW_SUFFIX) for n in names) == len(aliases)
    cmp = compare_outputs(str(src), str(dst), count=2, tflm=tflm.available())
    assert cmp["litert_equal"] and cmp["tflm_equal"] in (True, None)
    _, rb = assert_tflite_equal_on_board(src, dst, tmp_path, count=2, never_larger=False)
    _, rp = assert_tflite_equal_on_board(src, plain, tmp_path / "plain", never_larger=False)
    assert rb["min_arena_bytes"] == res.arena_bytes and rp["min_arena_bytes"] == res0.arena_bytes
    assert rb["invoke_instructions"] < rp["invoke_instructions"]


def test_tile_one_axis_windows_as_gathers(tmp_path):
    """A window that cuts one spatial axis (row bands, column strips, the crops before a
    residual ADD) is written as a GATHER of consecutive indices (issue 58 item 3: fewer
    instructions and persistent bytes than STRIDED_SLICE); a window cutting both axes stays a
    STRIDED_SLICE. The search prices what is written: instructions equal the file's
    prediction and the total arena equals the board's; outputs bit-equal in LiteRT, TFLite
    Micro and on the board."""
    from memsched.generators.tflite_synth import mobilenet_like
    from memsched.tflite import tflm
    from memsched.tflite.format.read import read_tflite
    from memsched.tflite.memory.instructions import model_instructions
    from memsched.tflite.patch.tile import compare_outputs, tile_tflite

    src = tmp_path / "m.tflite"
    src.write_bytes(mobilenet_like(blocks=4, size=32, width=8))
    for grid in ("3x1", "1x2", "2x2"):
        dst = tmp_path / f"g{grid}.tflite"
        out, res = tile_tflite(str(src), str(dst), offline_plan=True, grid=grid,
                               padding="explicit", views=False, time_limit=10)
        kinds = [op.kind for op in read_tflite(out).graph.ops]
        if grid == "2x2":  # every patch's window cuts rows and columns
            assert "STRIDED_SLICE" in kinds and "GATHER" not in kinds
        else:
            assert "GATHER" in kinds and "STRIDED_SLICE" not in kinds
        assert model_instructions(out).total == res.choice.instructions
        cmp = compare_outputs(str(src), str(dst), count=2, tflm=tflm.available())
        assert cmp["litert_equal"] and cmp["tflm_equal"] in (True, None)
        if grid == "3x1":
            _, rb = assert_tflite_equal_on_board(src, dst, tmp_path / grid,
                                                 never_larger=False)
            assert rb["min_arena_bytes"] == res.arena_bytes


def test_tile_row_views_of_a_float_input(tmp_path):
    """Views of float windows (4-byte elements) that each patch's QUANTIZE then reads: the
    checker tells the view pairs from an in-place QUANTIZE's (only a QUANTIZE whose output is
    at its input's offset overwrites); bit-equal on the host and the board."""
    from memsched.tflite import tflm
    from memsched.tflite.format.check import check_model
    from memsched.tflite.format.read import read_tflite
    from memsched.tflite.memory.model import reshape_aliases
    from memsched.tflite.patch.tile import compare_outputs, tile_tflite

    src = tmp_path / "m.tflite"
    src.write_bytes(_float_input_model())
    dst = tmp_path / "m_views.tflite"
    out, res = tile_tflite(str(src), str(dst), offline_plan=True, region_start=0, grid="2x2",
                           views=True)
    model = read_tflite(out).model
    assert reshape_aliases(model) and check_model(model).ok
    cmp = compare_outputs(str(src), str(dst), count=2, tflm=tflm.available())
    assert cmp["litert_equal"] and cmp["tflm_equal"] in (True, None)
    assert_tflite_equal_on_board(src, dst, tmp_path, count=2, never_larger=False)  # forced


def test_tile_tflite_errors(tmp_path):
    from memsched.tflite.format.read import TFLiteModelError
    from memsched.tflite.patch.tile import tile_tflite

    src = tmp_path / "m.tflite"
    src.write_bytes(_small_mobilenet())
    for grid in ("3", "axb", "0x2"):
        with pytest.raises(TFLiteModelError) as e:
            tile_tflite(str(src), grid=grid)
        assert "\n" not in str(e.value)
    with pytest.raises(TFLiteModelError, match="no patch region ends at"):
        tile_tflite(str(src), split="no_such_tensor")
    with pytest.raises(ValueError):
        tile_tflite(b"not a model")


@pytest.mark.heavy
def test_mobilenet_v2_tflm_total_arena(tmp_path):
    """Benchmark model (int8 MobileNetV2 0.35 at 96 px): TFLM's minimal total arena shrinks by
    about 2x within +30 % MACs, the persistent estimate plus the offline plan is within 1 % of
    the measurement, and
    outputs stay bit-equal in LiteRT and TFLM."""
    import importlib.util
    import os

    from memsched.tflite.patch.tile import measure_tile, tile_tflite
    from memsched.tflite import tflm

    if not tflm.available():
        pytest.skip("tflite-micro not installed")
    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "tflite", "patches.py")
    spec = importlib.util.spec_from_file_location("bench_patches", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    src, dst = tmp_path / "m.tflite", tmp_path / "p.tflite"
    src.write_bytes(bench.mobilenet_v2(0.35, 96))
    # planned for the host package, which this test measures (`tflm.min_arena_bytes`)
    _, res = tile_tflite(str(src), str(dst), offline_plan=True, target="host")
    m = measure_tile(str(src), str(dst), count=1)
    assert m["litert_equal"] and m["tflm_equal"]
    assert res.choice.overhead <= 0.3
    assert m["tflm_arena_ratio"] >= 1.8
    # the persistent estimate + the written offline plan's extent (= the certified peak when
    # the packer reaches it) is TFLM's measured total within 1 %
    est = res.choice.persistent + (res.offline_arena or res.choice.peak)
    assert res.offline_arena is None or res.offline_arena >= res.peak
    assert abs(est - m["tflm_arena_patched"]) <= 0.01 * m["tflm_arena_patched"]


def test_tflite_region_ends_at_a_global_mean_with_the_reason():
    """A .tflite region stops before a MEAN over the feature map (squeeze-and-excitation
    blocks): TFLite Micro cannot combine per-patch partial sums bit-exactly; the reason says
    so."""
    import importlib.util
    import os

    from memsched.patches import regions
    from memsched.tflite.format.read import read_tflite
    from memsched.tflite.patch.describe import spatial_model

    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "tflite", "patches.py")
    spec = importlib.util.spec_from_file_location("bench_patches_mean", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sm = spatial_model(read_tflite(bench.mobilenet_v2(0.35, 32)))
    means = [op for op in sm.ops if op.kind == "MEAN"]
    assert means and "bit-exactly" in means[0].reason
    regs, why = regions(sm)
    assert all(r.length <= means[0].index for r in regs)

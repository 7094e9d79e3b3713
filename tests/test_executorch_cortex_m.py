"""The patch adapter on ExecuTorch's Cortex-M int8 flow, run with the backend's own kernels.

Every program is exported the backend's way (``CortexMQuantizer``, ``to_edge`` with its
compile config, ``CortexMPassManager`` for the scalar C path: `host_kernels.target_config`),
lowered twice -- ExecuTorch's default ``to_executorch()`` and
``backend_config(tile_patches=True, ...)`` -- and both programs run in ``executorch.runtime``
with ExecuTorch's Cortex-M C++ kernels on CMSIS-NN (`memsched.executorch.host_kernels`, built
from ``../shared``): outputs bit-equal. The Python reference kernels compute on logical
tensors and could not see that a slice, pad or concatenation of a channels-last buffer was
wrong; these kernels do. Needs the Arm backend's ``tosa-tools`` (the README's set-up line).
"""
from __future__ import annotations

import copy
import warnings

import pytest

pytest.importorskip("executorch")
pytest.importorskip("tosa_serializer", reason="the Cortex-M quantizer imports tosa-tools")

import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

import memsched.executorch as mx  # noqa: E402
from cortex_m_models import LAYERS, Block, cba, int8_edge, stack  # noqa: E402
from memsched import board  # noqa: E402
from memsched.executorch import host_kernels, pte  # noqa: E402
from memsched.executorch.patch import cortex_m as cm  # noqa: E402
from memsched.executorch.patch.describe import describe_graph  # noqa: E402
from memsched.patches import region_starts  # noqa: E402


@pytest.fixture(scope="module")
def kernels():
    """The backend's kernels, loaded (built once from ../shared; skipped when absent)."""
    try:
        return host_kernels.load()
    except host_kernels.KernelsUnavailable as e:
        pytest.skip(str(e))


_edge = int8_edge


@pytest.fixture(scope="module")
def m55():
    """The emulated Cortex-M55's ExecuTorch firmware (MVE kernels), or the reason it is not
    here (a str): host checks still run, the board's part is skipped with that reason."""
    try:
        return board.firmware("executorch")
    except board.BoardUnavailable as e:
        return str(e)


def _on_board(m55, base, ours, x, tmp):
    """The MVE programs of one quantized graph on the emulated M55: the patched program's
    outputs bit-equal to ExecuTorch's default program on the board; returns the board's
    results (default, patched) and the default's output bytes."""
    if isinstance(m55, str):
        pytest.skip(f"host checks passed; the board: {m55}")
    ra, a = board.run_pte(base, [x], tmp / "default")
    rb, b = board.run_pte(ours, [x], tmp / "patched")
    assert ra["status"] == 0, (ra.get("error"), ra.get("et_log"))
    assert rb["status"] == 0, (rb.get("error"), rb.get("et_log"))
    assert a == b
    return ra, rb, a


def _memory_bytes(outs, results) -> list[bytes]:
    """Host outputs as the board writes them (each in its dim order's memory order)."""
    return [o.permute(*d["dim_order"]).contiguous().numpy().tobytes()
            for o, d in zip(outs, results["outputs"])]


def _runs_bit_equal(model, shape, whole=False, planned=True, edge=None, m55=None, tmp=None,
                    **kw):
    """Lower ``model``'s Cortex-M program (one quantized graph, both ISAs) with ExecuTorch's
    default and with patches (``whole``: the region is the backbone up to the global pool):
    the scalar programs run with the backend's kernels on the host, bit-equal; with ``m55``
    (the `m55` fixture) and ``tmp``, the MVE programs run on the emulated M55, the patched one
    bit-equal to the default there, the board's default equal to the host oracle. Returns
    (the scalar patch report, patched bytes, default bytes). Patches must apply."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    (scalar, mve), x = edge or _edge(model, shape, isa="both")
    if whole:
        kw["split"] = _before_pool(scalar.exported_program().graph_module)
    kw.setdefault("max_overhead", 10.0)

    def lower(e):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            base = copy.deepcopy(e).to_executorch(ExecutorchBackendConfig(
                memory_planning_pass=MemoryPlanningPass(alloc_graph_input=planned)))
            config = mx.backend_config(tile_patches=True, time_limit=3.0,
                                       alloc_graph_input=planned, **kw)
            ours = copy.deepcopy(e).to_executorch(config)
        rep = list(mx.report(config).values())[0]
        assert rep.patches.grid, rep.patches.skipped
        return base, ours, rep

    base, ours, rep = lower(scalar)
    a = host_kernels.run(base.buffer, [x])
    b = host_kernels.run(ours.buffer, [x])
    assert len(a) == len(b) and all(torch.equal(u, v) for u, v in zip(a, b))
    sizes = lambda buf: sum(pte.planned_sizes(buf)["forward"][1:])  # noqa: E731
    if m55 is not None:
        mbase, mours, _ = lower(mve)
        ra, _, got = _on_board(m55, mbase.buffer, mours.buffer, x, tmp)
        assert got == _memory_bytes(a, ra)  # the board's default = the host oracle
    return rep, ours.buffer, sizes(ours.buffer), sizes(base.buffer)


_cba = cba


def _small():
    return nn.Sequential(_cba(3, 8, 3, 2), Block(8, 8, 1), Block(8, 16, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))


def _before_pool(gm) -> str:
    """The name of the feature map the global average pool reads (the whole backbone)."""
    pool = [n for n in gm.graph.nodes if n.op == "call_function" and
            cm.is_cortex_m(n.target) and cm.op_name(n.target).startswith("quantized_avg")][-1]
    return pool.args[0].name


def test_cortex_m_ops_described_by_what_they_compute():
    torch.manual_seed(0)
    edge, _ = _edge(_small(), (1, 3, 32, 32))
    em = describe_graph(edge.exported_program().graph_module)
    cls = {op.kind: op.cls for op in em.sm.ops}
    assert cls["cortex_m.quantize_per_tensor.default"] == "eltwise"
    assert cls["cortex_m.quantized_conv2d.default"] == "window"
    assert cls["cortex_m.quantized_depthwise_conv2d.default"] == "window"
    assert cls["cortex_m.quantized_add.default"] == "eltwise"
    assert em.channels_last  # the rewrite cuts and reassembles on the NHWC form
    # an operator the table does not know is named where it ends the region
    lin = [op for op in em.sm.ops if "quantized_linear" in op.kind]
    assert lin and lin[0].cls == "other" and "quantized_linear" in lin[0].reason
    # CMSIS-NN scratch buffers are the ops' workspace
    assert all(g.workspace == op.workspace for g, op in zip(em.graph.ops, em.sm.ops))
    # the float input's quantize: regions start at it (per patch) and after it (whole)
    assert region_starts(em.sm)[:2] == [0, 1]
    # a caller-owned input (alloc_graph_input=False) costs the arena nothing
    (x,) = em.sm.inputs
    assert em.graph.tensors[em.graph.input_tensors[0]].nbytes == em.sm.tensors[x].nbytes > 0
    em0 = describe_graph(edge.exported_program().graph_module, planned_inputs=False)
    assert em0.graph.tensors[em0.graph.input_tensors[0]].nbytes == 0
    config = mx.backend_config(tile_patches=True, alloc_graph_input=False)
    assert [p.planned_inputs for p in config.passes if hasattr(p, "planned_inputs")] == [False]


def test_small_model_runs_bit_equal_with_zero_point_borders(kernels, m55, tmp_path):
    """Convolution, depthwise, residual add, zero-point border pads, slices and
    reassembly: the patched program runs with the backend's kernels, bit-equal."""
    torch.manual_seed(0)
    edge = _edge(_small(), (1, 3, 48, 48), isa="both")
    rep, *_ = _runs_bit_equal(None, None, grid=(2, 2), split="cortex_m_quantized_add_default",
                              edge=copy.deepcopy(edge), m55=m55, tmp=tmp_path)
    assert rep.patches.grid == "2x2" and rep.patches.region_ops >= 6
    # the same rewrite on the edge graph: border pads on the NHWC form, with the zero point
    # of the convolution that reads them (through the views back to channels-last)
    edge = edge[0][0]
    new, _ = mx.tile_graph_module(edge.exported_program().graph_module, grid=(2, 2),
                                  split="cortex_m_quantized_add_default", max_overhead=10.0)
    # int8 pads are the backend's arm_pad_s8 (cortex_m::pad), not the portable constant_pad_nd
    assert not [n for n in new.graph.nodes if "constant_pad_nd" in str(n.target)]
    calls = [n for n in new.graph.nodes if n.op == "call_function" and cm.is_cortex_m(n.target)]
    pads = [n for n in calls if cm.op_name(n.target) == "pad.default"]
    assert pads
    zps = set()
    for p in pads:
        pre, post = p.args[1], p.args[2]  # the NHWC form's own order: N, H, W, C
        assert pre[0] == pre[3] == post[0] == post[3] == 0  # never batch or channels
        assert list(p.meta["val"].shape) == [int(d) + a + b for d, a, b in
                                             zip(p.args[0].meta["val"].shape, pre, post)]
        (permute,) = p.users  # back to channels-last: permute, then declare the dim order
        (view,) = permute.users
        assert "permute_copy" in str(permute.target) and "_clone_dim_order" in str(view.target)
        readers = [u for u in view.users if cm.op_name(u.target) in cm.INPUT_OFFSET]
        for r in readers:
            assert p.args[3] == -int(r.args[cm.INPUT_OFFSET[cm.op_name(r.target)]])
            zps.add(p.args[3])
    assert zps - {0}
    # the stride-2 stem's top / left border patches pad through the kernel's own padding
    # (patch.cortex_m.own_padding): no pad before them
    own = [n for n in calls if cm.op_name(n.target) in cm.INPUT_OFFSET and
           list(n.args[cm.WINDOW[cm.op_name(n.target)][2]]) != [0, 0]]
    assert own and all(n.args[3] == [2, 2] for n in own if "depthwise" not in str(n.target))


def test_windows_are_copied_row_contiguous():
    """A window cut on both axes of a channels-last map and read by operators only is one
    ``as_strided_copy`` of ``[N, rows, W x C]`` (one contiguous run per row: measured on the
    M55, 3 instead of 37 instructions a value), seen as the channels-last map through one view
    of it: no view of a view, so no more tensor records than one 4-D window (the search's
    estimate is held to the program's records in test_records_abi; outputs bit-equal in the
    tests above)."""
    from executorch.exir import memory

    edge, _ = _edge(_small(), (1, 3, 48, 48), isa="mve")
    config = mx.backend_config(tile_patches=True, grid="2x2", max_overhead=10.0,
                               time_limit=3.0, alloc_graph_input=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm = copy.deepcopy(edge).to_executorch(config).exported_program().graph_module
    windows = [n for n in gm.graph.nodes if "as_strided_copy" in str(n.target)]
    assert len(windows) == 4
    for n in windows:
        size, stride = n.args[1], n.args[2]
        assert len(size) == 3 and stride[-1] == 1
        (view,) = n.users  # the operator's channels-last input, on the window's bytes
        assert view.target is memory.view
        assert tuple(view.meta["spec"].dim_order) == (0, 2, 3, 1)
        assert view.meta["spec"].allocated_memory == n.meta["spec"].allocated_memory
    assert not any(n.target is memory.view and getattr(n.args[0], "target", None) is
                   memory.view for n in gm.graph.nodes)


def test_window_reshape_is_a_view_without_removing_view_copy(kernels):
    """With ExecuTorch's ``remove_view_copy`` off, the window's reshape is still made a view
    (`patch.layout.lower_layout_views`), never a copy, and the program runs bit-equal with
    the backend's kernels (a model without a flatten: ExecuTorch's own program fails on a
    channels-last flatten's ``view_copy`` in that setting)."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    torch.manual_seed(0)
    model = nn.Sequential(_cba(3, 8, 3, 2), Block(8, 8, 1), _cba(8, 8, 3, 1))
    (scalar, _), x = _edge(model, (1, 3, 48, 48), isa="both")
    config = mx.backend_config(tile_patches=True, grid="2x2", max_overhead=10.0,
                               time_limit=3.0, alloc_graph_input=False)
    config.remove_view_copy = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = copy.deepcopy(scalar).to_executorch(config)
        base = copy.deepcopy(scalar).to_executorch(ExecutorchBackendConfig(
            remove_view_copy=False,
            memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False)))
    assert list(mx.report(config).values())[0].patches.grid == "2x2"
    targets = [str(n.target) for n in ours.exported_program().graph_module.graph.nodes]
    assert any("as_strided_copy" in t for t in targets)
    assert not any("view_copy" in t for t in targets)
    a, b = host_kernels.run(base.buffer, [x]), host_kernels.run(ours.buffer, [x])
    assert len(a) == len(b) and all(torch.equal(u, v) for u, v in zip(a, b))


@pytest.mark.heavy  # the random stacks cover max pools and residuals in the default run
def test_max_pool_and_residual_run_bit_equal(kernels, m55, tmp_path):
    torch.manual_seed(1)
    model = nn.Sequential(_cba(3, 8, 3, 1), nn.MaxPool2d(3, 2, 1), Block(8, 8, 1),
                          _cba(8, 8, 3, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 2))
    rep, *_ = _runs_bit_equal(model, (1, 3, 24, 24), whole=True, grid=(3, 2), m55=m55,
                              tmp=tmp_path)
    assert rep.patches.region_ops >= 8


@settings(max_examples=3, derandomize=True, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(LAYERS), min_size=1, max_size=4),
       st.sampled_from([(2, 2), (2, 3), (3, 1)]), st.booleans())
def test_random_cortex_m_stacks_run_bit_equal(kernels, m55, tmp_path, layers, grid, planned):
    torch.manual_seed(len(layers))
    rep, *_ = _runs_bit_equal(stack(layers), (1, 3, 24, 24), whole=True, grid=grid,
                              planned=planned, m55=m55, tmp=tmp_path)
    assert rep.patches.region_ops >= 2 + len(layers)  # every random layer patched


def test_same_bytes_leaves_out_sizes_of_one():
    """A one-channel map is channels-last and contiguous at once; ExecuTorch labels its
    channels-last form by sorting the strides, ``(0, 2, 1, 3)``, neither. Seeing it as NHWC
    (or back) moves no byte, whatever the label."""
    from memsched.executorch.patch.layout import TO_NATIVE, TO_NHWC, same_bytes

    assert same_bytes((0, 2, 1, 3), TO_NHWC, (0, 1, 2, 3), (1, 1, 28, 28))
    assert not same_bytes((0, 2, 1, 3), TO_NHWC, (0, 1, 2, 3))  # the labels alone differ
    assert same_bytes((0, 1, 2, 3), TO_NATIVE, (0, 1, 2, 3), (1, 28, 28, 1))
    assert same_bytes((0, 1, 2, 3), TO_NATIVE, (0, 2, 3, 1), (1, 28, 28, 1))
    for c in (2, 3):  # more channels: only the real layout change is a view
        assert same_bytes((0, 2, 3, 1), TO_NHWC, (0, 1, 2, 3), (1, c, 28, 28))
        assert not same_bytes((0, 1, 2, 3), TO_NHWC, (0, 1, 2, 3), (1, c, 28, 28))
        assert not same_bytes((0, 1, 2, 3), TO_NATIVE, (0, 1, 2, 3), (1, 28, 28, c))


@pytest.mark.parametrize("case", ["input", "inside"])
def test_one_channel_maps_run_bit_equal(kernels, m55, tmp_path, case):
    """Patches that cut a one-channel map -- the model's input (1 x 1 x H x W, a grey image)
    or a map inside the network (a 1x1 convolution to one channel, a depthwise on it) --
    still run on views: every change of form is a ``memory.view``, no ``permute_copy`` or
    ``_clone_dim_order`` runs, and the program is bit-equal to ExecuTorch's default on the
    host kernels and on the M55. Before, the labels' mismatch left the view onto the NHWC
    form a ``permute_copy``, which the portable kernel refuses ("2 input tensors have
    different dim orders", status 18); with the permute a view, its ``_clone_dim_order``
    back was left a copy, refused too."""
    torch.manual_seed(3)
    if case == "input":
        model = nn.Sequential(_cba(1, 8, 3), _cba(8, 8, 3, 2, 8), _cba(8, 16, 1),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 3))
        shape = (1, 1, 24, 24)
    else:
        model = nn.Sequential(_cba(3, 8, 3), _cba(8, 1, 1), _cba(1, 1, 3, 1, 1),
                              _cba(1, 8, 3, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                              nn.Linear(8, 3))
        shape = (1, 3, 24, 24)
    edge = _edge(model, shape, isa="both")
    gm = edge[0][0].exported_program().graph_module
    windows = [n for n in gm.graph.nodes if n.op == "call_function" and
               cm.is_cortex_m(n.target) and cm.op_name(n.target) in cm.WINDOW]
    # the region ends at the stride-2 depthwise (it starts at the float input or its
    # quantized copy: one channel), or at the depthwise on the one-channel map (its windows
    # cut from one channel, reassembled into one)
    split = windows[1 if case == "input" else 2].name
    rep, ours, *_ = _runs_bit_equal(None, None, grid=(2, 2), split=split, edge=edge,
                                    m55=m55, tmp=tmp_path)
    region = rep.patches.regions[0]
    sm = describe_graph(gm).sm
    ops = sm.ops[region["region_start"]:region["region_ops"]]
    assert 1 in {sm.tensors[t].channels for op in ops for t in op.inputs}
    calls = pte.summary(ours)["forward"]["operators"]
    assert not [op for op in calls if "permute_copy" in op or "_clone_dim_order" in op]


def test_checker_accepts_exactly_the_quantize_alias():
    """The int8 output may start at most 3 bytes above the float input it overwrites (the
    kernel's forward loop); any other overlap is an error."""
    from memsched.executorch.memory.check import check_intervals
    from memsched.executorch.errors import PlanCheckError

    class Spec:
        def __init__(self, dtype):
            self.dtype, self.storage_base = dtype, None

    f, q, other = Spec(torch.float32), Spec(torch.int8), Spec(torch.int8)
    for off in (96, 100, 103):
        check_intervals([(f, 0, 5, 100, 400), (q, 3, 9, off, 100)], 1000, shared=[(f, q)])
    for items, shared in (([(f, 0, 5, 100, 400), (q, 3, 9, 104, 100)], [(f, q)]),
                          ([(f, 0, 5, 100, 400), (q, 3, 9, 100, 100)], []),
                          ([(f, 0, 5, 100, 400), (other, 3, 9, 100, 100)], [(f, q)])):
        with pytest.raises(PlanCheckError):
            check_intervals(items, 1000, shared=shared)


def test_in_place_quantize_runs_bit_equal(kernels, m55, tmp_path):
    """With the model's input planned, the float input's quantize writes over it: fewer
    planned bytes than ExecuTorch's default, reported = written, outputs bit-equal (host
    kernels, and the MVE programs on the emulated M55, where the plan is never larger: the
    board's RAM is planned + method + temp allocator)."""
    torch.manual_seed(2)
    (scalar, mve), x = _edge(_small(), (1, 3, 32, 32), isa="both")

    def lower(edge):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            base = copy.deepcopy(edge).to_executorch()
            config = mx.backend_config(time_limit=3.0)
            ours = copy.deepcopy(edge).to_executorch(config)
        return base, ours, list(mx.report(config).values())[0]

    base, ours, rep = lower(scalar)
    planned = sum(pte.planned_sizes(ours.buffer)["forward"][1:])
    default = sum(pte.planned_sizes(base.buffer)["forward"][1:])
    assert planned == rep.planned_bytes < default
    # the float input and its int8 copy are both live at the quantize without the alias
    assert default - planned >= 32 * 32 * 3
    a, b = host_kernels.run(base.buffer, [x]), host_kernels.run(ours.buffer, [x])
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    mbase, mours, mrep = lower(mve)
    ra, rb, got = _on_board(m55, mbase.buffer, mours.buffer, x, tmp_path)
    assert got == _memory_bytes(a, ra)
    # MVE's larger scratch buffers may set the peak elsewhere: never larger on the board
    assert sum(rb["planned_buffers"]) == mrep.planned_bytes <= sum(ra["planned_buffers"])
    ram = lambda r: sum(r["planned_buffers"]) + r["method_allocator_bytes"] + \
        r["temp_allocator_bytes"]  # noqa: E731
    assert ram(rb) <= ram(ra)


class _Spec:
    """A planned tensor as the packer sees it: bytes, inclusive lifetime, dtype."""

    def __init__(self, size, lo, hi, dtype=torch.int8):
        self.allocated_memory, self.lifetime, self.dtype = size, [lo, hi], dtype
        self.storage_base = None


def test_in_place_packing_keeps_the_kernels_rule():
    """Random arenas around a float tensor and its in-place int8 quantize: the packer's
    result passes the checker (the output where the kernel allows, or apart), is never
    larger than packing without sharing, and never below the relaxed problem's bound."""
    import random

    from memsched.arena import Lifetime, plan
    from memsched.executorch.memory.check import check_intervals
    from memsched.executorch.plan.packer import MemschedAlgo

    rng = random.Random(0)
    for _ in range(30):
        i = rng.randint(1, 6)
        n = 16 * rng.randint(1, 8)
        f, q = _Spec(4 * n, 0, i, torch.float32), _Spec(n, i - 1, rng.randint(i + 1, 12))
        others = [_Spec(16 * rng.randint(1, 10), lo, lo + rng.randint(0, 5))
                  for lo in (rng.randint(0, 12) for _ in range(rng.randint(1, 6)))]
        roots = [f, q] + others
        p = MemschedAlgo(time_limit=2.0)._pack(roots, [(i, f, q)], 16)
        check_intervals([(s, s.lifetime[0], s.lifetime[1], off, s.allocated_memory)
                         for s, off in zip(roots, p.offsets)], p.arena, shared=[(f, q)])
        plain = plan([Lifetime(s.allocated_memory, *s.lifetime) for s in roots], "auto",
                     alignment=16, time_limit=2.0)
        assert p.lower_bound <= p.arena <= plain.arena


def test_checker_accepts_the_alias_through_a_layout_view():
    """A patch's float window reaches its quantize through a layout view (`_ViewSpec`: the
    window's bytes seen in the model's form): the quantize may write over the window it views,
    where the kernel's rule allows, and nothing else may."""
    from memsched.executorch.memory.check import check_intervals
    from memsched.executorch.errors import PlanCheckError

    class Spec:
        def __init__(self, dtype):
            self.dtype, self.storage_base = dtype, None

    class _ViewSpec:  # ExecuTorch's view spec: its base's bytes
        def __init__(self, base):
            self.dtype, self.storage_base, self._base = base.dtype, None, base

    window, q, other = Spec(torch.float32), Spec(torch.int8), Spec(torch.int8)
    view = _ViewSpec(window)
    items = [(window, 0, 5, 100, 400), (view, 4, 5, 100, 400), (q, 5, 9, 100, 100)]
    check_intervals(items, 1000, shared=[(view, q)])
    with pytest.raises(PlanCheckError):
        check_intervals(items[:2] + [(q, 5, 9, 104, 100)], 1000, shared=[(view, q)])
    with pytest.raises(PlanCheckError):
        check_intervals(items[:2] + [(other, 5, 9, 100, 100)], 1000, shared=[(view, q)])


def test_in_place_packing_with_several_pairs():
    """Several float windows each quantized in place, in sequence, among other buffers (a
    patched float input): the packing passes the checker, is never larger than packing
    without sharing and never below the relaxed problem's bound."""
    import random

    from memsched.arena import Lifetime, plan
    from memsched.executorch.memory.check import check_intervals
    from memsched.executorch.plan.packer import MemschedAlgo

    rng = random.Random(1)
    for _ in range(30):
        roots, share, t = [], [], 0
        for _ in range(rng.randint(2, 4)):
            n = 16 * rng.randint(1, 6)
            i = t + rng.randint(1, 3)
            f = _Spec(4 * n, t, i, torch.float32)
            q = _Spec(n, i - 1, i + rng.randint(1, 6))
            roots += [f, q]
            share.append((i, f, q))
            t = i + 1
        roots += [_Spec(16 * rng.randint(1, 10), lo, lo + rng.randint(0, 6))
                  for lo in (rng.randint(0, t) for _ in range(rng.randint(2, 8)))]
        p = MemschedAlgo(time_limit=2.0)._pack(roots, share, 16)
        check_intervals([(s, s.lifetime[0], s.lifetime[1], off, s.allocated_memory)
                         for s, off in zip(roots, p.offsets)], p.arena,
                        shared=[(f, q) for _, f, q in share])
        plain = plan([Lifetime(s.allocated_memory, *s.lifetime) for s in roots], "auto",
                     alignment=16, time_limit=2.0)
        assert p.lower_bound <= p.arena <= plain.arena

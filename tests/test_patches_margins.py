"""Patches with margins (`memsched.patches.margins`): every operator with its own padding on a
wider window; the split tensors equal the whole computation (numpy reference), MACs per axis
equal the plan's, and on a residual stack the plan needs no PAD and no crop before the ADD."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsched.patches.errors import Refused
from memsched.patches.margins import margin_macs, plan_margins
from memsched.patches.plans import plan_patches
from patch_reference import random_weights, run_plan, run_whole, stack_model
from memsched.patches.regions import regions

from test_patches import KINDS, stacks


@st.composite
def torch_stacks(draw, max_ops=4):
    """Window ops padded as torch pads: symmetric (k-1)*d//2 whatever the input size."""
    specs = []
    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(KINDS))
        if kind == "PAD":
            specs.append(("PAD", draw(st.integers(1, 2)), 1, 1, ""))
            continue
        k = (draw(st.sampled_from([1, 3, 5])), draw(st.sampled_from([1, 3, 5])))
        s_ = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        d = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) \
            if kind in ("CONV_2D", "DEPTHWISE_CONV_2D") else 1
        specs.append((kind, k, s_, d, draw(st.sampled_from(["TORCH", "VALID"]))))
    try:
        sm = stack_model(specs, draw(st.integers(3, 20)), draw(st.integers(3, 20)), 2,
                         residual=draw(st.booleans()), concat=draw(st.booleans()))
    except ValueError:
        from hypothesis import assume
        assume(False)
    return sm


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(stacks().map(lambda sm: (sm, "same")),
                 # torch's padding: its own amounts on both sides
                 torch_stacks().map(lambda sm: (sm, "fixed"))),
       st.integers(1, 4), st.integers(1, 4), st.integers(0, 2 ** 16))
def test_margin_plan_computes_the_same(model, rows, cols, seed):
    """TFLite's SAME rule and torch's fixed padding alike."""
    sm, rule = model
    rng = np.random.default_rng(seed)
    weights = random_weights(sm, rng)
    x = {0: rng.integers(-5, 6, (*sm.tensors[0].hw, sm.tensors[0].channels))}
    whole = run_whole(sm, len(sm.ops), weights, x)
    for r in regions(sm, starts=range(len(sm.ops)))[0]:
        g = (min(rows, r.hw[0]), min(cols, r.hw[1]))
        try:
            plan = plan_margins(sm, r, g, rule=rule)
        except Refused as e:
            assert "margin" in str(e) or "different" in str(e), e
            continue
        assert not any(nd.kind == "pad" for nd in plan.nodes)
        got = run_plan(sm, plan, weights, whole)
        for t in r.split:
            assert np.array_equal(got[t], whole[t]), (r.start, r.length, g, t)
        assert margin_macs(sm, r, g, rule=rule) == plan.macs


def _resnet_block(stride: int):
    """conv 3x3 SAME -> conv 3x3 SAME -> ADD of the block input (stride 1), then a stride-2
    3x3 SAME convolution: the CIFAR ResNet shapes."""
    return stack_model([("CONV_2D", 3, 1, 1, "SAME"), ("DEPTHWISE_CONV_2D", 3, 1, 1, "SAME"),
                        ("DEPTHWISE_CONV_2D", 3, 1, 1, "SAME")], 16, 16, 2, residual=True)


def test_residual_block_needs_no_pad_and_no_crop():
    sm = _resnet_block(1)
    r = regions(sm)[0][-1]
    exact = plan_patches(sm, r, (2, 2))
    margin = plan_margins(sm, r, (2, 2), rule="same")
    kinds = [nd.kind for nd in margin.nodes]
    assert "pad" not in kinds
    # slices: the input of each patch and one crop of the split tensor per patch
    assert kinds.count("slice") == 2 * 4
    assert len(margin.nodes) < len(exact.nodes)
    assert margin.macs > exact.macs  # the margins are computed too
    rng = np.random.default_rng(0)
    w = random_weights(sm, rng)
    x = {0: rng.integers(-5, 6, (16, 16, 2))}
    whole = run_whole(sm, len(sm.ops), w, x)
    got = run_plan(sm, margin, w, x)
    assert all(np.array_equal(got[t], whole[t]) for t in r.split)


def test_stride_two_window_parity():
    """A stride-2 SAME convolution after stride-1 ones: TFLite's SAME pads depend on the
    window's parity; the margin plan widens windows until they map onto the model's grid."""
    sm = stack_model([("CONV_2D", 3, 1, 1, "SAME"), ("CONV_2D", 3, 2, 1, "SAME"),
                      ("CONV_2D", 3, 1, 1, "SAME"), ("CONV_2D", 3, 2, 1, "SAME")], 32, 32, 3)
    rng = np.random.default_rng(1)
    w = random_weights(sm, rng)
    x = {0: rng.integers(-5, 6, (32, 32, 3))}
    whole = run_whole(sm, len(sm.ops), w, x)
    r = regions(sm)[0][-1]
    for g in ((1, 2), (2, 2), (3, 1), (4, 4)):
        plan = plan_margins(sm, r, g, rule="same")
        got = run_plan(sm, plan, w, x)
        assert all(np.array_equal(got[t], whole[t]) for t in r.split), g


def test_refused_without_the_runtime():
    """Margins only where the runtime's description says its adapter writes them."""
    from memsched.memory import MemoryModel
    from memsched.patches import Runtime, RuntimeMemory

    from test_patches_se import _graph_of, search

    sm = _resnet_block(1)
    graph, index = _graph_of(sm)
    mem = RuntimeMemory("m", MemoryModel())
    with pytest.raises(Refused, match="explicit padding only"):
        search(sm, graph, index, mem, padding="margins", certify=False, max_regions=1)
    res = search(sm, graph, index, Runtime(mem, implicit_padding=True, padding_rule="same"),
                 padding="margins", certify=False, max_regions=1)
    assert res.candidates and all(c.margins for c in res.candidates)

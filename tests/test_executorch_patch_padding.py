"""Border pads of the Cortex-M patch rewrite (issue 58, "less overhead for the same RAM"): a
convolution takes a border patch's pads as its own padding where the backend's shape function
gives the patch's output size (`patch.cortex_m.own_padding`), the other int8 pads are
``cortex_m::pad`` on the NHWC form (`patch.cortex_m.cm_pad_fits`), and the plans, the time
model and the instruction features say so. The programs themselves run bit-equal with the
backend's kernels and on the M55 in tests/test_executorch_cortex_m.py."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from memsched.patches.geometry import PAD_MIN, PAD_ZERO, SOp
from memsched.patches.plans import plan_patches
from memsched.patches.regions import regions
from patch_reference import random_weights, run_plan, run_whole, stack_model

cm = pytest.importorskip("memsched.executorch.patch.cortex_m")
CONV = "cortex_m.quantized_conv2d.default"
DW = "cortex_m.quantized_depthwise_conv2d.default"


def _op(kind=CONV, kernel=(3, 3), stride=(2, 2), pad_value=PAD_ZERO) -> SOp:
    return SOp(0, kind, "window", (0,), 1, kernel, stride, (1, 1), (1, 1), (0, 0), pad_value)


@pytest.mark.parametrize("op, pads, ok", [
    (_op(), (1, 0, 1, 0), True),  # stride 2: the top-left border, the shape function's own
    (_op(), (1, 0, 0, 0), True),
    (_op(), (0, 1, 0, 0), False),  # a bottom pad alone: one output row short
    (_op(), (2, 0, 0, 0), False),  # one output row too many
    (_op(DW, stride=(1, 1)), (1, 1, 0, 0), True),  # stride 1: equal pads only
    (_op(DW, stride=(1, 1)), (1, 0, 0, 0), False),
    (_op(stride=(1, 1)), (0, 0, 1, 1), True),
    (_op(kernel=(1, 3), stride=(1, 2)), (0, 0, 1, 0), False),  # arm_convolve_1_x_n_s8
    (_op(kernel=(1, 3), stride=(1, 1)), (0, 0, 1, 1), True),
    (_op(pad_value=PAD_MIN), (1, 0, 1, 0), False),  # max pool's -128: a pad node
    (_op("cortex_m.quantized_max_pool2d.default"), (1, 0, 1, 0), False),
])
def test_own_padding_rule(op, pads, ok):
    assert cm.own_padding(op, pads) is ok


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_own_padding_is_the_shape_functions_size(stride):
    """Every pad pair the rule accepts gives, through the backend's symmetric shape function
    ``(H + 2 * top - K) // s + 1``, the output rows of the patch's exact window; every pair it
    refuses does not."""
    k = 3
    for oh in range(1, 6):
        for top in range(k):
            for bottom in range(k):
                h = (oh - 1) * stride + k - top - bottom  # the clipped window's rows
                if h < 1:
                    continue
                same = (h + 2 * top - k) // stride + 1 == oh
                op = _op(stride=(stride, stride))
                assert cm.own_padding(op, (top, bottom, 0, 0)) is same, (oh, top, bottom)


@pytest.mark.parametrize("grid", [(2, 2), (3, 3), (1, 3), (4, 2)])
def test_plans_with_own_padding_compute_the_same(grid):
    """A stride-2 / stride-1 / stride-2 stack patched with the Cortex-M rule (the stack's
    operators seen as Cortex-M convolutions): the accepted borders have no pad node (the
    operator node reads the clipped window, ``implicit``, with the border's pads), the
    results equal the unpatched stack's, and the MACs are the same as with pad nodes."""
    sm = stack_model([("CONV_2D", 3, 2, 1, "TORCH"), ("DEPTHWISE_CONV_2D", 3, 1, 1, "TORCH"),
                      ("CONV_2D", 3, 2, 1, "TORCH")], 24, 24, 3)
    as_cm = {"CONV_2D": CONV, "DEPTHWISE_CONV_2D": DW}

    def own(op, pads):
        return cm.own_padding(replace(op, kind=as_cm.get(op.kind, op.kind)), pads)

    region = [r for r in regions(sm)[0] if r.length == len(sm.ops)][0]
    explicit = plan_patches(sm, region, grid)
    plan = plan_patches(sm, region, grid, own_padding=own)
    assert plan.macs == explicit.macs
    implicit = [nd for nd in plan.nodes if nd.kind == "op" and nd.implicit]
    assert implicit and all(own(sm.ops[nd.op], nd.pads) for nd in implicit)
    pads = [nd for nd in plan.nodes if nd.kind == "pad"]
    assert len(pads) + len(implicit) == sum(nd.kind == "pad" for nd in explicit.nodes)
    for k, nd in enumerate(plan.nodes):  # the pads left: the stride-1 depthwise's borders
        if nd.kind == "pad":
            (reader,) = [o for o in plan.nodes if k in o.inputs]
            assert sm.ops[reader.op].stride == (1, 1)
    rng = np.random.default_rng(0)
    weights = random_weights(sm, rng)
    x = {0: rng.integers(-5, 6, (24, 24, 3))}
    whole = run_whole(sm, len(sm.ops), weights, x)
    for t, v in run_plan(sm, plan, weights, x).items():
        np.testing.assert_array_equal(v, whole[t])


def test_cm_pad_fits_only_unambiguous_int8_shapes():
    assert cm.cm_pad_fits([1, 5, 7, 8], "torch.int8")
    assert not cm.cm_pad_fits([1, 5, 7, 8], "float32")
    # the runtime reads dim 1 of size 1, or dims 2 and 3 of size 1, as channels-last
    assert not cm.cm_pad_fits([1, 1, 7, 8], "int8")
    assert not cm.cm_pad_fits([1, 5, 7, 1], "int8")
    assert not cm.cm_pad_fits([1, 5, 1, 8], "int8")


def test_cm_pad_features_on_the_nhwc_form():
    """``arm_pad_s8`` runs on the sizes the kernel reads: a channels-last NCHW tensor
    permuted to (N, H, W, C), the rewrite's contiguous NHWC form as it is: the same bytes,
    the same features."""
    from memsched.executorch.memory.instructions import T, op_instructions

    cl_in, cl_out = T((1, 8, 5, 7), "int8", (0, 2, 3, 1)), T((1, 8, 6, 8), "int8", (0, 2, 3, 1))
    nhwc_in, nhwc_out = T((1, 5, 7, 8), "int8", (0, 1, 2, 3)), T((1, 6, 8, 8), "int8",
                                                                  (0, 1, 2, 3))
    a = op_instructions("cortex_m::pad", [cl_in, [0, 1, 1, 0], [0, 0, 0, 0], 0, cl_out])
    b = op_instructions("cortex_m::pad", [nhwc_in, [0, 1, 1, 0], [0, 0, 0, 0], 0, nhwc_out])
    assert a == b and a > 0

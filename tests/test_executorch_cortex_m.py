"""The patch adapter on ExecuTorch's Cortex-M int8 flow (`memsched.executorch.patch_cortex_m`).

The x86 runtime has no ``cortex_m::`` kernels, but the backend registers a Python reference
implementation of each one: the edge graph module is run eagerly before and after patching on
the same float input, and the outputs must be bit-equal. The flow is the backend's own
(``CortexMQuantizer``, ``to_edge`` with its compile config, ``CortexMPassManager``), which
needs the Arm backend's ``tosa-tools`` (the README's set-up line installs it).
"""
from __future__ import annotations

import warnings

import pytest

pytest.importorskip("executorch")
pytest.importorskip("tosa_serializer", reason="the Cortex-M quantizer imports tosa-tools")

import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

from memsched.executorch import patch_cortex_m as cm  # noqa: E402
from memsched.executorch.patch_describe import describe_graph  # noqa: E402
import memsched.executorch as mx  # noqa: E402
from memsched.executorch.patch_pass import _starts, tile_graph_module  # noqa: E402


def _edge(model, shape, seed=0):
    """The Cortex-M harness (``backends/cortex_m/test/tester.py``): (exported program after
    ``CortexMPassManager``, channels-last float input)."""
    from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
    from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
    from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer
    from executorch.backends.cortex_m.target_config import CortexM, CortexMTargetConfig
    from executorch.exir import to_edge
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    g = torch.Generator().manual_seed(seed)

    def sample():
        x = torch.rand(*shape, generator=g) * 2 - 1
        return x.to(memory_format=torch.channels_last)

    model = model.eval()
    x = sample()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        captured = torch.export.export(model, (x,), strict=True).module()
        prepared = prepare_pt2e(captured, CortexMQuantizer())
        for _ in range(3):
            prepared(sample())
        converted = convert_pt2e(prepared, fold_quantize=True)
        ep = torch.export.export(converted, (x,), strict=True)
        edge = to_edge(ep, compile_config=cortex_m_edge_compile_config())
        pm = CortexMPassManager(edge.exported_program(), CortexMPassManager.pass_list,
                                target_config=CortexMTargetConfig(cpu=CortexM.M55))
        return pm.transform(), x


def _run(ep, gm, x):
    args = []
    for spec in ep.graph_signature.input_specs:
        kind = spec.kind.name
        args.append(x if kind == "USER_INPUT" else ep.state_dict[spec.target]
                    if kind in ("PARAMETER", "BUFFER") else ep.constants[spec.target])
    return gm(*args)


def _cba(cin, cout, k=3, s=1, g=1, act=nn.ReLU6):
    """Conv2d - BatchNorm2d - activation, as users write it (not folded by hand)."""
    layers = [nn.Conv2d(cin, cout, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([act()] if act else []))


class Block(nn.Module):
    """An inverted residual (expand, depthwise, project, add when shapes allow)."""

    def __init__(self, cin, cout, stride, expand=3):
        super().__init__()
        hid = cin * expand
        self.body = nn.Sequential(_cba(cin, hid, 1), _cba(hid, hid, 3, stride, hid),
                                  _cba(hid, cout, 1, act=None))
        self.res = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.res else y


def _small():
    return nn.Sequential(_cba(3, 8, 3, 2), Block(8, 8, 1), Block(8, 16, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))


def _before_pool(gm) -> str:
    """The name of the feature map the global average pool reads (the whole backbone)."""
    pool = next(n for n in gm.graph.nodes if n.op == "call_function" and
                cm.is_cortex_m(n.target) and cm.op_name(n.target).startswith("quantized_avg"))
    return pool.args[0].name


def _patched_equal(model, shape, whole=False, **kw):
    """Patch the Cortex-M program of ``model`` (``whole``: the region is the whole backbone,
    up to the global pool) and compare it with the unpatched one under the reference
    kernels."""
    ep, x = _edge(model, shape)
    gm = ep.graph_module
    if whole:
        kw["split"] = _before_pool(gm)
    new, rep = tile_graph_module(gm, time_limit=3.0, max_overhead=10.0, **kw)
    assert new is not None, rep.skipped
    a, b = _run(ep, gm, x), _run(ep, new, x)
    assert len(a) == len(b) and all(torch.equal(u, v) for u, v in zip(a, b))
    return ep, new, rep


def test_cortex_m_ops_described_by_what_they_compute():
    torch.manual_seed(0)
    ep, _ = _edge(_small(), (1, 3, 32, 32))
    em = describe_graph(ep.graph_module)
    cls = {op.kind: op.cls for op in em.sm.ops}
    assert cls["cortex_m.quantize_per_tensor.default"] == "eltwise"
    assert cls["cortex_m.quantized_conv2d.default"] == "window"
    assert cls["cortex_m.quantized_depthwise_conv2d.default"] == "window"
    assert cls["cortex_m.quantized_add.default"] == "eltwise"
    # an operator the table does not know is named where it ends the region
    lin = [op for op in em.sm.ops if "quantized_linear" in op.kind]
    assert lin and lin[0].cls == "other" and "quantized_linear" in lin[0].reason
    # CMSIS-NN scratch buffers are the ops' workspace (the 3x3 depthwise needs one on MVE)
    assert any(op.workspace > 0 for op in em.sm.ops
               if op.kind == "cortex_m.quantized_depthwise_conv2d.default")
    assert all(g.workspace == op.workspace for g, op in zip(em.graph.ops, em.sm.ops))
    # the float input's quantize: regions start at it (per patch) and after it (whole)
    assert _starts(em.sm) == (0, 1)
    # a caller-owned input (alloc_graph_input=False) costs the arena nothing
    (x,) = em.sm.inputs
    assert em.graph.tensors[em.graph.input_tensors[0]].nbytes == em.sm.tensors[x].nbytes > 0
    em0 = describe_graph(ep.graph_module, planned_inputs=False)
    assert em0.graph.tensors[em0.graph.input_tensors[0]].nbytes == 0
    config = mx.backend_config(tile_patches=True, alloc_graph_input=False)
    assert [p.planned_inputs for p in config.passes] == [False]


def test_small_model_patched_bit_equal_with_zero_point_borders():
    torch.manual_seed(0)
    # the region through the first inverted residual (its add), 2x2 patches
    ep, new, rep = _patched_equal(_small(), (1, 3, 32, 32), grid=(2, 2),
                                  split="cortex_m_quantized_add_default")
    assert rep.grid == "2x2" and rep.region_ops >= 6
    pads = [n for n in new.graph.nodes if n.op == "call_function" and
            "constant_pad_nd" in str(n.target)]
    assert pads, "border patches pad explicitly"
    # the pad value of each is the zero point of the convolution that reads it (not 0)
    zps = set()
    for p in pads:
        reader = next(iter(p.users))
        name = cm.op_name(reader.target)
        assert p.args[2] == -int(reader.args[cm.INPUT_OFFSET[name]])
        zps.add(p.args[2])
    assert zps - {0}
    # every scratch buffer is read, and sized by the backend's function for its patch
    from executorch.backends.cortex_m.library import cmsis_nn
    from executorch.backends.cortex_m.passes.scratch_buffer_sizes import (
        required_cmsis_nn_buffer_sizes)

    allocs = [n for n in new.graph.nodes if n.op == "call_function" and
              getattr(n.target, "__name__", "") == "alloc"]
    assert allocs and all(a.users for a in allocs)
    for n in new.graph.nodes:
        if n.op == "call_function" and cm.is_cortex_m(n.target) and \
                cm.op_name(n.target) in cm.INPUT_OFFSET:
            want = required_cmsis_nn_buffer_sizes(n, cmsis_nn.Backend.MVE)
            assert [int(n.args[-1].meta["val"].shape[0])] == want


def test_max_pool_and_residual_patched_bit_equal():
    torch.manual_seed(1)
    model = nn.Sequential(_cba(3, 8, 3, 1), nn.MaxPool2d(3, 2, 1), Block(8, 8, 1),
                          _cba(8, 8, 3, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 2))
    ep, new, rep = _patched_equal(model, (1, 3, 24, 24), whole=True, grid=(3, 2))
    assert rep.region_ops >= 8


LAYERS = ["conv3", "conv3s2", "dw3", "conv1", "block", "maxpool", "hardswish"]


@settings(max_examples=4, derandomize=True, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(LAYERS), min_size=1, max_size=4),
       st.sampled_from([(2, 2), (2, 3), (3, 1)]))
def test_random_cortex_m_stacks_patched_bit_equal(layers, grid):
    torch.manual_seed(len(layers))
    c, mods = 8, [_cba(3, 8, 3, 1)]
    for name in layers:
        if name == "conv3":
            mods.append(_cba(c, c, 3))
        elif name == "conv3s2":
            mods.append(_cba(c, c, 3, 2))
        elif name == "dw3":
            mods.append(_cba(c, c, 3, 1, c))
        elif name == "conv1":
            mods.append(_cba(c, 2 * c, 1))
            c *= 2
        elif name == "block":
            mods.append(Block(c, c, 1, 2))
        elif name == "maxpool":
            mods.append(nn.MaxPool2d(2, 2))
        else:
            mods.append(_cba(c, c, 3, act=nn.Hardswish))
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 3)]
    ep, new, rep = _patched_equal(nn.Sequential(*mods), (1, 3, 24, 24), whole=True, grid=grid)
    assert rep.region_ops >= 2 + len(layers)  # every random layer patched

"""Models for the Cortex-M tests, written as users write them (`Conv2d` - `BatchNorm2d` -
activation, inverted residuals, pools, a `Linear` classifier), and the backend's own int8 flow
that lowers them (`int8_edge`): shared by the host-kernel and board tests."""
from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

# the layer kinds a hypothesis-generated stack draws from
LAYERS = ["conv3", "conv3s2", "dw3", "conv1", "block", "maxpool", "avgpool", "hardswish"]


def cba(cin, cout, k=3, s=1, g=1, act=nn.ReLU6):
    """Conv2d - BatchNorm2d - activation, as users write it (not folded by hand)."""
    layers = [nn.Conv2d(cin, cout, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([act()] if act else []))


class Block(nn.Module):
    """An inverted residual (expand, depthwise, project, add when shapes allow)."""

    def __init__(self, cin, cout, stride, expand=3):
        super().__init__()
        hid = cin * expand
        self.body = nn.Sequential(cba(cin, hid, 1), cba(hid, hid, 3, stride, hid),
                                  cba(hid, cout, 1, act=None))
        self.res = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.res else y


def stack(layers, classes: int = 3) -> nn.Sequential:
    """A stem, then one module per name of `LAYERS` in ``layers``, then a global average pool
    and a `Linear` classifier."""
    c, mods = 8, [cba(3, 8, 3, 1)]
    for name in layers:
        if name == "conv3":
            mods.append(cba(c, c, 3))
        elif name == "conv3s2":
            mods.append(cba(c, c, 3, 2))
        elif name == "dw3":
            mods.append(cba(c, c, 3, 1, c))
        elif name == "conv1":
            mods.append(cba(c, 2 * c, 1))
            c *= 2
        elif name == "block":
            mods.append(Block(c, c, 1, 2))
        elif name == "maxpool":
            mods.append(nn.MaxPool2d(2, 2))
        elif name == "avgpool":
            mods.append(nn.AvgPool2d(2, 2))
        else:
            mods.append(cba(c, c, 3, act=nn.Hardswish))
    return nn.Sequential(*mods, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes))


def int8_edge(model, shape, seed=0, isa="scalar", calibration: int = 3):
    """The Cortex-M harness (``backends/cortex_m/test/tester.py``): (edge program manager
    after ``CortexMPassManager``, channels-last float input). ``isa``: ``scalar`` (the host
    kernels' C path), ``mve`` (the M55's default export, which the board runs) or ``both``
    (one quantized graph lowered twice: ((scalar edge, mve edge), input))."""
    from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
    from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
    from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer
    from executorch.backends.cortex_m.target_config import CortexM, CortexMTargetConfig
    from executorch.exir import to_edge
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from memsched.executorch import host_kernels

    g = torch.Generator().manual_seed(seed)

    def sample():
        x = torch.rand(*shape, generator=g) * 2 - 1
        return x.to(memory_format=torch.channels_last)

    model = model.eval()
    x = sample()
    targets = {"scalar": host_kernels.target_config(), "mve": CortexMTargetConfig(cpu=CortexM.M55)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        captured = torch.export.export(model, (x,), strict=True).module(check_guards=False)
        prepared = prepare_pt2e(captured, CortexMQuantizer())
        for _ in range(calibration):
            prepared(sample())
        converted = convert_pt2e(prepared, fold_quantize=True)
        edge = to_edge(torch.export.export(converted, (x,), strict=True),
                       compile_config=cortex_m_edge_compile_config())
        lowered = {}
        for isa_name in (("scalar", "mve") if isa == "both" else (isa,)):
            e = copy.deepcopy(edge)
            pm = CortexMPassManager(e.exported_program(), CortexMPassManager.pass_list,
                                    target_config=targets[isa_name])
            e._edge_programs["forward"] = pm.transform()
            lowered[isa_name] = e
        if isa == "both":
            return (lowered["scalar"], lowered["mve"]), x
        return lowered[isa], x

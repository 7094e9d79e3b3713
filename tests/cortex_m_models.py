"""Models for the Cortex-M tests, written as users write them (`Conv2d` - `BatchNorm2d` -
activation, inverted residuals, pools, a `Linear` classifier): shared by the host-kernel and
board tests."""
from __future__ import annotations

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

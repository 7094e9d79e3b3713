"""Xception (Chollet, CVPR 2017), ImageNet 299x299.

Entry flow: 3x3/2 conv 32 (valid), 3x3 conv 64 (valid); three blocks (128, 256, 728) of
[ReLU] sep-BN-ReLU-sep-BN-3x3/2 max pool plus a 1x1/2 conv-BN shortcut (the first block has no
leading ReLU). Middle flow: 8 x (3 x ReLU-sep 728-BN) + identity. Exit flow: ReLU-sep 728-BN-
ReLU-sep 1024-BN-max pool/2 + 1x1/2 shortcut; sep 1536-BN-ReLU, sep 2048-BN-ReLU; pool; classifier.
Separable conv = 3x3 depthwise + 1x1 pointwise (no BN between, as in the paper).
"""
from __future__ import annotations

from torch import nn

from .ops import ConvBN

EPS = 1e-3


def sep(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cin, 3, 1, 1, groups=cin, bias=False),
                         ConvBN(cin, cout, 1, eps=EPS))


class Block(nn.Module):
    def __init__(self, cin, couts, first_relu=True, pool=True):
        super().__init__()
        layers, c = [], cin
        for i, co in enumerate(couts):
            if i > 0 or first_relu:
                layers.append(nn.ReLU())
            layers.append(sep(c, co))
            c = co
        if pool:
            layers.append(nn.MaxPool2d(3, 2, 1))
            self.short = ConvBN(cin, c, 1, 2, padding=0, eps=EPS)
        else:
            self.short = None
        self.body = nn.Sequential(*layers)

    def forward(self, x):
        return self.body(x) + (x if self.short is None else self.short(x))


class Xception(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.entry = nn.Sequential(
            ConvBN(3, 32, 3, 2, padding=0, eps=EPS), nn.ReLU(),
            ConvBN(32, 64, 3, 1, padding=0, eps=EPS), nn.ReLU(),
            Block(64, (128, 128), first_relu=False), Block(128, (256, 256)),
            Block(256, (728, 728)))
        self.middle = nn.Sequential(*[Block(728, (728, 728, 728), pool=False) for _ in range(8)])
        self.exit = nn.Sequential(
            Block(728, (728, 1024)), sep(1024, 1536), nn.ReLU(), sep(1536, 2048), nn.ReLU())
        self.classifier = nn.Linear(2048, num_classes)
        self.final_channels = 2048

    def forward(self, x):
        return self.classifier(self.exit(self.middle(self.entry(x))).mean((2, 3)))


def xception(num_classes=1000):
    return Xception(num_classes)

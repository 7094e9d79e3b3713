"""ResNet-50 / ResNet-152 (He et al., CVPR 2016), ImageNet 224x224.

Bottleneck blocks (1x1, 3x3, 1x1 x4), stages of [3,4,6,3] / [3,8,36,3] blocks at 64/128/256/512
planes; the stride-2 of a stage sits on the 3x3 conv (the common "v1.5" variant; the paper put
it on the first 1x1 — same tensor shapes between blocks); projection shortcut 1x1 conv + BN.
"""
from __future__ import annotations

from torch import nn

from .hrnet import Bottleneck
from .ops import ConvBN

EPS = 1e-5


class ResNet(nn.Module):
    def __init__(self, layers, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(ConvBN(3, 64, 7, 2, eps=EPS), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for i, (n, planes) in enumerate(zip(layers, (64, 128, 256, 512))):
            for b in range(n):
                blocks.append(Bottleneck(cin, planes, 2 if b == 0 and i > 0 else 1))
                cin = planes * 4
        self.blocks = nn.Sequential(*blocks)
        self.classifier = nn.Linear(cin, num_classes)
        self.final_channels = cin

    def forward(self, x):
        return self.classifier(self.blocks(self.stem(x)).mean((2, 3)))


def resnet50(num_classes=1000):
    return ResNet((3, 4, 6, 3), num_classes)


def resnet152(num_classes=1000):
    return ResNet((3, 8, 36, 3), num_classes)

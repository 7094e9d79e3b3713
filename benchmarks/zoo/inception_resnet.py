"""Inception-ResNet-v2 (Szegedy et al., AAAI 2017), ImageNet 299x299, layer sizes of the
TF-slim reference definition (which the Keras application follows).

Stem: 3x3/2 conv 32 (valid), 3x3 conv 32 (valid), 3x3 conv 64, 3x3/2 max pool, 1x1 conv 80,
3x3 conv 192 (valid), 3x3/2 max pool; Mixed_5b (96 | 48-64 5x5 | 64-96-96 | avg pool-64 = 320).
10 x block35 (32 | 32-32 | 32-48-64, 1x1 to 320 with bias, scale 0.17, ReLU);
Mixed_6a (3x3/2 384 | 256-256-3x3/2 384 | max pool/2 = 1088);
20 x block17 (192 | 128-1x7 160-7x1 192, 1x1 to 1088, scale 0.10, ReLU);
Mixed_7a (256-3x3/2 384 | 256-3x3/2 288 | 256-288-3x3/2 320 | max pool/2 = 2080);
10 x block8 (192 | 192-1x3 224-3x1 256, 1x1 to 2080, scale 0.20; ReLU except the last);
1x1 conv 1536; pool; classifier. Every conv but the residual projections is conv-BN-ReLU.
"""
from __future__ import annotations

import torch
from torch import nn

from .ops import ConvBN

EPS = 1e-3


class CBR(nn.Module):
    def __init__(self, cin, cout, k, stride=1, padding=None):
        super().__init__()
        self.conv = ConvBN(cin, cout, k, stride, padding=padding, eps=EPS)

    def forward(self, x):
        return torch.relu(self.conv(x))


class Mixed5b(nn.Module):
    def __init__(self):
        super().__init__()
        self.b0 = CBR(192, 96, 1)
        self.b1 = nn.Sequential(CBR(192, 48, 1), CBR(48, 64, 5))
        self.b2 = nn.Sequential(CBR(192, 64, 1), CBR(64, 96, 3), CBR(96, 96, 3))
        self.b3 = nn.Sequential(nn.AvgPool2d(3, 1, 1, count_include_pad=False), CBR(192, 64, 1))

    def forward(self, x):
        return torch.cat([self.b0(x), self.b1(x), self.b2(x), self.b3(x)], 1)


class Residual(nn.Module):
    def __init__(self, branches, cmid, cout, scale, activate=True):
        super().__init__()
        self.branches = nn.ModuleList(branches)
        self.up = nn.Conv2d(cmid, cout, 1, bias=True)
        self.scale = scale
        self.activate = activate

    def forward(self, x):
        y = x + self.up(torch.cat([b(x) for b in self.branches], 1)) * self.scale
        return torch.relu(y) if self.activate else y


def block35():
    return Residual([CBR(320, 32, 1),
                     nn.Sequential(CBR(320, 32, 1), CBR(32, 32, 3)),
                     nn.Sequential(CBR(320, 32, 1), CBR(32, 48, 3), CBR(48, 64, 3))],
                    128, 320, 0.17)


def block17():
    return Residual([CBR(1088, 192, 1),
                     nn.Sequential(CBR(1088, 128, 1), CBR(128, 160, (1, 7)),
                                   CBR(160, 192, (7, 1)))],
                    384, 1088, 0.10)


def block8(activate=True):
    return Residual([CBR(2080, 192, 1),
                     nn.Sequential(CBR(2080, 192, 1), CBR(192, 224, (1, 3)),
                                   CBR(224, 256, (3, 1)))],
                    448, 2080, 0.20, activate)


class Reduction(nn.Module):
    def __init__(self, branches):
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x):
        return torch.cat([b(x) for b in self.branches], 1)


class InceptionResNetV2(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        v = 0
        self.stem = nn.Sequential(
            CBR(3, 32, 3, 2, v), CBR(32, 32, 3, 1, v), CBR(32, 64, 3), nn.MaxPool2d(3, 2),
            CBR(64, 80, 1), CBR(80, 192, 3, 1, v), nn.MaxPool2d(3, 2), Mixed5b())
        self.repeat = nn.Sequential(*[block35() for _ in range(10)])
        self.mixed_6a = Reduction([
            CBR(320, 384, 3, 2, v),
            nn.Sequential(CBR(320, 256, 1), CBR(256, 256, 3), CBR(256, 384, 3, 2, v)),
            nn.MaxPool2d(3, 2)])
        self.repeat_1 = nn.Sequential(*[block17() for _ in range(20)])
        self.mixed_7a = Reduction([
            nn.Sequential(CBR(1088, 256, 1), CBR(256, 384, 3, 2, v)),
            nn.Sequential(CBR(1088, 256, 1), CBR(256, 288, 3, 2, v)),
            nn.Sequential(CBR(1088, 256, 1), CBR(256, 288, 3), CBR(288, 320, 3, 2, v)),
            nn.MaxPool2d(3, 2)])
        self.repeat_2 = nn.Sequential(*[block8() for _ in range(9)], block8(activate=False))
        self.conv_7b = CBR(2080, 1536, 1)
        self.classifier = nn.Linear(1536, num_classes)
        self.final_channels = 1536

    def forward(self, x):
        x = self.repeat(self.stem(x))
        x = self.repeat_1(self.mixed_6a(x))
        x = self.repeat_2(self.mixed_7a(x))
        return self.classifier(self.conv_7b(x).mean((2, 3)))


def inception_resnet_v2(num_classes=1000):
    return InceptionResNetV2(num_classes)

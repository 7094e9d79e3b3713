"""MobileNetV2 (Sandler et al., CVPR 2018), width 1.0, ImageNet 224x224.

3x3/2 conv 32, inverted residual blocks (t, c, n, s) = (1,16,1,1) (6,24,2,2) (6,32,3,2)
(6,64,4,2) (6,96,3,1) (6,160,3,2) (6,320,1,1): 1x1 expand-BN-ReLU6, 3x3 depthwise-BN-ReLU6,
1x1 project-BN, residual when stride 1 and shapes match; 1x1 conv 1280, pool, classifier.
"""
from __future__ import annotations

from torch import nn

from .ops import ConvBN

EPS = 1e-5
SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, t):
        super().__init__()
        hid = cin * t
        layers = []
        if t != 1:
            layers += [ConvBN(cin, hid, 1, eps=EPS), nn.ReLU6()]
        layers += [ConvBN(hid, hid, 3, stride, groups=hid, eps=EPS), nn.ReLU6(),
                   ConvBN(hid, cout, 1, eps=EPS)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    def __init__(self, num_classes=1000, settings=SETTINGS, last=1280):
        super().__init__()
        layers = [ConvBN(3, 32, 3, 2, eps=EPS), nn.ReLU6()]
        c = 32
        for t, cout, n, s in settings:
            for i in range(n):
                layers.append(InvertedResidual(c, cout, s if i == 0 else 1, t))
                c = cout
        layers += [ConvBN(c, last, 1, eps=EPS), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(last, num_classes)
        self.final_channels = last

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


def mobilenet_v2(num_classes=1000):
    return MobileNetV2(num_classes)

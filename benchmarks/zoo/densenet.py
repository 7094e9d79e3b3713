"""DenseNet-121 / DenseNet-201 (Huang et al., CVPR 2017), DenseNet-BC, ImageNet 224x224.

Growth rate 32, bottleneck width 4 x 32, compression 0.5, blocks of 6/12/24/16 (121) and
6/12/48/32 (201) layers. Stem 7x7/2 conv 64 - BN - ReLU - 3x3/2 max pool. Dense layer:
BN-ReLU-1x1 conv (128)-BN-ReLU-3x3 conv (32), its input the concat of all earlier features of the
block. Transition: BN-ReLU-1x1 conv-2x2/2 average pool. Final BN-ReLU, global pool, classifier.
Batch norms here precede their conv (pre-activation), so `fold_bn` folds only the middle BN of
each dense layer (which follows the 1x1 conv) and the stem's.
"""
from __future__ import annotations

import torch
from torch import nn

from .ops import ConvBN

EPS = 1e-5


class DenseLayer(nn.Module):
    def __init__(self, cin, growth=32, bn_size=4):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin, eps=EPS)
        self.c1 = ConvBN(cin, bn_size * growth, 1, eps=EPS)
        self.c2 = nn.Conv2d(bn_size * growth, growth, 3, 1, 1, bias=False)

    def forward(self, feats):
        x = torch.cat(feats, 1) if len(feats) > 1 else feats[0]
        return self.c2(torch.relu(self.c1(torch.relu(self.bn1(x)))))


class DenseBlock(nn.Module):
    def __init__(self, n, cin, growth=32):
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(cin + i * growth, growth) for i in range(n))
        self.out_channels = cin + n * growth

    def forward(self, x):
        feats = [x]
        for layer in self.layers:
            feats.append(layer(feats))
        return torch.cat(feats, 1)


class Transition(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.bn = nn.BatchNorm2d(cin, eps=EPS)
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)
        self.pool = nn.AvgPool2d(2, 2)

    def forward(self, x):
        return self.pool(self.conv(torch.relu(self.bn(x))))


class DenseNet(nn.Module):
    def __init__(self, blocks, growth=32, init=64, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(ConvBN(3, init, 7, 2, eps=EPS), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, c = [], init
        for i, n in enumerate(blocks):
            b = DenseBlock(n, c, growth)
            layers.append(b)
            c = b.out_channels
            if i != len(blocks) - 1:
                layers.append(Transition(c, c // 2))
                c //= 2
        self.features = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(c, eps=EPS)
        self.classifier = nn.Linear(c, num_classes)
        self.final_channels = c

    def forward(self, x):
        y = torch.relu(self.bn(self.features(self.stem(x))))
        return self.classifier(y.mean((2, 3)))


def densenet121(num_classes=1000):
    return DenseNet((6, 12, 24, 16), num_classes=num_classes)


def densenet201(num_classes=1000):
    return DenseNet((6, 12, 48, 32), num_classes=num_classes)

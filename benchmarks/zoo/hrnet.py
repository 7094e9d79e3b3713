"""HRNet classification networks (Wang et al., TPAMI 2020; HRNet-Image-Classification configs).

Stem: two 3x3/2 convs to 64 (56x56). Stage 1: bottleneck blocks (expansion 4). Stages 2-4:
high-resolution modules with 2/3/4 parallel branches of basic blocks, multi-resolution fusion
after each module (upsample: 1x1 conv + BN + nearest x2^k; downsample: chains of 3x3/2 conv +
BN, ReLU between; sum then ReLU). Transitions: 3x3 conv-BN-ReLU where the channel count
changes, 3x3/2 conv-BN-ReLU from the lowest resolution to open a new branch. Head: one
bottleneck per branch to 32/64/128/256 x 4 channels, 3x3/2 conv-BN-ReLU downsampling summed into
the next branch, 1x1 conv to 2048, global average pool, classifier.

Configs (NUM_MODULES, NUM_BLOCKS, NUM_CHANNELS per stage) from the official YAML files.
"""
from __future__ import annotations

import torch
from torch import nn

from .ops import ConvBN

EPS = 1e-5

CONFIGS = {
    # stage: (modules, blocks per branch, channels per branch)
    "w18_small_v1": [(1, (1,), (32,)), (1, (2, 2), (16, 32)), (1, (2, 2, 2), (16, 32, 64)),
                     (1, (2, 2, 2, 2), (16, 32, 64, 128))],
    "w18_small_v2": [(1, (2,), (64,)), (1, (2, 2), (18, 36)), (3, (2, 2, 2), (18, 36, 72)),
                     (2, (2, 2, 2, 2), (18, 36, 72, 144))],
    "w32": [(1, (4,), (64,)), (1, (4, 4), (32, 64)), (4, (4, 4, 4), (32, 64, 128)),
            (3, (4, 4, 4, 4), (32, 64, 128, 256))],
}


class Basic(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride=1):
        super().__init__()
        self.c1 = ConvBN(cin, planes, 3, stride, eps=EPS)
        self.c2 = ConvBN(planes, planes, 3, 1, eps=EPS)
        self.down = (ConvBN(cin, planes, 1, stride, eps=EPS)
                     if stride != 1 or cin != planes else None)

    def forward(self, x):
        r = x if self.down is None else self.down(x)
        return torch.relu(self.c2(torch.relu(self.c1(x))) + r)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride=1):
        super().__init__()
        cout = planes * 4
        self.c1 = ConvBN(cin, planes, 1, eps=EPS)
        self.c2 = ConvBN(planes, planes, 3, stride, eps=EPS)
        self.c3 = ConvBN(planes, cout, 1, eps=EPS)
        self.down = ConvBN(cin, cout, 1, stride, eps=EPS) if stride != 1 or cin != cout else None

    def forward(self, x):
        r = x if self.down is None else self.down(x)
        y = torch.relu(self.c2(torch.relu(self.c1(x))))
        return torch.relu(self.c3(y) + r)


def _layer(block, cin, planes, n, stride=1):
    layers = [block(cin, planes, stride)]
    layers += [block(planes * block.expansion, planes) for _ in range(n - 1)]
    return nn.Sequential(*layers)


class _Up(nn.Module):
    def __init__(self, cin, cout, factor):
        super().__init__()
        self.conv = ConvBN(cin, cout, 1, eps=EPS)
        self.up = nn.Upsample(scale_factor=factor, mode="nearest")

    def forward(self, x):
        return self.up(self.conv(x))


class HRModule(nn.Module):
    def __init__(self, blocks, channels):
        super().__init__()
        nb = len(channels)
        self.branches = nn.ModuleList(
            _layer(Basic, channels[i], channels[i], blocks[i]) for i in range(nb))
        self.fuse = nn.ModuleList()
        for i in range(nb):
            row = nn.ModuleList()
            for j in range(nb):
                if j > i:
                    row.append(_Up(channels[j], channels[i], 2 ** (j - i)))
                elif j == i:
                    row.append(nn.Identity())
                else:
                    chain = []
                    for k in range(i - j):
                        last = k == i - j - 1
                        chain.append(ConvBN(channels[j], channels[i] if last else channels[j],
                                            3, 2, eps=EPS))
                        if not last:
                            chain.append(nn.ReLU())
                    row.append(nn.Sequential(*chain))
            self.fuse.append(row)

    def forward(self, xs):
        xs = [b(x) for b, x in zip(self.branches, xs)]
        out = []
        for i, row in enumerate(self.fuse):
            y = xs[0] if i == 0 else row[0](xs[0])
            for j in range(1, len(xs)):
                y = y + (xs[j] if i == j else row[j](xs[j]))
            out.append(torch.relu(y))
        return out


def _conv_bn_relu(cin, cout, stride):
    return nn.Sequential(ConvBN(cin, cout, 3, stride, eps=EPS), nn.ReLU())


class HRNet(nn.Module):
    def __init__(self, config: str, num_classes=1000):
        super().__init__()
        cfg = CONFIGS[config]
        self.stem = nn.Sequential(_conv_bn_relu(3, 64, 2), _conv_bn_relu(64, 64, 2))
        _, (n1,), (c1,) = cfg[0]
        self.layer1 = _layer(Bottleneck, 64, c1, n1)
        pre = [c1 * 4]
        self.transitions = nn.ModuleList()
        self.stages = nn.ModuleList()
        for modules, blocks, channels in cfg[1:]:
            t = nn.ModuleList()
            for i, c in enumerate(channels):
                if i < len(pre):
                    t.append(_conv_bn_relu(pre[i], c, 1) if pre[i] != c else nn.Identity())
                else:
                    chain = [_conv_bn_relu(pre[-1], pre[-1], 2) for _ in range(i - len(pre))]
                    chain.append(_conv_bn_relu(pre[-1], c, 2))
                    t.append(nn.Sequential(*chain))
            self.transitions.append(t)
            self.stages.append(nn.ModuleList(HRModule(blocks, channels) for _ in range(modules)))
            pre = list(channels)
        head = (32, 64, 128, 256)
        self.incre = nn.ModuleList(_layer(Bottleneck, pre[i], head[i], 1) for i in range(4))
        self.downsamp = nn.ModuleList(_conv_bn_relu(head[i] * 4, head[i + 1] * 4, 2)
                                      for i in range(3))
        self.final = nn.Sequential(ConvBN(head[3] * 4, 2048, 1, eps=EPS), nn.ReLU())
        self.classifier = nn.Linear(2048, num_classes)
        self.final_channels = 2048

    def forward(self, x):
        ys = [self.layer1(self.stem(x))]
        for t, modules in zip(self.transitions, self.stages):
            xs = [t[i](ys[i] if i < len(ys) else ys[-1]) for i in range(len(t))]
            for m in modules:
                xs = m(xs)
            ys = xs
        y = self.incre[0](ys[0])
        for i in range(3):
            y = self.incre[i + 1](ys[i + 1]) + self.downsamp[i](y)
        return self.classifier(self.final(y).mean((2, 3)))


def hrnet(config, num_classes=1000):
    return HRNet(config, num_classes)

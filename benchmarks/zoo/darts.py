"""DARTS (Liu et al., ICLR 2019), genotype DARTS_V2 (second-order search), evaluation networks.

Cell: both inputs preprocessed (ReLU-1x1-BN, or a factorized reduce when the cell before the
previous one has twice the resolution); 4 nodes, each the sum of two ops on earlier states
(0 = c_{k-2}, 1 = c_{k-1}); output = concat of nodes 2..5 (4C channels). Ops as in the paper's
code: sep_conv = (ReLU, dw, pw, BN) x 2, dil_conv = ReLU, dw dilation 2, pw, BN;
skip_connect = identity (a factorized reduce at stride 2); pools without BN.
CIFAR-10: 20 cells, C=36, stem 3x3 conv to 3C. ImageNet (mobile): 14 cells, C=48, two stems
(3x3/2 conv C/2, BN, ReLU, 3x3/2 conv C, BN; ReLU, 3x3/2 conv C, BN). Auxiliary heads omitted.
"""
from __future__ import annotations

from collections import namedtuple

import torch
from torch import nn

from .ops import ConvBN, DilConv, FactorizedReduce, ReLUConvBN, SepConvDARTS, pool, relu

Genotype = namedtuple("Genotype", "normal normal_concat reduce reduce_concat")

DARTS_V2 = Genotype(
    normal=[("sep_conv_3x3", 0), ("sep_conv_3x3", 1), ("sep_conv_3x3", 0), ("sep_conv_3x3", 1),
            ("sep_conv_3x3", 1), ("skip_connect", 0), ("skip_connect", 0), ("dil_conv_3x3", 2)],
    normal_concat=[2, 3, 4, 5],
    reduce=[("max_pool_3x3", 0), ("max_pool_3x3", 1), ("skip_connect", 2), ("max_pool_3x3", 1),
            ("max_pool_3x3", 0), ("skip_connect", 2), ("skip_connect", 2), ("max_pool_3x3", 1)],
    reduce_concat=[2, 3, 4, 5])

EPS = 1e-5


def _op(name, c, stride):
    if name == "sep_conv_3x3":
        return SepConvDARTS(c, c, 3, stride, EPS)
    if name == "sep_conv_5x5":
        return SepConvDARTS(c, c, 5, stride, EPS)
    if name == "dil_conv_3x3":
        return DilConv(c, c, 3, stride, 2, EPS)
    if name == "dil_conv_5x5":
        return DilConv(c, c, 5, stride, 2, EPS)
    if name == "skip_connect":
        return nn.Identity() if stride == 1 else FactorizedReduce(c, c, "darts", EPS)
    if name == "max_pool_3x3":
        return nn.MaxPool2d(3, stride, 1)
    if name == "avg_pool_3x3":
        return pool("avg", 3, stride)
    raise ValueError(name)


class DartsCell(nn.Module):
    def __init__(self, genotype, c_pp, c_p, c, reduction, reduction_prev):
        super().__init__()
        self.pre0 = (FactorizedReduce(c_pp, c, "darts", EPS) if reduction_prev
                     else ReLUConvBN(c_pp, c, 1, 1, EPS))
        self.pre1 = ReLUConvBN(c_p, c, 1, 1, EPS)
        ops, self.concat = (genotype.reduce, genotype.reduce_concat) if reduction else \
            (genotype.normal, genotype.normal_concat)
        self.indices = [i for _, i in ops]
        self.ops = nn.ModuleList(
            _op(name, c, 2 if reduction and idx < 2 else 1) for name, idx in ops)
        self.out_channels = c * len(self.concat)

    def forward(self, s0, s1):
        states = [self.pre0(s0), self.pre1(s1)]
        for i in range(0, len(self.ops), 2):
            a = self.ops[i](states[self.indices[i]])
            b = self.ops[i + 1](states[self.indices[i + 1]])
            states.append(a + b)
        return torch.cat([states[i] for i in self.concat], 1)


class DartsNet(nn.Module):
    def __init__(self, genotype, c, layers, num_classes, imagenet):
        super().__init__()
        self.imagenet = imagenet
        if imagenet:
            self.stem0 = nn.Sequential(ConvBN(3, c // 2, 3, 2, eps=EPS), relu(),
                                       ConvBN(c // 2, c, 3, 2, eps=EPS))
            self.stem1 = nn.Sequential(relu(), ConvBN(c, c, 3, 2, eps=EPS))
            c_pp, c_p, c_cur = c, c, c
            reduction_prev = True
        else:
            c_cur = 3 * c
            self.stem = ConvBN(3, c_cur, 3, 1, eps=EPS)
            c_pp, c_p, c_cur = c_cur, c_cur, c
            reduction_prev = False
        self.cells = nn.ModuleList()
        for i in range(layers):
            reduction = i in (layers // 3, 2 * layers // 3)
            if reduction:
                c_cur *= 2
            cell = DartsCell(genotype, c_pp, c_p, c_cur, reduction, reduction_prev)
            reduction_prev = reduction
            self.cells.append(cell)
            c_pp, c_p = c_p, cell.out_channels
        self.final_channels = c_p
        self.classifier = nn.Linear(c_p, num_classes)

    def forward(self, x):
        if self.imagenet:
            s0 = self.stem0(x)
            s1 = self.stem1(s0)
        else:
            s0 = s1 = self.stem(x)
        for cell in self.cells:
            s0, s1 = s1, cell(s0, s1)
        return self.classifier(s1.mean((2, 3)))


def darts_v2_cifar(num_classes=10, c=36, layers=20):
    return DartsNet(DARTS_V2, c, layers, num_classes, imagenet=False)


def darts_v2_imagenet(num_classes=1000, c=48, layers=14):
    return DartsNet(DARTS_V2, c, layers, num_classes, imagenet=True)

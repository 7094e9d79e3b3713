"""Public-model suite: a dozen architectures users deploy, through the files users have.

Each network is written here in PyTorch from its published definition (paper configuration
tables; layer layouts as in the reference implementations users deploy, e.g. torchvision's
GoogLeNet with 3x3 "5x5" branches): torchvision and timm do not load on this machine, so
nothing is imported from them. Weights are random with a fixed seed (batch norms get
non-trivial running statistics), batch 1, a square RGB input (``--size``, default 128).

Every model is exported the ways users export it, into a temporary directory:

* ``onnx``: ``torch.onnx.export(..., dynamo=False)`` (the TorchScript exporter, eval mode, so
  batch norms are folded into the convolutions and constants folded, as users get it);
* ``dynamo``: ``torch.onnx.export(..., dynamo=True)`` (torch 2.13's default; needs
  ``onnxscript``: the format is skipped, and says so, without it);
* ``pt2``: ``torch.export.export`` + ``torch.export.save``.

Then, for every file, what a user runs: ``memsched analyze FILE --json`` and ``memsched compile FILE
--pass MemoryAwareSchedule --pass PlanArena -o model.so --json`` (both through `memsched.cli.main`,
in process), the library is loaded and run on the input in TVM's VM, and its output compared with
ONNX Runtime on the classic ONNX file (``rtol 1e-3``, ``atol 1e-4 * max|ref|``). Plain TVM's planned
bytes (what ``tvm.compile`` allocates for activations) come from the JSON of analyze/compile
(``tvm_planned_bytes``), or, when neither has it, `memsched.planned_bytes` of the same file with
``schedule=False, plan_arena=False``; a row notes it when analyze's peak or planned bytes differ
from compile's.

    .venv/bin/python benchmarks/tvm/public_models.py            # all models, all formats
    .venv/bin/python benchmarks/tvm/public_models.py --quick    # 3 models
    .venv/bin/python benchmarks/tvm/public_models.py --models resnet18 unet --formats onnx pt2
    .venv/bin/python benchmarks/tvm/public_models.py --jobs 2 --summary    # the README's table

Prints a markdown table: model, format, ops, peak in the input order and ours (from
``analyze``), optimal (peak == lower bound), plain-TVM and our planned bytes (from
``compile``), outputs equal to ONNX Runtime (max abs difference), seconds (export excluded).
A step that fails shows its error in the row; the script goes on.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import torch  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# ============================================================================ building blocks
def conv_bn(cin, cout, k=3, stride=1, groups=1, act=nn.ReLU, eps=1e-5, padding=None):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2 if padding is None else padding,
                        groups=groups, bias=False), nn.BatchNorm2d(cout, eps=eps)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def make_divisible(v, divisor=8):
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class SqueezeExcite(nn.Module):
    def __init__(self, c, squeeze, act=nn.ReLU, gate=nn.Sigmoid):
        super().__init__()
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.act = act()
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.gate = gate()

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class Classifier(nn.Module):
    """Global average pool + linear (dropout is the identity in eval)."""

    def __init__(self, c, num_classes):
        super().__init__()
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ============================================================================ MobileNetV2
class InvertedResidual(nn.Module):
    """MobileNetV2 / MnasNet / MobileNetV3 / EfficientNet block: 1x1 expand, kxk depthwise,
    optional squeeze-excite, 1x1 project, residual when shapes match."""

    def __init__(self, cin, cout, k, stride, expand, act=nn.ReLU6, se=None, eps=1e-5,
                 se_act=nn.ReLU, se_gate=nn.Sigmoid, hidden=None):
        super().__init__()
        hid = hidden or cin * expand
        layers = []
        if hid != cin:
            layers.append(conv_bn(cin, hid, 1, act=act, eps=eps))
        layers.append(conv_bn(hid, hid, k, stride, groups=hid, act=act, eps=eps))
        if se:
            layers.append(SqueezeExcite(hid, se, se_act, se_gate))
        layers.append(conv_bn(hid, cout, 1, act=None, eps=eps))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


def mobilenet_v2(num_classes=1000):
    """Sandler et al. 2018, Table 2, width 1.0."""
    settings = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))
    layers, c = [conv_bn(3, 32, 3, 2, act=nn.ReLU6)], 32
    for t, cout, n, s in settings:
        for i in range(n):
            layers.append(InvertedResidual(c, cout, 3, s if i == 0 else 1, t))
            c = cout
    layers.append(conv_bn(c, 1280, 1, act=nn.ReLU6))
    return nn.Sequential(*layers, Classifier(1280, num_classes))


# ============================================================================ MobileNetV3-small
class MobileNetV3Small(nn.Module):
    """Howard et al. 2019, Table 2 (k, exp, out, SE, NL, s); SE squeeze = exp/4 rounded to 8,
    hard-sigmoid gate; head 576 -> 1024 (hard-swish) -> classes."""

    CFG = ((3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
           (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
           (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1), (5, 288, 96, True, "HS", 2),
           (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1))

    def __init__(self, num_classes=1000):
        super().__init__()
        layers, c = [conv_bn(3, 16, 3, 2, act=nn.Hardswish, eps=1e-3)], 16
        for k, exp, out, se, nl, s in self.CFG:
            act = nn.ReLU if nl == "RE" else nn.Hardswish
            layers.append(InvertedResidual(c, out, k, s, 1, act=act, eps=1e-3, hidden=exp,
                                           se=make_divisible(exp // 4) if se else None,
                                           se_gate=nn.Hardsigmoid))
            c = out
        layers.append(conv_bn(c, 576, 1, act=nn.Hardswish, eps=1e-3))
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(),
                                  nn.Linear(1024, num_classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.head(torch.flatten(x, 1))


# ============================================================================ ShuffleNetV2
def channel_shuffle(x, groups=2):
    b, c, h, w = x.shape
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous().view(b, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        half = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(conv_bn(cin, cin, 3, stride, groups=cin, act=None),
                                         conv_bn(cin, half, 1))
        b2_in = cin if stride > 1 else half
        self.branch2 = nn.Sequential(conv_bn(b2_in, half, 1),
                                     conv_bn(half, half, 3, stride, groups=half, act=None),
                                     conv_bn(half, half, 1))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), 1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), 1)
        return channel_shuffle(out, 2)


def shufflenet_v2(num_classes=1000):
    """Ma et al. 2018, Table 5, 1.0x: stages (4, 8, 4) x (116, 232, 464), conv5 1024."""
    layers = [conv_bn(3, 24, 3, 2), nn.MaxPool2d(3, 2, 1)]
    c = 24
    for reps, cout in zip((4, 8, 4), (116, 232, 464)):
        for i in range(reps):
            layers.append(ShuffleUnit(c, cout, 2 if i == 0 else 1))
            c = cout
    layers.append(conv_bn(c, 1024, 1))
    return nn.Sequential(*layers, Classifier(1024, num_classes))


# ============================================================================ SqueezeNet 1.1
class Fire(nn.Module):
    def __init__(self, cin, squeeze, e1, e3):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.e1 = nn.Conv2d(squeeze, e1, 1)
        self.e3 = nn.Conv2d(squeeze, e3, 3, padding=1)

    def forward(self, x):
        s = F.relu(self.squeeze(x))
        return torch.cat((F.relu(self.e1(s)), F.relu(self.e3(s))), 1)


class SqueezeNet11(nn.Module):
    """Iandola et al. 2016, v1.1 (the reference repository's 2.4x cheaper variant)."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256),
            Fire(512, 64, 256, 256))
        self.final = nn.Conv2d(512, num_classes, 1)

    def forward(self, x):
        x = F.relu(self.final(self.features(x)))
        return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)


# ============================================================================ ResNet-18
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = conv_bn(cin, cout, 3, stride)
        self.c2 = conv_bn(cout, cout, 3, act=None)
        self.down = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout \
            else None

    def forward(self, x):
        sc = self.down(x) if self.down is not None else x
        return F.relu(self.c2(self.c1(x)) + sc)


def resnet18(num_classes=1000):
    """He et al. 2016, Table 1, 18 layers."""
    layers = [conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)]
    c = 64
    for i, cout in enumerate((64, 128, 256, 512)):
        for j in range(2):
            layers.append(BasicBlock(c, cout, 2 if i and not j else 1))
            c = cout
    return nn.Sequential(*layers, Classifier(512, num_classes))


# ============================================================================ DenseNet-121
class DenseLayer(nn.Module):
    def __init__(self, cin, growth, bn_size):
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(),
                                  nn.Conv2d(cin, bn_size * growth, 1, bias=False),
                                  nn.BatchNorm2d(bn_size * growth), nn.ReLU(),
                                  nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False))

    def forward(self, features):
        return self.body(torch.cat(features, 1))  # concat of all earlier maps, per layer


class DenseBlock(nn.Module):
    def __init__(self, n, cin, growth, bn_size):
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(cin + i * growth, growth, bn_size)
                                    for i in range(n))

    def forward(self, x):
        feats = [x]
        for layer in self.layers:
            feats.append(layer(feats))
        return torch.cat(feats, 1)


def densenet121(num_classes=1000, blocks=(6, 12, 24, 16), growth=32, init=64, bn_size=4):
    """Huang et al. 2017, Table 1, DenseNet-121 (k=32, BC, compression 0.5)."""
    layers = [conv_bn(3, init, 7, 2), nn.MaxPool2d(3, 2, 1)]
    c = init
    for i, n in enumerate(blocks):
        layers.append(DenseBlock(n, c, growth, bn_size))
        c += n * growth
        if i != len(blocks) - 1:
            layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False),
                       nn.AvgPool2d(2, 2)]
            c //= 2
    layers += [nn.BatchNorm2d(c), nn.ReLU()]
    return nn.Sequential(*layers, Classifier(c, num_classes))


# ============================================================================ GoogLeNet
class Inception(nn.Module):
    def __init__(self, cin, c1, c3r, c3, c5r, c5, pp):
        super().__init__()
        bc = dict(eps=1e-3)
        self.b1 = conv_bn(cin, c1, 1, **bc)
        self.b2 = nn.Sequential(conv_bn(cin, c3r, 1, **bc), conv_bn(c3r, c3, 3, **bc))
        self.b3 = nn.Sequential(conv_bn(cin, c5r, 1, **bc), conv_bn(c5r, c5, 3, **bc))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv_bn(cin, pp, 1, **bc))

    def forward(self, x):
        return torch.cat((self.b1(x), self.b2(x), self.b3(x), self.b4(x)), 1)


def googlenet(num_classes=1000):
    """Szegedy et al. 2015, Table 1, with batch norm and the 3x3 "5x5" branch of the
    reference implementation users deploy; no auxiliary heads (inference)."""
    bc = dict(eps=1e-3)
    return nn.Sequential(
        conv_bn(3, 64, 7, 2, **bc), nn.MaxPool2d(3, 2, ceil_mode=True),
        conv_bn(64, 64, 1, **bc), conv_bn(64, 192, 3, **bc), nn.MaxPool2d(3, 2, ceil_mode=True),
        Inception(192, 64, 96, 128, 16, 32, 32), Inception(256, 128, 128, 192, 32, 96, 64),
        nn.MaxPool2d(3, 2, ceil_mode=True),
        Inception(480, 192, 96, 208, 16, 48, 64), Inception(512, 160, 112, 224, 24, 64, 64),
        Inception(512, 128, 128, 256, 24, 64, 64), Inception(512, 112, 144, 288, 32, 64, 64),
        Inception(528, 256, 160, 320, 32, 128, 128), nn.MaxPool2d(2, 2, ceil_mode=True),
        Inception(832, 256, 160, 320, 32, 128, 128), Inception(832, 384, 192, 384, 48, 128, 128),
        Classifier(1024, num_classes))


# ============================================================================ MnasNet-A1... B1
def mnasnet1_0(num_classes=1000):
    """Tan et al. 2019 (MnasNet-B1, the variant without squeeze-excite, depth 1.0): stem
    conv + separable conv 16, stacks (exp, k, s, out, n)."""
    stacks = ((3, 3, 2, 24, 3), (3, 5, 2, 40, 3), (6, 5, 2, 80, 3), (6, 3, 1, 96, 2),
              (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))
    eps = 1e-5
    layers = [conv_bn(3, 32, 3, 2, eps=eps), conv_bn(32, 32, 3, groups=32, eps=eps),
              conv_bn(32, 16, 1, act=None, eps=eps)]
    c = 16
    for t, k, s, cout, n in stacks:
        for i in range(n):
            layers.append(InvertedResidual(c, cout, k, s if i == 0 else 1, t, act=nn.ReLU))
            c = cout
    layers.append(conv_bn(c, 1280, 1, eps=eps))
    return nn.Sequential(*layers, Classifier(1280, num_classes))


# ============================================================================ EfficientNet-B0
def efficientnet_b0(num_classes=1000):
    """Tan & Le 2019, Table 1: MBConv (expand, k, s, out, layers), SiLU, SE ratio 0.25 of the
    block input channels."""
    stages = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
              (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))
    layers, c = [conv_bn(3, 32, 3, 2, act=nn.SiLU, eps=1e-3)], 32
    for t, k, s, cout, n in stages:
        for i in range(n):
            layers.append(InvertedResidual(c, cout, k, s if i == 0 else 1, t, act=nn.SiLU,
                                           se=max(1, c // 4), se_act=nn.SiLU, eps=1e-3))
            c = cout
    layers.append(conv_bn(c, 1280, 1, act=nn.SiLU, eps=1e-3))
    return nn.Sequential(*layers, Classifier(1280, num_classes))


# ============================================================================ RegNetX-400MF
class XBlock(nn.Module):
    def __init__(self, cin, cout, stride, group_width):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, cout, 1),
                                  conv_bn(cout, cout, 3, stride, groups=cout // group_width),
                                  conv_bn(cout, cout, 1, act=None))
        self.proj = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout \
            else None

    def forward(self, x):
        sc = self.proj(x) if self.proj is not None else x
        return F.relu(self.body(x) + sc)


def regnet_x_400mf(num_classes=1000):
    """Radosavovic et al. 2020, RegNetX-400MF: depths (1, 2, 7, 12), widths
    (32, 64, 160, 400), group width 16, bottleneck ratio 1."""
    layers, c = [conv_bn(3, 32, 3, 2)], 32
    for d, w in zip((1, 2, 7, 12), (32, 64, 160, 400)):
        for i in range(d):
            layers.append(XBlock(c, w, 2 if i == 0 else 1, 16))
            c = w
    return nn.Sequential(*layers, Classifier(c, num_classes))


# ============================================================================ ConvNeXt-atto
class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.dw = nn.Conv2d(d, d, 7, padding=3, groups=d)
        self.norm = nn.LayerNorm(d, eps=1e-6)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.gamma = nn.Parameter(torch.full((d,), 0.5))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


def convnext_atto(num_classes=1000, depths=(2, 2, 6, 2), dims=(40, 80, 160, 320)):
    """Liu et al. 2022 (ConvNeXt block: 7x7 depthwise, LayerNorm, MLP 4x with GELU, layer
    scale), the smallest published configuration ("atto": depths 2/2/6/2, dims 40..320)."""
    layers = [nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6)]
    for i, (n, d) in enumerate(zip(depths, dims)):
        if i:
            layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], d, 2, 2)]
        layers += [ConvNeXtBlock(d) for _ in range(n)]

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
            self.fc = nn.Linear(dims[-1], num_classes)

        def forward(self, x):
            return self.fc(self.norm(x.mean((2, 3))))

    return nn.Sequential(*layers, Head())


# ============================================================================ U-Net
class UNet(nn.Module):
    """Ronneberger et al. 2015 (two 3x3 convs per level, 2x2 max pool down, 2x2 transposed conv
    up, skip concatenation), with batch norm and padded convs as deployed for segmentation;
    base width ``c`` (the paper: 64; here 16 by default), 4 levels, 2 classes."""

    def __init__(self, c=16, levels=4, num_classes=2):
        super().__init__()
        widths = [c * 2 ** i for i in range(levels + 1)]
        self.down = nn.ModuleList()
        cin = 3
        for w in widths:
            self.down.append(nn.Sequential(conv_bn(cin, w, 3), conv_bn(w, w, 3)))
            cin = w
        self.up = nn.ModuleList(nn.ConvTranspose2d(widths[i + 1], widths[i], 2, 2)
                                for i in reversed(range(levels)))
        self.dec = nn.ModuleList(nn.Sequential(conv_bn(2 * widths[i], widths[i], 3),
                                               conv_bn(widths[i], widths[i], 3))
                                 for i in reversed(range(levels)))
        self.out = nn.Conv2d(widths[0], num_classes, 1)

    def forward(self, x):
        skips = []
        for i, d in enumerate(self.down):
            x = d(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        skips.pop()
        for up, dec in zip(self.up, self.dec):
            x = dec(torch.cat((skips.pop(), up(x)), 1))
        return self.out(x)


# ============================================================================ tiny (tests)
def tiny_fire(num_classes=10):
    """A two-Fire-module SqueezeNet-like net for the fast test (not a public model)."""
    return nn.Sequential(nn.Conv2d(3, 16, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
                         Fire(16, 8, 16, 16), Fire(32, 8, 16, 16),
                         nn.Conv2d(32, num_classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten())


# ============================================================================ registry
@dataclass(frozen=True)
class Spec:
    name: str
    build: object
    source: str
    size: int | None = None  # fixed input size (else --size)


MODELS = {s.name: s for s in [
    Spec("mobilenet_v2", mobilenet_v2, "Sandler et al. 2018, width 1.0"),
    Spec("mobilenet_v3_small", MobileNetV3Small, "Howard et al. 2019, small, width 1.0"),
    Spec("shufflenet_v2", shufflenet_v2, "Ma et al. 2018, 1.0x"),
    Spec("squeezenet1_1", SqueezeNet11, "Iandola et al. 2016, v1.1"),
    Spec("resnet18", resnet18, "He et al. 2016"),
    Spec("densenet121", densenet121, "Huang et al. 2017"),
    Spec("googlenet", googlenet, "Szegedy et al. 2015 (+BN)"),
    Spec("mnasnet1_0", mnasnet1_0, "Tan et al. 2019, B1 1.0"),
    Spec("efficientnet_b0", efficientnet_b0, "Tan & Le 2019"),
    Spec("regnet_x_400mf", regnet_x_400mf, "Radosavovic et al. 2020"),
    Spec("convnext_atto", convnext_atto, "Liu et al. 2022, atto config"),
    Spec("unet", UNet, "Ronneberger et al. 2015, base 16, 4 levels (+BN)"),
]}
TESTS = {"tiny_fire": Spec("tiny_fire", tiny_fire, "test net", size=32)}
QUICK = ("squeezenet1_1", "shufflenet_v2", "mobilenet_v3_small")
FORMATS = ("onnx", "dynamo", "pt2")


def build(name: str, size: int, seed: int = 0):
    """(eval-mode model, input) with seeded weights and non-trivial batch-norm statistics."""
    spec = MODELS.get(name) or TESTS[name]
    torch.manual_seed(seed)
    model = spec.build()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(torch.rand(c, generator=g) * 0.2 - 0.1)
                m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
                m.weight.copy_(torch.rand(c, generator=g) + 0.5)
                m.bias.copy_(torch.rand(c, generator=g) * 0.2 - 0.1)
    model.eval()
    s = spec.size or size
    x = torch.randn(1, 3, s, s, generator=g)
    return model, x


def dynamo_available() -> bool:
    try:
        import onnxscript  # noqa: F401
    except ImportError:
        return False
    return True


def export(model, x, fmt: str, path: str) -> None:
    import logging

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # "torchvision is not installed"
    with warnings.catch_warnings(), torch.no_grad(), \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        if fmt == "onnx":
            torch.onnx.export(model, (x,), path, dynamo=False, input_names=["x"],
                              output_names=["y"])
        elif fmt == "dynamo":
            torch.onnx.export(model, (x,), path, dynamo=True, input_names=["x"],
                              output_names=["y"], verbose=False)
        else:
            torch.export.save(torch.export.export(model, (x,)), path)


# ============================================================================ one row
@dataclass
class Row:
    model: str
    format: str
    ops: int | None = None
    memory_model: str = ""
    input_peak: int | None = None
    peak: int | None = None
    lower_bound: int | None = None
    optimal: bool | None = None
    tvm_planned: int | None = None
    ours_planned: int | None = None
    max_diff: float | None = None
    equal: bool | None = None
    seconds: float = 0.0
    errors: list = field(default_factory=list)
    step_seconds: dict = field(default_factory=dict)  # export, analyze, compile, run, plain

    def cells(self) -> list[str]:
        def num(v):
            return "-" if v is None else f"{v:,}"

        if self.equal is None:
            eq = "-"
        else:
            eq = ("yes" if self.equal else "**no**") + f" ({self.max_diff:.1e})"
        saved = ""
        if self.tvm_planned and self.ours_planned is not None:
            saved = f" ({100.0 * (self.ours_planned - self.tvm_planned) / self.tvm_planned:+.0f}%)"
        return [self.model, self.format, num(self.ops), num(self.input_peak), num(self.peak),
                "-" if self.optimal is None else ("yes" if self.optimal else "no"),
                num(self.tvm_planned), num(self.ours_planned) + saved, eq,
                f"{self.seconds:.1f}", "; ".join(self.errors) or ""]


HEADER = ["model", "format", "ops", "peak input order (B)", "peak ours (B)", "optimal",
          "plain TVM planned (B)", "ours planned (B)", "outputs equal (max abs diff)", "s",
          "errors"]


SUMMARY_HEADER = ["model", "formats", "ops", "peak input order (B)", "peak ours (B)", "optimal",
                  "plain TVM planned (B)", "ours planned (B)", "saved", "outputs equal",
                  "max abs diff", "s"]


def summary(rows: list[Row]) -> str:
    """One line per model: a value shared by every format once, else one per format
    ("a / b / c" in the order of the formats column)."""
    def num(v):
        return "-" if v is None else f"{v:,}"

    def joined(vals):
        return vals[0] if len(set(vals)) == 1 else " / ".join(vals)

    lines = ["| " + " | ".join(SUMMARY_HEADER) + " |", "|" + "---|" * len(SUMMARY_HEADER)]
    for name in dict.fromkeys(r.model for r in rows):
        rs = [r for r in rows if r.model == name and not
              (r.errors and r.errors[0].startswith("skipped"))]
        if not rs:
            continue
        saved = [f"{100.0 * (r.ours_planned - r.tvm_planned) / r.tvm_planned:+.0f}%"
                 if r.tvm_planned and r.ours_planned is not None else "-" for r in rs]
        diffs = [r.max_diff for r in rs if r.max_diff is not None]
        cells = [name, " / ".join(r.format for r in rs),
                 joined([num(r.ops) for r in rs]), joined([num(r.input_peak) for r in rs]),
                 joined([num(r.peak) for r in rs]),
                 joined(["-" if r.optimal is None else "yes" if r.optimal else "no"
                         for r in rs]),
                 joined([num(r.tvm_planned) for r in rs]),
                 joined([num(r.ours_planned) for r in rs]), joined(saved),
                 f"{sum(bool(r.equal) for r in rs)}/{len(rs)}",
                 f"{max(diffs):.1e}" if diffs else "-", f"{sum(r.seconds for r in rs):.0f}"]
        if any(r.errors for r in rs):
            cells[0] += " (errors: see the full table)"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cli(argv: list[str]) -> tuple[int, str, str]:
    from memsched.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _short(text: str) -> str:
    text = " ".join(text.strip().split())
    return text[:160] + ("..." if len(text) > 160 else "")


def run_file(row: Row, path: str, x, ref, time_limit: float, workdir: str) -> Row:
    """analyze + compile + run one exported file; fills ``row``."""
    import numpy as np

    t0 = t = time.perf_counter()

    def lap(step):
        nonlocal t
        now = time.perf_counter()
        row.step_seconds[step] = round(now - t, 2)
        t = now

    analyzed_planned = None
    rc, out, err = _cli(["analyze", path, "--json", "--time-limit", str(time_limit)])
    lap("analyze")
    if rc == 0:
        res = json.loads(out)
        row.ops, row.memory_model = res["ops"], res.get("memory_model", "")
        row.input_peak, row.peak = res["input_order_peak_bytes"], res["peak_bytes"]
        row.lower_bound, row.optimal = res["lower_bound"], bool(res["optimal"])
        row.tvm_planned = res.get("tvm_planned_bytes")  # analyze's Relax view reports both
        analyzed_planned = res.get("planned_bytes")
    else:
        row.errors.append("analyze: " + _short(err))
    so = os.path.join(workdir, f"{row.model}-{row.format}.so")
    rc, out, err = _cli(["compile", path, "--pass", "MemoryAwareSchedule", "--pass", "PlanArena",
                         "--time-limit", str(time_limit), "-o", so, "--json"])
    lap("compile")
    if rc != 0:
        row.errors.append("compile: " + _short(err))
    else:
        built = json.loads(out)
        row.ours_planned = built["planned_bytes"]
        if row.tvm_planned is None:
            row.tvm_planned = built.get("tvm_planned_bytes")
        if analyzed_planned is not None and row.ours_planned != analyzed_planned:
            row.errors.append(f"analyze planned {analyzed_planned:,} B != compile")
        if row.peak is not None and built.get("peak_bytes") != row.peak:
            row.errors.append(f"compile peak {built.get('peak_bytes')} != analyze")
        try:
            import tvm
            from tvm import relax

            vm = relax.VirtualMachine(tvm.runtime.load_module(so), tvm.cpu())
            y = vm["main"](tvm.runtime.tensor(x.numpy()))
            if not hasattr(y, "numpy"):  # a tuple of outputs
                y = y[0]
            y = y.numpy()
            if y.shape != ref.shape:
                row.errors.append(f"run: output shape {y.shape} != {ref.shape}")
                row.equal = False
                row.max_diff = math.inf
            else:
                row.max_diff = float(np.max(np.abs(y - ref))) if ref.size else 0.0
                scale = max(1.0, float(np.max(np.abs(ref))))
                row.equal = bool(np.allclose(y, ref, rtol=1e-3, atol=1e-4 * scale))
        except Exception as e:  # noqa: BLE001 - the row reports it
            row.errors.append(f"run: {type(e).__name__}: {_short(str(e))}")
        lap("run")
    if row.tvm_planned is None:  # what plain tvm.compile allocates for the same file
        try:
            from memsched import load_relax, planned_bytes

            with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
                row.tvm_planned = planned_bytes(load_relax(path), schedule=False,
                                                plan_arena=False)
        except Exception as e:  # noqa: BLE001
            row.errors.append(f"plain TVM: {type(e).__name__}: {_short(str(e))}")
        lap("plain")
    row.seconds = time.perf_counter() - t0
    return row


def run_model(name: str, size: int, formats, time_limit: float, workdir: str,
              seed: int = 0) -> list[Row]:
    import numpy as np
    import onnxruntime as ort

    model, x = build(name, size, seed)
    paths = {}
    rows = []
    for fmt in formats:
        row = Row(name, fmt)
        if fmt == "dynamo" and not dynamo_available():
            row.errors.append("skipped: the dynamo exporter needs onnxscript")
            rows.append(row)
            continue
        path = os.path.join(workdir, f"{name}-{fmt}.{'pt2' if fmt == 'pt2' else 'onnx'}")
        try:
            t = time.perf_counter()
            export(model, x, fmt, path)
            row.step_seconds["export"] = round(time.perf_counter() - t, 2)
            paths[fmt] = path
        except Exception as e:  # noqa: BLE001
            row.errors.append(f"export: {type(e).__name__}: {_short(str(e))}")
        rows.append(row)
    # reference: ONNX Runtime on the classic file (else the dynamo one, else PyTorch)
    ref, ref_from = None, None
    for fmt in ("onnx", "dynamo"):
        p = paths.get(fmt)
        if p is None and fmt == "onnx" and "onnx" not in formats:
            p = os.path.join(workdir, f"{name}-ref.onnx")
            try:
                export(model, x, "onnx", p)
            except Exception:  # noqa: BLE001
                p = None
        if p is not None:
            try:
                sess = ort.InferenceSession(p, providers=["CPUExecutionProvider"])
                ref = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
                ref_from = fmt
                break
            except Exception:  # noqa: BLE001
                continue
    if ref is None:
        with torch.no_grad():
            ref, ref_from = model(x).numpy(), "torch"
    for row in rows:
        if row.format in paths:
            run_file(row, paths[row.format], x, np.asarray(ref), time_limit, workdir)
            if ref_from != "onnx" and row.equal is not None:
                row.errors.append(f"reference: {ref_from}")
    return rows


def markdown(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def _timed(name, size, formats, time_limit, workdir) -> list[Row]:
    torch.set_num_threads(1)
    t = time.perf_counter()
    rows = run_model(name, size, formats, time_limit, workdir)
    print(f"{name}: {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS) + sorted(TESTS),
                    help="models to run (default: all twelve)")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    ap.add_argument("--size", type=int, default=128, help="input height = width (default 128)")
    ap.add_argument("--time-limit", type=float, default=10.0,
                    help="analyze/compile scheduling time limit per file (default 10 s)")
    ap.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    ap.add_argument("--summary", action="store_true",
                    help="one line per model (formats side by side) instead of one per file")
    ap.add_argument("--jobs", type=int, default=1,
                    help="models run in parallel processes (default 1; 2 on an idle 2-core "
                         "machine halves the wall time)")
    args = ap.parse_args(argv)
    names = args.models or (list(QUICK) if args.quick else list(MODELS))
    rows: list[Row] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="memsched-public-") as workdir:
        work = [(name, args.size, args.formats, args.time_limit, workdir) for name in names]
        if args.jobs <= 1:
            for item in work:
                rows += _timed(*item)
        else:  # one model per process (spawn: TVM and torch do not survive fork)
            import concurrent.futures as cf
            import multiprocessing as mp

            with cf.ProcessPoolExecutor(args.jobs, mp.get_context("spawn")) as pool:
                futures = [pool.submit(_timed, *item) for item in work]
                for fut in futures:  # table in model order
                    rows += fut.result()
    import resource

    cpu = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF,
              resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
    try:
        load = f", load average {os.getloadavg()[0]:.1f}"
    except OSError:
        load = ""
    print(f"\n{len(names)} models, input 1x3x{args.size}x{args.size} float32, "
          f"time limit {args.time_limit:g} s, total {time.perf_counter() - t0:.0f} s "
          f"({args.jobs} job{'s' if args.jobs > 1 else ''}, {cpu:.0f} CPU s{load}); memory "
          f"model of analyze: {', '.join(sorted({r.memory_model for r in rows if r.memory_model}))}"
          "\n")
    print(summary(rows) if args.summary else markdown(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.__dict__ for r in rows], f, indent=1)
    ok = all(r.equal for r in rows if not r.errors or not r.errors[0].startswith("skipped"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

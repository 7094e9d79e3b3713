"""Building blocks shared by the zoo's networks.

Every convolution that is directly followed by a batch norm is a `ConvBN`, so that batch norm
can be folded into the convolution (`fold_bn`), which is how the papers' inference graphs look.
Batch norms that follow something else (a concat, a ReLU: DenseNet's pre-activation) stay.

Conventions: NCHW, no convolution bias (as in the TF-slim / Keras reference models), padding
``k // 2`` for odd kernels so that a stride-2 layer gives ``ceil(n / 2)`` like TensorFlow's SAME.
"""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

BN_EPS = 1e-3  # TF-slim / Keras default; DARTS and torchvision-style nets pass 1e-5


class ConvBN(nn.Module):
    """Conv2d (no bias) followed by BatchNorm2d; `fold()` turns it into one conv with bias."""

    def __init__(self, cin, cout, k=1, stride=1, padding=None, dilation=1, groups=1,
                 eps=BN_EPS, bn=True):
        super().__init__()
        if isinstance(k, int):
            k = (k, k)
        if padding is None:
            padding = (dilation * (k[0] - 1) // 2, dilation * (k[1] - 1) // 2)
        self.conv = nn.Conv2d(cin, cout, k, stride, padding, dilation, groups, bias=not bn)
        self.bn = nn.BatchNorm2d(cout, eps=eps) if bn else None

    def forward(self, x):
        x = self.conv(x)
        return self.bn(x) if self.bn is not None else x

    @torch.no_grad()
    def fold(self):
        if self.bn is None:
            return
        self.conv = fold_conv_bn(self.conv, self.bn)
        self.bn = None


@torch.no_grad()
def fold_conv_bn(conv: nn.Conv2d, bn: nn.BatchNorm2d, out_slice: slice | None = None) -> nn.Conv2d:
    """A conv with bias computing ``bn(conv(x))`` (eval mode); ``out_slice`` picks BN channels."""
    sl = out_slice if out_slice is not None else slice(None)
    scale = bn.weight[sl] / torch.sqrt(bn.running_var[sl] + bn.eps)
    shift = bn.bias[sl] - bn.running_mean[sl] * scale
    new = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride,
                    conv.padding, conv.dilation, conv.groups, bias=True)
    new.weight.copy_(conv.weight * scale.reshape(-1, 1, 1, 1))
    b = conv.bias if conv.bias is not None else torch.zeros_like(shift)
    new.bias.copy_(b * scale + shift)
    return new.eval()


def fold_bn(model: nn.Module) -> nn.Module:
    """Fold every batch norm that directly follows a convolution into it (in place)."""
    for m in list(model.modules()):
        if hasattr(m, "fold") and m is not model:
            m.fold()
    return model


def relu():
    return nn.ReLU(inplace=False)


class SepConvTF(nn.Module):
    """TF-slim ``separable_KxK_N``: N x (ReLU, depthwise KxK, pointwise 1x1, BN).

    The first layer's depthwise runs on the input channels (multiplier 1) and carries the stride;
    its pointwise maps to ``cout`` (NASNet / AmoebaNet / PNASNet `_stacked_separable_conv`).
    """

    def __init__(self, cin, cout, k, stride, layers=2, eps=BN_EPS):
        super().__init__()
        mods = []
        c = cin
        for i in range(layers):
            mods += [relu(),
                     nn.Conv2d(c, c, k, stride if i == 0 else 1, k // 2, groups=c, bias=False),
                     ConvBN(c, cout, 1, eps=eps)]
            c = cout
        self.op = nn.Sequential(*mods)

    def forward(self, x):
        return self.op(x)


class SepConvDARTS(nn.Module):
    """DARTS ``sep_conv_KxK``: (ReLU, dw K stride s, pw, BN, ReLU, dw K, pw, BN)."""

    def __init__(self, cin, cout, k, stride, eps=1e-5):
        super().__init__()
        p = k // 2
        self.op = nn.Sequential(
            relu(), nn.Conv2d(cin, cin, k, stride, p, groups=cin, bias=False),
            ConvBN(cin, cin, 1, eps=eps),
            relu(), nn.Conv2d(cin, cin, k, 1, p, groups=cin, bias=False),
            ConvBN(cin, cout, 1, eps=eps))

    def forward(self, x):
        return self.op(x)


class DilConv(nn.Module):
    """DARTS ``dil_conv_KxK``: ReLU, depthwise K dilation d, pointwise, BN."""

    def __init__(self, cin, cout, k, stride, dilation=2, eps=1e-5):
        super().__init__()
        self.op = nn.Sequential(
            relu(), nn.Conv2d(cin, cin, k, stride, dilation * (k - 1) // 2, dilation, groups=cin,
                              bias=False),
            ConvBN(cin, cout, 1, eps=eps))

    def forward(self, x):
        return self.op(x)


class ReLUConvBN(nn.Module):
    def __init__(self, cin, cout, k=1, stride=1, eps=BN_EPS):
        super().__init__()
        self.op = nn.Sequential(relu(), ConvBN(cin, cout, k, stride, eps=eps))

    def forward(self, x):
        return self.op(x)


def pool(kind: str, k: int, stride: int) -> nn.Module:
    """TF 'SAME' pooling: max pads with -inf, avg excludes the padding from the count."""
    if kind == "max":
        return nn.MaxPool2d(k, stride, k // 2)
    if kind == "avg":
        return nn.AvgPool2d(k, stride, k // 2, count_include_pad=False)
    raise ValueError(kind)


class FactorizedReduce(nn.Module):
    """Halve H and W without losing pixels: two strided 1x1 convs on shifted grids, concat, BN.

    ``style="tf"`` (NASNet family): path 2 pads bottom/right by one and drops the first row and
    column (works for odd sizes); path 1 gets ``cout // 2`` filters, path 2 the rest.
    ``style="darts"``: ReLU first, path 2 reads ``x[:, :, 1:, 1:]``, equal halves.
    The output BN is folded into the two convs by channel halves.
    """

    def __init__(self, cin, cout, style="tf", eps=BN_EPS):
        super().__init__()
        self.style = style
        c1 = cout // 2
        self.relu = relu() if style == "darts" else None
        self.conv1 = nn.Conv2d(cin, c1, 1, 2, 0, bias=False)
        self.conv2 = nn.Conv2d(cin, cout - c1, 1, 2, 0, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=eps)

    def forward(self, x):
        if self.relu is not None:
            x = self.relu(x)
        a = self.conv1(x)
        if self.style == "darts":
            b = self.conv2(x[:, :, 1:, 1:])
        else:
            b = self.conv2(F.pad(x, (0, 1, 0, 1))[:, :, 1:, 1:])
        y = torch.cat([a, b], 1)
        return self.bn(y) if self.bn is not None else y

    @torch.no_grad()
    def fold(self):
        if self.bn is None:
            return
        c1 = self.conv1.out_channels
        self.conv1 = fold_conv_bn(self.conv1, self.bn, slice(0, c1))
        self.conv2 = fold_conv_bn(self.conv2, self.bn, slice(c1, None))
        self.bn = None


class WeightedSum(nn.Module):
    """RandWire aggregation: sum_i sigmoid(w_i) * x_i (a single input passes through)."""

    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(n)) if n > 1 else None

    def forward(self, xs):
        if self.w is None:
            return xs[0]
        s = torch.sigmoid(self.w)
        y = xs[0] * s[0]
        for i in range(1, len(xs)):
            y = y + xs[i] * s[i]
        return y


def randomize_bn(model: nn.Module, seed: int) -> nn.Module:
    """Give every BN non-trivial running statistics and affine parameters (deterministic), so a
    wrong batch-norm lowering shows up in output comparisons; keeps activations well scaled."""
    g = torch.Generator().manual_seed(seed + 7919)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(c, generator=g) * 0.1)
    return model

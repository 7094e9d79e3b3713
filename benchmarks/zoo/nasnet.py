"""NASNet-A (Zoph et al., CVPR 2018) and the TF-slim cell machinery it shares with AmoebaNet-A
and PNASNet-5.

A cell is given as the TF-slim triple (operations, hiddenstate_indices, used_hiddenstates):
block ``b`` adds ``operations[2b](h[idx[2b]])`` and ``operations[2b+1](h[idx[2b+1]])``; ``h[0]``
is ReLU-1x1-BN of the previous cell's output, ``h[1]`` the cell before that (matched in size
by a factorized reduction or a 1x1); the cell output concatenates the states whose
``used_hiddenstates`` flag is 0. Stride 2 (reduction / stem cells) applies only to ops that read
``h[0]`` or ``h[1]``. The network skeletons (ImageNet stem of a 3x3/2 conv and two reduction
stem cells; CIFAR stem of one 3x3 conv; reduction cells at 1/3 and 2/3 of ``num_cells``) follow
the TF-slim / TPU reference definitions.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .ops import ConvBN, FactorizedReduce, SepConvTF, pool, relu


@dataclass(frozen=True)
class CellSpec:
    operations: tuple
    hiddenstate_indices: tuple
    used_hiddenstates: tuple


NASNET_NORMAL = CellSpec(
    ("separable_5x5_2", "separable_3x3_2", "separable_5x5_2", "separable_3x3_2", "avg_pool_3x3",
     "none", "avg_pool_3x3", "avg_pool_3x3", "separable_3x3_2", "none"),
    (0, 1, 1, 1, 0, 1, 1, 1, 0, 0),
    (1, 0, 0, 0, 0, 0, 0))
NASNET_REDUCTION = CellSpec(
    ("separable_5x5_2", "separable_7x7_2", "max_pool_3x3", "separable_7x7_2", "avg_pool_3x3",
     "separable_5x5_2", "none", "avg_pool_3x3", "separable_3x3_2", "max_pool_3x3"),
    (0, 1, 0, 1, 0, 1, 3, 2, 2, 0),
    (1, 1, 1, 0, 0, 0, 0))


def _conv_kernel(op):  # 'separable_5x5_2' -> (5, 2)
    parts = op.split("_")
    return int(parts[1].split("x")[0]), int(parts[2])


class _Op(nn.Module):
    """One TF-slim cell operation (`_apply_operation`)."""

    def __init__(self, op, cin, cout, stride):
        super().__init__()
        if op.startswith("separable"):
            k, n = _conv_kernel(op)
            self.body = SepConvTF(cin, cout, k, stride, n)
        elif op == "none":
            if stride > 1 or cin != cout:
                self.body = nn.Sequential(relu(), ConvBN(cin, cout, 1, stride))
            else:
                self.body = nn.Identity()
        elif "pool" in op:
            kind, shape = op.split("_")[0], int(op.split("_")[-1].split("x")[0])
            layers = [pool(kind, shape, stride)]
            if cin != cout:
                layers.append(ConvBN(cin, cout, 1))
            self.body = nn.Sequential(*layers)
        elif op == "1x7_7x1":  # AmoebaNet: bottleneck to cout/4 around 1x7 then 7x1
            r = cout // 4
            self.body = nn.Sequential(
                relu(), ConvBN(cin, r, 1),
                relu(), ConvBN(r, r, (1, 7), (1, stride), padding=(0, 3)),
                relu(), ConvBN(r, r, (7, 1), (stride, 1), padding=(3, 0)),
                relu(), ConvBN(r, cout, 1))
        else:
            raise ValueError(f"unknown op {op}")

    def forward(self, x):
        return self.body(x)


def _down(h, stride):
    return (h + stride - 1) // stride


class TFCell(nn.Module):
    """One NASNet-style cell. ``cur``/``prev`` are (channels, height) of the two inputs;
    ``prev=None`` means the cell has a single input (first cell after the stem)."""

    def __init__(self, spec: CellSpec, filters: int, stride: int, cur, prev):
        super().__init__()
        self.spec = spec
        c_cur, h_cur = cur
        # _reduce_prev_layer
        if prev is None:
            self.prev = None
            prev_shape = (c_cur, h_cur)
        else:
            c_prev, h_prev = prev
            if h_prev != h_cur:
                self.prev = nn.Sequential(relu(), FactorizedReduce(c_prev, filters))
            elif c_prev != filters:
                self.prev = nn.Sequential(relu(), ConvBN(c_prev, filters, 1))
            else:
                self.prev = nn.Identity()
            prev_shape = (filters, h_cur)
        self.single_input = prev is None
        # _cell_base
        self.base = nn.Sequential(relu(), ConvBN(c_cur, filters, 1))
        shapes = [(filters, h_cur), prev_shape]
        self.ops = nn.ModuleList()
        for i in range(0, len(spec.operations), 2):
            for j in (i, i + 1):
                idx = spec.hiddenstate_indices[j]
                s = stride if idx < 2 else 1
                self.ops.append(_Op(spec.operations[j], shapes[idx][0], filters, s))
            idx = spec.hiddenstate_indices[i]
            h_out = _down(shapes[idx][1], stride if idx < 2 else 1)
            shapes.append((filters, h_out))
        # _combine_unused_states
        final_c, final_h = shapes[-1]
        self.fixups = nn.ModuleDict()
        self.concat_idx = []
        for idx, used in enumerate(spec.used_hiddenstates):
            if used:
                continue
            c, h = shapes[idx]
            if c != final_c or h != final_h:
                if h != final_h:
                    self.fixups[str(idx)] = FactorizedReduce(c, final_c)
                else:
                    self.fixups[str(idx)] = ConvBN(c, final_c, 1)
            self.concat_idx.append(idx)
        self.out_channels = final_c * len(self.concat_idx)
        self.out_height = final_h

    def forward(self, cur, prev=None):
        if self.single_input:
            prev = cur
        else:
            prev = self.prev(prev)
        h = [self.base(cur), prev]
        ops = iter(self.ops)
        idxs = self.spec.hiddenstate_indices
        for i in range(0, len(idxs), 2):
            a = next(ops)(h[idxs[i]])
            b = next(ops)(h[idxs[i + 1]])
            h.append(a + b)
        outs = []
        for idx in self.concat_idx:
            f = self.fixups[str(idx)] if str(idx) in self.fixups else None
            outs.append(f(h[idx]) if f is not None else h[idx])
        return torch.cat(outs, 1)


def reduction_layers(num_cells, num_reductions=2):
    return [int(float(p) / (num_reductions + 1) * num_cells) for p in range(1, num_reductions + 1)]


class NASNetFamily(nn.Module):
    """The TF-slim NASNet / AmoebaNet / PNASNet skeleton.

    ``style="nasnet"``: ``num_cells`` normal cells, a reduction cell inserted before the normal
    cells at the reduction indices (NASNet, AmoebaNet). ``style="pnasnet"``: ``num_cells`` cells
    in total, those at the reduction indices run with stride 2 (PNASNet).
    ``skip_reduction_layer_input``: TF flag; 0 means the normal cell after a reduction reads the
    cell before the reduction as its second input.
    """

    def __init__(self, normal: CellSpec, reduction: CellSpec, num_cells: int, filters: int,
                 stem: str, stem_filters: int, num_classes: int, image_size: int,
                 style: str = "nasnet", skip_reduction_layer_input: int = 0):
        super().__init__()
        self.cells = nn.ModuleList()
        self.wiring = []  # per cell: (index of cur in outputs, index of prev or None)
        if stem == "imagenet":
            self.stem = ConvBN(3, stem_filters, 3, 2, padding=0)
            h = (image_size - 3) // 2 + 1
            outputs = [None, (stem_filters, h)]
            scaling = 0.25
            for _ in range(2):
                cell = TFCell(reduction, int(filters * scaling), 2, outputs[-1], outputs[-2])
                self._add(cell, len(outputs) - 1, len(outputs) - 2, outputs)
                scaling *= 2
        elif stem == "cifar":
            self.stem = ConvBN(3, stem_filters, 3, 1)
            outputs = [None, (stem_filters, image_size)]
        else:
            raise ValueError(stem)
        red = reduction_layers(num_cells)
        scaling = 1.0
        for n in range(num_cells):
            if style == "nasnet":
                if n in red:
                    scaling *= 2
                    cell = TFCell(reduction, int(filters * scaling), 2, outputs[-1], outputs[-2])
                    self._add(cell, len(outputs) - 1, len(outputs) - 2, outputs)
                    prev_i = len(outputs) - 3 if skip_reduction_layer_input else len(outputs) - 2
                else:
                    prev_i = len(outputs) - 2
                cell = TFCell(normal, int(filters * scaling), 1, outputs[-1], outputs[prev_i])
                self._add(cell, len(outputs) - 1, prev_i, outputs)
            else:  # pnasnet: one cell type, strided at the reduction indices
                is_red = n in red
                if is_red:
                    scaling *= 2
                prev_i = len(outputs) - 2  # skip_reduction_layer_input=1 in both PNAS configs
                cell = TFCell(normal, int(filters * scaling), 2 if is_red else 1,
                              outputs[-1], outputs[prev_i])
                self._add(cell, len(outputs) - 1, prev_i, outputs)
        self.final_channels = outputs[-1][0]
        self.classifier = nn.Linear(self.final_channels, num_classes)

    def _add(self, cell, cur_i, prev_i, outputs):
        self.cells.append(cell)
        self.wiring.append((cur_i, prev_i if outputs[prev_i] is not None else None))
        outputs.append((cell.out_channels, cell.out_height))

    def forward(self, x):
        outs = [None, self.stem(x)]
        for cell, (ci, pi) in zip(self.cells, self.wiring):
            outs.append(cell(outs[ci], outs[pi] if pi is not None else None))
        y = torch.relu(outs[-1])
        y = y.mean((2, 3))
        return self.classifier(y)


def nasnet_a_mobile(num_classes=1000, num_cells=12, filters=44, image_size=224):
    """NASNet-A Mobile (4 @ 1056): 224x224, N=4 normal cells per stage, 44 filters."""
    return NASNetFamily(NASNET_NORMAL, NASNET_REDUCTION, num_cells, filters, "imagenet", 32,
                        num_classes, image_size)


def nasnet_a_cifar(num_classes=10, num_cells=18, filters=32, image_size=32):
    """NASNet-A CIFAR-10 (6 @ 768): 32x32, N=6, 32 filters, stem 3x3 conv with 3F filters."""
    return NASNetFamily(NASNET_NORMAL, NASNET_REDUCTION, num_cells, filters, "cifar",
                        3 * filters, num_classes, image_size)


__all__ = ["CellSpec", "TFCell", "NASNetFamily", "nasnet_a_mobile", "nasnet_a_cifar"]

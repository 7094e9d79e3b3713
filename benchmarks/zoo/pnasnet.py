"""PNASNet-5 (Liu et al., ECCV 2018), mobile ImageNet setting.

One cell type (TF-slim ``PNasNetNormalCell``), run with stride 2 at the reduction positions and
as the two ImageNet stem cells; ``num_cells=9`` cells in total (reductions at 3 and 6),
``num_conv_filters=54`` (final 5 x 216 = 1080 channels), ``skip_reduction_layer_input=1``.
"""
from __future__ import annotations

from .nasnet import CellSpec, NASNetFamily

PNASNET5 = CellSpec(
    ("separable_5x5_2", "max_pool_3x3", "separable_7x7_2", "max_pool_3x3", "separable_5x5_2",
     "separable_3x3_2", "separable_3x3_2", "max_pool_3x3", "separable_3x3_2", "none"),
    (1, 1, 0, 0, 0, 0, 4, 0, 1, 0),
    (1, 1, 0, 0, 0, 0, 0))


def pnasnet5_mobile(num_classes=1000, num_cells=9, filters=54, image_size=224):
    return NASNetFamily(PNASNET5, PNASNET5, num_cells, filters, "imagenet", 32, num_classes,
                        image_size, style="pnasnet")

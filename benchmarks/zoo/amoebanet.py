"""AmoebaNet-A (Real et al., AAAI 2019).

Cells from the authors' TPU reference (`model_specs.py`, cell ``amoeba_net_a``), in TF-slim
form (see `nasnet.py`); the network skeleton is the same as NASNet's (the TPU AmoebaNet model
builder uses NASNet's ImageNet stem: 3x3/2 conv + two reduction cells as stem cells).
ImageNet mobile setting N=4, F=50 (paper: 5.1M params, 555M mult-adds); CIFAR-10 N=6, F=36.
"""
from __future__ import annotations

from .nasnet import CellSpec, NASNetFamily

AMOEBA_A_NORMAL = CellSpec(
    ("avg_pool_3x3", "max_pool_3x3", "separable_3x3_2", "none", "none", "avg_pool_3x3",
     "separable_3x3_2", "separable_5x5_2", "avg_pool_3x3", "separable_3x3_2"),
    (0, 0, 1, 1, 0, 1, 0, 2, 5, 0),
    (1, 0, 1, 0, 0, 1, 0))
AMOEBA_A_REDUCTION = CellSpec(
    ("separable_3x3_2", "avg_pool_3x3", "max_pool_3x3", "separable_7x7_2", "max_pool_3x3",
     "max_pool_3x3", "separable_3x3_2", "1x7_7x1", "avg_pool_3x3", "separable_7x7_2"),
    (1, 0, 0, 2, 1, 0, 4, 0, 1, 0),
    (1, 1, 0, 0, 0, 0, 0))


def amoebanet_a_mobile(num_classes=1000, num_cells=12, filters=50, image_size=224):
    """AmoebaNet-A (N=4, F=50), 224x224, stem 32 filters."""
    return NASNetFamily(AMOEBA_A_NORMAL, AMOEBA_A_REDUCTION, num_cells, filters, "imagenet", 32,
                        num_classes, image_size)


def amoebanet_a_cifar(num_classes=10, num_cells=18, filters=36, image_size=32):
    """AmoebaNet-A (N=6, F=36), 32x32, CIFAR stem (3x3 conv, 3F filters)."""
    return NASNetFamily(AMOEBA_A_NORMAL, AMOEBA_A_REDUCTION, num_cells, filters, "cifar",
                        3 * filters, num_classes, image_size)

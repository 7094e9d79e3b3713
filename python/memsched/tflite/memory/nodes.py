"""What the patch writer (`memsched.tflite.patch.tile`) writes for a plan's nodes, stated once for
the writer and for the two models that price it (`memory.model`: persistent bytes and
constants; `memory.instructions`: instructions): a slice's begin, end and strides, its row-view
shapes, a pad's amounts."""
from __future__ import annotations


def slice_constants(nd, channels: int, view: bool = False) -> tuple[tuple, tuple, tuple]:
    """The begin, end and strides a plan's slice node is written with (`memsched.tflite.patch.tile`:
    a ``STRIDED_SLICE`` of its NHWC source window ``base``; ``view``: of its row view
    [1, H, W*C], rows x columns [w0*C, w1*C))."""
    b, w = nd.base, nd.win
    if view:
        return ((0, w.h0 - b.h0, (w.w0 - b.w0) * channels),
                (1, w.h1 - b.h0, (w.w1 - b.w0) * channels), (1, 1, 1))
    return ((0, w.h0 - b.h0, w.w0 - b.w0, 0), (1, w.h1 - b.h0, w.w1 - b.w0, channels),
            (1, 1, 1, 1))


def view_shapes(nd, channels: int) -> tuple[tuple, tuple]:
    """The row-view shapes of a slice node: its source [1, H, W*C] and its cut [1, h, w*C]."""
    b, w = nd.base, nd.win
    return (1, b.height, b.width * channels), (1, w.height, w.width * channels)


def pad_constant(nd) -> tuple:
    """The paddings a plan's pad node (or a copied PAD) is written with: NHWC, (before, after)
    per dim."""
    top, bottom, left, right = nd.pads
    return ((0, 0), (top, bottom), (left, right), (0, 0))


__all__ = ["pad_constant", "slice_constants", "view_shapes"]

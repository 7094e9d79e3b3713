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


# TFLite Micro's GATHER (int8 / float32 data, int32 indices) copies one contiguous run per
# outer index and index, as STRIDED_SLICE does per position, at fewer instructions per run
# (measured on the M55: 17 against 36 + 30 per row) and fewer persistent bytes (no op data, its
# 8-byte options and a copy of the output's dims, against STRIDED_SLICE's 120 B and a second
# constant): a window that cuts one spatial axis is written as a GATHER of consecutive
# indices along it. SLICE would cost nothing persistent but copies element by element (45
# instructions per element on the M55: 1.23x the instructions of ResNet-8's 1x3 plan).
GATHER_TYPES = (0, 9)  # TensorType FLOAT32, INT8


def gather_axis(nd, dtype: int) -> int | None:
    """The NHWC axis (1 = H, 2 = W) a plan's slice node is written as a GATHER along: its
    window cuts exactly one spatial axis of its source window and the kernel takes ``dtype``
    (the tensor's TensorType); None: a STRIDED_SLICE."""
    if int(dtype) not in GATHER_TYPES:
        return None
    rows, cols = nd.cuts()
    if rows == cols:
        return None
    return 1 if rows else 2


def gather_indices(nd, axis: int) -> tuple:
    """The indices of `gather_axis`'s GATHER: the window's rows (or columns) in its source."""
    b, w = nd.base, nd.win
    if axis == 1:
        return tuple(range(w.h0 - b.h0, w.h1 - b.h0))
    return tuple(range(w.w0 - b.w0, w.w1 - b.w0))


def view_shapes(nd, channels: int) -> tuple[tuple, tuple]:
    """The row-view shapes of a slice node: its source [1, H, W*C] and its cut [1, h, w*C]."""
    b, w = nd.base, nd.win
    return (1, b.height, b.width * channels), (1, w.height, w.width * channels)


def pad_constant(nd) -> tuple:
    """The paddings a plan's pad node (or a copied PAD) is written with: NHWC, (before, after)
    per dim."""
    top, bottom, left, right = nd.pads
    return ((0, 0), (top, bottom), (left, right), (0, 0))


__all__ = ["GATHER_TYPES", "gather_axis", "gather_indices", "pad_constant", "slice_constants",
           "view_shapes"]

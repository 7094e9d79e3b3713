"""Window geometry of spatially local operators (plain Python, no TVM).

A feature map is NHWC; a *window* is a half-open rectangle ``[h0, h1) x [w0, w1)`` of its
spatial cells (all channels). A window operator (convolution, depthwise convolution, pooling,
explicit PAD) maps output index ``o`` along one axis to the input cells
``o*stride - pad + j*dilation`` for ``j in [0, kernel)``, so an output range ``[a, b)`` reads the
input range

    [a*stride - pad, (b-1)*stride - pad + (kernel-1)*dilation + 1)

-- the row-window rule of `memsched.split` (``InputReq`` with ``rmode="window"``), here per axis
and *not* clipped: the part of the range outside ``[0, size)`` is the padding this window needs,
which a patch makes explicit (a PAD operator, only on the true borders of the tensor). An
explicit PAD operator is the same map with kernel 1, stride 1 and ``pad`` = its leading padding.
Element-wise operators (same-shape inputs) and concatenation along channels read the same window
of every input.

A runtime adapter describes its graph as a `SpatialModel`: every operator with its activation
inputs, output, class (``window`` / ``eltwise`` / ``concat`` / ``other``; for
squeeze-and-excitation blocks ``reduce`` / ``vector`` / ``scale``, see `SOp`), kernel, stride,
dilation, leading padding, the value implicit padding stands for, and MACs per output element
(`memsched.tflite.patch.describe` for a .tflite file, `memsched.transform.tile_patches` for Relax).

Exact or refused: a region runs through a whole-map reduction (``reduce``) only if per-patch
partial sums combine to the bits of the whole sum -- an integer accumulator that cannot
overflow, or a combine in the original's order; a float sum only when the caller accepts
rounding differences (`inexact_reduction`, the one rule; each adapter describes its
reductions' accumulation in `SOp.acc_dtype` / ``acc_range`` / ``acc_ordered``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass(frozen=True)
class Win:
    """Spatial window ``[h0, h1) x [w0, w1)``."""

    h0: int
    h1: int
    w0: int
    w1: int

    @property
    def height(self) -> int:
        return self.h1 - self.h0

    @property
    def width(self) -> int:
        return self.w1 - self.w0

    @property
    def area(self) -> int:
        return max(self.h1 - self.h0, 0) * max(self.w1 - self.w0, 0)

    def clip(self, height: int, width: int) -> "Win":
        return Win(max(self.h0, 0), min(self.h1, height), max(self.w0, 0), min(self.w1, width))

    def pads(self, inner: "Win") -> tuple[int, int, int, int]:
        """(top, bottom, left, right) of this window outside ``inner``."""
        return (inner.h0 - self.h0, self.h1 - inner.h1, inner.w0 - self.w0, self.w1 - inner.w1)

    def shift(self, dh: int, dw: int) -> "Win":
        return Win(self.h0 - dh, self.h1 - dh, self.w0 - dw, self.w1 - dw)

    def contains(self, o: "Win") -> bool:
        return self.h0 <= o.h0 and o.h1 <= self.h1 and self.w0 <= o.w0 and o.w1 <= self.w1


def bbox(wins: Sequence[Win]) -> Win:
    return Win(min(w.h0 for w in wins), max(w.h1 for w in wins),
               min(w.w0 for w in wins), max(w.w1 for w in wins))


def axis_range(a: int, b: int, kernel: int, stride: int, dilation: int, pad: int
               ) -> tuple[int, int]:
    """Input range (unclipped) that output range ``[a, b)`` of one axis reads."""
    return a * stride - pad, (b - 1) * stride - pad + (kernel - 1) * dilation + 1


def axis_read(a: int, b: int, kernel: int, stride: int, dilation: int, pad: int, size: int
              ) -> tuple[int, int]:
    """The exact range of cells inside ``[0, size)`` that output range ``[a, b)`` reads: the
    first and last tap that lands inside (at a border a dilated kernel may step over a cell,
    which then is neither read nor needed). Empty (``lo >= hi``) when every tap is padding."""
    lo, hi = size, -1
    for j in range(kernel):
        off = j * dilation - pad
        o = max(a, -(-(-off) // stride))  # first o with o*stride + off >= 0
        if o < b:
            lo = min(lo, o * stride + off)
        o = min(b - 1, (size - 1 - off) // stride)  # last o with o*stride + off < size
        if o >= a:
            hi = max(hi, o * stride + off + 1)
    return (lo, hi) if lo < hi else (0, 0)


def same_padding(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int, int]:
    """TFLite's SAME rule: (output size, padding before, padding after)."""
    eff = (kernel - 1) * dilation + 1
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + eff - size, 0)
    return out, total // 2, total - total // 2


def valid_size(size: int, kernel: int, stride: int, dilation: int) -> int:
    eff = (kernel - 1) * dilation + 1
    return (size - eff + stride) // stride


# pad values: what the cells outside the input mean to the operator
PAD_ZERO = "zero"  # real zero (int8: the input's zero point): convolutions, explicit PAD
PAD_MIN = "min"  # the dtype's minimum: MAX_POOL_2D ignores padded cells
PAD_NONE = "none"  # cannot be made explicit (AVERAGE_POOL_2D divides by real cells only)


@dataclass
class STensor:
    index: int
    name: str
    shape: tuple
    itemsize: int
    dtype: int = 0

    @property
    def nbytes(self) -> int:
        n = self.itemsize
        for d in self.shape:
            n *= max(int(d), 1)
        return n

    @property
    def spatial(self) -> bool:
        return len(self.shape) == 4 and int(self.shape[0]) == 1

    @property
    def hw(self) -> tuple[int, int]:
        return int(self.shape[1]), int(self.shape[2])

    @property
    def channels(self) -> int:
        return int(self.shape[3])

    def win_bytes(self, w: Win) -> int:
        return w.area * self.channels * self.itemsize


@dataclass
class SOp:
    """One operator as the patch geometry sees it."""

    index: int  # operator index in the file (or in a synthetic stack)
    kind: str  # TFLite builtin name (CONV_2D, ...) or a generic name in tests
    # "window", "eltwise", "concat" or "other"; squeeze-and-excitation (regions opt in with
    # ``se=True``): "reduce" (sum over H and W of a feature map, divided by ``divisor``),
    # "vector" (any operator whose activations are all reduce results or vector outputs: runs
    # once, whole), "scale" (a feature map times a vector, broadcast over space: input 0 the
    # feature map, input 1 the vector)
    cls: str
    inputs: tuple  # activation tensor indices
    output: int
    kernel: tuple = (1, 1)
    stride: tuple = (1, 1)
    dilation: tuple = (1, 1)
    pad: tuple = (0, 0)  # leading padding (top, left)
    pad_after: tuple = (0, 0)
    pad_value: str = PAD_ZERO
    macs_per_out: int = 1  # multiply-accumulates per output element
    cout: int = 0
    reason: str = ""  # why the op is not spatially local ("other")
    divisor: int = 1  # "reduce": what the sum over space is divided by (H*W: mean; 1: sum)
    # "reduce": how its sum over space accumulates, as the adapter reads it off its graph (the
    # combine of per-patch partial sums is judged by `inexact_reduction`): the accumulator's
    # dtype ("int32", "float32", ...; "" unknown), for an integer one the range (lo, hi) of
    # the values summed (None: the accumulator's own), and ``acc_ordered``: the adapter's
    # combine adds the cells in the original's order (exact whatever the dtype)
    acc_dtype: str = ""
    acc_range: tuple | None = None
    acc_ordered: bool = False
    # scratch bytes the kernel holds while it runs (CMSIS-NN buffers of the Cortex-M flow);
    # each copy of the op in a patch is priced with the whole op's (scratch does not grow
    # with the window)
    workspace: int = 0
    # a "window" operator that only pads its input (TFLite PAD / PADV2, ExecuTorch's
    # constant_pad_nd, Relax nn.pad): it keeps its own amounts on border patches and is the
    # identity inside, so plans never pad before it and count no MACs for it
    is_pad: bool = False

    def in_window(self, out: Win) -> Win:
        """Input window (unclipped) that output window ``out`` reads (window ops), or ``out``
        itself (element-wise, concat)."""
        if self.cls != "window":
            return out
        h0, h1 = axis_range(out.h0, out.h1, self.kernel[0], self.stride[0], self.dilation[0],
                            self.pad[0])
        w0, w1 = axis_range(out.w0, out.w1, self.kernel[1], self.stride[1], self.dilation[1],
                            self.pad[1])
        return Win(h0, h1, w0, w1)

    def read_window(self, out: Win, hw: tuple[int, int]) -> Win:
        """The exact window of the input (inside the ``hw`` tensor) that ``out`` reads:
        `in_window` clipped to the first and last tap inside on each axis."""
        if self.cls != "window":
            return out.clip(*hw)
        h0, h1 = axis_read(out.h0, out.h1, self.kernel[0], self.stride[0], self.dilation[0],
                           self.pad[0], hw[0])
        w0, w1 = axis_read(out.w0, out.w1, self.kernel[1], self.stride[1], self.dilation[1],
                           self.pad[1], hw[1])
        return Win(h0, h1, w0, w1)


# ---------------------------------------------------------------------------- exact or refused
INT_RANGES = {f"{u}int{b}": ((0, (1 << b) - 1) if u else (-(1 << (b - 1)), (1 << (b - 1)) - 1))
              for u in ("", "u") for b in (8, 16, 32, 64)}


def inexact_reduction(op: SOp, cells: int, float_sums: bool = False) -> str:
    """Why per-patch partial sums of the ``reduce`` operator ``op`` (a sum over ``cells``
    cells per channel) may not combine to the bits of its whole sum; "" when they do. The one
    rule of every adapter (`regions.regions` applies it): a region extends through a whole-map
    reduction only if its combine is exact --

    * an integer accumulator no partial or running sum can overflow: ``cells`` times the
      largest magnitude of the summands' range fits the accumulator (then every sum is the
      exact integer, in any order);
    * or a combine that adds in the original's order (``acc_ordered``);

    a floating-point accumulation is refused (the partial sums reassociate the additions:
    equal up to rounding, not bit-equal) unless ``float_sums`` accepts that; an accumulation
    the adapter could not tell is refused."""
    if op.acc_ordered:
        return ""
    dt = op.acc_dtype
    if dt in INT_RANGES:
        lo_acc, hi_acc = INT_RANGES[dt]
        lo, hi = op.acc_range if op.acc_range is not None else (lo_acc, hi_acc)
        if cells * min(lo, 0) < lo_acc or cells * max(hi, 0) > hi_acc:
            return (f"its {dt} sum of {cells} cells of values in [{lo}, {hi}] may overflow, "
                    "so per-patch partial sums are not guaranteed to combine exactly")
        return ""
    if "float" in dt:
        if float_sums:
            return ""
        return (f"a {dt} sum: per-patch partial sums add in another order, equal only up to "
                "rounding (accept it: exact_reductions=False)")
    return "its accumulation is not known to be exact (integer or in the original's order)"


@dataclass
class SpatialModel:
    """Operators (file order, a topological order) over tensors, with window geometry."""

    ops: list[SOp]
    tensors: dict[int, STensor]
    inputs: list[int]
    outputs: list[int]
    macs: list[int] = field(default_factory=list)  # per op, whole tensors
    name: str = "model"

    def __post_init__(self):
        self.producer = {}
        self.consumers: dict[int, list[int]] = {}
        for k, op in enumerate(self.ops):
            self.producer[op.output] = k
            for t in dict.fromkeys(op.inputs):
                self.consumers.setdefault(t, []).append(k)
        if not self.macs:
            self.macs = [self.op_macs(op) for op in self.ops]

    def op_macs(self, op: SOp, out: Win | None = None) -> int:
        ten = self.tensors[op.output]
        if out is None:
            cells = ten.nbytes // max(ten.itemsize, 1)
        else:
            cells = out.area * ten.channels
        return cells * op.macs_per_out


# ---------------------------------------------------------------------------- brute force
def read_cells(op: SOp, out_h: int, out_w: int, in_h: int, in_w: int, oh: int, ow: int
               ) -> set[tuple[int, int]]:
    """The input cells (inside the tensor) output cell ``(oh, ow)`` of a window op reads,
    enumerated tap by tap: the reference the window rule is tested against."""
    cells = set()
    for i in range(op.kernel[0]):
        for j in range(op.kernel[1]):
            h = oh * op.stride[0] - op.pad[0] + i * op.dilation[0]
            w = ow * op.stride[1] - op.pad[1] + j * op.dilation[1]
            if 0 <= h < in_h and 0 <= w < in_w:
                cells.add((h, w))
    return cells

"""TFLite Micro's minimal arena for a .tflite file, computed from the file (no interpreter).

`arena` replays what ``MicroInterpreter::AllocateTensors()`` allocates over a
``RecordingMicroAllocator`` (how the ``tflite-micro`` Python package and the emulated Cortex-M55's
runner set the interpreter up) and bisects the smallest arena exactly as
`memsched.tflite.tflm.min_arena_bytes` and the board's ``--min-arena`` do (start at 1 MiB,
double until it fits, halve to 16 B). Two targets:

* ``cortex-m`` (default): a 32-bit Cortex-M (the emulated M55, ``memsched.board``): TFLM
  90b983c2, ``TF_LITE_STATIC_MEMORY``, the CMSIS-NN kernels with MVE where TFLM has them
  (``OPTIMIZED_KERNEL_DIR=cmsis_nn``, ``KERNELS_OPTIMIZED_FOR_SPEED``), GCC's short enums;
* ``host``: the venv's ``tflite-micro`` package on x86-64 (TFLM 8f6596d, reference kernels,
  ``TF_LITE_STATIC_MEMORY`` and ``USE_TFLM_COMPRESSION``).

**Where TFLM allocates.** One arena, a head section growing up from its start and a tail
section growing down from its end (``SingleArenaBufferAllocator``):

* *tail* (persistent, never freed; ``AllocatePersistentBuffer`` aligns *down* and fails only
  when it would cross the head): the allocator objects themselves (the recording buffer
  allocator, the ``GreedyMemoryPlanner``, the ``RecordingMicroAllocator``, the builtin-data
  allocator), one ``SubgraphAllocations``, one ``TfLiteEvalTensor`` per tensor of the subgraph
  (constants included), one ``NodeAndRegistration`` per operator, each operator's parsed
  builtin options (``TfLiteConvParams`` ...: size and alignment of the C struct), each kernel's
  op data (``Init``: 16-byte aligned), what the kernels' ``Prepare`` keeps (per-channel output
  multipliers and shifts, 4 B per channel each, for quantized CONV_2D / DEPTHWISE_CONV_2D /
  per-channel FULLY_CONNECTED; CMSIS-NN's FULLY_CONNECTED kernel sums, 4 B per output channel;
  int16 softmax tables; a RESHAPE's resolved dims), the scratch-buffer handles (one pointer
  each), variable tensors without an offline offset, and at the end the ``TfLiteTensor`` (+
  quantization: ``TfLiteAffineQuantization`` and a zero-point array of 4 + 4 x channels B) of
  every model input and output plus the two pointer arrays to them.
* *head* (non-persistent): after ``AllocateTensors`` exactly the memory plan, i.e. the greedy
  planner's maximum of offset + size over the planned buffers: every non-constant,
  non-variable tensor of non-zero size and every scratch buffer a kernel requested, each
  rounded up to 16 B. While it runs the head holds the scratch-buffer requests
  (``ScratchBufferRequest`` x (requests + 12)), and above it *temporary* allocations that only
  move up until the next reset: the ``TfLiteTensor`` structs (+ quantization) each ``Prepare``
  asks for (one node at a time), then, for planning, ``size_t`` per subgraph, one
  ``AllocationInfo`` per tensor and scratch buffer, and all the remaining memory for the
  planner, which needs 40 B per planned buffer. Those transient needs are why the minimal
  arena can exceed head + tail (``transient_bytes``).

**Sizes** (bytes, 32-bit Cortex-M / 64-bit host): ``TfLiteEvalTensor`` 12 / 24,
``NodeAndRegistration`` 32 / 64, ``TfLiteTensor`` 32 / 64, ``TfLiteAffineQuantization`` 12 /
24, ``SubgraphAllocations`` 8 / 24, ``ScratchBufferRequest`` 12 / 16, ``AllocationInfo`` 24 /
32, scratch handle 4 / 8, allocator objects 52 + 44 + 124 + 8 / 104 + 72 + 272 + 16; builtin
options and op data per kernel in `_ABIS`: ``sizeof``/``alignof`` of TFLM's headers compiled
by ``arm-none-eabi-g++ -mcpu=cortex-m55`` (short enums: ``TfLiteFullyConnectedParams`` is 5 B)
and by the host ``g++`` with the package's defines; the host's builtin options checked against
the package's own parse functions (8f6596d's ``TfLiteFullyConnectedParams`` is 32 B, 8-aligned,
not 90b983c2's 16).

**CMSIS-NN scratch buffers** (``cortex-m``; the ``arm_*_get_buffer_size_mve`` functions, int8):
CONV_2D: 0 for a 1x1 convolution without padding or dilation, the 1xN size for a one-row
input, else im2col ``4 x ceil(C_in x K_w x K_h / 16) x 16``; DEPTHWISE_CONV_2D: ``4 x 124 x
K_w x K_h`` when C_in == C_out, batch 1 and no dilation, or (one input channel) the
convolution's size plus the filter's; FULLY_CONNECTED: ``8 x C_out`` when the output has more
than two dimensions and the depth is a multiple of 4 (per-tensor quantization), else the
kernel sums go to the tail; AVERAGE_POOL_2D: 0 with MVE. The reference kernels (``host``) ask
for none (MEAN / SUM ask for their accumulators on both).

**The planner** (``GreedyMemoryPlanner``, `greedy_plan`): buffers with an offline offset (the
``OfflineMemoryAllocation`` metadata) are placed at it first, in tensor order; the others,
largest first (ties: the later-added buffer first; scratch buffers are added after the
tensors), go at the lowest offset where they do not overlap any buffer live at the same time.
A tight offline plan leaves no gap, so CMSIS-NN's scratch buffers land above it and the head
grows past the plan's size. Lifetimes: operator ``i`` is step ``i + 1``; subgraph inputs from
step 0, outputs to the last step, scratch buffers during their operator.

**The bisection's transient needs**: a probe fails as soon as one allocation fails: a
temporary one with fewer bytes left below the tail, the planner's memory under 40 B per
buffer, the head's reservations, or a persistent one reaching below the head *or into
temporary data a kernel still reads*. TFLM itself checks a persistent allocation against the
head only (and a temporary one with an unsigned count that passes once it starts above the
tail): in such a probe a kernel's ``Prepare`` writes its per-channel arrays or kernel sums over
its own temporary ``TfLiteTensor`` structs. What it reads afterwards is the whole
``TfLiteTensor`` and the two pointers of its ``TfLiteAffineQuantization``, never the
quantized dimension or the zero-point array, so those last bytes may be overwritten (the
replay allows exactly that). When the overwrite does hit a struct, the host package failed
the probe in every file checked, and the board's firmware can fault in the planner (a
FULLY_CONNECTED stack whose kernel sums overlap the temporaries): the board's
``--min-arena`` then has no answer while `arena` gives the smallest arena that allocates
cleanly (checked on the board with ``--arena N`` and ``N - 16``). Otherwise ``arena_bytes``
is the board's (and the host's) bisection result.

Priced: the builtin operators of `priced_operators`, float32 and int8 convolutions and fully
connected layers (int16 activations and int4 weights are not priced there), one subgraph.
Anything else raises `UnpricedModelError` naming it; bad files raise `TFLiteModelError` (both
``ValueError``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from .read import (TFLiteGraph, TFLiteModelError, _text, op_names, read_offline_plan,
                   read_tflite)

TARGETS = ("cortex-m", "host")
ALIGN = 16  # MicroArenaBufferAlignment()
PLANNER_BYTES_PER_BUFFER = 40  # GreedyMemoryPlanner::per_buffer_size()
MAX_SCRATCH_PER_OP = 12  # kMaxScratchBuffersPerOp
ONLINE = -1  # kOnlinePlannedBuffer


class UnpricedModelError(TFLiteModelError):
    """A model whose TFLite Micro arena `arena` cannot compute: an operator, tensor type or
    structure outside the priced set (the message names them), or one TFLite Micro itself
    rejects whatever the arena size."""


@dataclass(frozen=True)
class _Abi:
    """Sizes and kernels of one target: (size, alignment) of TFLM's structs, builtin options
    and op data (Init's persistent buffer) per operator."""

    name: str
    kernels: str  # "cmsis-nn" or "reference"
    word: int  # sizeof(size_t) == sizeof(void*)
    # RecordingSingleArenaBufferAllocator, GreedyMemoryPlanner, RecordingMicroAllocator
    allocator_objects: tuple
    builtin_data_allocator: tuple
    subgraph_allocations: tuple
    eval_tensor: tuple
    node_and_registration: tuple
    tflite_tensor: tuple
    affine_quantization: tuple
    scratch_handle: tuple
    scratch_request: tuple
    allocation_info: tuple
    builtin: dict
    op_data: dict


# builtin options structs (sizeof, alignof) per operator: the parse function's Allocate<T>()
_BUILTIN_32 = {
    "CONV_2D": (28, 4), "DEPTHWISE_CONV_2D": (28, 4), "FULLY_CONNECTED": (5, 1),
    "AVERAGE_POOL_2D": (40, 4), "MAX_POOL_2D": (40, 4), "RESHAPE": (36, 4),
    "SOFTMAX": (4, 4), "ADD": (2, 1), "MUL": (1, 1), "CONCATENATION": (8, 4),
    "STRIDED_SLICE": (24, 4), "SQUEEZE": (36, 4), "MEAN": (1, 1), "SUM": (1, 1),
    "REDUCE_MAX": (1, 1), "REDUCE_MIN": (1, 1), "LEAKY_RELU": (4, 4), "SUB": (2, 1),
}
_BUILTIN_64 = dict(_BUILTIN_32, FULLY_CONNECTED=(32, 8), ADD=(8, 4), MUL=(4, 4), SUB=(8, 4))

# op data: sizeof of what each kernel's Init allocates (16-byte aligned); None: no Init
_OP_DATA_COMMON = {
    "MUL": 36, "PAD": 56, "PADV2": 56, "STRIDED_SLICE": 84, "RELU": 28, "RELU6": 8,
    "LOGISTIC": 16, "MEAN": 44, "SUM": 44, "REDUCE_MAX": 44, "REDUCE_MIN": 44, "QUANTIZE": 32,
    "DEQUANTIZE": 32, "HARD_SWISH": 20, "LEAKY_RELU": 24, "SUB": 52, "TANH": 16,
    "RESHAPE": None, "SQUEEZE": None, "EXPAND_DIMS": None,
}
_OP_DATA_CMSIS = dict(_OP_DATA_COMMON, CONV_2D=60, DEPTHWISE_CONV_2D=60, FULLY_CONNECTED=72,
                      ADD=60, AVERAGE_POOL_2D=36, MAX_POOL_2D=36, SOFTMAX=64,
                      CONCATENATION=24)
_OP_DATA_REF = dict(_OP_DATA_COMMON, CONV_2D=80, DEPTHWISE_CONV_2D=80, FULLY_CONNECTED=72,
                    ADD=60, AVERAGE_POOL_2D=32, MAX_POOL_2D=32, SOFTMAX=80, CONCATENATION=80)

_ABIS = {
    "cortex-m": _Abi("cortex-m", "cmsis-nn", 4, ((52, 4), (44, 4), (124, 4)), (8, 4), (8, 4),
                     (12, 4), (32, 4), (32, 4), (12, 4), (4, 4), (12, 4), (24, 4),
                     _BUILTIN_32, _OP_DATA_CMSIS),
    "host": _Abi("host", "reference", 8, ((104, 8), (72, 8), (272, 8)), (16, 8), (24, 8),
                 (24, 8), (64, 8), (64, 8), (24, 8), (8, 8), (16, 8), (32, 8),
                 _BUILTIN_64, _OP_DATA_REF),
}

# TFLM's TfLiteTypeSizeOf per schema TensorType (INT4 counts one byte per element)
_TYPE_BYTES = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 6: 1, 7: 2, 8: 8, 9: 1, 10: 8, 11: 16, 12: 8,
               13: 4, 15: 4, 16: 2, 17: 1, 18: 2}
_FLOAT32, _INT32, _INT64, _INT16, _INT8, _INT4 = 0, 2, 4, 7, 9, 17


def priced_operators() -> tuple[str, ...]:
    """The builtin operators `arena` prices (on both targets)."""
    return tuple(sorted(_OP_DATA_COMMON.keys() | _OP_DATA_CMSIS.keys()))


@dataclass(frozen=True)
class ArenaReport:
    """TFLite Micro's minimal arena for one file on one target.

    ``arena_bytes``: the smallest arena (16-B bisection, as the board and the host measure it)
    in which ``AllocateTensors()`` succeeds; ``head_bytes``: the planned part it keeps
    (activations and scratch buffers); ``tail_bytes``: the persistent part (``tail_parts``: by
    kind: allocator objects, eval tensors, nodes, builtin options, op data, what ``Prepare``
    keeps, scratch handles, variables, the input and output tensors); ``transient_bytes``: what
    ``AllocateTensors()`` needs only while it runs (temporary allocations), beyond head + tail
    rounded up to 16 B; ``scratch_bytes``: what the kernels' scratch buffers add to the head
    (the head minus the same plan without them); ``scratch``: (operator, kind, bytes rounded
    to 16) of each scratch buffer (each lives during its operator only); ``offline_plan``: the
    file carries an ``OfflineMemoryAllocation``; ``plan_bytes``: the largest offset + size of
    the offline-planned tensors (None without a plan)."""

    target: str
    kernels: str
    arena_bytes: int
    head_bytes: int
    tail_bytes: int
    transient_bytes: int
    scratch_bytes: int
    scratch: tuple = ()
    offline_plan: bool = False
    plan_bytes: int | None = None
    ops: int = 0
    tensors: int = 0
    tail_parts: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"target": self.target, "kernels": self.kernels, "arena_bytes": self.arena_bytes,
                "head_bytes": self.head_bytes, "tail_bytes": self.tail_bytes,
                "transient_bytes": self.transient_bytes, "scratch_bytes": self.scratch_bytes,
                "scratch": [list(s) for s in self.scratch], "offline_plan": self.offline_plan,
                "plan_bytes": self.plan_bytes, "ops": self.ops, "tensors": self.tensors,
                "tail_parts": dict(self.tail_parts)}


# ---------------------------------------------------------------------------------------------
# the model as TFLM sees it


@dataclass
class _Tensor:
    type: int
    shape: tuple
    bytes: int
    channels: int  # quantization arrays TFLM copies (0: not quantized)
    const: bool
    variable: bool


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - _c_div(a, b) * b


def _up(x: int, a: int) -> int:
    return -(-x // a) * a


def _down(x: int, a: int) -> int:
    return x // a * a


def _tensors(tg: TFLiteGraph, label: str) -> list[_Tensor]:
    model, sg = tg.model, tg.subgraph
    buffers = model.buffers or []
    out = []
    for i, t in enumerate(sg.tensors or []):
        ttype = int(t.type)
        if ttype not in _TYPE_BYTES:
            raise UnpricedModelError(f"{label}: tensor {i} has type {ttype}, which TFLite "
                                     "Micro does not allocate (not priced)")
        shape = tuple(int(d) for d in (t.shape if t.shape is not None else []))
        b = int(t.buffer)
        if not 0 <= b < len(buffers):
            raise TFLiteModelError(f"cannot read model {label!r}: tensor {i} uses buffer {b} "
                                   f"of {len(buffers)}")
        buf = buffers[b]
        if buf.data is None and buf.offset > 1 and buf.size:
            raise UnpricedModelError(f"{label}: tensor {i}'s data is stored outside the "
                                     "flatbuffer (offset), which TFLite Micro does not read")
        const = buf.data is not None and len(buf.data) > 0
        elems = 1
        for d in shape:
            elems *= d
        if any(d < 0 for d in shape) and not const:
            elems = -1  # resolved by the kernel (RESHAPE) or dynamic: checked per operator
        q = t.quantization
        channels = 0
        if q is not None and q.scale is not None and len(q.scale) > 0 and \
                q.zeroPoint is not None and len(q.zeroPoint) > 0:
            channels = len(q.scale)
        out.append(_Tensor(ttype, shape, elems * _TYPE_BYTES[ttype] if elems >= 0 else -1,
                           channels, const, bool(t.isVariable)))
    return out


# ---------------------------------------------------------------------------------------------
# what each kernel allocates: Init's op data, then Prepare's events in order
# ("t", bytes, align): temporary; ("p", bytes, align): persistent; ("s", bytes): scratch request


class _Node:
    def __init__(self, v, kind, op, tensors, abi):
        self.v, self.kind, self.abi, self.tensors = v, kind, abi, tensors
        self.ins = [int(t) for t in (op.inputs if op.inputs is not None else [])]
        self.outs = [int(t) for t in (op.outputs if op.outputs is not None else [])]
        self.options = op.builtinOptions
        self.events: list[tuple] = []

    def tensor_events(self, t: int, kind: str) -> list[tuple]:
        # temporary: ("t", bytes, align, bytes from the start still read after Prepare's
        # persistent writes): the whole TfLiteTensor, the scale and zero-point pointers of the
        # TfLiteAffineQuantization (its quantized dimension is not read again), none of the
        # zero-point array
        abi, ten = self.abi, self.tensors[t]
        if kind == "t":
            ev = [("t", *abi.tflite_tensor, abi.tflite_tensor[0])]
            if ten.channels:
                ev += [("t", *abi.affine_quantization, 2 * abi.word),
                       ("t", 4 + 4 * ten.channels, 4, 0)]
            return ev
        ev = [(kind, *abi.tflite_tensor)]
        if ten.channels:
            ev += [(kind, *abi.affine_quantization), (kind, 4 + 4 * ten.channels, 4)]
        return ev

    def _temp(self, ids, i):
        if 0 <= i < len(ids) and ids[i] >= 0:
            self.events += self.tensor_events(ids[i], "t")
            return self.tensors[ids[i]]
        return None

    def tin(self, i):
        return self._temp(self.ins, i)

    def tout(self, i):
        return self._temp(self.outs, i)

    def persist(self, nbytes, align=ALIGN):
        self.events.append(("p", int(nbytes), align))

    def scratch(self, nbytes):
        self.events.append(("s", int(nbytes)))

    def inp(self, i):
        return self.tensors[self.ins[i]] if 0 <= i < len(self.ins) and self.ins[i] >= 0 else None

    def out(self, i):
        return self.tensors[self.outs[i]] if 0 <= i < len(self.outs) and self.outs[i] >= 0 \
            else None

    def need(self, *tensors):
        if any(t is None for t in tensors):
            raise UnpricedModelError(f"operator {self.v} ({self.kind}) lacks an input or "
                                     "output its kernel reads")

    def opt(self, name, positive: bool = False):
        value = getattr(self.options, name, None)
        if value is None or (positive and not 0 < int(value) < 1 << 31):
            raise UnpricedModelError(f"operator {self.v} ({self.kind}) has no usable builtin "
                                     f"option {name} ({value!r}); TFLite Micro would read an "
                                     "uninitialized or invalid one")
        return int(value)


def _padding(stride, dilation, size, fsize, same: bool) -> int:
    """TFLite's ComputePaddingWithOffset for the output size ComputeOutSize gives."""
    eff = (fsize - 1) * dilation + 1
    out = _c_div(size + stride - 1, stride) if same else _c_div(size + stride - eff, stride)
    total = (out - 1) * stride + eff - size
    return _c_div(max(total, 0), 2)


def _conv_s8_general(cin, kw, kh):  # arm_convolve_s8_get_buffer_size_mve
    return 4 * _c_div(cin * kw * kh + 15, 16) * 16


def _conv_s8_buffer(in_shape, f_hwc, out_w, stride, dilation, pad):
    """arm_convolve_wrapper_s8_get_buffer_size_mve (in_shape NHWC; filter h, w, c)."""
    _, ih, iw, ic = in_shape
    fh, fw, fc = f_hwc
    sw, sh = stride
    dw, dh = dilation
    pw, ph = pad
    if pw == 0 and ph == 0 and fw == 1 and fh == 1 and dw == 1 and dh == 1 and ic == fc:
        return 0  # 1x1: the fast path needs nothing with MVE
    if ih == 1 and dw == 1 and fh == 1 and _c_mod(sw * ic, 4) == 0 and ic == fc:
        total_pad = (out_w - 1) * sw + fw - iw
        asym = _c_mod(total_pad, 2)
        right = max(1, _c_div(pw + asym + sw - 1, sw)) if pw + asym != 0 else 0
        left = max(1, _c_div(pw + sw - 1, sw)) if pw != 0 else 0
        no_pad = max(out_w - (right + left), 0)
        if right + no_pad + left != out_w:
            return _conv_s8_general(ic, fw, fh)
        pad_left = pw * ic
        pad_right = right * ic if asym else pad_left
        left_elems = fw * ic
        return max(left_elems + pad_left, left_elems - ic + pad_right)
    return _conv_s8_general(ic, fw, fh)


def _check_types(n: _Node, *types):
    for t in (n.inp(0), n.out(0)):
        if t is not None and t.type not in types:
            raise UnpricedModelError(f"operator {n.v} ({n.kind}) on {t.type} tensors: only "
                                     f"types {types} are priced for this kernel")


def _conv(n: _Node, cmsis: bool):
    x, w, y = n.inp(0), n.inp(1), n.out(0)
    n.need(x, w, y)
    _check_types(n, _FLOAT32, _INT8)
    if w.type == _INT4:
        raise UnpricedModelError(f"operator {n.v} ({n.kind}): int4 weights are not priced")
    if len(x.shape) != 4 or len(w.shape) != 4 or len(y.shape) != 4:
        raise UnpricedModelError(f"operator {n.v} ({n.kind}): not a 4-D convolution")
    depthwise = n.kind == "DEPTHWISE_CONV_2D"
    channels = w.shape[3] if depthwise else w.shape[0]
    quant = x.type == _INT8
    if cmsis:
        n.tin(0), n.tin(1), n.tout(0)  # (CONV_2D asks for output 2 as the bias: none)
        if quant:
            n.persist(4 * channels), n.persist(4 * channels)
    else:
        n.tout(0), n.tin(0), n.tin(1)
        n.persist(4 * channels), n.persist(4 * channels)
    # CalculateOpDataConv / CalculateOpDataDepthwiseConv
    n.tin(0), n.tin(1), n.tin(2), n.tout(0)
    if not (cmsis and quant):
        return
    sw, sh = n.opt("strideW", True), n.opt("strideH", True)
    dw, dh = n.opt("dilationWFactor", True), n.opt("dilationHFactor", True)
    same = n.opt("padding") == 0
    _, ih, iw, ic = x.shape
    fh, fw = w.shape[1], w.shape[2]
    pad = (_padding(sw, dw, iw, fw, same), _padding(sh, dh, ih, fh, same))
    if not depthwise:
        size = _conv_s8_buffer(x.shape, (fh, fw, w.shape[3]), y.shape[2], (sw, sh), (dw, dh),
                               pad)
    else:
        oc = y.shape[3]
        size = 0
        if ic == 1 and oc > 1:  # converted to a convolution; its stride is left unset there
            one_by_one = pad == (0, 0) and fw == 1 and fh == 1 and dw == 1 and dh == 1
            if not one_by_one and ih == 1 and dw == 1 and fh == 1:
                raise UnpricedModelError(f"operator {n.v}: a one-row DEPTHWISE_CONV_2D with "
                                         "one input channel (CMSIS-NN sizes it with an unset "
                                         "stride): not priced")
            size = _conv_s8_buffer(x.shape, (fh, fw, 1), y.shape[2], (1, 1), (dw, dh), pad) \
                + oc * fh * fw
        elif ic == oc and x.shape[0] == 1 and dw == 1 and dh == 1:
            size = 4 * 124 * fw * fh  # CH_IN_BLOCK_MVE
    if size > 0:
        n.scratch(size)


def _fully_connected(n: _Node, cmsis: bool):
    x, w, b, y = n.inp(0), n.inp(1), n.inp(2), n.out(0)
    n.need(x, w, y)
    _check_types(n, _FLOAT32, _INT8)
    if w.type == _INT4:
        raise UnpricedModelError(f"operator {n.v} (FULLY_CONNECTED): int4 weights are not "
                                 "priced")
    n.tin(0), n.tin(1), n.tin(2), n.tout(0)
    per_channel = x.type != _FLOAT32 and w.channels > 1
    if per_channel:
        n.persist(4 * w.channels), n.persist(4 * w.channels)
    if not cmsis or x.type != _INT8:
        return
    out_depth, accum = y.shape[-1], w.shape[-1]
    if len(y.shape) > 2 and accum % 4 == 0:
        if not per_channel:
            n.scratch(out_depth * 8)
        return  # arm_convolve_1x1_s8_fast_get_buffer_size: 0 with MVE
    size = out_depth * 4  # arm_fully_connected_s8_get_buffer_size_mve
    if size > 0 and w.const and (b is None or b.const):
        n.persist(size)  # KERNELS_OPTIMIZED_FOR_SPEED: kernel sums
    elif size > 0:
        n.scratch(size)


def _softmax(n: _Node, cmsis: bool):
    n.need(n.inp(0), n.out(0))
    n.tin(0), n.tout(0)
    if n.inp(0).type == _INT16:
        n.persist(2 * 513), n.persist(2 * 513)  # exp and 1/(1+x) tables: LUTSize<int16_t>


def _reduce(n: _Node, cmsis: bool):
    x, axis, y = n.inp(0), n.inp(1), n.out(0)
    n.need(x, axis, y)
    if y.bytes < 0 or axis.bytes < 0:
        raise UnpricedModelError(f"operator {n.v} ({n.kind}): dynamic shapes")

    def prepare_simple():
        n.tin(0), n.tin(1)
        if x.type == _INT8:
            n.tout(0)

    if n.kind in ("MEAN", "SUM"):  # PrepareMeanOrSumHelper
        n.tin(0), n.tout(0), n.tin(1)
        if x.type in (_INT8, _INT16):
            n.scratch(4 * (y.bytes // _TYPE_BYTES[y.type]))  # accumulators
        n.scratch(4 * len(x.shape))
        n.scratch(4 * (axis.bytes // _TYPE_BYTES[axis.type]))
        prepare_simple()
    else:  # REDUCE_MAX / REDUCE_MIN: PrepareMinMaxHelper
        prepare_simple()
        n.tin(0), n.tout(0), n.tin(1)
        n.scratch(4 * len(x.shape))
        n.scratch(4 * (axis.bytes // _TYPE_BYTES[axis.type]))


def _reshape(n: _Node, cmsis: bool):
    n.need(n.inp(0), n.out(0))
    n.tin(0), n.tout(0)
    y = n.out(0)
    if y.bytes < 0:  # a -1 dimension: resolved into a persistent copy of the dims
        x = n.inp(0)
        known = 1
        for d in y.shape:
            known *= d if d != -1 else 1
        if list(y.shape).count(-1) != 1 or x.bytes < 0 or known <= 0:
            raise UnpricedModelError(f"operator {n.v} (RESHAPE): dynamic shapes")
        elems = x.bytes // _TYPE_BYTES[x.type]
        y.shape = tuple(elems // known if d == -1 else d for d in y.shape)
        y.bytes = elems // known * known * _TYPE_BYTES[y.type]
        n.persist(4 + 4 * len(y.shape))


def _simple(*temps):
    """A kernel whose Prepare only reads these tensors ("i"/"o", index), all required."""
    def prepare(n: _Node, cmsis: bool):
        n.need(*[(n.inp if kind == "i" else n.out)(i) for kind, i in temps])
        for kind, i in temps:
            (n.tin if kind == "i" else n.tout)(i)
    return prepare


def _concatenation(n: _Node, cmsis: bool):
    n.need(n.inp(0), n.out(0))
    if len(n.ins) > 10:  # kMaxInputNum
        raise UnpricedModelError(f"operator {n.v} (CONCATENATION) has {len(n.ins)} inputs; "
                                 "TFLite Micro takes at most 10")
    n.tin(0), n.tout(0)
    for i in range(len(n.ins)):
        n.tin(i)


def _pad(n: _Node, cmsis: bool):
    n.need(n.inp(0), n.inp(1), n.out(0))
    n.tin(0), n.tin(1)
    if len(n.ins) == 3:
        n.tin(2)
    n.tout(0)


def _pool(n: _Node, cmsis: bool):
    n.need(n.inp(0), n.out(0))
    n.tin(0), n.tout(0)  # PoolingPrepare
    if cmsis and n.kind == "AVERAGE_POOL_2D":
        n.tin(0), n.tout(0)  # arm_avgpool_s8_get_buffer_size_mve: 0


def _tanh(n: _Node, cmsis: bool):
    n.need(n.inp(0), n.out(0))
    n.tin(0), n.tin(0), n.tout(0)


_PREPARE = {
    "CONV_2D": _conv, "DEPTHWISE_CONV_2D": _conv, "FULLY_CONNECTED": _fully_connected,
    "SOFTMAX": _softmax, "MEAN": _reduce, "SUM": _reduce, "REDUCE_MAX": _reduce,
    "REDUCE_MIN": _reduce,
    "RESHAPE": _reshape, "CONCATENATION": _concatenation, "PAD": _pad, "PADV2": _pad,
    "AVERAGE_POOL_2D": _pool, "MAX_POOL_2D": _pool, "TANH": _tanh,
    "ADD": _simple(("i", 0), ("i", 1), ("o", 0)), "SUB": _simple(("i", 0), ("i", 1), ("o", 0)),
    "MUL": _simple(("i", 0), ("i", 1), ("o", 0)), "SQUEEZE": _simple(("i", 0), ("o", 0)),
    "EXPAND_DIMS": _simple(("i", 0), ("i", 1), ("o", 0)),
    "STRIDED_SLICE": _simple(("i", 0), ("i", 1), ("i", 2), ("i", 3), ("o", 0)),
    "RELU": _simple(("i", 0), ("o", 0)), "RELU6": _simple(("i", 0)),
    "LOGISTIC": _simple(("i", 0), ("o", 0)), "QUANTIZE": _simple(("i", 0), ("o", 0)),
    "DEQUANTIZE": _simple(("i", 0), ("o", 0)), "HARD_SWISH": _simple(("i", 0), ("o", 0)),
    "LEAKY_RELU": _simple(("i", 0), ("o", 0)),
}


# ---------------------------------------------------------------------------------------------
# the greedy planner (GreedyMemoryPlanner::CalculateOffsetsIfNeeded), exactly


def greedy_plan(buffers: list[tuple[int, int, int, int]]) -> list[int]:
    """Offsets TFLM's ``GreedyMemoryPlanner`` gives ``buffers`` (size, first, last,
    offline offset or -1), in its order of addition."""
    n = len(buffers)
    if n == 0:
        return []
    offline = [i for i in range(n) if buffers[i][3] != ONLINE]
    online = [i for i in range(n) if buffers[i][3] == ONLINE]
    # the online buffers are stored from the end of the sort arrays (so in reverse order of
    # addition), then ReverseSortInPlace bubble-sorts them by size, descending, stably: equal
    # sizes keep that reverse order
    online.reverse()
    online.sort(key=lambda i: -buffers[i][0])
    order = offline + online
    offsets = [buffers[i][3] if buffers[i][3] != ONLINE else -1 for i in range(n)]
    # the placed buffers sorted by offset (TFLM's linked list; a tie goes after)
    placed: list[tuple[int, int]] = []  # (offset, buffer)
    first = order[0]
    if buffers[first][3] == ONLINE:
        offsets[first] = 0
    placed.append((offsets[first], first))
    for b in order[1:]:
        size, t0, t1, off = buffers[b]
        if off == ONLINE:
            cand = 0
            for o, p in placed:  # entries overlapping in time, in offset order
                ps, p0, p1, _ = buffers[p]
                if p0 > t1 or t0 > p1:
                    continue
                if o - cand >= size:
                    break
                cand = max(cand, o + ps)
            off = cand
        offsets[b] = off
        # insert: before the first entry when strictly smaller than it, else after the last
        # entry whose offset is <= off
        if placed[0][0] > off:
            placed.insert(0, (off, b))
        else:
            k = 1
            while k < len(placed) and placed[k][0] <= off:
                k += 1
            placed.insert(k, (off, b))
    return offsets


# ---------------------------------------------------------------------------------------------
# the replay


@dataclass
class _Trace:
    """What AllocateTensors does, in order, whatever the arena size: ``events`` are
    ("p", bytes, align, part): persistent; ("t", bytes, align, bytes still read): temporary;
    ("reset",): temporaries freed; ("resize", bytes, align): the head's resizable buffer;
    ("planner", buffers): the planner takes all the memory left. ``head``: the plan's size
    (``head_without_scratch``: without the kernels' scratch buffers)."""

    events: list
    head: int
    head_without_scratch: int
    scratch: list
    plan_bytes: int | None
    parts: tuple


def _trace(tg: TFLiteGraph, abi: _Abi, label: str) -> _Trace:
    model = tg.model
    if len(model.subgraphs or []) != 1:
        raise UnpricedModelError(f"{label}: {len(model.subgraphs or [])} subgraphs (control "
                                 "flow): not priced")
    sg = tg.subgraph
    names = op_names()
    tensors = _tensors(tg, label)
    nt = len(tensors)
    codes = model.operatorCodes or []
    ops = sg.operators or []
    cmsis = abi.kernels == "cmsis-nn"
    ev: list = []

    def persist(what, size, align):
        ev.append(("p", int(size), int(align), what))

    for size, align in abi.allocator_objects:
        persist("allocator", size, align)
    # StartModelAllocation
    persist("allocator", *abi.builtin_data_allocator)
    req_size, req_align = abi.scratch_request
    ev.append(("resize", req_size * MAX_SCRATCH_PER_OP, req_align))
    persist("allocator", *abi.subgraph_allocations)
    persist("eval_tensors", abi.eval_tensor[0] * nt, abi.eval_tensor[1])
    persist("nodes", abi.node_and_registration[0] * len(ops), abi.node_and_registration[1])
    nodes = []
    unpriced: dict[str, list[int]] = {}
    for v, op in enumerate(ops):
        code = codes[op.opcodeIndex]
        kind = names.get(max(int(code.builtinCode), int(code.deprecatedBuiltinCode)), "?")
        if kind == "CUSTOM" or kind not in _PREPARE:
            name = kind if kind != "CUSTOM" else f"CUSTOM {_text(code.customCode)!r}"
            unpriced.setdefault(name, []).append(v)
            continue
        node = _Node(v, kind, op, tensors, abi)
        for t in node.outs:
            if not 0 <= t < nt:
                raise TFLiteModelError(f"cannot read model {label!r}: operator {v} writes "
                                       f"tensor {t}")
        inter = [int(t) for t in (op.intermediates if op.intermediates is not None else [])]
        if any(not 0 <= t < nt for t in inter):
            raise TFLiteModelError(f"cannot read model {label!r}: operator {v} has an "
                                   "intermediate tensor out of range")
        if any(tensors[t].bytes != 0 for t in inter):
            raise UnpricedModelError(f"{label}: operator {v} ({kind}) has intermediate "
                                     "tensors of non-zero size, which TFLite Micro rejects")
        nodes.append(node)
    if unpriced:
        what = ", ".join(f"{k} (operator{'s' if len(v) > 1 else ''} "
                         f"{', '.join(map(str, v[:5]))}{' ...' if len(v) > 5 else ''})"
                         for k, v in sorted(unpriced.items()))
        raise UnpricedModelError(f"{label}: TFLite Micro's arena is not priced for {what}; "
                                 f"priced operators: {', '.join(priced_operators())}")
    for node in nodes:  # PrepareNodeAndRegistrationDataFromFlatbuffer: builtin options
        if node.kind in abi.builtin:
            persist("builtin_data", *abi.builtin[node.kind])
    for node in nodes:  # InitSubgraphs
        size = abi.op_data[node.kind]
        if size is not None:
            persist("op_data", size, ALIGN)
    scratch: list[tuple[int, str, int]] = []
    requests: list[tuple[int, int]] = []  # (bytes, node)
    for node in nodes:  # PrepareSubgraphs
        _PREPARE[node.kind](node, cmsis)
        for e in node.events:
            if e[0] == "s":
                requests.append((e[1], node.v))
                scratch.append((node.v, node.kind, _up(e[1], ALIGN)))
            elif e[0] == "p":
                ev.append(("p", e[1], e[2], "prepare"))
            else:
                ev.append(e)
        for t in node.outs:
            if tensors[t].bytes < 0 or (any(d <= 0 for d in tensors[t].shape) and
                                        tensors[t].shape != (0,)):
                raise UnpricedModelError(f"{label}: operator {node.v} ({node.kind}) has a "
                                         "dynamic output shape, which TFLite Micro rejects")
        ev.append(("reset",))
        # FinishPrepareNodeAllocations: room for the next operator's requests (TFLM ignores
        # a failure here, but then the requests overwrite temporaries: counted as failing;
        # planning needs more room anyway)
        ev.append(("resize", req_size * (len(requests) + MAX_SCRATCH_PER_OP), req_align))
    for t in tensors:
        if t.bytes < 0:
            raise UnpricedModelError(f"{label}: a tensor of dynamic shape: not priced")
    # FinishModelAllocation
    if requests:
        persist("scratch_handles", abi.scratch_handle[0] * len(requests), abi.scratch_handle[1])
    ev.append(("t", abi.word, abi.word, abi.word))  # subgraph offsets
    ai_size, ai_align = abi.allocation_info
    ai_bytes = ai_size * (nt + len(requests))
    ev.append(("t", ai_bytes, ai_align, ai_bytes))
    plan = read_offline_plan(model)
    if plan is not None and len(plan) != nt:
        raise UnpricedModelError(f"{label}: its offline plan has {len(plan)} offsets for {nt} "
                                 "tensors; TFLite Micro rejects the file")
    for i, t in enumerate(tensors):  # AllocateVariables
        if t.variable and (plan is None or plan[i] == ONLINE):
            persist("variables", t.bytes, ALIGN)
    # lifetimes (MarkAllocationLifetimes of subgraph 0)
    first = [-1] * nt
    last = [-1] * nt
    for t in (sg.inputs if sg.inputs is not None else []):
        t = int(t)
        if first[t] == -1:
            first[t] = 0
        last[t] = 0
    scope = 0
    for v, op in enumerate(ops):
        scope += 1
        for t in (op.outputs if op.outputs is not None else []):
            if first[int(t)] == -1:
                first[int(t)] = scope
        for t in (op.inputs if op.inputs is not None else []):
            if int(t) >= 0:
                last[int(t)] = scope
        for t in (op.outputs if op.outputs is not None else []):
            last[int(t)] = scope
    for t in (sg.outputs if sg.outputs is not None else []):
        t = int(t)
        if first[t] == -1:
            first[t] = scope
        last[t] = scope
    buffers = []
    for i, t in enumerate(tensors):
        needs = not t.const and not t.variable and t.bytes != 0
        off = plan[i] if plan is not None else ONLINE
        if plan is not None and t.variable and off != ONLINE:
            needs = True
        if needs:
            buffers.append((_up(t.bytes, ALIGN), first[i], last[i], off))
    for nbytes, v in requests:
        buffers.append((_up(nbytes, ALIGN), v + 1, v + 1, ONLINE))
    offsets = greedy_plan(buffers)
    head = max((o + b[0] for o, b in zip(offsets, buffers)), default=0)
    tensor_buffers = buffers[:len(buffers) - len(requests)]
    head_without_scratch = max((o + b[0] for o, b in zip(greedy_plan(tensor_buffers),
                                                         tensor_buffers)), default=0)
    plan_bytes = None
    if plan is not None:
        plan_bytes = max((o + b[0] for o, b in zip(offsets, buffers) if b[3] != ONLINE),
                         default=0)
    ev.append(("planner", len(buffers)))
    ev.append(("reset",))
    ev.append(("resize", 0, 1))  # DeallocateResizableBuffer
    ev.append(("resize", head, ALIGN))  # ReserveNonPersistentOverlayMemory
    # the interpreter's input and output TfLiteTensors
    for ids, what in ((sg.inputs, "inputs"), (sg.outputs, "outputs")):
        ids = [int(t) for t in (ids if ids is not None else [])]
        persist(what, abi.word * len(ids), ALIGN)
        for t in ids:
            persist(what, *abi.tflite_tensor)
            if tensors[t].channels:
                persist(what, *abi.affine_quantization)
                persist(what, 4 + 4 * tensors[t].channels, 4)
    parts = tuple(dict.fromkeys(e[3] for e in ev if e[0] == "p"))
    return _Trace(ev, head, head_without_scratch, scratch, plan_bytes, parts)


def _replay(trace: _Trace, size: int, base: int = 1 << 20):
    """Whether AllocateTensors succeeds in ``size`` bytes at a 16-byte aligned ``base``
    without overwriting data it still reads: (ok, head bytes, tail bytes, tail bytes per
    part). TFLM checks less: a persistent allocation only against the head, a temporary one
    with an unsigned count that passes once it starts above the tail; such a probe corrupts
    the arena (on the board the bisection then faults, see `arena`)."""
    bh = base
    head = temp = live = base  # live: the end of the temporary data still read
    tail = base + size
    parts = dict.fromkeys(trace.parts, 0)
    for e in trace.events:
        k = e[0]
        if k == "p":
            r = _down(tail - e[1], e[2])
            if r < live:  # crosses the head, or temporary data still read
                return False, 0, 0, parts
            parts[e[3]] += tail - r
            tail = r
        elif k == "t":
            r = _up(temp, e[2])
            if tail - r < e[1]:
                return False, 0, 0, parts
            temp = r + e[1]
            if e[3]:
                live = r + e[3]
        elif k == "reset":
            temp = live = head
        elif k == "resize":
            r = _up(bh, e[2])
            if tail - r < e[1]:
                return False, 0, 0, parts
            head = temp = live = r + e[1]
        elif k == "planner":  # all the memory left, 40 B per planned buffer
            start = _up(temp, ALIGN)
            remaining = _down(tail, ALIGN) - start
            if remaining < 0 or e[1] > remaining // PLANNER_BYTES_PER_BUFFER:
                return False, 0, 0, parts
            temp = live = start + remaining
    return True, max(head, temp) - bh, base + size - tail, parts


def _bisect(allocates, resolution: int = 16, start: int = 1 << 20, limit: int = 1 << 34) -> int:
    """The runner's and `memsched.tflite.tflm.min_arena_bytes`'s bisection."""
    hi = start
    while not allocates(hi):
        hi *= 2
        if hi > limit:
            raise UnpricedModelError("TFLite Micro cannot allocate the model in any arena "
                                     f"up to {limit:,} B")
    lo = 0
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        if allocates(mid):
            hi = mid
        else:
            lo = mid
    return hi


def arena(model_or_path, target: str = "cortex-m") -> ArenaReport:
    """TFLite Micro's minimal arena for a .tflite file (a path, its bytes or a `TFLiteGraph`)
    on ``target`` (`TARGETS`), computed by replaying ``AllocateTensors()`` (module docstring).

    Raises `TFLiteModelError` for a bad file and `UnpricedModelError` for operators, types or
    structures it does not price (the message names them)."""
    if target not in _ABIS:
        raise ValueError(f"target {target!r}: choose one of {', '.join(TARGETS)}")
    abi = _ABIS[target]
    if isinstance(model_or_path, TFLiteGraph):
        tg, label = model_or_path, model_or_path.name
    elif isinstance(model_or_path, (bytes, bytearray, memoryview)):
        tg, label = read_tflite(bytes(model_or_path)), "model.tflite"
    else:
        label = os.fspath(model_or_path)
        tg = read_tflite(label)
    try:
        trace = _trace(tg, abi, label)
    except (IndexError, KeyError, TypeError, AttributeError, ZeroDivisionError,
            OverflowError) as e:  # a malformed file the reader let through
        raise TFLiteModelError(f"cannot read model {label!r}: malformed model for TFLite "
                               f"Micro ({type(e).__name__}: {e})") from None
    size = _bisect(lambda s: _replay(trace, s)[0])
    ok, head, tail, parts = _replay(trace, size)
    assert ok
    return ArenaReport(
        target=target, kernels=abi.kernels, arena_bytes=size, head_bytes=head,
        tail_bytes=tail, transient_bytes=size - _up(head + tail, ALIGN),
        scratch_bytes=trace.head - trace.head_without_scratch, scratch=tuple(trace.scratch),
        offline_plan=trace.plan_bytes is not None, plan_bytes=trace.plan_bytes,
        ops=len(tg.subgraph.operators or []), tensors=len(tg.subgraph.tensors or []),
        tail_parts={k: v for k, v in parts.items() if v})


def scratch_requests(tg: TFLiteGraph, target: str = "cortex-m") -> dict[int, list[int]]:
    """The scratch buffers each operator's kernel requests on ``target`` (file operator index
    -> bytes of each, rounded up to 16 as TFLM plans them; operators without any are left
    out): what the memory plan must hold during that operator besides its tensors. Raises as
    `arena` does."""
    if target not in _ABIS:
        raise ValueError(f"target {target!r}: choose one of {', '.join(TARGETS)}")
    out: dict[int, list[int]] = {}
    for v, _, size in _trace(tg, _ABIS[target], tg.name).scratch:
        out.setdefault(int(v), []).append(int(size))
    return out


def persistent_price(target: str = "cortex-m"):
    """What the patch search charges per node and tensor on ``target``
    (`tflm_memory.TFLMPersistent`): the node struct, the eval tensor, and per operator kind its
    builtin options plus its kernel's op data (16-byte aligned), from the same tables `arena`
    replays."""
    from .tflm_memory import TFLMPersistent

    abi = _ABIS[target]
    data = {}
    for kind in set(abi.op_data) | set(abi.builtin):
        b = abi.builtin.get(kind, (0, 1))[0]
        d = abi.op_data.get(kind)
        data[kind] = _up(b, abi.word) + (_up(d, ALIGN) if d else 0)
    return TFLMPersistent(node=abi.node_and_registration[0], eval_tensor=abi.eval_tensor[0],
                          op_data=tuple(sorted(data.items())), default_op_data=48,
                          per_channel=8)


__all__ = ["ArenaReport", "TARGETS", "UnpricedModelError", "arena", "greedy_plan",
           "persistent_price", "priced_operators", "scratch_requests"]

"""What each TFLite Micro kernel allocates while ``AllocateTensors()`` prepares it, on each
target: ``Init``'s op data, then ``Prepare``'s temporary tensors, persistent buffers
(per-channel multipliers and shifts, CMSIS-NN kernel sums) and scratch-buffer requests (the
CMSIS-NN MVE sizes: ``arm_*_get_buffer_size_mve``), as events `memory.arena` replays.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..format.read import TFLiteGraph, TFLiteModelError
from .abi import (ALIGN, FLOAT32, INT4, INT8, INT16, INT32, TYPE_BYTES,
                  UnpricedModelError)
from .kernels_elementwise import PREPARE as _ELEMENTWISE
from .kernels_misc import PREPARE as _MISC

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
    # what few kernels read beyond the sizes (DECODE, `kernels_misc`): the quantized
    # dimension, the zero points, a constant's bytes (the buffer's array, not copied)
    axis: int = 0
    zero_points: tuple = ()
    data: object = field(default=None, compare=False, repr=False)


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - _c_div(a, b) * b




def tensors_of(tg: TFLiteGraph, label: str) -> list[_Tensor]:
    model, sg = tg.model, tg.subgraph
    buffers = model.buffers or []
    out = []
    for i, t in enumerate(sg.tensors or []):
        ttype = int(t.type)
        if ttype not in TYPE_BYTES:
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
        channels, axis, zps = 0, 0, ()
        if q is not None and q.scale is not None and len(q.scale) > 0 and \
                q.zeroPoint is not None and len(q.zeroPoint) > 0:
            channels, axis, zps = len(q.scale), int(q.quantizedDimension), tuple(q.zeroPoint)
        out.append(_Tensor(ttype, shape, elems * TYPE_BYTES[ttype] if elems >= 0 else -1,
                           channels, const, bool(t.isVariable), axis, zps,
                           buf.data if const else None))
    return out


# ---------------------------------------------------------------------------------------------
# what each kernel allocates: Init's op data, then Prepare's events in order
# ("t", bytes, align): temporary; ("p", bytes, align): persistent; ("s", bytes): scratch request


class Node:
    def __init__(self, v, kind, op, tensors, abi):
        self.v, self.kind, self.abi, self.tensors = v, kind, abi, tensors
        self.ins = [int(t) for t in (op.inputs if op.inputs is not None else [])]
        self.outs = [int(t) for t in (op.outputs if op.outputs is not None else [])]
        self.options = op.builtinOptions
        self.custom_options = op.customOptions
        self.state: dict = {}  # shared by the nodes of one replay (resource variables)
        self.sg = 0  # its subgraph
        self.subgraphs: list = []  # the file's subgraphs (control flow)
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


def _elements(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def _check_types(n: Node, *types):
    for t in (n.inp(0), n.out(0)):
        if t is not None and t.type not in types:
            raise UnpricedModelError(f"operator {n.v} ({n.kind}) on {t.type} tensors: only "
                                     f"types {types} are priced for this kernel")


def _conv(n: Node, cmsis: bool):
    x, w, y = n.inp(0), n.inp(1), n.out(0)
    n.need(x, w, y)
    _check_types(n, FLOAT32, INT8, INT16)
    if (x.type == INT16 and w.type != INT8) or (w.type == INT4 and x.type != INT8) or \
            x.type != y.type:
        raise UnpricedModelError(f"operator {n.v} ({n.kind}): int16 activations with "
                                 "non-int8 weights, int4 weights with non-int8 activations "
                                 "or an output type other than the input's, which TFLite "
                                 "Micro rejects")
    if len(x.shape) != 4 or len(w.shape) != 4 or len(y.shape) != 4:
        raise UnpricedModelError(f"operator {n.v} ({n.kind}): not a 4-D convolution")
    depthwise = n.kind == "DEPTHWISE_CONV_2D"
    channels = w.shape[3] if depthwise else w.shape[0]
    quant = x.type in (INT8, INT16)
    # the reference kernels unpack int4 weights into a scratch buffer of one byte per weight
    # (depthwise before CalculateOpData, the convolution after it)
    unpack = not cmsis and w.type == INT4
    if cmsis:
        n.tin(0), n.tin(1), n.tout(0)  # (CONV_2D asks for output 2 as the bias: none)
        if quant:
            n.persist(4 * channels), n.persist(4 * channels)
    else:
        n.tout(0), n.tin(0), n.tin(1)
        n.persist(4 * channels), n.persist(4 * channels)
        if unpack and depthwise:
            n.scratch(_elements(w.shape))
    # CalculateOpDataConv / CalculateOpDataDepthwiseConv
    n.tin(0), n.tin(1), n.tin(2), n.tout(0)
    if unpack and not depthwise:
        n.scratch(_elements(w.shape))
    if not (cmsis and quant):
        return
    sw, sh = n.opt("strideW", True), n.opt("strideH", True)
    dw, dh = n.opt("dilationWFactor", True), n.opt("dilationHFactor", True)
    same = n.opt("padding") == 0
    _, ih, iw, ic = x.shape
    fh, fw = w.shape[1], w.shape[2]
    if x.type == INT16:
        # 16x8: CMSIS-NN's convolution asks for arm_convolve_s16_get_buffer_size_mve
        # (4 im2col columns of C_in x K_w x K_h int16, rounded up to 8 lanes), whatever the
        # filter; its depthwise kernel's Prepare asks for nothing in int16
        if not depthwise:
            n.scratch(4 * (-(-ic * fw * fh // 8)) * 8 * 2)
        return
    pad = (_padding(sw, dw, iw, fw, same), _padding(sh, dh, ih, fh, same))
    if not depthwise:
        size = _conv_s8_buffer(x.shape, (fh, fw, w.shape[3]), y.shape[2], (sw, sh), (dw, dh),
                               pad)
    elif w.type == INT4:  # arm_depthwise_conv_wrapper_s4_get_buffer_size (MVE)
        oc = y.shape[3]
        size = 4 * 124 * fw * fh if ic == oc and x.shape[0] == 1 and dw == 1 and dh == 1 \
            else 0
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


def _fully_connected(n: Node, cmsis: bool):
    x, w, b, y = n.inp(0), n.inp(1), n.inp(2), n.out(0)
    n.need(x, w, y)
    _check_types(n, FLOAT32, INT8, INT16)
    if (x.type == INT16 and w.type != INT8) or (w.type == INT4 and x.type != INT8) or \
            (cmsis and x.type != FLOAT32 and w.type != INT8 and w.channels > 1) or \
            (cmsis and x.type == INT16 and w.channels > 1):
        raise UnpricedModelError(f"operator {n.v} (FULLY_CONNECTED): int16 activations with "
                                 "non-int8 weights, int4 weights with non-int8 activations, "
                                 "or (CMSIS-NN) per-channel int16 or int4, which TFLite Micro "
                                 "rejects")
    n.tin(0), n.tin(1), n.tin(2), n.tout(0)
    if not cmsis and w.type == INT4:  # the reference kernel unpacks the int4 weights
        n.scratch(_elements(w.shape))
    per_channel = x.type != FLOAT32 and w.channels > 1
    if per_channel:
        n.persist(4 * w.channels), n.persist(4 * w.channels)
    if not cmsis or x.type != INT8 or w.type == INT4:  # CMSIS-NN's int4: no scratch
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


def _softmax(n: Node, cmsis: bool):
    n.need(n.inp(0), n.out(0))
    n.tin(0), n.tout(0)
    if n.inp(0).type == INT16:
        n.persist(2 * 513), n.persist(2 * 513)  # exp and 1/(1+x) tables: LUTSize<int16_t>


def _reduce(n: Node, cmsis: bool):
    x, axis, y = n.inp(0), n.inp(1), n.out(0)
    n.need(x, axis, y)
    if y.bytes < 0 or axis.bytes < 0:
        raise UnpricedModelError(f"operator {n.v} ({n.kind}): dynamic shapes")

    def prepare_simple():
        n.tin(0), n.tin(1)
        if x.type == INT8:
            n.tout(0)

    if n.kind in ("MEAN", "SUM"):  # PrepareMeanOrSumHelper
        n.tin(0), n.tout(0), n.tin(1)
        if x.type in (INT8, INT16):
            n.scratch(4 * (y.bytes // TYPE_BYTES[y.type]))  # accumulators
        n.scratch(4 * len(x.shape))
        n.scratch(4 * (axis.bytes // TYPE_BYTES[axis.type]))
        prepare_simple()
    else:  # REDUCE_MAX / REDUCE_MIN: PrepareMinMaxHelper
        prepare_simple()
        n.tin(0), n.tout(0), n.tin(1)
        n.scratch(4 * len(x.shape))
        n.scratch(4 * (axis.bytes // TYPE_BYTES[axis.type]))


def _reshape(n: Node, cmsis: bool):
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
        elems = x.bytes // TYPE_BYTES[x.type]
        y.shape = tuple(elems // known if d == -1 else d for d in y.shape)
        y.bytes = elems // known * known * TYPE_BYTES[y.type]
        n.persist(4 + 4 * len(y.shape))


def _simple(*temps):
    """A kernel whose Prepare only reads these tensors ("i"/"o", index), all required."""
    def prepare(n: Node, cmsis: bool):
        n.need(*[(n.inp if kind == "i" else n.out)(i) for kind, i in temps])
        for kind, i in temps:
            (n.tin if kind == "i" else n.tout)(i)
    return prepare


def _concatenation(n: Node, cmsis: bool):
    n.need(n.inp(0), n.out(0))
    if len(n.ins) > 10:  # kMaxInputNum
        raise UnpricedModelError(f"operator {n.v} (CONCATENATION) has {len(n.ins)} inputs; "
                                 "TFLite Micro takes at most 10")
    n.tin(0), n.tout(0)
    for i in range(len(n.ins)):
        n.tin(i)


def _pad(n: Node, cmsis: bool):
    n.need(n.inp(0), n.inp(1), n.out(0))
    n.tin(0), n.tin(1)
    if len(n.ins) == 3:
        n.tin(2)
    n.tout(0)


def _pool(n: Node, cmsis: bool):
    n.need(n.inp(0), n.out(0))
    n.tin(0), n.tout(0)  # PoolingPrepare
    if cmsis and n.kind == "AVERAGE_POOL_2D":
        n.tin(0), n.tout(0)  # arm_avgpool_s8_get_buffer_size_mve: 0


def _tanh(n: Node, cmsis: bool):
    n.need(n.inp(0), n.out(0))
    n.tin(0), n.tin(0), n.tout(0)


def _transpose(n: Node, cmsis: bool):
    """TransposePrepare (reference and CMSIS-NN alike): the input, the permutation and the
    output as temporaries; nothing kept."""
    x, perm, y = n.inp(0), n.inp(1), n.out(0)
    n.need(x, perm, y)
    if not perm.const or len(x.shape) > 5 or x.type != y.type or \
            perm.shape != (len(x.shape),):
        raise UnpricedModelError(f"operator {n.v} (TRANSPOSE): TFLite Micro takes a constant "
                                 "permutation of a 1-D to 5-D tensor only")
    n.tin(0), n.tin(1), n.tout(0)


def _resize_nearest(n: Node, cmsis: bool):
    x, size, y = n.inp(0), n.inp(1), n.out(0)
    n.need(x, size, y)
    if len(x.shape) != 4 or not size.const or size.type != INT32 or size.shape != (2,):
        raise UnpricedModelError(f"operator {n.v} (RESIZE_NEAREST_NEIGHBOR): TFLite Micro "
                                 "takes a 4-D input and a constant int32 size of 2 only")
    n.tin(0), n.tin(1), n.tout(0)


def _split(n: Node, cmsis: bool):
    """SPLIT reads its axis (input 0), SPLIT_V its axis (input 2) in Prepare; both must be
    constant."""
    i = 0 if n.kind == "SPLIT" else 2
    if n.kind == "SPLIT_V" and len(n.ins) != 3:
        raise UnpricedModelError(f"operator {n.v} (SPLIT_V) has {len(n.ins)} inputs, not 3")
    axis = n.inp(i)
    n.need(axis)
    if not axis.const:
        raise UnpricedModelError(f"operator {n.v} ({n.kind}): a non-constant axis, which "
                                 "TFLite Micro rejects")
    n.tin(i)


def _gather(n: Node, cmsis: bool):
    """GatherPrepare: three temporaries, then a persistent copy of the output's dims."""
    x, idx, y = n.inp(0), n.inp(1), n.out(0)
    n.need(x, idx, y)
    if idx.type != INT32 or x.type not in (FLOAT32, INT8):
        raise UnpricedModelError(f"operator {n.v} (GATHER): float32 or int8 data with int32 "
                                 "indices only (TFLite Micro's GatherPrepare rejects other "
                                 "types, int16 too)")
    # ParseGather: 0 and 0 without options
    axis, batch_dims = (0, 0) if n.options is None else (n.opt("axis"), n.opt("batchDims"))
    axis += len(x.shape) if axis < 0 else 0
    batch_dims += len(idx.shape) if batch_dims < 0 else 0
    rank = len(x.shape) + len(idx.shape) - 1 - batch_dims
    if not (0 <= batch_dims <= axis < len(x.shape)) or len(y.shape) != rank:
        raise UnpricedModelError(f"operator {n.v} (GATHER): axis, batch dims or output rank "
                                 "TFLite Micro rejects")
    n.tin(0), n.tin(1), n.tout(0)
    n.persist(4 + 4 * len(y.shape))  # CreateWritableTensorDimsWithCopy


def _batch_matmul(n: Node, cmsis: bool):
    """BATCH_MATMUL's Prepare keeps a transposed copy (eval tensor, dims, data) of the left
    operand when adj_x and of the right one unless adj_y, the output's dims, and for int8 the
    quantization record; CMSIS-NN (int8) asks for the kernel sums as scratch (4 B per output
    column). The order of these requests differs between the two kernels."""
    x, w, y = n.inp(0), n.inp(1), n.out(0)
    n.need(x, w, y)
    if not x.type == w.type == y.type or x.type not in (FLOAT32, INT8, INT16):
        raise UnpricedModelError(f"operator {n.v} (BATCH_MATMUL): float32, int8 or int16 "
                                 "operands only")
    if not (2 <= len(x.shape) <= (4 if cmsis else 5) and
            2 <= len(w.shape) <= (4 if cmsis else 5)):
        raise UnpricedModelError(f"operator {n.v} (BATCH_MATMUL): operand ranks TFLite Micro "
                                 "rejects")
    rank = max(len(x.shape), len(w.shape))
    if len(y.shape) < rank:
        raise UnpricedModelError(f"operator {n.v} (BATCH_MATMUL): output rank below the "
                                 "operands'")
    adj_x, adj_y = bool(getattr(n.options, "adjX", False)), \
        bool(getattr(n.options, "adjY", False))
    quant = x.type in (INT8, INT16)  # int16: the same records, no CMSIS-NN scratch
    n.tin(0), n.tin(1), n.tout(0)
    eval_tensor = n.abi.eval_tensor[0]

    def transposed(t):
        n.persist(eval_tensor), n.persist(4 + 4 * len(t.shape)), n.persist(t.bytes)

    if quant and not cmsis:
        n.persist(28)  # QuantizationOpDataBatchMatmul
    if adj_x:
        transposed(x)
    if not adj_y:
        transposed(w)
    n.persist(4 + 4 * len(y.shape))  # the output's dims (CreateWritableTensorDimsWithCopy)
    if quant and cmsis:
        n.persist(28)
        if x.type == INT16:
            return
        ws = (1,) * (rank - len(w.shape)) + tuple(w.shape)
        n.scratch(4 * (ws[-2] if adj_y else ws[-1]))  # arm_fully_connected_s8_get_buffer_size


def _svdf(n: Node, cmsis: bool):
    """SVDF's Prepare (CMSIS-NN's and the reference one read the same temporaries): scratch
    for the feature products (4 B per batch x filter) and, int8, for the output (4 B per
    batch x unit); CMSIS-NN (MVE, optimized for speed) keeps the feature weights' kernel
    sums (4 B per filter)."""
    x, wf, wt, bias, state, y = (n.inp(0), n.inp(1), n.inp(2), n.inp(3), n.inp(4), n.out(0))
    n.need(x, wf, wt, state, y)
    rank = n.opt("rank", True)
    if len(n.ins) != 5 or len(n.outs) != 1 or len(x.shape) != 2 or len(wf.shape) != 2 or \
            len(wt.shape) != 2 or len(y.shape) != 2 or not state.variable:
        raise UnpricedModelError(f"operator {n.v} (SVDF): a layout TFLite Micro rejects")
    batch, filters = x.shape[0], wf.shape[0]
    if filters % rank or y.shape != (batch, filters // rank):
        raise UnpricedModelError(f"operator {n.v} (SVDF): filters, rank and units disagree")
    quant = x.type == INT8
    # int8 with int16 or int8 time weights and state (the same requests; the kernels pick
    # arm_svdf_state_s16_s8 or arm_svdf_s8 by the time weights' type, so the state must match)
    if not (quant and wf.type == INT8 and wt.type == state.type and
            wt.type in (INT8, INT16) and y.type == INT8 and bias is not None) and \
            not (x.type == wf.type == wt.type == state.type == y.type == FLOAT32):
        raise UnpricedModelError(f"operator {n.v} (SVDF): types outside float32 and int8 "
                                 "(with int16 or int8 time weights and state of one type, "
                                 "and a bias)")
    n.tin(0), n.tin(1), n.tin(2), n.tin(3), n.tin(4), n.tout(0)
    n.scratch(4 * batch * filters)
    if quant:
        n.scratch(4 * batch * (filters // rank))
        if cmsis:
            if not wf.const:
                raise UnpricedModelError(f"operator {n.v} (SVDF): CMSIS-NN needs constant "
                                         "feature weights")
            n.persist(4 * filters)  # arm_svdf_s8_get_buffer_size_mve: kernel sums


def _lstm(n: Node, cmsis: bool):
    """UNIDIRECTIONAL_SEQUENCE_LSTM's Prepare (the standard LSTM only: no peephole, projection
    or layer norm): the 24 inputs present and the output as temporaries, then 4 scratch
    buffers of batch x state cells (the cell state's type); CMSIS-NN's int8 kernel (int16
    cell state) instead keeps 8 kernel-sum vectors (4 B per state cell each) and asks for 3."""
    if len(n.ins) != 24 or len(n.outs) != 1:
        raise UnpricedModelError(f"operator {n.v} (UNIDIRECTIONAL_SEQUENCE_LSTM): "
                                 f"{len(n.ins)} inputs, {len(n.outs)} outputs, not 24 and 1")
    x, h, c, y = n.inp(0), n.inp(18), n.inp(19), n.out(0)
    n.need(x, h, c, y, *[n.inp(i) for i in (*range(1, 9), *range(12, 16))])
    if any(n.inp(i) is not None for i in (9, 10, 11, 16, 17, 20, 21, 22, 23)):
        raise UnpricedModelError(f"operator {n.v} (UNIDIRECTIONAL_SEQUENCE_LSTM): peephole, "
                                 "projection or layer-norm tensors, which TFLite Micro rejects")
    if not (h.variable and c.variable) or len(x.shape) != 3 or len(y.shape) != 3 or \
            len(h.shape) != 2:
        raise UnpricedModelError(f"operator {n.v} (UNIDIRECTIONAL_SEQUENCE_LSTM): a layout "
                                 "TFLite Micro rejects")
    # 8x8 (int8 activations) or 16x8 (int16 activations, int8 weights, int64 biases), both
    # with an int16 cell state
    quant = x.type in (INT8, INT16) and c.type == INT16 and h.type == y.type == x.type and \
        all(n.inp(i).type == INT8 for i in range(1, 9))
    if not quant and not x.type == h.type == c.type == y.type == FLOAT32:
        raise UnpricedModelError(f"operator {n.v} (UNIDIRECTIONAL_SEQUENCE_LSTM): float32, or "
                                 "int8 or int16 with int8 weights and an int16 cell state, "
                                 "only")
    time_major = bool(getattr(n.options, "timeMajor", False))
    batch, state = x.shape[1 if time_major else 0], h.shape[1]
    for i in range(24):
        n.tin(i)
    n.tout(0)
    if quant and cmsis:
        if any(not n.inp(i).const for i in (*range(1, 9), *range(12, 16))):
            raise UnpricedModelError(f"operator {n.v} (UNIDIRECTIONAL_SEQUENCE_LSTM): "
                                     "non-constant weights or biases")
        for _ in range(8):  # kernel sums of the bias type: int32 (8x8) or int64 (16x8)
            n.persist((4 if x.type == INT8 else 8) * state)
    for _ in range(3 if quant and cmsis else 4):
        n.scratch(batch * state * TYPE_BYTES[c.type])


def _no_prepare(n: Node, cmsis: bool):  # PACK, UNPACK: no Prepare
    pass


PREPARE = {
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
    "TRANSPOSE": _transpose, "RESIZE_NEAREST_NEIGHBOR": _resize_nearest, "SPLIT": _split,
    "SPLIT_V": _split, "GATHER": _gather, "BATCH_MATMUL": _batch_matmul, "PACK": _no_prepare,
    "UNPACK": _no_prepare, "SVDF": _svdf, "UNIDIRECTIONAL_SEQUENCE_LSTM": _lstm,
}
PREPARE.update(_ELEMENTWISE)
PREPARE.update(_MISC)

"""Small int8 / float32 TFLite models whose weights TFLite Micro decodes at run time with its
``DECODE`` kernel (the custom operator ``TFLM_DECODE``: ``MicroMutableOpResolver::AddDecode``),
one file per decode type (`decode_models`), for the arena's `memory.kernels_misc` pricing.

Each DECODE input pair is a constant encoded tensor (uint8) and a constant ancillary tensor
(uint8): 16 bytes of decode common metadata (``DecodeState::kDcm*``: byte 0 the decode type,
1 its version, 4 the type's version, 5 and 6 its parameters) and then the type's table, as
``decode_state_lut.cc``, ``decode_state_prune.cc`` and ``decode_state_huffman.cc`` read
them:

* LUT (type 0): indices of ``bits`` bits packed most significant bit first; the value table
  holds ``stride`` values of the output's type per channel (channel axis 0, or the last axis
  when it is the output's quantized dimension);
* PRUNE (type 2): one bit per element (most significant first), 1 taking the next value of
  the table, 0 the channel's zero point;
* HUFFMAN (type 1): a fixed-length 4-bit code here (a 16-entry first table whose every entry
  is a symbol of 4 bits), codewords packed most significant bit first in big-endian 32-bit
  words; a 16-bit table (int8 outputs only) or a 32-bit one.

The decoded tensors feed the weights of convolutions and a fully connected layer (which
then asks for its kernel sums as scratch: its filter is not constant), and, int8 PRUNE, one
more model output quantized per channel with non-zero zero points (the kernel copies them to
the tail).
"""
from __future__ import annotations

import numpy as np

from .tflite_ops import _op_finish, _op_net
from .tflite_ops_misc import _custom

CODECS = ("LUT", "PRUNE", "HUFFMAN")
_TYPE = {"LUT": 0, "HUFFMAN": 1, "PRUNE": 2}


def _pack_bits(values, bits: int) -> bytes:
    """``values`` of ``bits`` bits each, most significant bit first, padded to a byte."""
    out = np.zeros(-(-len(values) * bits // 8), np.uint8)
    pos = 0
    for v in values:
        for b in range(bits - 1, -1, -1):
            if (int(v) >> b) & 1:
                out[pos >> 3] |= 0x80 >> (pos & 7)
            pos += 1
    return out.tobytes()


def _dcm(codec: str, p5: int = 0, p6: int = 0) -> bytes:
    head = np.zeros(16, np.uint8)
    head[0], head[1], head[4], head[5], head[6] = _TYPE[codec], 1, 1, p5, p6
    return head.tobytes()


def _u8(net, name: str, raw: bytes) -> int:
    arr = np.frombuffer(raw, np.uint8)
    return net.b.tensor(name, [len(arr)], net.s.TensorType.UINT8, net.b.buffer(arr))


def _lut(values: np.ndarray, axis: int | None, bits: int, dtype) -> tuple[bytes, bytes]:
    """(encoded indices, ancillary) of ``values`` with a table of ``2**bits`` entries per
    channel: channels along ``axis`` (0, or the last axis: the kernel's alternate axis; None:
    one channel, as for an output without quantization)."""
    stride = 1 << bits
    last = axis is not None and axis == values.ndim - 1 and axis != 0
    chans = np.moveaxis(values, -1, 0) if last else (values if axis == 0 else values[None])
    tables, idx = [], np.zeros(chans.shape, np.int64)
    for c in range(chans.shape[0]):
        table = np.unique(chans[c])
        assert len(table) <= stride
        tables.append(np.concatenate([table, np.zeros(stride - len(table), table.dtype)]))
        idx[c] = np.searchsorted(table, chans[c])
    if last:  # elements in memory order: the channel changes fastest
        idx = np.moveaxis(idx, 0, -1)
    table = np.concatenate(tables).astype(dtype)
    return _pack_bits(idx.ravel(), bits), _dcm("LUT", bits, stride) + table.tobytes()


def _prune(values: np.ndarray, zero_points) -> tuple[bytes, bytes]:
    """(bitmap, ancillary) of ``values`` (channels along axis 0) whose entries equal to their
    channel's zero point are pruned."""
    zp = np.broadcast_to(np.asarray(zero_points, values.dtype).reshape(
        [-1] + [1] * (values.ndim - 1)), values.shape)
    keep = (values != zp).ravel()
    return _pack_bits(keep.astype(np.int64), 1), _dcm("PRUNE") + values.ravel()[keep].tobytes()


def _huffman(values: np.ndarray, wide: bool) -> tuple[bytes, bytes]:
    """(codewords, ancillary) of int8 ``values`` that take at most 16 distinct values: each a
    4-bit code, its table entry a symbol found (bit 15 / 31) of 4 bits (bits 11-14 / 27-30)."""
    uniq = np.unique(values)
    assert len(uniq) <= 16
    idx = np.searchsorted(uniq, values.ravel())
    table = np.concatenate([uniq, np.zeros(16 - len(uniq), uniq.dtype)])
    raw = _pack_bits(idx, 4)
    raw += bytes(-len(raw) % 4)  # whole 32-bit words
    sym = table.astype(np.int64) & 0xFF
    if wide:
        entries = (0x80000000 | (4 << 27) | sym).astype("<u4")
    else:
        entries = (0x8000 | (4 << 11) | sym).astype("<u2")
    return raw, _dcm("HUFFMAN", (3 << 4) | int(wide)) + entries.tobytes()


def _levels(net, shape, levels: int, axis: int | None):
    """Weights of ``shape`` taking ``levels`` values per channel (int8 with per-channel scales
    along ``axis``, or float32)."""
    rng = net.rng
    chans = shape[axis] if axis is not None else 1
    grid = rng.normal(0, 0.4, (chans, levels)).astype(np.float32)
    pick = rng.integers(0, levels, shape)
    bshape = [1] * len(shape)
    if axis is not None:
        bshape[axis] = chans
    wf = grid[np.arange(chans).reshape(bshape), pick]
    if not net.q:
        return wf, None
    red = tuple(i for i in range(len(shape)) if i != axis) if axis is not None else None
    scale = (np.maximum(np.abs(wf).max(axis=red), 1e-3) / 127.0).astype(np.float32)
    return np.clip(np.round(wf / scale.reshape(bshape)), -127, 127).astype(np.int8), \
        np.atleast_1d(scale)


def _decoded(net, name, shape, scale, axis, zero_point=0) -> int:
    T = net.s.TensorType
    if not net.q:
        return net.b.tensor(name, shape, T.FLOAT32)
    return net.b.tensor(name, shape, T.INT8, scale=scale, zero_point=zero_point, axis=axis)


def _conv_with(net, x, shape, w, cout, k, depthwise=False, relu=True):
    """A SAME, stride-1 convolution of ``x`` with the (decoded) weight tensor ``w``."""
    s = net.s
    net.n += 1
    scale = net.b.tensors[w].quantization.scale if net.q else None
    bt = net.bias(f"conv{net.n}/b", x, np.asarray(scale) if net.q else None, cout)
    out = net.act(f"conv{net.n}", shape[:3] + [cout], 0.05 + 0.01 * (net.n % 5),
                  -10 + net.n % 7)
    fused = s.ActivationFunctionType.RELU if relu else s.ActivationFunctionType.NONE
    o = s.DepthwiseConv2DOptionsT() if depthwise else s.Conv2DOptionsT()
    o.padding, o.strideW, o.strideH, o.fusedActivationFunction = s.Padding.SAME, 1, 1, fused
    o.dilationWFactor = o.dilationHFactor = 1
    if depthwise:
        o.depthMultiplier = 1
        net.b.op("DEPTHWISE_CONV_2D", [x, w, bt], [out], s.BuiltinOptions.DepthwiseConv2DOptions,
                 o)
    else:
        net.b.op("CONV_2D", [x, w, bt], [out], s.BuiltinOptions.Conv2DOptions, o)
    return out, shape[:3] + [cout]


def _fc_with(net, x, shape, w, units):
    """FULLY_CONNECTED of ``x`` (its last axis) with the (decoded) weights ``w``."""
    s = net.s
    net.n += 1
    scale = net.b.tensors[w].quantization.scale if net.q else None
    bt = net.bias(f"fc{net.n}/b", x, np.asarray(scale) if net.q else None, units)
    rows = int(np.prod(shape[:-1]))
    out = net.act(f"fc{net.n}", [rows, units], 0.1, 3)
    o = s.FullyConnectedOptionsT()
    o.fusedActivationFunction = s.ActivationFunctionType.NONE
    net.b.op("FULLY_CONNECTED", [x, w, bt], [out], s.BuiltinOptions.FullyConnectedOptions, o)
    return out


def decode_model(codec: str = "LUT", quantized: bool = True, seed: int = 0, size: int = 8,
                 channels: int = 8, plain: bool = False) -> bytes:
    """conv3x3 -> one DECODE of ``codec`` (`CODECS`) with two or three outputs ->
    the decoded weights used by the layers after it:

    * LUT: a depthwise 3x3 (int8: per channel along the last axis, the kernel's alternate
      axis; 3 bits) and a 1x1 convolution (per channel along axis 0; 2 bits);
    * PRUNE: a 1x1 convolution (about half its weights pruned to 0) and a fully connected
      layer on the convolution's output (per tensor), and, int8, a third output (per channel,
      non-zero zero points) that is a model output too;
    * HUFFMAN (int8 only): a 1x1 convolution (16-bit table) and a fully connected layer
      (32-bit table).

    ``plain``: the same model with the decoded weights stored as constants (no DECODE): its
    outputs are the DECODE model's."""
    if codec not in CODECS:
        raise ValueError(f"codec {codec!r}: choose one of {', '.join(CODECS)}")
    if codec == "HUFFMAN" and not quantized:
        raise ValueError("TFLite Micro's Huffman decoding writes int8 and int16 only")
    net, _, a, shape = _op_net(f"decode_{codec.lower()}", quantized, seed, size, channels)
    dtype = np.int8 if quantized else np.float32
    pairs, outs = [], []

    def add(name, values, scale, axis, enc, zero_point=0):
        if plain:
            t = _decoded(net, name, list(values.shape), scale, axis, zero_point)
            net.b.tensors[t].buffer = net.b.buffer(values)
            return t
        pairs.extend([_u8(net, f"{name}/encoded", enc[0]), _u8(net, f"{name}/ancillary",
                                                                enc[1])])
        outs.append(_decoded(net, name, list(values.shape), scale, axis, zero_point))
        return outs[-1]

    cout = 4
    if codec == "LUT":
        dw, dws = _levels(net, [1, 3, 3, channels], 8, 3 if quantized else None)
        pw, pws = _levels(net, [cout, 1, 1, channels], 4, 0 if quantized else None)
        w_dw = add("dw", dw, dws, 3, _lut(dw, 3 if quantized else None, 3, dtype))
        w_pw = add("pw", pw, pws, 0, _lut(pw, 0 if quantized else None, 2, dtype))
        if pairs:
            _custom(net, "TFLM_DECODE", pairs, outs)
        d, dshape = _conv_with(net, a, shape, w_dw, channels, 3, depthwise=True)
        y, yshape = _conv_with(net, d, dshape, w_pw, cout, 1, relu=False)
        return _op_finish(net, y, yshape)
    pw, pws = _levels(net, [cout, 1, 1, channels], 3 if codec == "HUFFMAN" else 6,
                      0 if quantized else None)
    pw[net.rng.random(pw.shape) < 0.5] = 0
    fc, fcs = _levels(net, [cout, cout], 8, None)
    if codec == "PRUNE":
        w_pw = add("pw", pw, pws, 0, _prune(pw, 0))
        w_fc = add("fc_w", fc, fcs, 0, _prune(fc, 0))
        extra = None
        if quantized:
            zps = np.array([3, 6, 9, 12], np.int8)
            tq = net.rng.integers(-100, 100, (4, 16)).astype(np.int8)
            tq = np.where(net.rng.random(tq.shape) < 0.5, zps[:, None], tq).astype(np.int8)
            extra = add("table", tq, np.full(4, 0.02, np.float32), 0, _prune(tq, zps), zps)
    else:
        w_pw = add("pw", pw, pws, 0, _huffman(pw, wide=False))
        w_fc = add("fc_w", fc, fcs, 0, _huffman(fc, wide=True))
        extra = None
    if pairs:
        _custom(net, "TFLM_DECODE", pairs, outs)
    y, yshape = _conv_with(net, a, shape, w_pw, cout, 1)
    z = _fc_with(net, y, yshape, w_fc, cout)
    net.b.outputs = [z] + ([extra] if extra is not None else [])
    return net.b.finish()


def decode_models(quantized: bool = True) -> dict[str, bytes]:
    """One file per decode type (HUFFMAN in int8 only)."""
    return {c: decode_model(c, quantized) for c in CODECS if quantized or c != "HUFFMAN"}

"""What one TFLite Micro kernel costs on a Cortex-M55 with the CMSIS-NN MVE kernels, in
instructions: per kernel, counts that follow its loop structure (`features`: inner-loop calls,
vector iterations over 16-byte / 4-lane channel blocks, output rows and pixels, MACs, the
firmware's ``memcpy`` replayed) and the coefficients fitted on the emulated board
(`COEFFICIENTS`); `op_instructions` is their product for one operator, None where no fit
covers it. The file-level figure and the patch search's time model are in
`memsched.tflite.memory.instructions`."""
from __future__ import annotations

from functools import lru_cache

PER_OP = 12  # the interpreter's loop outside an operator's profiler window (plain firmware)

# ------------------------------------------------------------------------------ geometry
def _c(a: int, b: int) -> int:
    return -(-a // b)


def _taps_in(size: int, out: int, k: int, stride: int, dil: int, pad: int) -> int:
    """Kernel taps inside the input along one axis, summed over the output positions."""
    n = 0
    for j in range(k):  # outputs o with 0 <= o * stride - pad + j * dil < size
        off = j * dil - pad
        lo = max(0, -(off // stride))
        hi = min(out - 1, (size - 1 - off) // stride)
        n += max(0, hi - lo + 1)
    return n


def _same_pad(size: int, out: int, k: int, stride: int, dil: int) -> int:
    eff = (k - 1) * dil + 1
    return max((out - 1) * stride + eff - size, 0) // 2


def _geometry(o: dict, ih: int, iw: int, oh: int, ow: int, kh: int, kw: int):
    sh, sw = o.get("stride", (1, 1))
    dh, dw = o.get("dilation", (1, 1))
    if o.get("padding", "SAME") == "SAME":
        ph, pw = _same_pad(ih, oh, kh, sh, dh), _same_pad(iw, ow, kw, sw, dw)
    else:
        ph = pw = 0
    ty, tx = _taps_in(ih, oh, kh, sh, dh, ph), _taps_in(iw, ow, kw, sw, dw, pw)
    return sh, sw, ph, pw, ty, tx


def _nhwc(shape) -> tuple:
    s = [int(d) for d in shape]
    while len(s) < 4:
        s.insert(0, 1)
    return tuple(s[-4:])


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


# ------------------------------------------------------------------------------ features
# Each returns (variant, {feature: count}) or (variant, None, reason) when not modelled.

def _conv(ins, out, dtype, o):
    n, ih, iw, cin = _nhwc(ins[0])
    _, oh, ow, cout = _nhwc(out)
    kh, kw = o.get("filter", (1, 1))
    if dtype not in ("int8", "float32"):
        return "conv_" + dtype, None, f"{dtype} CONV_2D (int8 and float32 calibrated)"
    sh, sw, ph, pw, ty, tx = _geometry(o, ih, iw, oh, ow, kh, kw)
    npx = n * oh * ow
    if dtype == "float32":  # TFLite's reference loops: per output, every tap, its channels
        tin = n * ty * tx
        # GCC -O2 vectorizes the channel loop 4 floats at a time, the rest one by one
        return "float32", {"one": 1, "px": npx, "outs": npx * cout,
                           "taps": npx * cout * kh * kw, "taps_in": tin * cout,
                           "mac4": tin * cout * (cin // 4), "mac1": tin * cout * (cin % 4)}
    if kh == 1 and kw == 1 and ph == 0 and pw == 0 and o.get("dilation", (1, 1)) == (1, 1):
        c16 = _c(cin, 16)
        if (sh, sw) == (1, 1):  # arm_convolve_1x1_s8_fast: one matrix product over all pixels
            return "1x1", {"one": 1, **_matmul(npx, cout, c16, calls=1)}
        # arm_convolve_1x1_s8: one matrix product per output row
        return "1x1_strided", {"one": 1, "orows": n * oh,
                               **_matmul(ow, cout, c16, calls=n * oh)}
    # arm_convolve_s8 (1xN shares its im2col and product structure): im2col of 4 pixels at a
    # time, each a 4-row matrix product over K = kh*kw*cin; the last 1-3 pixels one product
    k16 = _c(kh * kw * cin, 16)
    c16 = _c(cin, 16)
    taps = npx * kh * kw
    tin = n * ty * tx
    mm = _matmul(4, cout, k16, calls=npx // 4)
    if npx % 4:
        left = _matmul(npx % 4, cout, k16, calls=1)
        mm = {k: mm.get(k, 0) + left.get(k, 0) for k in set(mm) | set(left)}
    return "general", {"one": 1, "px": npx, "taps": taps, "taps_in": tin,
                       "taps_in_c16": tin * c16, "pad_c16": (taps - tin) * c16, **mm}


def _matmul(rows: int, cout: int, k16: int, calls: int) -> dict:
    """Counts of ``calls`` arm_nn_mat_mult_nt_t_s8(lhs_rows=rows, rhs_rows=cout): blocks of 4
    rows x each output channel (a 16-byte MAC loop, one vector requantization), then the
    1-3 rows left one by one (the same loop, requantized 4 channels at a time, the last
    cout % 4 scalar)."""
    q, r = rows // 4, rows % 4
    return {"mm_calls": calls, "mm_quads": calls * q, "mm_quad_cout": calls * q * cout,
            "mm_quad_k": calls * q * cout * k16, "mm_left": calls * r,
            "mm_left_cout": calls * r * cout, "mm_left_k": calls * r * cout * k16,
            "mm_left_c4": calls * r * (cout // 4), "mm_left_tail": calls * r * (cout % 4)}


def _depthwise(ins, out, dtype, o):
    n, ih, iw, cin = _nhwc(ins[0])
    _, oh, ow, cout = _nhwc(out)
    kh, kw = o.get("filter", (1, 1))
    if dtype == "float32":  # TFLite's reference loops
        sh, sw, ph, pw, ty, tx = _geometry(o, ih, iw, oh, ow, kh, kw)
        npx = n * oh * ow
        return "float32", {"one": 1, "px": npx, "outs": npx * cout,
                           "taps": npx * cout * kh * kw, "taps_in": n * ty * tx * cout}
    if dtype != "int8":
        return "dw_" + dtype, None, f"{dtype} DEPTHWISE_CONV_2D (int8, float32 calibrated)"
    if cin == 1 and cout > 1:  # CMSIS-NN runs it as a convolution (GCC's threshold: 1)
        r = _conv(ins, out, dtype, o)
        return "as_conv_" + r[0], r[1]
    if cout != cin or n != 1 or o.get("dilation", (1, 1)) != (1, 1):
        return "dw_generic", None, "channel multiplier, batch or dilation (arm_depthwise_conv_s8)"
    sh, sw, ph, pw, ty, tx = _geometry(o, ih, iw, oh, ow, kh, kw)
    npx = oh * ow
    ks = kh * kw
    blocks = [min(124, cin - b) for b in range(0, cin, 124)]  # CH_IN_BLOCK_MVE
    nb = len(blocks)
    c4 = sum(_c(a, 4) for a in blocks)
    c16 = sum(_c(a, 16) for a in blocks)
    taps = npx * ks
    tin = ty * tx
    return "opt", {"one": 1, "blocks": nb, "rows": nb * oh, "px": nb * npx,
                   "taps": nb * taps, "pad_taps": nb * (taps - tin),
                   "taps_c16": c16 * taps, "pad_c16": c16 * (taps - tin),
                   "quads": nb * (npx // 4), "quads_c4": npx // 4 * c4,
                   "quads_c4_k": npx // 4 * c4 * ks,
                   "left_c4": npx % 4 * c4, "left_c4_k": npx % 4 * c4 * ks}


def _fc(ins, out, dtype, o):
    k = int(ins[0][-1]) if ins[0] else 1
    m = int(out[-1])
    batches = max(1, _prod(out) // max(m, 1))
    if dtype == "float32":
        return "float32", {"one": 1, "batches": batches, "out": batches * m,
                           "macs": batches * m * k}
    if dtype != "int8":
        return "fc_" + dtype, None, f"{dtype} FULLY_CONNECTED (int8, float32 calibrated)"
    k16 = _c(k, 16)
    return "int8", {"one": 1, "batches": batches, "out": batches * m,
                    "out_k": batches * m * k16, "out4_k": batches * (m // 4) * k16,
                    "out4": batches * (m // 4)}


def _eltwise(ins, out, dtype, o, kind):
    if dtype not in ("int8", "float32"):
        return dtype, None, f"{dtype} {kind} (int8, float32 calibrated)"
    e = _prod(out)
    if len(ins) < 2:
        return "malformed", None, "one input"
    if dtype == "float32":  # TFLite's reference loops, broadcasting or not
        runs = _broadcast_runs(ins[0], ins[1], out)[0] if tuple(ins[0]) != tuple(ins[1]) \
            else 0
        return "float32" if not runs else "float32_broadcast", {"one": 1, "e": e, "runs": runs}
    if tuple(ins[0]) != tuple(ins[1]):  # TFLite Micro's reference broadcasting loops
        runs, inner = _broadcast_runs(ins[0], ins[1], out)
        scalar = min(_prod(ins[0]), _prod(ins[1])) == 1
        if scalar and kind != "MUL":  # measured 109-122 per element on random data: no fit
            return "broadcast_scalar", None, f"{kind} of a scalar (not fitted within 10 %)"
        return "broadcast_scalar" if scalar else "broadcast", \
            {"one": 1, "e": e, "runs": runs}
    if kind == "SUB":  # the reference kernel, element by element
        return "int8", {"one": 1, "e": e}
    return "int8", {"one": 1, "e4": _c(e, 4), "e16": _c(e, 16)}


def _broadcast_runs(a, b, out) -> tuple[int, int]:
    """(inner loops, their length) of TFLite's ``BroadcastBinaryOpSimple`` over ``out``: it
    fuses a dimension into the loop inside it when both inputs' strides continue (a size-1
    output dimension fuses always, but a first one of size 1 still opens the inner loop)."""
    a, b, out = _nhwc(a), _nhwc(b), _nhwc(out)
    acc = [1, 1, 1]
    loops: list = []  # [a stride, b stride, o stride, size], innermost first
    for d in range(3, -1, -1):
        dims = (a[d], b[d], out[d])
        strides = [0 if dims[i] == 1 and out[d] != 1 else acc[i] for i in range(2)] + [acc[2]]
        if loops and (out[d] == 1 or all(
                (strides[i] == 0) if loops[-1][i] == 0 else (strides[i] == acc[i])
                for i in range(3))):
            loops[-1][3] *= out[d]
        else:
            loops.append(strides + [out[d]])
        acc = [acc[i] * dims[i] for i in range(3)]
    inner = loops[0][3]
    return _prod(out) // max(inner, 1), inner


def _unary(ins, out, dtype, o, kind):
    # TFLite Micro's reference kernels, element by element
    if dtype not in ("int8", "float32"):
        return dtype, None, f"{dtype} {kind} (int8, float32 calibrated)"
    return dtype, {"one": 1, "e": _prod(out)}


def _pool(ins, out, dtype, o, kind):
    if dtype not in ("int8", "float32"):
        return dtype, None, f"{dtype} {kind} (int8, float32 calibrated)"
    n, ih, iw, c = _nhwc(ins[0])
    _, oh, ow, _ = _nhwc(out)
    kh, kw = o.get("filter", (1, 1))
    sh, sw, ph, pw, ty, tx = _geometry(o, ih, iw, oh, ow, kh, kw)
    npx = n * oh * ow
    tin = n * ty * tx
    c16 = _c(c, 16)
    if dtype == "float32":
        return "float32", {"one": 1, "px": npx, "px_c": npx * c, "taps_in_c": tin * c}
    return "int8", {"one": 1, "px": npx, "px_c16": npx * c16, "taps_in": tin,
                    "taps_in_c16": tin * c16, "taps_in_c": tin * c, "px_c": npx * c}


def _mean(ins, out, dtype, o):
    if dtype not in ("int8", "float32"):
        return dtype, None, f"{dtype} MEAN (int8, float32 calibrated)"
    n, h, w, c = _nhwc(ins[0])
    return dtype, {"one": 1, "in": _prod(ins[0]), "out": _prod(out), "px": n * h * w,
                    "c": c}


def _softmax(ins, out, dtype, o):
    if dtype not in ("int8", "float32"):
        return dtype, None, f"{dtype} SOFTMAX (int8, float32 calibrated)"
    row = int(out[-1])
    rows = _prod(out) // max(row, 1)
    if dtype == "float32":
        return "float32", {"one": 1, "rows": rows, "e": rows * row}
    return "int8", {"one": 1, "rows": rows, "e": rows * row, "e4": rows * _c(row, 4)}


def _memcpy_insns(src: int, dst: int, n: int) -> int:
    """Instructions of the firmware's newlib ``memcpy`` (v8-m.main, read from its
    disassembly): 64-, 16- and 4-byte word loops when both ends are 4-byte aligned (or can be
    made so), byte loops for short misaligned copies."""
    c = 4  # mov, orr, ands, bne

    def aligned(n):
        k = 2 + 2 + 2 + 2 + 2  # the four size tests, mov + bx
        k += 36 * (n // 64) + 12 * (n % 64 // 16) + 4 * (n % 16 // 4)
        if n % 4:
            k += 5 + 2 * (n % 4 >= 2)
        return k

    if (src | dst) & 3 == 0:
        return c + aligned(n)
    c += 2  # cmp, bcc
    if n < 8:
        c += 2
        if n < 4:  # straight to the byte tail
            return c + 2 + (5 + 2 * (n >= 2) if n else 0) + 2
        return c + 4 * (n - 3) + 8
    c += 2  # src aligned: word copies with unaligned stores
    if src & 3 == 0:
        return c + aligned(n)
    c += 2
    if dst & 3 == 0:
        return c + aligned(n)
    head = 4 - (dst & 3)
    c += 7 + 3 * (head >= 2)
    return c + aligned(n - head)


def _copy(ins, out, dtype, o):
    # RESHAPE / SQUEEZE: one memcpy unless input and output share the buffer (``aliased``: the
    # offline plan puts the output at the input's offset; RESHAPE then skips its memcpy)
    isz = o.get("itemsize", 1)
    b = _prod(out) * isz
    copied = 0 if o.get("aliased") else _memcpy_insns(0, 0, b)
    return "copy" if isz == 1 else f"copy{isz}", {"one": 1, "memcpy": copied,
                                                  "dims": len(ins[0]) if ins else 0}


def _expand_dims(ins, out, dtype, o):
    # TFLite Micro's EXPAND_DIMS copies element by element
    isz = o.get("itemsize", 1)
    return "copy" if isz == 1 else f"copy{isz}", {"one": 1, "e": _prod(out)}


def _quantize(ins, out, dtype, o):
    e = _prod(out)
    return f"{dtype}_to_{o.get('out_dtype', 'int8')}", {"one": 1, "e": e}


def _pad(ins, out, dtype, o):
    n, ih, iw, c = _nhwc(ins[0])
    _, oh, ow, _ = _nhwc(out)
    isz = o.get("itemsize", 1)
    if isz == 4:  # TFLite's reference pad, element by element
        return "wide", {"one": 1, "orows": n * oh, "oe": _prod(out)}
    if isz != 1:
        return "wide", None, f"{dtype} PAD (1- and 4-byte types calibrated)"
    return "s8", {"one": 1, "orows": n * oh, "irows": n * ih, "ipx": n * ih * iw,
                  "obytes": _prod(out), "ibytes": _prod(ins[0]),
                  "ob16": _c(_prod(out), 16), "irow16": n * ih * _c(iw * c, 16)}


def _slice(ins, out, dtype, o):
    # TFLite Micro's reference kernel: one memcpy of the innermost dimension's run per
    # position of the outer dimensions (unit inner stride)
    isz = o.get("itemsize", 1)
    full, shape = _nhwc(ins[0]), _nhwc(out)
    begin = tuple(o.get("begin", (0, 0, 0, 0)))
    begin = (0,) * (4 - len(begin)) + begin[-4:]
    if tuple(o.get("strides", (1,)))[-1] != 1:
        return "strided", None, "inner stride other than 1"
    n, oh, ow, c = shape
    _, h, w, cc = full
    # one memcpy per output pixel; both offsets modulo 4 (all memcpy's cost depends on)
    # repeat with the row and the column modulo 4: count those 16 classes
    cost = 0
    for b in range(n):
        for ry in range(min(4, oh)):
            ny = len(range(ry, oh, 4))
            for rx in range(min(4, ow)):
                nx = len(range(rx, ow, 4))
                src = (((b + begin[0]) * h + ry + begin[1]) * w + begin[2] + rx) * cc + begin[3]
                dst = ((b * oh + ry) * ow + rx) * c
                cost += ny * nx * _memcpy_insns(src * isz & 3, dst * isz & 3, c * isz)
    return "copy" if isz == 1 else f"copy{isz}", {"one": 1, "rows": n * oh, "runs": n * oh * ow,
                                                  "memcpy": cost}


def _gather(ins, out, dtype, o):
    # TFLite Micro's GATHER (int32 indices, batch_dims 0): one memcpy of the dimensions after
    # ``axis`` per outer index and per index (``begin``: the first index; the patch writer's
    # indices are consecutive, so the source offset of copy k is begin + k)
    isz = o.get("itemsize", 1)
    x = ins[0]
    axis = o.get("axis", 0) % len(x)
    outer, coords = _prod(x[:axis]), int(out[axis]) if len(out) > axis else 1
    inner = _prod(x[axis + 1:]) * isz
    first = int(o.get("begin", 0))
    cost = 0
    for a in range(min(4, outer)):  # the offsets modulo 4 repeat with the indices modulo 4
        for k in range(min(4, coords)):
            src = (a * int(x[axis]) + first + k) * inner
            dst = (a * coords + k) * inner
            cost += len(range(a, outer, 4)) * len(range(k, coords, 4)) * \
                _memcpy_insns(src & 3, dst & 3, inner)
    return "copy" if isz == 1 else f"copy{isz}", {"one": 1, "copies": outer * coords,
                                                  "memcpy": cost}


def _concat(ins, out, dtype, o):
    # TFLite Micro's reference kernel: for each outer index, one memcpy per input
    isz = o.get("itemsize", 1)
    axis = o.get("axis", -1) % len(out)
    outer = _prod(out[:axis])
    runs = [_prod(s[axis:]) * isz for s in ins]
    step = sum(runs)
    cost, at = 0, 0
    for run in runs:  # the offsets modulo 4 repeat with the outer index modulo 4
        cost += sum(len(range(k, outer, 4)) * _memcpy_insns(k * run & 3, k * step + at & 3, run)
                    for k in range(min(4, outer)))
        at += run
    return "copy" if isz == 1 else f"copy{isz}", \
        {"one": 1, "inputs": len(ins), "outer": outer, "copies": outer * len(ins),
         "memcpy": cost}


_FEATURES = {
    "CONV_2D": _conv, "DEPTHWISE_CONV_2D": _depthwise, "FULLY_CONNECTED": _fc,
    "ADD": lambda i, u, d, o: _eltwise(i, u, d, o, "ADD"),
    "MUL": lambda i, u, d, o: _eltwise(i, u, d, o, "MUL"),
    "SUB": lambda i, u, d, o: _eltwise(i, u, d, o, "SUB"),
    **{k: (lambda i, u, d, o, k=k: _unary(i, u, d, o, k))
       for k in ("RELU", "RELU6", "LEAKY_RELU", "HARD_SWISH", "LOGISTIC", "TANH")},
    "AVERAGE_POOL_2D": lambda i, u, d, o: _pool(i, u, d, o, "AVERAGE_POOL_2D"),
    "MAX_POOL_2D": lambda i, u, d, o: _pool(i, u, d, o, "MAX_POOL_2D"),
    "MEAN": _mean, "SOFTMAX": _softmax, "RESHAPE": _copy, "SQUEEZE": _copy,
    "EXPAND_DIMS": _expand_dims, "QUANTIZE": _quantize, "DEQUANTIZE": _quantize, "PAD": _pad,
    "PADV2": _pad, "STRIDED_SLICE": _slice, "CONCATENATION": _concat, "GATHER": _gather,
}

# Fitted coefficients: {(kind, variant): {feature: instructions per unit of the feature}}.
# Measured 2026-11-28 on the emulated Cortex-M55 (QEMU 7.2 mps3-an547, TFLite Micro 90b983c2,
# CMSIS-NN dbf45dbf, GCC 12.2 -O2), the --per-op firmware of `memsched.board`: 63 generated
# int8 and 63 float32 files of 14 independent operators each (1,764 operators: random shapes,
# filters 1/3/5, strides 1/2, SAME / VALID, 1-200 channels, pads, slices, concatenations up to
# 128x128 maps), one random input each; least squares per kernel variant on each operator's
# profiler window (`benchmarks/tflite/tflm_instructions.py --calibrate` re-measures and prints this
# literal; a variant is kept only with 2 samples per feature and, for float / wide-element
# reference loops, within 10 % on every sample). Copies (RESHAPE, SQUEEZE, STRIDED_SLICE,
# CONCATENATION) fit with coefficient 1.0 on `_memcpy_insns`.
COEFFICIENTS = {
    ('ADD', 'broadcast'):
        {'e': 114.5907, 'one': 837.1928, 'runs': 80.7004},
    ('ADD', 'float32'):
        {'e': 13.0, 'one': 382.0},
    ('ADD', 'int8'):
        {'e4': 55.0, 'one': 751.0},
    ('AVERAGE_POOL_2D', 'int8'):
        {'one': 55.2799,
         'px': 38.5597,
         'px_c': 2.0281,
         'px_c16': 177.0626,
         'taps_in': 0.9892,
         'taps_in_c': -0.2803,
         'taps_in_c16': 27.1343},
    ('CONCATENATION', 'copy'):
        {'copies': 16.0003, 'inputs': 218.2078, 'memcpy': 1.0, 'one': 285.3816, 'outer': 12.0009},
    ('CONCATENATION', 'copy4'):
        {'copies': 18.0002, 'inputs': 218.1864, 'memcpy': 1.0, 'one': 287.9655, 'outer': 12.0002},
    ('CONV_2D', '1x1'):
        {'mm_calls': 228.2498,
         'mm_left': 29.6199,
         'mm_left_c4': -1.2736,
         'mm_left_cout': 27.3104,
         'mm_left_k': 4.9927,
         'mm_left_tail': 32.4049,
         'mm_quad_cout': 56.0002,
         'mm_quad_k': 11.0004,
         'mm_quads': 41.9507,
         'one': 228.2498},
    ('CONV_2D', '1x1_strided'):
        {'mm_calls': 40.0056,
         'mm_left': 24.2734,
         'mm_left_c4': -1.3526,
         'mm_left_cout': 27.3258,
         'mm_left_k': 5.0094,
         'mm_left_tail': 32.7363,
         'mm_quad_cout': 55.9474,
         'mm_quad_k': 10.9943,
         'mm_quads': 61.7603,
         'one': 377.6457,
         'orows': 40.0056},
    ('CONV_2D', 'general'):
        {'mm_calls': 46.3116,
         'mm_left': -2.3087,
         'mm_left_c4': -6.1291,
         'mm_left_cout': 27.8007,
         'mm_left_k': 4.9969,
         'mm_left_tail': 52.3171,
         'mm_quad_cout': 56.0585,
         'mm_quad_k': 10.9992,
         'mm_quads': 23.3518,
         'one': 780.9286,
         'pad_c16': 1.9552,
         'px': 91.0986,
         'taps': 17.7887,
         'taps_in': 0.4764,
         'taps_in_c16': 3.008},
    ('DEPTHWISE_CONV_2D', 'as_conv_general'):
        {'mm_calls': 46.3116,
         'mm_left': -2.3087,
         'mm_left_c4': -6.1291,
         'mm_left_cout': 27.8007,
         'mm_left_k': 4.9969,
         'mm_left_tail': 52.3171,
         'mm_quad_cout': 56.0585,
         'mm_quad_k': 10.9992,
         'mm_quads': 23.3518,
         'one': 1818.1584,
         'pad_c16': 1.9552,
         'px': 91.0986,
         'taps': 17.7887,
         'taps_in': 0.4764,
         'taps_in_c16': 3.008},
    ('DEPTHWISE_CONV_2D', 'opt'):
        {'blocks': 78.7044,
         'left_c4': 48.094,
         'left_c4_k': 6.8533,
         'one': 605.3687,
         'pad_c16': -1.0499,
         'pad_taps': -0.7919,
         'px': 94.9449,
         'quads': -11.4649,
         'quads_c4': 105.0578,
         'quads_c4_k': 16.0346,
         'rows': 38.0782,
         'taps': 16.164,
         'taps_c16': 2.9574},
    ('DEQUANTIZE', 'int8_to_float32'):
        {'e': 8.0, 'one': 272.0},
    ('EXPAND_DIMS', 'copy'):
        {'e': 3.0, 'one': 134.0},
    ('EXPAND_DIMS', 'copy4'):
        {'e': 3.0, 'one': 138.0},
    ('GATHER', 'copy'):  # 2026-11-28: 32 GATHERs of patch windows (axis 1 and 2, 3 and 16
        # channels, 8-16 indices) in ResNet-8 rewrites, least squares with memcpy fixed at 1.0
        {'copies': 17.11, 'memcpy': 1.0, 'one': 288.0},
    ('FULLY_CONNECTED', 'float32'):
        {'batches': 220.5, 'macs': 4.0, 'one': 220.5, 'out': 25.0},
    ('FULLY_CONNECTED', 'int8'):
        {'batches': 248.0846,
         'one': 248.0846,
         'out': 36.8728,
         'out4': -97.3158,
         'out4_k': -24.0152,
         'out_k': 13.5139},
    ('HARD_SWISH', 'float32'):
        {'e': 15.0, 'one': 275.0},
    ('HARD_SWISH', 'int8'):
        {'e': 94.7916, 'one': 2001.0392},
    ('LEAKY_RELU', 'float32'):
        {'e': 8.0, 'one': 272.0},
    ('LEAKY_RELU', 'int8'):
        {'e': 50.855, 'one': 216.9871},
    ('LOGISTIC', 'float32'):
        {'e': 51.0, 'one': 269.0},
    ('LOGISTIC', 'int8'):
        {'e': 374.935, 'one': 295.4269},
    ('MAX_POOL_2D', 'int8'):
        {'one': 413.957,
         'px': 35.9001,
         'px_c': 0.4609,
         'px_c16': 0.1117,
         'taps_in': 17.1373,
         'taps_in_c': 0.0381,
         'taps_in_c16': 15.9429},
    ('MEAN', 'int8'):
        {'c': 24.5613, 'in': 149.0133, 'one': 972.1359, 'out': 24.5613, 'px': 10.222},
    ('MUL', 'broadcast'):
        {'e': 51.0442, 'one': 888.009, 'runs': 53.9695},
    ('MUL', 'broadcast_scalar'):
        {'e': 49.9666, 'one': 954.7718, 'runs': 56.0262},
    ('MUL', 'float32'):
        {'e': 13.0, 'one': 861.0},
    ('MUL', 'int8'):
        {'e4': 27.0, 'one': 779.0},
    ('PAD', 's8'):
        {'ibytes': -0.2051,
         'ipx': 0.0052,
         'irow16': 4.2623,
         'irows': 32.2511,
         'ob16': 43.7779,
         'obytes': -2.6102,
         'one': 384.3382,
         'orows': -2.3379},
    ('PADV2', 's8'):
        {'ibytes': -0.0937,
         'ipx': 0.0227,
         'irow16': 2.4462,
         'irows': 27.8181,
         'ob16': 8.8488,
         'obytes': -0.4267,
         'one': 452.111,
         'orows': 2.8857},
    ('QUANTIZE', 'float32_to_int8'):
        {'e': 14.0, 'one': 271.0},
    ('RELU', 'float32'):
        {'e': 8.0, 'one': 277.0},
    ('RELU', 'int8'):
        {'e': 52.4189, 'one': -731.2618},
    ('RELU6', 'float32'):
        {'e': 10.5059, 'one': 274.0067},
    ('RELU6', 'int8'):
        {'e': 10.9476, 'one': 238.3385},
    ('RESHAPE', 'copy'):
        {'dims': 3.0, 'memcpy': 1.0, 'one': 148.0},
    ('RESHAPE', 'copy4'):
        {'dims': 3.0, 'memcpy': 1.0, 'one': 146.0},
    ('SOFTMAX', 'float32'):
        {'e': 53.0, 'one': 276.0, 'rows': 30.0},
    ('SOFTMAX', 'int8'):
        {'e': 586.433, 'e4': -113.9669, 'one': 148.3067, 'rows': 171.7743},
    ('SQUEEZE', 'copy'):
        {'dims': 83.6, 'memcpy': 1.0, 'one': 41.8},
    ('SQUEEZE', 'copy4'):
        {'dims': 82.0, 'memcpy': 1.0, 'one': 41.0},
    ('STRIDED_SLICE', 'copy'):
        {'memcpy': 1.0, 'one': 825.0, 'rows': 30.0, 'runs': 36.0},
    ('STRIDED_SLICE', 'copy4'):
        {'memcpy': 1.0, 'one': 837.0, 'rows': 30.0, 'runs': 40.0},
    ('SUB', 'float32'):
        {'e': 13.0, 'one': 402.0},
    ('SUB', 'float32_broadcast'):
        {'e': 13.9739, 'one': 1154.6024, 'runs': 64.2419},
    ('SUB', 'int8'):
        {'e': 109.0163, 'one': 632.7963},
    ('TANH', 'float32'):
        {'e': 99.1026, 'one': 167.2937},
    ('TANH', 'int8'):
        {'e': 382.4205, 'one': 204.5091},
}


def features(kind: str, input_shapes, output_shape, dtype: str = "int8", **options):
    """(variant, {feature: count}) of one operator, or (variant, None, reason) when the
    kernel has no cost model. See `op_instructions` for the arguments."""
    f = _FEATURES.get(kind)
    if f is None:
        return "", None, f"{kind}: no cost model"
    if dtype == "malformed":
        return "malformed", None, "inputs or options the kernel needs are missing"
    ins = [tuple(int(d) for d in s) for s in input_shapes]
    return f(ins, tuple(int(d) for d in output_shape), dtype, options)


def op_instructions(kind: str, input_shapes, output_shape, dtype: str = "int8",
                    **options) -> int | None:
    """Predicted instructions of one TFLite Micro operator on the Cortex-M55 (CMSIS-NN MVE):
    its profiler window plus `PER_OP`, what it adds to one ``Invoke()``.

    Parameters
    ----------
    kind : str
        TFLite builtin name (``"CONV_2D"``, ``"STRIDED_SLICE"`` ...).
    input_shapes : list of tuple
        Shapes of the activation inputs (NHWC for spatial operators; for CONCATENATION every
        input; constants such as weights or slice bounds are not inputs here).
    output_shape : tuple
        Shape of the output.
    dtype : str
        The input's type: ``"int8"``, ``"float32"``, ``"int16"`` ...
    **options
        ``filter=(kh, kw)``, ``stride=(sh, sw)``, ``dilation=(dh, dw)``,
        ``padding="SAME"|"VALID"`` (convolutions and pools); ``axis`` (CONCATENATION);
        ``itemsize`` (bytes per element, copies); ``out_dtype`` (QUANTIZE / DEQUANTIZE).

    Returns
    -------
    int or None
        None when the kernel (or this variant of it) has no calibrated model.

    Examples
    --------
    >>> op_instructions("CONV_2D", [(1, 8, 8, 16)], (1, 8, 8, 16), filter=(1, 1)) > 0
    True
    >>> op_instructions("GATHER", [(1, 8)], (1, 8)) is None
    True
    """
    try:
        key = (kind, tuple(tuple(int(d) for d in s) for s in input_shapes),
               tuple(int(d) for d in output_shape), dtype, tuple(sorted(options.items())))
        hash(key)
    except TypeError:  # an unhashable option: computed, not cached
        return _instructions(kind, input_shapes, output_shape, dtype, options)
    return _cached(key)


@lru_cache(maxsize=1 << 16)
def _cached(key):
    # the patch search prices the same windows again and again
    kind, ins, out, dtype, options = key
    return _instructions(kind, ins, out, dtype, dict(options))


def _instructions(kind, input_shapes, output_shape, dtype, options):
    r = features(kind, input_shapes, output_shape, dtype, **options)
    if r[1] is None:
        return None
    coef = COEFFICIENTS.get((kind, r[0]))
    if coef is None:
        return None
    return int(round(sum(coef.get(k, 0.0) * v for k, v in r[1].items()))) + PER_OP

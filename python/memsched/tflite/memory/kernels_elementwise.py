"""What TFLite Micro's elementwise, comparison, logical and shape kernels allocate in
``Prepare`` (issue 60, item 2), as `kernels.Node` events: most only read their tensors as
temporaries; the rest keep a small record (`abi`'s op data: ``Init``) or a copy of the output's
dims, or ask for pointer arrays as scratch. Read from TFLM 90b983c2's ``kernels/`` (the
reference kernels; CMSIS-NN replaces only MAXIMUM / MINIMUM, which read nothing, and
TRANSPOSE_CONV); the host package's 8f6596d checked against its bisection.
"""
from __future__ import annotations

from .abi import BOOL, FLOAT32, INT8, INT16, INT32, INT64, UnpricedModelError


def _types(n, what: str, allowed, *tensors):
    for t in tensors:
        if t is not None and t.type not in allowed:
            raise UnpricedModelError(f"operator {n.v} ({n.kind}): {what} of type {t.type}; "
                                     f"TFLite Micro's kernel takes types {tuple(allowed)} only")


def _reads(*temps, types=None, arity=None, persist=None):
    """A kernel whose Prepare reads these temporaries (("i" | "o", index), in order) and
    nothing else; ``types``: the input types its Eval takes; ``arity``: (inputs, outputs)."""
    def prepare(n, cmsis: bool):
        if arity is not None and (len(n.ins), len(n.outs)) != arity:
            raise UnpricedModelError(f"operator {n.v} ({n.kind}) has {len(n.ins)} inputs and "
                                     f"{len(n.outs)} outputs, not {arity[0]} and {arity[1]}")
        n.need(*[(n.inp if k == "i" else n.out)(i) for k, i in temps])
        if types is not None:
            _types(n, "an input", types, n.inp(0))
        for k, i in temps:
            (n.tin if k == "i" else n.tout)(i)
    return prepare


_UNARY = (("i", 0), ("o", 0))
_BINARY = (("i", 0), ("i", 1), ("o", 0))


def _dims_copy(n, cmsis: bool):
    """DEPTH_TO_SPACE / SPACE_TO_DEPTH: input and output, then a persistent copy of the
    output's dims (CreateWritableTensorDimsWithCopy: 4 + 4 x rank B)."""
    x, y = n.inp(0), n.out(0)
    n.need(x, y)
    if len(x.shape) != 4 or len(y.shape) != 4:
        raise UnpricedModelError(f"operator {n.v} ({n.kind}): TFLite Micro takes 4-D tensors "
                                 "only")
    _types(n, "an input", (FLOAT32, INT8), x)
    n.tin(0), n.tout(0)
    n.persist(4 + 4 * len(y.shape))


def _l2_pool(n, cmsis: bool):
    """L2_POOL_2D (float32): output and input, then the output's dims copy."""
    x, y = n.inp(0), n.out(0)
    n.need(x, y)
    if len(x.shape) != 4 or len(y.shape) != 4:
        raise UnpricedModelError(f"operator {n.v} (L2_POOL_2D): 4-D tensors only")
    _types(n, "an input", (FLOAT32,), x)
    n.tout(0), n.tin(0)
    n.persist(4 + 4 * len(y.shape))


def _gather_nd(n, cmsis: bool):
    """GATHER_ND: params, indices, output, then the output's dims copy."""
    x, idx, y = n.inp(0), n.inp(1), n.out(0)
    n.need(x, idx, y)
    _types(n, "indices", (INT32,), idx)
    n.tin(0), n.tin(1), n.tout(0)
    n.persist(4 + 4 * len(y.shape))


def _embedding_lookup(n, cmsis: bool):
    """EMBEDDING_LOOKUP: ids, table, output, then the output's dims copy and its op data
    (a float and a size_t: 8 B at 32 bits, 16 at 64)."""
    ids, table, y = n.inp(0), n.inp(1), n.out(0)
    n.need(ids, table, y)
    _types(n, "ids", (INT32,), ids)
    _types(n, "a table", (FLOAT32, INT8), table)
    n.tin(0), n.tin(1), n.tout(0)
    n.persist(4 + 4 * len(y.shape))
    n.persist(2 * n.abi.word)


def _reduce_all(n, cmsis: bool):
    """REDUCE_ALL (bool): input, output, axis, then PrepareSimple's input and axis, and two
    scratch arrays: 4 B per input dimension and per axis."""
    x, axis, y = n.inp(0), n.inp(1), n.out(0)
    n.need(x, axis, y)
    _types(n, "an input", (BOOL,), x)
    n.tin(0), n.tout(0), n.tin(1)
    n.tin(0), n.tin(1)
    n.scratch(4 * len(x.shape))
    elems = 1
    for d in axis.shape:
        elems *= d
    n.scratch(4 * elems)


def _add_n(n, cmsis: bool):
    """ADD_N: the first input and the output, then each other input; float32 asks for a
    scratch array of input pointers, int8 keeps its op data (40 B) and asks for the same."""
    n.need(n.inp(0), n.out(0))
    if len(n.ins) < 2:
        raise UnpricedModelError(f"operator {n.v} (ADD_N) has fewer than 2 inputs")
    _types(n, "an input", (FLOAT32, INT8), n.inp(0))
    n.tin(0), n.tout(0)
    for i in range(1, len(n.ins)):
        n.need(n.inp(i))
        n.tin(i)
    if n.inp(0).type == INT8:
        n.persist(40)
    n.scratch(n.abi.word * len(n.ins))


def _log_softmax(n, cmsis: bool):
    """LOG_SOFTMAX: input and output; int8 keeps its op data (28 B at 32 bits, 40 at 64:
    two size_t)."""
    x, y = n.inp(0), n.out(0)
    n.need(x, y)
    _types(n, "an input", (FLOAT32, INT8), x)
    n.tin(0), n.tout(0)
    if x.type == INT8:
        n.persist(28 if n.abi.word == 4 else 40)


def _cumsum(n, cmsis: bool):
    """CUMSUM: input, axis, output; int8 keeps its op data (36 B)."""
    x, axis, y = n.inp(0), n.inp(1), n.out(0)
    n.need(x, axis, y)
    _types(n, "an input", (FLOAT32, INT8), x)
    n.tin(0), n.tin(1), n.tout(0)
    if x.type == INT8:
        n.persist(36)


def _mirror_pad(n, cmsis: bool):
    """MIRROR_PAD: input, paddings, output, then two scratch arrays of 4 B per dimension."""
    x, pads, y = n.inp(0), n.inp(1), n.out(0)
    n.need(x, pads, y)
    n.tin(0), n.tin(1), n.tout(0)
    n.scratch(4 * len(x.shape))
    n.scratch(4 * len(x.shape))


def _fill(n, cmsis: bool):
    dims = n.inp(0)
    n.need(dims, n.inp(1), n.out(0))
    if not dims.const:
        raise UnpricedModelError(f"operator {n.v} (FILL): a non-constant dims tensor, which "
                                 "TFLite Micro rejects")
    n.tin(0), n.tin(1), n.tout(0)


def _const_second(kind_of_input: str):
    def prepare(n, cmsis: bool):
        n.need(n.inp(0), n.inp(1), n.out(0))
        if not n.inp(1).const:
            raise UnpricedModelError(f"operator {n.v} ({n.kind}): a non-constant "
                                     f"{kind_of_input}, which TFLite Micro rejects")
        n.tin(0), n.tin(1), n.tout(0)
    return prepare


def _transpose_conv(n, cmsis: bool):
    """TRANSPOSE_CONV (inputs: output shape, filter, input, bias): output, input and filter,
    two per-channel arrays (4 B per output channel each) in the tail; int8 then asks for
    scratch: the reference kernel 4 B per output element, CMSIS-NN (MVE) its column buffer
    and its reversed-filter buffer (possibly 0 B); quantized, the quantization parameters
    read input, filter, bias and output again."""
    x, w, y = n.inp(2), n.inp(1), n.out(0)
    n.need(x, w, y, n.inp(0))
    if (x.type not in (FLOAT32, INT8, INT16) or
            w.type != (INT8 if x.type == INT16 else x.type) or y.type != x.type or
            len(x.shape) != 4 or len(w.shape) != 4 or len(y.shape) != 4):
        raise UnpricedModelError(f"operator {n.v} (TRANSPOSE_CONV): 4-D float32, int8 or "
                                 "16x8 only")
    channels = w.shape[0]
    n.tout(0), n.tin(2), n.tin(1)
    n.persist(4 * channels), n.persist(4 * channels)
    if x.type == INT16:
        # 16x8 (CMSIS-NN falls back to the reference kernel): an int64 accumulator per
        # output element on both targets; an int16 bias is converted into an int64 copy
        elems = 1
        for d in y.shape:
            elems *= d
        n.scratch(8 * elems)
        n.tin(2), n.tin(1), n.tin(3), n.tout(0)  # CalculateOpData
        bias = n.inp(3)
        if bias is not None and bias.type == INT16:
            n.scratch(8 * max(bias.bytes // 2, 0))
        return
    quant = x.type == INT8
    if quant:
        if cmsis:
            sw, sh = n.opt("strideW", True), n.opt("strideH", True)
            _, ih, iw, ic = x.shape
            fh, fw = w.shape[1], w.shape[2]
            if sw <= 2 and sh <= 2 and ic > 16:  # the reverse convolution
                rhs = ic * fw * fh  # arm_convolve_s8_get_buffer_size_mve
                n.scratch(4 * ((rhs + 15) // 16) * 16)
                n.scratch(ic * fw * fh * channels)
            else:
                n.scratch(((iw - 1) * sw + max(fw, sh)) * y.shape[3] * max(fh, sh) * 4)
                n.scratch(0)
        else:
            elems = 1
            for d in y.shape:
                elems *= d
            n.scratch(4 * elems)
        n.tin(2), n.tin(1), n.tin(3), n.tout(0)  # CalculateOpData


def _shape(n, cmsis: bool):
    n.need(n.inp(0), n.out(0))
    if len(n.ins) != 1 or n.out(0).type != INT32:
        raise UnpricedModelError(f"operator {n.v} (SHAPE): one input and an int32 output only")


def _nothing(n, cmsis: bool):  # no Prepare (or one that reads no tensor)
    n.need(n.inp(0), n.out(0))


_FLOAT = (FLOAT32,)
_NUMERIC = (FLOAT32, INT8, INT16, INT32, INT64)

PREPARE = {
    # unary math (elementwise.cc: SIN, COS, LOG, SQRT, SQUARE, LOGICAL_NOT without Init;
    # ABS, RSQRT with OpDataAbsRsqrt)
    "ABS": _reads(*_UNARY, types=(FLOAT32, INT8, INT16), arity=(1, 1)),
    "RSQRT": _reads(*_UNARY, types=(FLOAT32, INT8), arity=(1, 1)),
    "SIN": _reads(*_UNARY, types=_FLOAT, arity=(1, 1)),
    "COS": _reads(*_UNARY, types=_FLOAT, arity=(1, 1)),
    "LOG": _reads(*_UNARY, types=_FLOAT, arity=(1, 1)),
    "SQRT": _reads(*_UNARY, types=_FLOAT, arity=(1, 1)),
    "SQUARE": _reads(*_UNARY, types=_FLOAT, arity=(1, 1)),
    "LOGICAL_NOT": _reads(*_UNARY, types=(BOOL,), arity=(1, 1)),
    "EXP": _reads(*_UNARY, types=_FLOAT), "CEIL": _reads(*_UNARY, types=_FLOAT),
    "ROUND": _reads(*_UNARY, types=_FLOAT), "NEG": _nothing, "FLOOR": _nothing,
    "ELU": _reads(*_UNARY, types=(FLOAT32, INT8)),
    "ZEROS_LIKE": _reads(*_UNARY, types=(FLOAT32, INT8, INT32, INT64)),
    "CAST": _reads(*_UNARY), "L2_NORMALIZATION": _reads(*_UNARY, types=(FLOAT32, INT8)),
    "LOG_SOFTMAX": _log_softmax,
    # binary
    "MAXIMUM": _nothing, "MINIMUM": _nothing, "LOGICAL_AND": _nothing,
    "LOGICAL_OR": _nothing, "ARG_MAX": _nothing, "ARG_MIN": _nothing,
    "DIV": _reads(*_BINARY, types=(FLOAT32, INT8, INT32)),
    "SQUARED_DIFFERENCE": _reads(*_BINARY, types=(FLOAT32, INT8, INT32)),
    "FLOOR_DIV": _reads(*_BINARY, types=_FLOAT), "FLOOR_MOD": _reads(*_BINARY, types=_FLOAT),
    "PRELU": _reads(*_BINARY, types=(FLOAT32, INT8, INT16)),
    "EQUAL": _reads(("i", 0), ("i", 1)), "NOT_EQUAL": _reads(("i", 0), ("i", 1)),
    "LESS": _reads(("i", 0), ("i", 1)), "LESS_EQUAL": _reads(("i", 0), ("i", 1)),
    "GREATER": _reads(("i", 0), ("i", 1)), "GREATER_EQUAL": _reads(("i", 0), ("i", 1)),
    "SELECT_V2": _reads(("i", 0), ("i", 1), ("i", 2), ("o", 0), arity=(3, 1)),
    "ADD_N": _add_n, "CUMSUM": _cumsum,
    # shape and data movement
    "SHAPE": _shape, "SLICE": _reads(("i", 0), ("i", 1), ("i", 2), ("o", 0), arity=(3, 1)),
    "FILL": _fill, "BROADCAST_TO": _const_second("shape"),
    "RESIZE_BILINEAR": _const_second("size"),
    "DEPTH_TO_SPACE": _dims_copy, "SPACE_TO_DEPTH": _dims_copy,
    "BATCH_TO_SPACE_ND": _reads(*_UNARY, types=(FLOAT32, INT8), arity=(3, 1)),
    "SPACE_TO_BATCH_ND": _reads(*_UNARY, types=(FLOAT32, INT8), arity=(3, 1)),
    "MIRROR_PAD": _mirror_pad, "TRANSPOSE_CONV": _transpose_conv, "L2_POOL_2D": _l2_pool,
    "REVERSE_V2": _reads(*_BINARY, arity=(2, 1)), "GATHER_ND": _gather_nd,
    "EMBEDDING_LOOKUP": _embedding_lookup, "REDUCE_ALL": _reduce_all,
    "BROADCAST_ARGS": _reads(*_BINARY, types=(INT32, INT64), arity=(2, 1)),
}

"""Instructions of one ``Method::execute`` on a Cortex-M55 (MVE), predicted from the program.

The target: ExecuTorch 1.5.1's runtime with the Cortex-M backend's ``cortex_m::`` kernels on
CMSIS-NN's MVE code and the portable kernels of the board's firmware (`memsched.board`:
``../shared/tools/cortex-m55/portable_ops.txt``), as the M55 default export
(``CortexMTargetConfig(cpu=CortexM.M55)``) runs. Instructions, not cycles: QEMU has no
timing model; counts are deterministic.

API:

* `op_instructions` (op_name, args): one instruction of a chain, the runtime's dispatch
  included, or None when no model covers the kernel. ``args`` as the ``.pte`` holds the
  ``.out`` call (tensors as `T`, the output last); `args_of_node` / `node_instructions`
  build them from an FX node of the edge graph (``meta['val']``), so synthetic shapes can
  be priced.
* `program_instructions` (the ``.pte`` bytes, path or parsed program): per method a
  `MethodInstructions`: ``total`` (the predicted ``execute_instructions``), one figure per
  instruction, and ``unknown``: kernels (and delegate, move, free, jump instructions) no model
  covers, named and left out of ``total``.
* The patch search's time model on these costs, `ExecutorchTime`, is in
  `memsched.executorch.patch.time` (`patch.tile.executorch_runtime` attaches it).

Each kernel's cost is a sum of coefficients times features (`FEATURES`) that follow its loop
structure on the M55: CMSIS-NN's GEMM runs 4 lhs rows against each output channel with 16
int8 lanes, its im2col copies one run of channels per tap, the depthwise kernel 4 int32
lanes per channel group per tap, pools 16 channel lanes per tap; the portable copies one
memcpy per contiguous block, padding element by element, ``as_strided_copy`` recursing per
row. How the coefficients were measured: every program of
``benchmarks/executorch/executorch_predicted_instructions.py``'s ``CALIBRATION`` (small int8
networks of the Cortex-M flow, ExecuTorch's default and memsched-patched programs) ran on the board
once per prefix of its chain (the chain cut after instruction ``k``), the difference of two
prefixes being instruction ``k``'s cost (dispatch included); ``--fit`` fits them by
non-negative least squares (2026-11-28). MLPerf Tiny MobileNetV1-0.25 and ResNet-8 were held
out. Not modelled (named as unknown): the kernels outside `FEATURES` (portable elementwise
and float ops, softmax, transpose, batch matmul, transpose conv, ...), delegates, and the
move / free / jump instructions, which no calibration program had.
"""
from __future__ import annotations

from dataclasses import dataclass


# ExecuTorch ScalarType codes -> (name, bytes per element)
SCALAR_TYPES = {0: ("uint8", 1), 1: ("int8", 1), 2: ("int16", 2), 3: ("int32", 4),
                4: ("int64", 8), 5: ("float16", 2), 6: ("float32", 4), 7: ("float64", 8),
                11: ("bool", 1), 15: ("bfloat16", 2)}


@dataclass(frozen=True)
class T:
    """A tensor argument as the cost functions see it: sizes, dtype name, dim order."""
    sizes: tuple
    dtype: str = "int8"
    dim_order: tuple | None = None

    @property
    def numel(self) -> int:
        n = 1
        for s in self.sizes:
            n *= int(s)
        return n

    @property
    def itemsize(self) -> int:
        return {n: b for n, b in SCALAR_TYPES.values()}.get(self.dtype, 4)

    def to_json(self):
        return {"sizes": list(self.sizes), "dtype": self.dtype,
                "dim_order": list(self.dim_order or range(len(self.sizes)))}


def _value(plan, i: int, jsonable=False):
    """EValue ``i`` of ``plan`` as a Python value (list items are value indices)."""
    v = plan.values[i].val
    kind = type(v).__name__
    if kind == "Tensor":
        dt = SCALAR_TYPES.get(v.scalar_type, (f"type{v.scalar_type}", 4))[0]
        t = T(tuple(v.sizes or ()), dt, tuple(v.dim_order or ()))
        return t.to_json() if jsonable else t
    if kind in ("Int", "Bool", "Double"):
        return next(iter(getattr(v, f) for f in ("int_val", "bool_val", "double_val")
                         if hasattr(v, f)))
    if kind == "IntList":
        return [_value(plan, j) for j in (v.items or ())]
    if kind in ("DoubleList", "BoolList"):
        return list(v.items or ())
    if kind in ("TensorList", "OptionalTensorList"):
        return [None if j < 0 else _value(plan, j, jsonable) for j in (v.items or ())]
    if kind == "String":
        return v.string_val
    return None


def _instr_name(plan, ins) -> str:
    a = ins.instr_args
    if type(a).__name__ == "KernelCall":
        op = plan.operators[a.op_index]
        return f"{op.name}.{op.overload}" if op.overload else op.name
    return type(a).__name__


def decode_args(plan, ins, jsonable=False) -> list:
    """The arguments of kernel call ``ins`` of execution plan ``plan`` as `op_instructions`
    takes them (``jsonable``: tensors as dicts, for the calibration files)."""
    a = ins.instr_args
    if type(a).__name__ not in ("KernelCall", "DelegateCall"):
        return []
    return [_value(plan, j, jsonable) for j in (a.args or ())]


# ---------------------------------------------------------------------------- features
# Each kernel's cost is a sum of coefficient x feature; the features follow the loop
# structure of the kernel on the M55 (CMSIS-NN's MVE paths, the portable kernels' C loops).

def _ceil(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= int(x)
    return n


def _pair(v, default=(1, 1)) -> tuple:
    if v is None:
        return default
    if isinstance(v, int):
        return (v, v)
    v = list(v)
    return (int(v[0]), int(v[-1])) if v else default


def _nhwc(t: T) -> tuple:
    """(N, H, W, C) of a 4-D NCHW tensor whatever its dim order (the kernels read NHWC)."""
    n, c, h, w = (list(t.sizes) + [1, 1, 1, 1])[:4]
    return n, h, w, c


def _gemm(rows: int, cout: int, k: int) -> dict:
    """arm_nn_mat_mult_nt_t_s8 on MVE: 4 lhs rows at a time against each output channel, the
    columns 16 lanes at a time; the rows left over one at a time."""
    return {"r4": rows // 4 * cout, "mac": rows // 4 * cout * _ceil(k, 16),
            "r1": rows % 4 * cout, "mac1": rows % 4 * cout * _ceil(k, 16)}


def _conv(args) -> tuple[str, dict]:
    x, wt, out = args[0], args[1], args[-1]
    stride, pad = _pair(args[3]), _pair(args[4], (0, 0))
    n, _, _, cin = _nhwc(x)
    cout, kh, kw = wt.sizes[0], wt.sizes[1], wt.sizes[2]
    _, ho, wo, _ = _nhwc(out)
    pix = n * ho * wo
    if kh == kw == 1 and pad == (0, 0) and stride == (1, 1):
        # arm_convolve_1x1_s8_fast: one GEMM over all pixels, 4 lhs rows at a time, the
        # columns (input channels) 16 lanes at a time
        return "conv1x1", {"c": 1, **_gemm(pix, cout, cin), "pix": pix}
    k = kh * kw * cin
    # arm_convolve_s8 (and 1x1 strided): im2col per output pixel (one copy of ``cin`` bytes
    # per tap), then the GEMM per 4 columns: per output channel, the row 16 lanes at a time
    return "conv", {"c": 1, "tap": pix * kh * kw, "tapv": pix * kh * kw * _ceil(cin, 16),
                    **_gemm(pix, cout, k), "pix": pix, "row": n * ho}


def _depthwise(args) -> tuple[str, dict]:
    x, wt, out = args[0], args[1], args[-1]
    n, _, _, cin = _nhwc(x)
    kh, kw, c = wt.sizes[1], wt.sizes[2], wt.sizes[3]
    if cin == 1 and c > 1:
        # CMSIS-NN on MVE (built with GCC: threshold 1) runs it as a convolution of 1 input
        # channel
        return "dw_as_conv", _conv([args[0], T((c, kh, kw, 1), wt.dtype), None, args[3],
                                    args[4], out])[1]
    if cin != c:
        raise ValueError("a depth multiplier > 1: arm_depthwise_conv_s8, not modelled")
    _, ho, wo, _ = _nhwc(out)
    pix = n * ho * wo
    # arm_depthwise_conv_s8_opt on MVE: the channels in blocks of 124 (CH_IN_BLOCK_MVE); per
    # block and output pixel one copy of the block's channels per tap, then per 4 pixels the
    # channels 4 int32 lanes at a time over the taps (the pixels left over one at a time)
    kk = kh * kw
    f = {"c": 1, "blocks": 0, "pix": 0, "tap": 0, "tapv": 0, "dw": 0, "ch4": 0, "dw1": 0,
         "ch1": 0}
    for lo in range(0, c, 124):
        act = min(124, c - lo)
        g = _ceil(act, 4)
        f["blocks"] += 1
        f["pix"] += pix
        f["tap"] += pix * kk
        f["tapv"] += pix * kk * _ceil(act, 16)
        f["dw"] += pix // 4 * g * kk
        f["ch4"] += pix // 4 * g
        f["dw1"] += pix % 4 * g * kk
        f["ch1"] += pix % 4 * g
    return "depthwise", f


def _pool(args) -> tuple[str, dict]:
    out = args[-1]
    kh, kw = _pair(args[1])
    n, _, _, c = _nhwc(out)
    _, ho, wo, _ = _nhwc(out)
    pix = n * ho * wo
    # CMSIS-NN's MVE pools: per output pixel, the channels in blocks of 16 lanes (the last one
    # tail-predicated), each block summed over the window's taps
    blocks = pix * _ceil(c, 16)
    return "pool", {"c": 1, "tapv": blocks * kh * kw, "blk": blocks, "pix": pix}


def _linear(args) -> tuple[str, dict]:
    x, wt = args[0], args[1]
    rows = _prod(x.sizes[:-1])
    nout, nin = wt.sizes[0], wt.sizes[1]
    # arm_nn_vec_mat_mult_t_s8: output rows 4 at a time, the input 16 lanes at a time
    return "linear", {"c": 1, "r4": rows * (nout // 4), "mac": rows * (nout // 4) * _ceil(nin, 16),
                      "r1": rows * (nout % 4), "mac1": rows * (nout % 4) * _ceil(nin, 16)}


def _eltwise(args) -> tuple[str, dict]:
    out = args[-1]
    # the MVE loops: 4 int32 lanes per iteration
    return "eltwise", {"c": 1, "v4": _ceil(out.numel, 4)}


def _mul(args) -> tuple[str, dict]:
    out = args[-1]
    ts = [a for a in args[:-1] if isinstance(a, T)]
    if all(t.numel == out.numel for t in ts[:2]):
        return "mul", {"c": 1, "v4": _ceil(out.numel, 4)}
    # a feature map times a per-channel vector (squeeze-and-excitation): the kernel's
    # broadcasting path, one run of channels per spatial position
    n, h, w, c = _nhwc(out)
    return "mul_broadcast", {"c": 1, "v4": _ceil(out.numel, 4), "pos": n * h * w}


def _minmax(args) -> tuple[str, dict]:
    # cortex_m::minimum / maximum: 16 int8 lanes an MVE iteration
    return "minmax", {"c": 1, "v16": _ceil(args[-1].numel, 16)}


def _quantize(args) -> tuple[str, dict]:
    n = args[-1].numel  # the kernel's MVE loop: 16 values an iteration, then one by one
    return "quantize", {"c": 1, "v16": n // 16, "t": n % 16}


def _cm_channels_last(t: T) -> bool:
    """The Cortex-M kernels' ``is_channels_last_tensor``: 4-D, and dim 1 or dims 2 and 3 of
    size 1 (ambiguous) or the dim order (0, 2, 3, 1)."""
    s = list(t.sizes)
    if len(s) != 4:
        return False
    if s[1] == 1 or (s[2] == 1 and s[3] == 1) or t.dim_order is None:
        return True
    return tuple(t.dim_order) == (0, 2, 3, 1)


def _cm_pad(args) -> tuple[str, dict]:
    out = args[-1]
    # the kernel's (N, H, W, C): the logical sizes permuted for a channels-last input, else
    # the logical sizes as they are (the patch rewrite's NHWC form)
    n, h, w, c = _nhwc(out) if _cm_channels_last(args[0]) else \
        tuple((list(out.sizes) + [1, 1, 1, 1])[:4])
    # arm_pad_s8: per output row a memset / memcpy pair, 16 bytes an MVE iteration
    return "cm_pad", {"c": 1, "rows": n * h, "vec": n * h * _ceil(w * c, 16)}


def _dequantize(args) -> tuple[str, dict]:
    n = args[-1].numel  # as quantize: 16 values an MVE iteration, then one by one
    return "dequantize", {"c": 1, "v16": n // 16, "t": n % 16}


def _strides(sizes) -> list:
    s, acc = [], 1
    for v in reversed(sizes):
        s.append(acc)
        acc *= int(v)
    return s[::-1]


def _pad_nd(args) -> tuple[str, dict]:
    x, pads, out = args[0], list(args[1]), args[-1]
    nd = len(x.sizes)
    padded = [d for d in range(nd) if nd - 1 - d < len(pads) // 2
              and (pads[2 * (nd - 1 - d)] or pads[2 * (nd - 1 - d) + 1])]
    last = max(padded) if padded else 0
    # portable constant_pad_nd: recursion down to the last padded dim, one memcpy per block
    # below it, and the padding written element by element
    recs = fills = 0
    for d in range(last + 1):
        reach = _prod(x.sizes[:d])
        recs += reach
        i = nd - 1 - d
        if i < len(pads) // 2:
            fills += reach * (int(pads[2 * i]) + int(pads[2 * i + 1]))
    return "constant_pad_nd", {"c": 1, "blocks": _prod(x.sizes[:last]), "recs": recs,
                               "fills": fills, "padv": (out.numel - x.numel) * x.itemsize,
                               "bytes": x.numel * x.itemsize}


def _slice(args) -> tuple[str, dict]:
    x, dim, out = args[0], int(args[1]), args[-1]
    dim %= max(1, len(x.sizes))
    # portable slice_copy: one memcpy per index of the dims before ``dim``
    return "slice_copy", {"c": 1, "blocks": _prod(x.sizes[:dim]),
                          "bytes": out.numel * out.itemsize}


def _cat(args) -> tuple[str, dict]:
    ts, dim, out = [t for t in args[0] if t is not None], int(args[1]), args[-1]
    dim %= max(1, len(out.sizes))
    # portable cat: per input, one memcpy per index of the dims before ``dim``
    return "cat", {"c": 1, "inputs": len(ts), "blocks": _prod(out.sizes[:dim]) * len(ts),
                   "bytes": out.numel * out.itemsize}


def _as_strided(args) -> tuple[str, dict]:
    out = args[-1]
    # portable as_strided_copy: the innermost dim copied element by element, the others
    # recursed per element
    last = int(out.sizes[-1]) if out.sizes else 1
    rows = out.numel // max(1, last)
    if out.itemsize == 1:  # the compiler's vectorized byte loop: 32 bytes an iteration
        return "strided1", {"c": 1, "rows": rows, "vec": rows * _ceil(last, 32)}
    return "strided", {"c": 1, "rows": rows, "n": out.numel}


def _elementwise_copy(args) -> tuple[str, dict]:
    x, out = args[0], args[-1]
    if isinstance(x, T) and tuple(x.dim_order or ()) == tuple(out.dim_order or ()):
        # the same memory order in and out: one memcpy
        return "copy", {"c": 1, "bytes": out.numel * out.itemsize}
    return "permuting_copy", {"c": 1, "n": out.numel}  # element by element: not calibrated


def _view(args) -> tuple[str, dict]:
    return "view", {"c": 1}


def _named(model, fn):
    def f(args):
        return model, fn(args)[1]
    return f


# models priced with another's coefficients (too few calibration calls of their own):
# CMSIS-NN runs a depthwise convolution of 1 input channel as a convolution
ALIASES = {"dw_as_conv": "conv"}

# operator (namespace::name, no overload) -> its features
FEATURES = {
    "cortex_m::quantized_conv2d": _conv,
    "cortex_m::quantized_depthwise_conv2d": _depthwise,
    "cortex_m::quantized_avg_pool2d": _named("avgpool", _pool),
    "cortex_m::quantized_max_pool2d": _named("maxpool", _pool),
    "cortex_m::quantized_linear": _linear,
    "cortex_m::quantized_add": _named("add", _eltwise),
    "cortex_m::quantized_mul": _mul,
    "cortex_m::minimum": _minmax,
    "cortex_m::quantize_per_tensor": _quantize,
    "cortex_m::dequantize_per_tensor": _dequantize,
    "aten::constant_pad_nd": _pad_nd,
    "cortex_m::pad": _cm_pad,
    "aten::slice_copy": _slice,
    "aten::cat": _cat,
    "aten::as_strided_copy": _as_strided,
    "executorch_prim::et_view": _view,
    "dim_order_ops::_clone_dim_order": _elementwise_copy,
    "dim_order_ops::_to_dim_order_copy": _elementwise_copy,
    "aten::permute_copy": _elementwise_copy,
    "aten::clone": _elementwise_copy,
}

# Control instructions of a chain the calibration programs never contained: named as unknown
# when a program has them (never guessed).
CONTROL = {"MoveCall": "move", "FreeCall": "free", "JumpFalseCall": "jump_false"}


def op_key(op_name) -> str:
    """``namespace::name`` of an operator given as a .pte operator name (``aten::cat``, with
    or without its overload), an FX target (edge or aten overload) or a string like
    ``aten.cat.default``."""
    schema = getattr(op_name, "_schema", None)
    if schema is None:
        op = getattr(op_name, "_op", None)  # an edge dialect EdgeOpOverload
        schema = getattr(op, "_schema", None)
    if schema is not None:
        return schema.name
    s = str(op_name)
    if "::" in s:
        return s.split(".")[0]
    parts = s.split(".")
    return f"{parts[0]}::{parts[1]}" if len(parts) >= 2 else s


def op_features(op_name, args) -> tuple[str, dict] | None:
    """(cost model name, features) of one kernel call, or None when no model covers it."""
    fn = FEATURES.get(op_key(op_name))
    if fn is None:
        return None
    try:
        model, feats = fn(list(args))
    except (IndexError, TypeError, AttributeError, ValueError, ZeroDivisionError):
        return None  # an argument list the model does not understand: unknown, not guessed
    return (model, feats) if ALIASES.get(model, model) in COEFFICIENTS else None


def op_instructions(op_name, args) -> int | None:
    """Predicted M55 instructions of one instruction of a chain calling ``op_name`` (the
    runtime's dispatch included), or None when no cost model covers the kernel.

    ``args``: the call's arguments in the order of the operator's ``.out`` schema as the
    ``.pte`` holds them, the output tensor last: tensors as `T` (sizes in logical order,
    dtype name, dim order), ints, floats, bools, int lists, tensor lists (`args_of_node`
    builds them from an FX node of the edge graph)."""
    f = op_features(op_name, args)
    if f is None:
        return None
    model, feats = f
    coef = COEFFICIENTS[ALIASES.get(model, model)]
    return int(round(sum(coef.get(k, 0.0) * v for k, v in feats.items())))


def _t_of(v):
    """`T` of a fake tensor (``meta['val']``), else ``v`` itself (lists recursively)."""
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        dt = str(v.dtype).replace("torch.", "")
        try:
            order = tuple(v.dim_order())
        except (AttributeError, RuntimeError, ValueError):
            order = tuple(range(v.dim()))
        return T(tuple(int(s) for s in v.shape), dt, order)
    if isinstance(v, (list, tuple)):
        return [_t_of(x) for x in v]
    return v


def args_of_node(node) -> list:
    """The `op_instructions` arguments of an FX call node of the edge graph: its arguments
    (tensors from their ``meta['val']``, keyword arguments after the positional ones), then
    its result as the output tensor."""
    def val(a):
        if hasattr(a, "meta"):
            return _t_of(a.meta.get("val"))
        if isinstance(a, (list, tuple)):
            return [val(x) for x in a]
        return a
    out = val(node)
    if isinstance(out, list):
        out = out[0] if out else None
    return [val(a) for a in node.args] + [val(a) for a in node.kwargs.values()] + [out]


def node_instructions(node) -> int | None:
    """`op_instructions` of an FX call node of the edge graph (None: no model)."""
    return op_instructions(node.target, args_of_node(node))


@dataclass
class MethodInstructions:
    """One method's predicted ``Method::execute`` instructions: ``total`` (the runtime's fixed
    cost per execute plus every instruction of its chains), ``per_instruction`` (one row per
    instruction: ``index``, ``name``, ``instructions`` or None), ``unknown`` (kernel or
    instruction name -> how many calls no model covers; their instructions are not in
    ``total``)."""
    total: int
    per_instruction: list
    unknown: dict

    def to_dict(self) -> dict:
        return {"total": self.total, "per_instruction": self.per_instruction,
                "unknown": self.unknown}


def program_instructions(program) -> dict[str, MethodInstructions]:
    """Per method of ``program`` (a ``.pte``'s bytes, a path, or a parsed
    `format.pte.PteFile` / ``Program``), the predicted instructions of one
    ``Method::execute`` on the Cortex-M55 (`MethodInstructions`). Delegate calls are named
    unknown (their backends' kernels are not modelled)."""
    from ..format.pte import PteFile, read_pte

    if isinstance(program, (bytes, bytearray, memoryview)):
        program = read_pte(bytes(program))
    elif isinstance(program, (str, bytes)) or hasattr(program, "__fspath__"):
        with open(program, "rb") as f:
            program = read_pte(f.read(), str(program))
    prog = program.program if isinstance(program, PteFile) else program
    out = {}
    for plan in prog.execution_plan or ():
        rows, unknown, total = [], {}, EXECUTE_INSTRUCTIONS
        k = 0
        for chain in plan.chains or ():
            for ins in chain.instructions or ():
                kind = type(ins.instr_args).__name__
                name = _instr_name(plan, ins)
                n = None
                if kind == "KernelCall":
                    n = op_instructions(name, decode_args(plan, ins))
                elif kind == "DelegateCall":
                    d = plan.delegates[ins.instr_args.delegate_index]
                    name = f"delegate:{d.id}"
                else:
                    name = CONTROL.get(kind, kind)
                if n is None:
                    unknown[name] = unknown.get(name, 0) + 1
                else:
                    total += n
                rows.append({"index": k, "name": name, "instructions": n})
                k += 1
        out[plan.name] = MethodInstructions(total, rows, unknown)
    return out

TARGET = "Cortex-M55 (CMSIS-NN MVE, ExecuTorch 1.5.1 portable kernels)"

# `Method::execute` with an empty chain (the runner's measurement of 0 instructions)
EXECUTE_INSTRUCTIONS = 95

# ---------------------------------------------------------------------------- coefficients
# BEGIN COEFFICIENTS (benchmarks/executorch/executorch_predicted_instructions.py --calibrate)
COEFFICIENTS = {'add': {'c': 505.0, 'v4': 55.0},
 'avgpool': {'blk': 212.0025, 'c': 921.0147, 'pix': 41.6723, 'tapv': 22.207},
 'cat': {'blocks': 73.0139, 'bytes': 0.55, 'c': 626.5143, 'inputs': 360.9404},
 'cm_pad': {'c': 485.4601, 'rows': 28.117, 'vec': 3.0914},
 'constant_pad_nd': {'blocks': 141.0426,
                     'bytes': 0.5535,
                     'c': 1186.6956,
                     'fills': 52.7893,
                     'padv': 0.4175},
 'conv': {'c': 869.0712,
          'mac': 10.9894,
          'mac1': 5.0475,
          'pix': 108.97,
          'r1': 29.3547,
          'r4': 56.0308,
          'row': 39.1582,
          'tap': 18.1351,
          'tapv': 2.9279},
 'conv1x1': {'c': 784.7235,
             'mac': 11.01,
             'mac1': 4.9956,
             'pix': 10.6206,
             'r1': 26.967,
             'r4': 55.9986},
 'copy': {'bytes': 0.5752, 'c': 469.364},
 'depthwise': {'c': 1284.2732,
               'ch4': 116.3005,
               'dw': 14.8415,
               'dw1': 11.5469,
               'pix': 80.1867,
               'tap': 17.6258,
               'tapv': 2.8438},
 'dequantize': {'c': 289.6047, 't': 7.0902, 'v16': 26.2825},
 'linear': {'c': 493.6736, 'mac': 30.0014, 'mac1': 18.0459, 'r1': 24.4324, 'r4': 49.8778},
 'maxpool': {'c': 1257.0105, 'pix': 112.8912, 'tapv': 15.8883},
 'minmax': {'c': 462.612, 'v16': 15.0298},
 'mul': {'c': 363.2003, 'v4': 27.0081},
 'mul_broadcast': {'c': 243.0, 'pos': 64.0, 'v4': 27.0},
 'quantize': {'c': 327.553, 't': 14.2453, 'v16': 44.9993},
 'slice_copy': {'blocks': 43.5789, 'bytes': 0.4986, 'c': 753.5063},
 'strided': {'c': 1079.4903, 'n': 2.2563, 'rows': 84.4392},
 'strided1': {'c': 1160.3218, 'rows': 64.3468, 'vec': 18.6371},
 'view': {'c': 452.0}}
# END COEFFICIENTS

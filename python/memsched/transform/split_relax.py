"""The split-across-devices problem (`memsched.split.problem`) read from a Relax module.

Every Relax call binding of the (single) dataflow block is one operator, in the execution order
of MemoryAwareSchedule's scheduler (`memsched.schedule(graph, "auto")` on the block's `OpGraph`);
tuples, ``TupleGetItem`` and ``y = x`` are resolved to the tensor they name and are no
operators. An operator this module cannot split (a reshape, a strided slice, a concat on another
axis, anything unknown) is ``whole``: it runs on one device, which the encoding chooses.
"""
from __future__ import annotations

from typing import Sequence

from ..split.problem import InputReq, SplitError, SplitOp, SplitProblem, TensorInfo

ELEMENTWISE = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
               "relax.minimum", "relax.power", "relax.nn.relu", "relax.nn.relu6", "relax.nn.gelu",
               "relax.nn.silu", "relax.sigmoid", "relax.tanh", "relax.exp", "relax.negative",
               "relax.clip", "relax.sqrt", "relax.rsqrt", "relax.abs", "relax.nn.leakyrelu",
               "relax.nn.gelu_tanh", "relax.square"}


def _ints(xs) -> list[int]:
    return [int(x) for x in xs]


def _shape(ty) -> tuple[tuple[int, ...], str] | None:
    """(static shape, dtype) of a Relax tensor type, None if not a static tensor."""
    from tvm import relax
    from tvm.ir.prim.expr import IntImm

    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    dims = []
    for d in ty.shape.values:
        if not isinstance(d, IntImm):
            return None
        dims.append(int(d.value))
    return tuple(dims), str(ty.dtype)


def _geometry(shape: Sequence[int]) -> tuple[int, int, int]:
    """(channels, rows, other cells) of a shape: axis 1, axis 2 of rank >= 3, the rest."""
    shape = list(shape)
    c = shape[1] if len(shape) >= 2 else 1
    h = shape[2] if len(shape) >= 3 else 1
    rest = 1
    for k, d in enumerate(shape):
        if k not in (1, 2) or (k == 2 and len(shape) < 3):
            rest *= d
    if len(shape) == 1:
        rest = shape[0]
        c = 1
    return c, h, rest


def _itemsize(dtype: str) -> int:
    import tvm

    dt = tvm.DataType(dtype)
    return max(1, (dt.bits * dt.lanes + 7) // 8)


def relax_block(mod, func_name: str = "main"):
    """(function, its single dataflow block) or `SplitError` naming why it cannot be split."""
    import tvm
    from tvm import relax

    from ..importers.relax import dataflow_blocks, has_control_flow

    func = mod[func_name] if isinstance(mod, tvm.IRModule) else mod
    if not isinstance(func, relax.Function):
        raise SplitError(f"{func_name!r} is not a Relax function")
    if has_control_flow(func):
        raise SplitError(f"function {func_name!r} has control flow; only a single dataflow "
                         "block can be split across devices")
    blocks = dataflow_blocks(func)
    body = func.body
    if len(blocks) != 1 or len(body.blocks) != 1:
        raise SplitError(f"function {func_name!r} must be one dataflow block (has "
                         f"{len(body.blocks)} blocks, {len(blocks)} dataflow)")
    return func, blocks[0][1]


class _Resolver:
    """Resolves a Relax expression of the block to what it names: a tensor id, a constant, or
    a (nested) list of those for tuples. Identity bindings (``y = x``, tuples, TupleGetItem,
    match_cast) are no operators; every call binding is."""

    def __init__(self):
        self.of: dict = {}  # var -> tensor id | ("const", expr) | list

    def __call__(self, expr):
        import tvm
        from tvm import relax

        if isinstance(expr, tvm.ir.expr.Constant):
            return ("const", expr)
        if isinstance(expr, tvm.ir.Var):
            if expr not in self.of:
                raise SplitError(f"{expr.name!r} is used but not defined in the block")
            return self.of[expr]
        if isinstance(expr, relax.Tuple):
            return [self(f) for f in expr.fields]
        return ("other", expr)


def from_relax(mod, order: Sequence[int] | None = None, func_name: str = "main",
               time_limit: float = 10.0) -> SplitProblem:
    """The `SplitProblem` of a Relax function (one dataflow block, static shapes).

    ``order``: op ids of the block's `OpGraph` (`memsched.importers.relax.block_graph`) in
    execution order; default: MemoryAwareSchedule's scheduler
    (``memsched.schedule(graph, "auto", time_limit=time_limit)``).
    """
    import tvm
    from tvm import relax

    from ..importers.relax import UnsupportedModelError, block_graph

    func, block = relax_block(mod, func_name)
    try:
        graph = block_graph(block, name=func_name)
    except UnsupportedModelError as e:
        raise SplitError(str(e)) from None
    if order is None:
        from ..schedulers import schedule

        order = schedule(graph, "auto", time_limit=time_limit).order
    graph.check_order(order)
    bindings = list(block.bindings)
    binding_order = [graph.ops[v].source for v in order]

    res = _Resolver()
    tensors: list[TensorInfo] = []
    for p in func.params:
        sh = _shape(p.ty)
        if sh is None:
            raise SplitError(f"parameter {p.name!r} is not a tensor of static shape")
        c, h, rest = _geometry(sh[0])
        res.of[p] = len(tensors)
        tensors.append(TensorInfo(p.name, c, h, rest * _itemsize(sh[1]), shape=sh[0],
                                  dtype=sh[1]))
    # resolve identity bindings in block order (they may appear anywhere; they cost nothing)
    ops: list[SplitOp] = []

    def define(bi):
        b = bindings[bi]
        var, value = b.var, b.value
        if isinstance(b, relax.MatchCast) or isinstance(value, tvm.ir.Var):
            res.of[var] = res(value)
            return
        if isinstance(value, relax.Tuple):
            res.of[var] = res(value)
            return
        if isinstance(value, relax.TupleGetItem):
            tup = res(value.tuple_value)
            if not isinstance(tup, list) or value.index >= len(tup):
                raise SplitError(f"binding {var.name!r}: cannot resolve tuple item")
            res.of[var] = tup[value.index]
            return
        if not isinstance(value, tvm.ir.Call):
            raise SplitError(f"binding {var.name!r}: unsupported value {type(value).__name__}")
        ops.append(_make_op(bi, var, value, res, tensors))

    # identity bindings must be defined before use; walk the execution order and define
    # every binding when it is reached (identity bindings are in the order too)
    for bi in binding_order:
        define(bi)
    if len(binding_order) != len(bindings):
        raise SplitError("order does not cover every binding")
    out = res(func.body.body)
    outs = _flat_tensors(out)
    if not outs:
        raise SplitError("the function returns no activation tensor")
    prob = SplitProblem(ops, tensors, name=func_name, outputs=outs)
    prob.return_struct = out  # nested tensor ids of the return value (rewrite rebuilds it)
    return prob


def _flat_tensors(s) -> list[int]:
    if isinstance(s, list):
        return [t for x in s for t in _flat_tensors(x)]
    if isinstance(s, int):
        return [s]
    raise SplitError("the function returns a constant or an unsupported value")


def _const_bytes(expr) -> int:
    sh = _shape(expr.ty)
    if sh is None:
        return 0
    n = 1
    for d in sh[0]:
        n *= d
    return n * _itemsize(sh[1])


def _make_op(bi, var, value, res, tensors) -> SplitOp:
    """Classify one call binding and record its output tensor and input regions."""
    import tvm
    from tvm import relax

    sh = _shape(var.ty)
    kind = value.op.name if isinstance(value.op, tvm.ir.Op) else str(getattr(value.op, "name_hint",
                                                                            value.op))
    tuple_out = None
    if sh is None and isinstance(var.ty, tvm.ir.TupleType) and kind == "relax.nn.batch_norm":
        sh = _shape(var.ty.fields[0])
        tuple_out = len(var.ty.fields)
    if sh is None:
        raise SplitError(f"binding {var.name!r} ({kind}): result is not one tensor of static "
                         "shape; cannot split this model")
    shape, dtype = sh
    c, h, rest = _geometry(shape)
    tid = len(tensors)
    tensors.append(TensorInfo(var.name, c, h, rest * _itemsize(dtype), shape=shape, dtype=dtype))
    if tuple_out:
        # batch_norm's (output, mean, var): the op's tensor is field 0; the statistics fields
        # are not activations a consumer of an inference graph reads
        res.of[var] = [tid] + [("stat", var, k) for k in range(1, tuple_out)]
    else:
        res.of[var] = tid
    args = [res(a) for a in value.args]
    act = [(k, a) for k, a in enumerate(args) if isinstance(a, int)]
    consts = [a[1] for a in args if isinstance(a, tuple) and a[0] == "const"]
    for a, r in zip(value.args, args):
        if isinstance(r, list) and not isinstance(a, relax.Tuple) and \
                not all(isinstance(x, int) for x in r):
            raise SplitError(f"binding {var.name!r} ({kind}) reads a tuple variable that holds "
                             "more than tensors; cannot split this model")
    tuple_of_tensors = any(isinstance(a, list) and _flat_tensors_ok(a) for a in args)
    if any(isinstance(a, tuple) and a[0] == "stat" for a in args):
        raise SplitError(f"binding {var.name!r} reads batch-norm statistics; cannot split it")
    wbytes = sum(_const_bytes(k) for k in consts)
    out_cells = c * h * rest
    op = SplitOp(var.name, kind, "whole", tid, [InputReq(t) for _, t in act], {},
                 weight_bytes=wbytes, flops=float(out_cells), source=bi)
    rank = len(shape)
    attrs = value.attrs

    def shp(t):
        return tensors[t].shape

    if tuple_of_tensors and kind != "relax.concat":
        pass  # reads a tuple of activations (other than concat): whole
    elif kind == "relax.nn.conv2d" and len(act) == 1 and len(consts) == 1 and act[0][0] == 0 \
            and attrs.data_layout == "NCHW" and attrs.kernel_layout == "OIHW" \
            and attrs.out_layout == "NCHW" and rank == 4:
        w = _shape(consts[0].ty)[0]
        groups = int(attrs.groups)
        kh, dil = w[2], int(attrs.dilation[0])
        ext = (kh - 1) * dil + 1
        cin = shp(act[0][1])[1]
        r = InputReq(act[0][1], cmode="full" if groups == 1 else "group", rmode="window",
                     extent=ext, stride=int(attrs.strides[0]), pad=int(attrs.padding[0]),
                     cin_group=cin // groups, cout_group=c // groups)
        op.cls, op.inputs = "conv", [r]
        op.dims = {"cout": c, "fmh": h}
        op.weight_cout = wbytes
        op.flops = 2.0 * out_cells * (cin // groups) * w[2] * w[3]
    elif kind in ("relax.nn.max_pool2d", "relax.nn.avg_pool2d") and rank == 4 \
            and attrs.layout == "NCHW" and attrs.out_layout == "NCHW":
        ph = int(attrs.pool_size[0])
        ext = (ph - 1) * int(attrs.dilation[0]) + 1
        r = InputReq(act[0][1], cmode="same", rmode="window", extent=ext,
                     stride=int(attrs.strides[0]), pad=int(attrs.padding[0]))
        op.cls, op.inputs = "pool", [r]
        op.dims = {"cout": c} if bool(attrs.ceil_mode) else {"cout": c, "fmh": h}
        op.flops = float(out_cells * ph * int(attrs.pool_size[1]))
    elif kind == "relax.nn.batch_norm" and rank == 4 and int(attrs.axis) in (1, -3) \
            and len(act) == 1 and act[0][0] == 0:
        op.cls, op.inputs = "bn", [InputReq(act[0][1], cmode="same", rmode="same")]
        op.dims = {"cout": c, "fmh": h}
        op.weight_cout = wbytes
        op.flops = 2.0 * out_cells
    elif kind in ELEMENTWISE and rank in (2, 4) and _broadcast_ok(value, shape, tensors, res):
        reqs = []
        for _, t in act:
            s = shp(t)
            s = (1,) * (rank - len(s)) + tuple(s)
            reqs.append(InputReq(t, cmode="same" if s[1] in (c, 1) else "full",
                                 rmode="same" if rank == 4 and s[2] in (h, 1) else "full"))
        op.cls, op.inputs = "eltwise", reqs
        op.dims = {"cout": c, "fmh": h} if rank == 4 else {"cout": c}
        op.weight_cout = sum(_const_bytes(k) for k in consts
                             if _aligned(_shape(k.ty)[0], rank)[1] == c and c > 1)
    elif kind == "relax.concat" and len(value.args) == 1 and isinstance(args[0], list) \
            and all(isinstance(t, int) for t in args[0]) and rank == 4 \
            and int(attrs.axis) in (1, -3):
        reqs, off = [], 0
        for t in args[0]:
            reqs.append(InputReq(t, cmode="offset", rmode="same", offset=off))
            off += shp(t)[1]
        op.cls, op.inputs = "concat", reqs
        op.dims = {"cout": c, "fmh": h}
    elif kind == "relax.mean" and len(act) == 1 and len(shp(act[0][1])) == 4 \
            and attrs.axis is not None and sorted(int(a) % 4 for a in attrs.axis) == [2, 3]:
        op.cls = "mean"
        op.inputs = [InputReq(act[0][1], cmode="same", rmode="full")]
        op.dims = {"cout": c}
        op.flops = float(tensors[act[0][1]].nbytes // 4)
    elif kind == "relax.matmul" and len(act) == 1 and act[0][0] == 0 and len(consts) == 1 \
            and rank == 2 and len(_shape(consts[0].ty)[0]) == 2 and shape[0] == 1:
        k_in = _shape(consts[0].ty)[0][0]
        op.cls, op.inputs = "dense", [InputReq(act[0][1])]
        op.dims = {"cout": c}
        op.weight_cout = wbytes
        op.flops = 2.0 * k_in * c
    # anything else: whole (runs on one device with its whole inputs)
    if op.cls == "whole":
        op.inputs = [InputReq(t) for t in dict.fromkeys(_flat_tensors_ok(args))]
    by_pos = list(op.inputs)  # concat: one InputReq per tuple field, in order
    op.inputs = list(dict.fromkeys(op.inputs))  # add(x, x) reads one region of x
    index = {r: k for k, r in enumerate(op.inputs)}

    def arg_req(r, pos=None):
        if not isinstance(r, int):
            return None
        if op.cls == "concat" and pos is not None:
            return index[by_pos[pos]]
        return next(k for k, q in enumerate(op.inputs) if q.tensor == r)

    for r in args:
        if isinstance(r, list):
            op.arg_reqs.append([arg_req(x, p) for p, x in enumerate(r)])
        else:
            op.arg_reqs.append(arg_req(r))
    return op


def _flat_tensors_ok(args) -> list[int]:
    out = []
    for a in args:
        if isinstance(a, int):
            out.append(a)
        elif isinstance(a, list):
            out += _flat_tensors_ok(a)
    return out


def _aligned(shape, rank):
    shape = tuple(shape)
    return (1,) * (rank - len(shape)) + shape


def _broadcast_ok(value, out_shape, tensors, res) -> bool:
    """Element-wise op whose operands broadcast to its output without moving the batch/width
    axes in a way a channel or row slice cannot follow (operands of rank <= output rank)."""
    rank = len(out_shape)
    for a in value.args:
        r = res(a)
        if isinstance(r, int):
            s = tensors[r].shape
        elif isinstance(r, tuple) and r[0] == "const":
            sh = _shape(r[1].ty)
            if sh is None:
                return False
            s = sh[0]
        else:
            return False
        if len(s) > rank:
            return False
        s = _aligned(s, rank)
        if any(d not in (1, o) for d, o in zip(s, out_shape)):
            return False
    return True

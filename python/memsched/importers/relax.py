"""Relax importer: a dataflow block of a Relax function -> `OpGraph`.

Each binding of the block becomes one op, ``Op.source`` = its index in the block, so a schedule
is applied by reordering the bindings (`reorder_block`). What the model sees:

* a call (Relax op, ``call_tir`` / ``call_dps_packed`` after legalization, a call to another
  function) creates one tensor per tensor field of its result type;
* ``TupleGetItem``, tuple construction, ``y = x``, ``match_cast`` and reshape-like views
  (``reshape``, ``flatten``, ``squeeze``, ``expand_dims``, ``memory.view``, which the VM runs
  without a copy after ``RewriteDataflowReshape``) are *alias* ops: they create no storage;
* vars defined outside the block (function parameters, earlier blocks) are graph inputs;
  constants are weights, not activations;
* the block's output vars (plain ``Var``, not ``DataflowVar``) are graph outputs;
* an **in-place write** (``call_tir_inplace`` / ``call_inplace_packed`` with
  ``inplace_indices``, as DataflowUseInplaceCalls emits) creates no storage for the outputs it
  writes into an argument: they are the argument's tensor, so the memory model charges nothing
  new and keeps that tensor live for the readers of the result. Because the buffer's contents
  change, the op keeps its original place relative to every other access of the buffer (any
  alias of it): readers before the write stay before it, readers after it stay after it
  (read-after-write, write-after-read and write-after-write edges). Every scheduler sees these
  edges as ordinary dependencies, so no reorder can move a write across a read.

`UnsupportedModelError` names what cannot be modelled: dynamic shapes, impure calls, unknown
binding kinds, functions with control flow when a whole-function graph is asked for.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import tvm
from tvm import relax

from ..graph import GraphBuilder, OpGraph, UnsupportedModelError  # noqa: F401 (re-export)

from tvm.ir.prim.expr import IntImm as _IntImm  # noqa: E402  (tvm.tir is gone in 0.27)

VIEW_OPS = {"relax.reshape", "relax.flatten", "relax.squeeze", "relax.expand_dims",
            "relax.memory.view"}
ELEMENTWISE_OPS = {"relax.nn.relu", "relax.nn.gelu", "relax.nn.silu", "relax.sigmoid",
                   "relax.tanh", "relax.add", "relax.multiply", "relax.subtract",
                   "relax.divide", "relax.clip", "relax.nn.relu6", "relax.exp", "relax.negative"}


def _where(var) -> str:
    return f"binding {var.name!r}"


def tensor_nbytes(ty, what: str = "value") -> list[int]:
    """Byte sizes of the tensors of a Relax type (a tuple type gives one per field)."""
    if isinstance(ty, relax.TensorType):
        shape = ty.shape
        if shape is None or not isinstance(shape, relax.ShapeExpr):
            raise UnsupportedModelError(f"dynamic shape: {what} has unknown shape ({ty})")
        n = 1
        for d in shape.values:
            if not isinstance(d, _IntImm):
                raise UnsupportedModelError(f"dynamic shape: {what} has symbolic shape {shape}")
            n *= int(d.value)
        dt = tvm.DataType(ty.dtype)
        return [(n * dt.bits * dt.lanes + 7) // 8]
    if isinstance(ty, tvm.ir.TupleType):
        return [b for f in ty.fields for b in tensor_nbytes(f, what)]
    if isinstance(ty, (relax.ShapeType, relax.PrimType, relax.ObjectType)):
        return []
    raise UnsupportedModelError(f"unsupported type {type(ty).__name__} for {what}")


INPLACE_OPS = {"relax.call_tir_inplace", "relax.call_inplace_packed"}


def inplace_indices(value) -> list[int] | None:
    """``inplace_indices`` of an in-place call (output k is written into argument
    ``indices[k]``; -1 = a fresh output), or None for any other value."""
    op = getattr(value, "op", None)
    if not isinstance(op, tvm.ir.Op) or op.name not in INPLACE_OPS:
        return None
    return [int(i) for i in value.attrs.inplace_indices]


_WRITES = re.compile(r"T\.writes\(([^)]*)\)")
_STORE = re.compile(r"^\s*([A-Za-z_]\w*)\[[^\n]*\]\s*=[^=]", re.M)
_kernel_writes_cache: dict = {}


def kernel_written_inputs(mod, gvar, n_inputs: int) -> list[int]:
    """Indices of the first ``n_inputs`` parameters of PrimFunc ``gvar`` that it stores into.

    A plain ``call_tir`` promises a kernel that only writes its output buffers, but FuseTIR
    (TVM 0.27) folds an in-place kernel into a fused one called with ``call_tir``: the write
    into an argument is then invisible in Relax. Read from the kernel itself (its
    ``T.writes`` annotations and buffer stores), such writes are treated like
    ``call_tir_inplace`` ones, so no reorder moves them across other readers."""
    func = mod[gvar] if gvar in mod.get_global_vars() else None
    if func is None or isinstance(func, relax.Function):
        return []
    # keyed by the kernel object's handle (Python wrappers differ per lookup); the entry
    # holds the kernel, so the handle cannot be reused while cached
    key = func.__chandle__()
    if key not in _kernel_writes_cache or not _kernel_writes_cache[key][0].same_as(func):
        if len(_kernel_writes_cache) > 4096:
            _kernel_writes_cache.clear()
        text = func.script()
        written = set(_STORE.findall(text))
        for group in _WRITES.findall(text):
            written.update(re.findall(r"([A-Za-z_]\w*)\[", group))
        # TVM 0.27 prints each buffer parameter under its parameter's name
        names = [str(p.name) for p in func.params]
        _kernel_writes_cache[key] = (func, [k for k, b in enumerate(names) if b in written])
    return [k for k in _kernel_writes_cache[key][1] if k < n_inputs]


def _inplace_args(value) -> list:
    """The argument expressions that ``inplace_indices`` index into."""
    if value.op.name == "relax.call_tir_inplace":
        args = value.args[1]
        return list(args.fields) if isinstance(args, relax.Tuple) else [args]
    return list(value.args[1:])  # call_inplace_packed(func, *args)


def written_buffers(block) -> tuple[dict, set]:
    """(buffer roots of every var of ``block``, roots overwritten by in-place calls).

    A var's roots are the vars whose storage it may refer to: itself for a value that gets
    fresh storage; the roots of what it views for aliases (``y = x``, match_cast, tuples,
    TupleGetItem, reshape views) and for the outputs an in-place call writes into an argument.
    A rewrite that moves a read of ``v`` is safe from in-place writes when ``roots[v]`` and
    the written set do not meet. Vars from outside the block are their own roots.
    """
    roots: dict = {}
    fields: dict = {}  # tuple var -> roots of each field
    written: set = set()

    def of(expr) -> frozenset:
        if isinstance(expr, tvm.ir.Var):
            return roots.get(expr, frozenset((expr,)))
        if isinstance(expr, relax.Tuple):
            return frozenset().union(*(of(f) for f in expr.fields))
        return frozenset()

    for binding in block.bindings:
        var, value = binding.var, binding.value
        indices = inplace_indices(value) if isinstance(value, tvm.ir.Call) else None
        if isinstance(value, relax.Tuple):
            fields[var] = [of(f) for f in value.fields]
            roots[var] = of(value)
        elif isinstance(value, relax.TupleGetItem):
            tv = value.tuple_value
            known = fields.get(tv) if isinstance(tv, tvm.ir.Var) else None
            roots[var] = known[value.index] if known and value.index < len(known) else of(tv)
        elif isinstance(value, tvm.ir.Var) or isinstance(binding, relax.MatchCast):
            roots[var] = of(value)
        elif isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.Op) and \
                value.op.name in VIEW_OPS:
            roots[var] = of(value.args[0])
        elif indices is not None:
            args = _inplace_args(value)
            hit = frozenset().union(*(of(args[j]) for j in indices if 0 <= j < len(args)))
            written |= hit
            roots[var] = hit | (frozenset((var,)) if any(j < 0 for j in indices) else frozenset())
        else:
            roots[var] = frozenset((var,))
    return roots, written


def _is_pure_call(value) -> bool:
    op = value.op
    if isinstance(op, tvm.ir.Op):
        pure = op.get_attr("FPurity")
        return bool(pure) if pure is not None else False
    if isinstance(op, tvm.ir.GlobalVar):
        return True  # calls to other functions of the module; well-formedness checks purity
    return False


@dataclass
class BlockGraph:
    graph: OpGraph
    block_index: int


def _struct(ty, tensors):
    """Nest a flat list of tensor ids like the fields of ``ty``."""
    it = iter(tensors)

    def rec(t):
        if isinstance(t, tvm.ir.TupleType):
            return [rec(f) for f in t.fields]
        if isinstance(t, relax.TensorType):
            return next(it)
        return []

    return rec(ty)


def _flat(s) -> list[int]:
    if isinstance(s, list):
        return [t for x in s for t in _flat(x)]
    return [s]


def block_graph(block, name: str = "block", mod=None) -> OpGraph:
    """The `OpGraph` of one Relax ``DataflowBlock``; raises `UnsupportedModelError`.

    ``mod`` (the IRModule holding the block's kernels) lets the importer see writes that
    ``call_tir`` kernels make into their arguments (`kernel_written_inputs`); pass it
    whenever kernels may be fused in-place code."""
    if not isinstance(block, relax.DataflowBlock):
        raise UnsupportedModelError(f"{name}: not a dataflow block (impure bindings or "
                                    "control flow cannot be reordered)")
    b = GraphBuilder(name)
    struct: dict = {}  # var -> nested tensor ids
    alias_op: dict = {}  # var -> op id that defines it
    externals: dict = {}
    # Buffer hazards (tensor id -> ops): keep every in-place write in its original place
    # relative to the other accesses of the buffer it overwrites.
    last_write: dict[int, int] = {}
    reads_since_write: dict[int, list[int]] = {}

    def add_op(opname, kind, reads, outs=(), *, alias=False, deps=(), inplace=(), writes=()):
        """``b.op`` plus the hazard edges of the buffers it reads and (in place) writes."""
        preds = list(deps)
        for t in reads:
            if t in last_write:
                preds.append(last_write[t])  # read after write
        for t in writes:
            preds += reads_since_write.get(t, [])  # write after read
        v = b.op(opname, kind, reads, outs, alias=alias, source=i, extra_preds=preds,
                 inplace=inplace)
        for t in reads:
            reads_since_write.setdefault(t, []).append(v)
        for t in writes:
            last_write[t] = v
            reads_since_write[t] = []
        return v

    def value_struct(expr):
        """(nested tensors, defining ops) of an argument expression."""
        if isinstance(expr, relax.Tuple):
            parts = [value_struct(f) for f in expr.fields]
            return [p[0] for p in parts], [o for p in parts for o in p[1]]
        if isinstance(expr, tvm.ir.Var):
            if expr in struct:
                return struct[expr], [alias_op[expr]]
            if expr not in externals:
                sizes = tensor_nbytes(expr.ty, f"input {expr.name!r}")
                ids = [b.input(expr.name if len(sizes) == 1 else f"{expr.name}.{i}", s)
                       for i, s in enumerate(sizes)]
                externals[expr] = _struct(expr.ty, ids)
            return externals[expr], []
        return [], []  # constants, shapes, prim values: no activation memory

    for i, binding in enumerate(block.bindings):
        var = binding.var
        value = binding.value
        if isinstance(binding, relax.MatchCast):
            tensor_nbytes(binding.struct_info if hasattr(binding, "struct_info") else var.ty,
                          _where(var))
            s, deps = value_struct(value)
            v = add_op(var.name, "match_cast", _flat(s), alias=True, deps=deps)
            struct[var], alias_op[var] = s, v
            continue
        if isinstance(value, relax.TupleGetItem):
            s, deps = value_struct(value.tuple_value)
            field = s[value.index] if isinstance(s, list) and value.index < len(s) else []
            v = add_op(var.name, "TupleGetItem", _flat(field), alias=True, deps=deps)
            struct[var], alias_op[var] = field, v
            continue
        if isinstance(value, (relax.Tuple, tvm.ir.Var)):
            s, deps = value_struct(value)
            v = add_op(var.name, "tuple" if isinstance(value, relax.Tuple) else "copy",
                       _flat(s), alias=True, deps=deps)
            struct[var], alias_op[var] = s, v
            continue
        if not isinstance(value, tvm.ir.Call):
            raise UnsupportedModelError(
                f"{name}: {_where(var)} has an unsupported value kind {type(value).__name__}")
        if not _is_pure_call(value):
            raise UnsupportedModelError(f"{name}: {_where(var)} is an impure call "
                                        f"({getattr(value.op, 'name', value.op)}); "
                                        "impure calls cannot be reordered")
        kind = value.op.name if isinstance(value.op, tvm.ir.Op) else str(value.op.name_hint)
        if kind == "relax.call_tir" and isinstance(value.args[0], tvm.ir.GlobalVar):
            kind = f"call_tir:{value.args[0].name_hint}"
        reads, deps = [], []
        for a in value.args:
            s, d = value_struct(a)
            reads += _flat(s)
            deps += d
        if kind in VIEW_OPS:
            s = value_struct(value.args[0])[0]
            tensor_nbytes(var.ty, _where(var))
            v = add_op(var.name, kind, reads, alias=True, deps=deps)
            struct[var], alias_op[var] = s, v
            continue
        sizes = tensor_nbytes(var.ty, _where(var))
        indices = inplace_indices(value)
        hidden = _hidden_writes(mod, value, indices, value_struct)
        if hidden:
            outs = [(var.name if len(sizes) == 1 else f"{var.name}.{k}", s)
                    for k, s in enumerate(sizes)]
            if indices is not None:  # declared in-place outputs stay aliases (below)
                v, fields = _inplace_op(b, value, var, indices, sizes, add_op, value_struct,
                                        reads, deps, kind, name, extra_writes=hidden)
            else:
                v = add_op(var.name, kind, reads, outs, deps=deps, writes=hidden)
                fields = list(b.ops[v].outputs)
            struct[var] = _struct(var.ty, fields)
            alias_op[var] = v
            continue
        if indices is not None:
            v, fields = _inplace_op(b, value, var, indices, sizes, add_op, value_struct,
                                    reads, deps, kind, name)
            struct[var] = _struct(var.ty, fields)
            alias_op[var] = v
            continue
        outs = [(var.name if len(sizes) == 1 else f"{var.name}.{k}", s)
                for k, s in enumerate(sizes)]
        inplace = reads[:1] if kind in ELEMENTWISE_OPS and len(sizes) == 1 else []
        v = add_op(var.name, kind, reads, outs, deps=deps, inplace=inplace)
        struct[var] = _struct(var.ty, list(b.ops[v].outputs))
        alias_op[var] = v
    for var, s in struct.items():
        if not isinstance(var, relax.DataflowVar):
            for t in _flat(s):
                b.mark_output(t)
    return b.build()


def _hidden_writes(mod, value, indices, value_struct) -> list[int]:
    """Tensor ids of ``call_tir``/``call_tir_inplace`` arguments the kernel writes without
    declaring it (see `kernel_written_inputs`)."""
    if mod is None or not isinstance(value.op, tvm.ir.Op) or \
            value.op.name not in ("relax.call_tir", "relax.call_tir_inplace") or \
            not isinstance(value.args[0], tvm.ir.GlobalVar):
        return []
    args = value.args[1]
    args = list(args.fields) if isinstance(args, relax.Tuple) else [args]
    declared = set(indices or [])
    out = []
    for k in kernel_written_inputs(mod, value.args[0], len(args)):
        if k not in declared:
            out += _flat(value_struct(args[k])[0])
    return list(dict.fromkeys(out))


def _inplace_op(b, value, var, indices, sizes, add_op, value_struct, reads, deps, kind, name,
                extra_writes=()):
    """Add an in-place call: fresh outputs get new tensors, written outputs are the written
    argument's tensor. Returns (op id, flat tensor ids of the result's fields)."""
    args = _inplace_args(value)
    if len(indices) != len(sizes):
        raise UnsupportedModelError(f"{name}: {_where(var)}: inplace_indices {indices} do not "
                                    f"match its {len(sizes)} tensor outputs")
    written: list[int | None] = []
    for j in indices:
        target = _flat(value_struct(args[j])[0]) if 0 <= j < len(args) else []
        if j >= 0 and len(target) != 1:
            raise UnsupportedModelError(
                f"{name}: {_where(var)} writes in place into argument {j}, which is not one "
                "activation tensor (a constant or a tuple); it cannot be modelled")
        written.append(target[0] if j >= 0 else None)
    outs = [(var.name if len(sizes) == 1 else f"{var.name}.{k}", s)
            for k, (s, w) in enumerate(zip(sizes, written)) if w is None]
    v = add_op(var.name, kind, reads, outs, deps=deps,
               writes=list(dict.fromkeys([w for w in written if w is not None]
                                         + list(extra_writes))))
    fresh = iter(b.ops[v].outputs)
    return v, [next(fresh) if w is None else w for w in written]


def dataflow_blocks(func) -> list[tuple[int, object]]:
    """(index, block) of the dataflow blocks of a Relax function body."""
    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return []
    return [(i, blk) for i, blk in enumerate(body.blocks) if isinstance(blk, relax.DataflowBlock)]


def has_control_flow(func) -> bool:
    found = []

    def visit(e):
        if isinstance(e, relax.If):
            found.append(e)

    relax.analysis.post_order_visit(func.body, visit)
    return bool(found)


def from_relax(mod, func_name: str = "main") -> OpGraph:
    """The `OpGraph` of a Relax function's dataflow block (``mod`` may be an IRModule or a
    Function). The function must have exactly one dataflow block and no control flow."""
    func = mod[func_name] if isinstance(mod, tvm.IRModule) else mod
    if not isinstance(func, relax.Function):
        raise UnsupportedModelError(f"{func_name!r} is not a Relax function")
    if has_control_flow(func):
        raise UnsupportedModelError(f"control flow: function {func_name!r} contains an If; "
                                    "only its dataflow blocks can be scheduled (use the pass)")
    blocks = dataflow_blocks(func)
    if len(blocks) != 1:
        raise UnsupportedModelError(
            f"function {func_name!r} has {len(blocks)} dataflow blocks; a whole-function graph "
            "needs exactly one (the pass schedules each block separately)")
    return block_graph(blocks[0][1], name=func_name,
                       mod=mod if isinstance(mod, tvm.IRModule) else None)


def reorder_block(block, graph: OpGraph, order) -> "relax.DataflowBlock":
    """The block with its bindings in ``order`` (op ids of ``graph`` = block_graph(block))."""
    graph.check_order(order)
    bindings = list(block.bindings)
    return relax.DataflowBlock([bindings[graph.ops[v].source] for v in order], block.span)

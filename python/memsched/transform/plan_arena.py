"""`PlanArena`: pack every planned activation of a Relax function into one arena at offsets.

TVM's StaticPlanBlockMemory plans *storage tokens*: a freed token is reused whole for a later
tensor (or grown), and a tensor always starts at offset 0 of its token. Two small tensors never
share one freed big token and a big tensor never spans two freed small ones, so the planned
storage ends up 1.0-2.6x the liveness peak on real networks. `PlanArena` keeps TVM's plan of
*which* tensors are planned (and their lifetimes in binding order) but replaces the tokens by a
single ``R.memory.alloc_storage`` per (device, storage scope) holding every tensor at a
computed offset (`memsched.arena`: greedy, then the exact packer when greedy is above the
liveness peak; or CP-SAT).

Place it right after ``relax.transform.StaticPlanBlockMemory()`` in a custom pipeline, or in
place of it (it then runs StaticPlanBlockMemory itself first, to reuse TVM's decision of which
tensors may be planned: not the returned ones, static or upper-bounded shapes)::

    ... CallTIRRewrite(), StaticPlanBlockMemory(), PlanArena(), LowerAllocTensor(),
    KillAfterLastUse(), LowerRuntimeBuiltin(), ...

What the VM requires (checked on apache-tvm 0.27, CPU):

* ``vm.builtin.alloc_tensor`` on a storage with a non-zero offset gives a tensor with a
  non-zero ``byte_offset``; TIR kernels reject it ("Invalid ... byte_offset, expected 0").
  Each tensor at a non-zero offset is therefore followed by ``R.memory.ensure_zero_offset``,
  which moves the offset into the data pointer without a copy *when the offset is a multiple
  of 64 bytes* (and copies otherwise): offsets are 64-byte aligned by default.
* Kill points need nothing special: tensors keep their storage alive, and KillAfterLastUse
  (later in the pipeline) drops the arena's register after the last ``alloc_tensor``.

Lifetimes (conservative, in top-level binding order): a tensor lives from its
``alloc_tensor`` binding to the last binding that reads it or anything derived from it (views,
tuples, results of calls taking it); a tensor reaching the function's result lives to the end.
A storage is moved into the arena only when it has a constant size and is used by nothing but
top-level ``alloc_tensor`` calls with static shapes (and ``kill_storage``); everything else is
left as it was, and so is a storage with a tensor that reaches the function's result (which
would keep the arena alive after the call).

Results are attached to each rewritten function as attributes (bytes):
``memsched.arena_bytes`` (the arena), ``memsched.arena_planned_before`` (the storages it
replaced), ``memsched.arena_lower_bound`` (max live bytes, aligned, or CP-SAT's bound),
``memsched.arena_live_peak`` (max live bytes of the planned tensors, unaligned),
``memsched.arena_optimal`` (1/0), ``memsched.arena_method``, ``memsched.arena_tensors``.
The pass object also keeps them: ``PlanArena(...).results[func_name]``.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import tvm
from tvm import relax
from tvm.ir.prim.expr import IntImm

from .. import arena as _arena
from .common import map_relax_functions, with_blocks

_OPS = {}


def _op(name):
    if name not in _OPS:
        _OPS[name] = tvm.ir.Op.get(name)
    return _OPS[name]


def _is_call(expr, name) -> bool:
    return isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and \
        expr.op.same_as(_op(name))


def _int(expr):
    """Python int of a constant integer expression (an IntImm, also what ``prim_value`` gives
    in TVM 0.27), else None."""
    return int(expr.value) if isinstance(expr, IntImm) else None


def _static_bytes(shape, dtype) -> int | None:
    if not isinstance(shape, relax.ShapeExpr):
        return None
    n = 1
    for d in shape.values:
        if not isinstance(d, IntImm):
            return None
        n *= int(d.value)
    dt = tvm.DataType(str(dtype.value if isinstance(dtype, tvm.ir.GenericConst) else dtype))
    return n * ((dt.bits * dt.lanes + 7) // 8)


@dataclass
class ArenaResult:
    """What `PlanArena` did to one function (one entry per (device, scope) arena)."""

    arena_bytes: int
    planned_before: int
    lower_bound: int
    live_peak: int
    optimal: bool
    method: str
    tensors: int
    storages_replaced: int
    seconds: float
    plans: list = field(default_factory=list)  # memsched.arena.ArenaPlan per arena
    lifetimes: list = field(default_factory=list)  # per arena: list of memsched.arena.Lifetime
    names: list = field(default_factory=list)  # per arena: the tensors' variable names


@dataclass
class _Storage:
    var: relax.Var
    index: int
    size: int | None
    device: int | None
    scope: str | None
    movable: bool = True
    tensors: list = field(default_factory=list)


@dataclass
class _Tensor:
    var: relax.Var
    index: int
    storage: _Storage
    call: relax.Call
    offset: int
    nbytes: int
    end: int = -1


@tvm.transform.module_pass(opt_level=0, name="PlanArena")
class PlanArena:
    """Replace the storage tokens of StaticPlanBlockMemory by one arena with offsets.

    Parameters
    ----------
    method : str
        ``"auto"`` (default: greedy, then the exact packer only when greedy is above the
        max-live lower bound), ``"greedy"`` (greedy by size with best-fit gaps, a few
        orderings), ``"exact"`` (`memsched.packing`: MiniMalloc-class canonical search under
        ``time_limit``, greedy warm start) or ``"cpsat"`` (CP-SAT packing under
        ``time_limit``).
    alignment : int
        Byte alignment of every offset (64: below it the VM copies tensors).
    time_limit : float
        Seconds per function for the exact packer (or CP-SAT): a safety net for ``"exact"``
        and ``"auto"``, which are bounded by ``max_nodes``.
    max_nodes : int or None
        Nodes of the exact packer's search per arena (default 200,000, what the patch
        search's written plans get: `memsched.patches.budget.ARENA_NODES`): its answer then
        depends on the lifetimes alone, not on how busy the machine is; None: the time limit
        alone decides.
    static_plan : bool or None
        Run StaticPlanBlockMemory first. None (default): only when the module has no
        ``relax.memory.alloc_storage`` yet (PlanArena used in place of it).
    functions : list of str, optional
        Only these functions (default: every Relax function).
    keep_if_worse : bool
        Keep TVM's tokens (stacked, which is always a valid arena) when the packing is not
        smaller (default True, so the pass never increases planned bytes).
    """

    def __init__(self, method: str = "auto", alignment: int = 64, time_limit: float = 10.0,
                 static_plan: bool | None = None, functions=None, workers: int = 1,
                 keep_if_worse: bool = True, max_nodes: int | None = 200_000):
        if method not in _arena.METHODS:
            raise ValueError(f"unknown arena method {method!r}; choose one of {_arena.METHODS}")
        if int(alignment) < 1:
            raise ValueError("alignment must be >= 1")
        if int(alignment) % 64:
            warnings.warn(f"PlanArena: alignment {alignment} is not a multiple of 64: the VM "
                          "copies tensors at such offsets (vm.builtin.ensure_zero_offset)",
                          stacklevel=2)
        self.method = method
        self.alignment = int(alignment)
        self.time_limit = float(time_limit)
        self.static_plan = static_plan
        self.functions = None if functions is None else set(functions)
        self.workers = workers
        self.keep_if_worse = keep_if_worse
        self.max_nodes = None if max_nodes is None else int(max_nodes)
        self.results: dict[str, ArenaResult] = {}

    # ---------------------------------------------------------------------------------------
    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        run_spbm = self.static_plan
        if run_spbm is None:
            run_spbm = not _has_call(mod, "relax.memory.alloc_storage") and \
                _has_call(mod, "relax.builtin.alloc_tensor")
        if run_spbm:
            mod = relax.transform.StaticPlanBlockMemory()(mod)

        def one(func, name):
            if func.attrs is not None and "memsched.arena_bytes" in func.attrs:
                return None  # already packed
            return self._plan_function(func, name)

        return map_relax_functions(mod, self.functions, one)

    # ---------------------------------------------------------------------------------------
    def _plan_function(self, func: relax.Function, name: str):
        t0 = time.perf_counter()
        body = func.body
        if not isinstance(body, relax.SeqExpr):
            return None
        bindings = [b for blk in body.blocks for b in blk.bindings]
        storages, tensors = _collect(bindings, body.body)
        if not tensors:
            return None
        _lifetimes(bindings, body.body, tensors)
        # a tensor reaching the result would keep the whole arena alive after the call
        # (possible when LowerAllocTensor ran before): leave its storage as it was
        escaping = {id(t.storage) for t in tensors if t.end >= len(bindings)}
        if escaping:
            for st in storages.values():
                if id(st) in escaping:
                    st.movable = False
            tensors = [t for t in tensors if t.storage.movable]
            if not tensors:
                return None

        # one arena per (device, scope)
        groups: dict[tuple, list[_Tensor]] = {}
        for t in tensors:
            groups.setdefault((t.storage.device, t.storage.scope), []).append(t)
        offsets: dict[relax.Var, tuple[tuple, int]] = {}
        arenas: dict[tuple, int] = {}
        plans, all_lts, all_names = [], [], []
        for key, ts in groups.items():
            lts = [_arena.Lifetime(t.nbytes, t.index, t.end) for t in ts]
            opts = {} if self.method == "greedy" else {"workers": self.workers}
            if self.method in ("exact", "auto") and self.max_nodes is not None:
                opts["max_nodes"] = self.max_nodes
            p = _arena.plan(lts, self.method, self.alignment, self.time_limit, **opts)
            # TVM's own tokens stacked one above the other are a valid arena too
            sts = [s for s in storages.values() if s.movable and (s.device, s.scope) == key]
            pos = {id(t): i for i, t in enumerate(ts)}
            stacked_arena, stacked = _arena.stacked_offsets(
                [[pos[id(t)] for t in s.tensors] for s in sts], [s.size for s in sts],
                len(ts), self.alignment)
            stacked = [o + t.offset for o, t in zip(stacked, ts)]
            if self.keep_if_worse and stacked_arena < p.arena and \
                    all(t.offset % self.alignment == 0 for t in ts):
                try:
                    _arena.verify(lts, stacked, self.alignment, stacked_arena)
                    p = _arena.ArenaPlan(stacked_arena, stacked, p.lower_bound,
                                         stacked_arena <= p.lower_bound, "tokens",
                                         self.alignment, p.live_peak, p.seconds, p.stats)
                except ValueError:
                    pass
            _arena.verify(lts, p.offsets, self.alignment, p.arena)
            plans.append(p)
            all_lts.append(lts)
            all_names.append([t.var.name for t in ts])
            arenas[key] = p.arena
            for t, o in zip(ts, p.offsets):
                offsets[t.var] = (key, o)

        new_func = _rewrite(func, storages, offsets, arenas)
        before = sum(s.size for s in storages.values() if s.movable)
        res = ArenaResult(
            arena_bytes=sum(arenas.values()), planned_before=before,
            lower_bound=sum(p.lower_bound for p in plans),
            live_peak=sum(p.live_peak for p in plans),
            optimal=all(p.optimal for p in plans),
            method="+".join(sorted({p.method for p in plans})), tensors=len(tensors),
            storages_replaced=sum(s.movable for s in storages.values()),
            seconds=time.perf_counter() - t0, plans=plans, lifetimes=all_lts, names=all_names)
        self.results[name] = res
        return new_func.with_attrs({
            "memsched.arena_bytes": int(res.arena_bytes),
            "memsched.arena_planned_before": int(res.planned_before),
            "memsched.arena_lower_bound": int(res.lower_bound),
            "memsched.arena_live_peak": int(res.live_peak),
            "memsched.arena_optimal": int(res.optimal),
            "memsched.arena_method": res.method,
            "memsched.arena_tensors": int(res.tensors),
        })


# ------------------------------------------------------------------------------------------
# analysis


def _has_call(mod, op_name) -> bool:
    found = []

    def visit(e):
        if not found and _is_call(e, op_name):
            found.append(e)

    for _, f in mod.functions_items():
        if isinstance(f, relax.Function):
            relax.analysis.post_order_visit(f.body, visit)
            if found:
                return True
    return False


def _collect(bindings, result):
    """Top-level storages that can move into the arena, and their tensors."""
    storages: dict[relax.Var, _Storage] = {}
    tensors: list[_Tensor] = []
    for i, b in enumerate(bindings):
        v = b.value if isinstance(b, relax.VarBinding) else None
        if v is not None and _is_call(v, "relax.memory.alloc_storage"):
            size_expr = v.args[0]
            size = None
            if isinstance(size_expr, relax.ShapeExpr) and len(size_expr.values) == 1:
                size = _int(size_expr.values[0])
            device = _int(v.args[1])
            scope = v.args[2].value if isinstance(v.args[2], tvm.ir.StringImm) else None
            storages[b.var] = _Storage(b.var, i, size, device, scope,
                                       movable=size is not None and device is not None
                                       and scope is not None)
    if not storages:
        return storages, tensors
    for i, b in enumerate(bindings):
        v = b.value
        if isinstance(b, relax.VarBinding) and _is_call(v, "relax.memory.alloc_tensor") and \
                isinstance(v.args[0], relax.Var) and v.args[0] in storages:
            s = storages[v.args[0]]
            offset = _int(v.args[1])
            nbytes = _static_bytes(v.args[2], v.args[3])
            if offset is None or nbytes is None or offset + nbytes > (s.size or 0):
                s.movable = False
            else:
                s.tensors.append(_Tensor(b.var, i, s, v, offset, nbytes))
            # other arguments must not mention a storage
            for u in relax.analysis.free_vars(v):
                if u in storages and not u.same_as(v.args[0]):
                    storages[u].movable = False
            continue
        if isinstance(b, relax.VarBinding) and _is_call(v, "relax.memory.kill_storage"):
            continue
        # any other use of a storage (nested scopes, calls, tuples...) pins it
        for u in relax.analysis.free_vars(v):
            if u in storages:
                storages[u].movable = False
    for u in relax.analysis.free_vars(result):
        if u in storages:
            storages[u].movable = False
    for s in storages.values():
        if s.movable:
            tensors.extend(s.tensors)
    tensors.sort(key=lambda t: t.index)
    return storages, tensors


def _lifetimes(bindings, result, tensors) -> None:
    """Set ``t.end``: the last binding reading ``t`` or a value derived from it (conservative:
    every binding's result may alias every tensor it reads); ``len(bindings)`` if returned."""
    tid = {t.var: k for k, t in enumerate(tensors)}
    alias: dict[relax.Var, frozenset] = {}
    fields: dict[relax.Var, list] = {}  # tuple var -> aliases of its fields (when known)
    end = [t.index for t in tensors]
    for i, b in enumerate(bindings):
        var = b.var
        if var in tid:
            alias[var] = frozenset((tid[var],))
            continue
        value = b.value
        if isinstance(value, relax.Tuple) and all(isinstance(f, tvm.ir.Var)
                                                  for f in value.fields):
            # a tuple of vars refers to exactly its fields; a field taken out of it (split
            # outputs, returned tuples) aliases that field only, not its siblings
            fields[var] = [alias.get(f, frozenset()) for f in value.fields]
        if isinstance(value, relax.TupleGetItem) and value.tuple_value in fields and \
                0 <= value.index < len(fields[value.tuple_value]):
            reads = set(fields[value.tuple_value][value.index])
        else:
            reads = set()
            for u in relax.analysis.free_vars(value):
                a = alias.get(u)
                if a:
                    reads |= a
        for k in reads:
            end[k] = i
        if reads:
            alias[var] = frozenset(reads)
    n = len(bindings)
    for u in relax.analysis.free_vars(result):
        for k in alias.get(u, ()):
            end[k] = n
    for t, e in zip(tensors, end):
        t.end = e


# ------------------------------------------------------------------------------------------
# rewrite


def _rewrite(func, storages, offsets, arenas):
    bb = relax.BlockBuilder()
    arena_vars = {}
    arena_bindings = []
    for k, (key, size) in enumerate(sorted(arenas.items(), key=lambda kv: str(kv[0]))):
        device, scope = key
        call = bb.normalize(relax.op.memory.alloc_storage(
            relax.ShapeExpr([IntImm("int64", size)]), IntImm("int64", device), scope, "uint8"))
        var = relax.Var("arena" if not k else f"arena{k}", call.ty)
        arena_vars[key] = var
        arena_bindings.append(relax.VarBinding(var, call))
    moved = {v for v, s in storages.items() if s.movable}
    blocks = []
    for blk in func.body.blocks:
        new = []
        for b in blk.bindings:
            v = b.value
            if isinstance(b, relax.VarBinding):
                if b.var in moved:
                    continue  # the token's alloc_storage
                if _is_call(v, "relax.memory.kill_storage") and isinstance(v.args[0], relax.Var) \
                        and v.args[0] in moved:
                    continue
                if b.var in offsets:
                    key, off = offsets[b.var]
                    call = bb.normalize(relax.op.memory.alloc_tensor(
                        arena_vars[key], IntImm("int64", off), v.args[2], v.args[3], v.args[4]))
                    if off == 0:
                        new.append(relax.VarBinding(b.var, call, b.span))
                    else:
                        raw = relax.Var(f"{b.var.name}_at{off}", call.ty)
                        new.append(relax.VarBinding(raw, call, b.span))
                        new.append(relax.VarBinding(
                            b.var, bb.normalize(relax.op.memory.ensure_zero_offset(raw)), b.span))
                    continue
            new.append(b)
        blocks.append((type(blk), new, blk.span))
    out = []
    if blocks and blocks[0][0] is relax.BindingBlock:
        kind, bs, span = blocks[0]
        blocks[0] = (kind, arena_bindings + bs, span)
    else:
        out.append(relax.BindingBlock(arena_bindings))
    for kind, bs, span in blocks:
        out.append(kind(bs, span))
    return with_blocks(func, out)

"""`PartitionPipeline`: cut a Relax function into pipeline stage functions.

The cut is what `memsched.partition` solves (issue 12's objective: lexicographic minimum of
peak cached parameters P, off-chip overflow O, boundary traffic C), here on the Relax graph of
``main``'s dataflow block: one op per binding (`memsched.importers.relax.block_graph`), the
parameters of an op are the Relax constants its binding uses and, for models imported with
``keep_params_as_input`` (``num_input`` attribute, or ``params=``), the weight parameters of the
function it reads; weight parameters are not activations, so they never cross a boundary.

The module is rewritten into ``main_stage0 .. main_stage{K-1}`` and a ``main`` that calls them
in order, so the module still builds and runs as a whole, bit-identical to the original (the
bindings are the same; only the function boundaries move). Stage ``j`` takes

* stage 0: the data inputs of ``main`` (same order and types);
* stage j >= 1: the tensors carried across boundary ``j - 1``, flattened to tensors (a tuple
  value crosses as its fields) in a fixed order;

followed by the weight parameters it uses (in the order of ``main``'s parameters). Stage
``j < K-1`` returns a tuple of the tensors carried across boundary ``j``; the last stage returns
what ``main`` returned. A tensor needed two stages later is relayed through the stage between
(exactly the boundary cost C counts), so the stages form a plain chain: what a device pipeline
runs (`memsched.runtime.rpc_pipeline`).

Attributes (the report): on ``main``, ``memsched.pipeline.*``: ``stages``, ``assignment``
(stage per binding of the original block), ``P``, ``O``, ``C`` (bytes), ``m`` (parameter bytes
per stage), ``c`` (bytes per boundary), ``lower_bounds``, ``optimal``, ``method``,
``seconds``, ``sram_bytes``, ``baseline`` (param-balanced P, O, C); `pipeline_report` reads
them back as a dict. Each stage function has ``memsched.pipeline.stage`` (its index),
``num_input`` (activation inputs; the rest are weights) and, when ``main`` had a ``params``
attribute, ``params`` (its weights' values).
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import tvm
from tvm import relax

from ..graph import GraphBuilder, OpGraph
from ..importers.relax import UnsupportedModelError, block_graph

PREFIX = "memsched.pipeline."


def stage_name(func_name: str, j: int) -> str:
    return f"{func_name}_stage{j}"


# ---------------------------------------------------------------------------------- reading
def weight_params(func: relax.Function, params: Sequence[str] | None = None) -> list:
    """The parameters of ``func`` that are model weights: those named in ``params``, else
    those after ``num_input`` (how Relax frontends mark ``keep_params_as_input``), else none."""
    fparams = list(func.params)
    if params is not None:
        names = [p.name for p in fparams]
        unknown = sorted(set(params) - set(names))
        if unknown:
            raise UnsupportedModelError(f"params= names {unknown} are not parameters of the "
                                        f"function (it has {names})")
        return [p for p in fparams if p.name in set(params)]
    attrs = func.attrs
    if attrs is not None and "num_input" in attrs:
        return fparams[int(attrs["num_input"]):]
    return []


def _single_block(func: relax.Function, name: str):
    body = func.body
    if not isinstance(body, relax.SeqExpr) or len(body.blocks) != 1 \
            or not isinstance(body.blocks[0], relax.DataflowBlock):
        raise UnsupportedModelError(
            f"function {name!r} must be one dataflow block and a return to be cut into "
            "pipeline stages (run PartitionPipeline before ToNonDataflow)")
    return body.blocks[0]


def _nbytes(ty) -> int:
    from ..importers.relax import tensor_nbytes

    return sum(tensor_nbytes(ty, "constant"))


def binding_params(block, weights: Sequence) -> tuple[list[tuple[int, ...]], list[int],
                                                       list[str]]:
    """(buffer ids per binding, bytes per buffer, buffer names): the distinct Relax constants
    each binding uses (one constant object = one buffer) and the weight parameters it reads."""
    ids: dict = {}
    nbytes: list[int] = []
    names: list[str] = []
    weight_set = {w: w.name for w in weights}

    def buffer(key, size, name):
        if key not in ids:
            ids[key] = len(nbytes)
            nbytes.append(int(size))
            names.append(name)
        return ids[key]

    per_binding = []
    for binding in block.bindings:
        used: list[int] = []

        def visit(e):
            if isinstance(e, tvm.ir.GenericConst):
                used.append(buffer(e, _nbytes(e.ty), f"const{len(nbytes)}"))

        relax.analysis.post_order_visit(binding.value, visit)
        for v in relax.analysis.free_vars(binding.value):
            if v in weight_set:
                used.append(buffer(v, _nbytes(v.ty), weight_set[v]))
        per_binding.append(tuple(dict.fromkeys(used)))
    return per_binding, nbytes, names


def without_inputs(graph: OpGraph, drop: set[int]) -> OpGraph:
    """``graph`` without the input tensors ``drop`` (weights given as function parameters are
    parameters of the partition problem, not activations that cross boundaries)."""
    b = GraphBuilder(graph.name)
    tmap: dict[int, int] = {}
    for t, ten in enumerate(graph.tensors):
        if ten.is_input and t not in drop:
            tmap[t] = b.input(ten.name, ten.nbytes)
    for v, op in enumerate(graph.ops):
        new = b.op(op.name, op.kind, [tmap[t] for t in op.inputs if t in tmap],
                   [(graph.tensors[t].name, graph.tensors[t].nbytes) for t in op.outputs],
                   workspace=op.workspace, alias=op.alias, source=op.source,
                   extra_preds=op.preds, inplace=[tmap[t] for t in op.inplace if t in tmap])
        assert new == v
        for t, nt in zip(op.outputs, b.ops[new].outputs):
            tmap[t] = nt
    for t in graph.output_tensors:
        if t in tmap:
            b.mark_output(tmap[t])
    return b.build()


def partition_problem(func: relax.Function, name: str = "main",
                      params: Sequence[str] | None = None):
    """(PartitionProblem, OpGraph, block) of a Relax function's dataflow block."""
    from ..partition import PartitionProblem

    block = _single_block(func, name)
    weights = weight_params(func, params)
    graph = block_graph(block, name=name)
    for v, op in enumerate(graph.ops):
        if op.source != v:  # block_graph makes one op per binding, in binding order
            raise UnsupportedModelError(f"{name}: op {v} does not map to binding {v}")
    wnames = {w.name for w in weights}
    drop = {t for t in graph.input_tensors
            if graph.tensors[t].name in wnames or graph.tensors[t].name.split(".")[0] in wnames}
    if drop:
        graph = without_inputs(graph, drop)
    op_params, nbytes, _ = binding_params(block, weights)
    return PartitionProblem.from_graph(graph, op_params, nbytes), graph, block


def _numel(ty) -> int:
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return 0
    n = 1
    for d in ty.shape.values:
        n *= int(d.value) if hasattr(d, "value") else 0
    return n


def binding_flops(binding) -> int:
    """A rough operation count of one binding: multiply-adds of convolutions and matrix
    products (output elements x reduction size), output elements for everything else."""
    value = binding.value
    out = sum(_numel(f) for f in (binding.var.ty.fields
                                  if isinstance(binding.var.ty, tvm.ir.TupleType)
                                  else [binding.var.ty]))
    if not isinstance(value, tvm.ir.Call) or not isinstance(value.op, tvm.ir.Op):
        return 0 if isinstance(value, (relax.TupleGetItem, relax.Tuple, tvm.ir.Var)) else out
    name = value.op.name
    try:
        if name in ("relax.nn.conv2d", "relax.nn.conv1d", "relax.nn.conv3d"):
            w = value.args[1].ty
            o = int(w.shape.values[str(value.attrs.kernel_layout).index("O")].value)
            return out * (_numel(w) // max(o, 1))
        if name == "relax.matmul":
            return out * int(value.args[0].ty.shape.values[-1].value)
    except (AttributeError, IndexError, TypeError, ValueError):
        pass
    return out


def flops_balanced_assignment(func: relax.Function, stages: int) -> list[int]:
    """A cut for CPU pipelines (not an Edge TPU objective): contiguous runs of the binding
    order with about equal `binding_flops`, every stage non-empty. Pass it as
    ``PartitionPipeline(k, assignment=...)``; compare with the (P, O, C) cuts."""
    block = _single_block(func, "function")
    work = [binding_flops(b) for b in block.bindings]
    n, k = len(work), stages
    if not 1 <= k <= n:
        raise UnsupportedModelError(f"cannot cut {n} bindings into {k} non-empty stages")
    total = sum(work) or n
    out, run, prev = [], 0, -1
    for i, w in enumerate(work):
        mid = run + (w if sum(work) else 1) / 2  # a binding goes where most of its work lies
        j = min(int(mid * k / total), k - 1)
        j = min(max(j, prev, k - (n - i)), prev + 1, k - 1)
        out.append(j)
        prev = j
        run += w if sum(work) else 1
    return out


# ---------------------------------------------------------------------------------- rewriting
def _leaves(ty, path=()):
    """Paths of the tensor fields of a type (``()`` for a tensor)."""
    if isinstance(ty, relax.TensorType):
        return [path]
    if isinstance(ty, tvm.ir.TupleType):
        return [p for i, f in enumerate(ty.fields) for p in _leaves(f, path + (i,))]
    raise UnsupportedModelError(f"a value of type {ty} would cross a pipeline boundary; only "
                                "tensors and tuples of tensors can")


def _get(expr, path):
    for i in path:
        expr = relax.TupleGetItem(expr, i)
    return expr


def _rebuild(ty, leaf_vars: dict, path=()):
    """The expression that reassembles a tuple value from its carried tensor fields."""
    if isinstance(ty, relax.TensorType):
        return leaf_vars[path]
    return relax.Tuple([_rebuild(f, leaf_vars, path + (i,)) for i, f in enumerate(ty.fields)])


def split_function(func: relax.Function, stage_of: Sequence[int], stages: int,
                   func_name: str = "main", params: Sequence[str] | None = None):
    """The stage functions of ``func`` for a stage per binding (``stage_of``), and a builder
    of the new ``main``: returns ``(stage_funcs, stage_args)`` where ``stage_args[j]`` says
    what stage ``j`` is called with (see `_build_main`)."""
    block = _single_block(func, func_name)
    bindings = list(block.bindings)
    weights = weight_params(func, params)
    wset = set(weights)
    data = [p for p in func.params if p not in wset]
    if len(stage_of) != len(bindings):
        raise UnsupportedModelError(f"assignment has {len(stage_of)} entries for "
                                    f"{len(bindings)} bindings")
    k = stages
    ret = func.body.body
    define: dict = {p: -1 for p in data}  # var -> stage that defines it (-1: input)
    for i, b in enumerate(bindings):
        define[b.var] = stage_of[i]
    last_use: dict = {}
    for i, b in enumerate(bindings):
        for v in relax.analysis.free_vars(b.value):
            if v in define:
                last_use[v] = max(last_use.get(v, -1), stage_of[i])
    for v in relax.analysis.free_vars(ret):
        if v in define:
            last_use[v] = k  # returned: carried to the end
    order = {v: n for n, v in enumerate(list(data) + [b.var for b in bindings])}
    # carried[j]: the (var, leaf path) pairs crossing boundary j, in a fixed order
    carried = []
    for j in range(k - 1):
        vs = sorted((v for v in define if define[v] <= j < last_use.get(v, -2)),
                    key=order.__getitem__)
        carried.append([(v, p) for v in vs for p in _leaves(v.ty)])

    funcs, args = [], []
    for j in range(k):
        mine = [b for i, b in enumerate(bindings) if stage_of[i] == j]
        used_w = set()
        for b in mine:
            used_w.update(v for v in relax.analysis.free_vars(b.value) if v in wset)
        stage_w = [w for w in weights if w in used_w]
        pre = []  # bindings that restore carried-in values under their original vars
        if j == 0:
            inputs = list(data)
        else:
            inputs = []
            by_var: dict = {}
            for v, p in carried[j - 1]:
                pv = relax.Var(f"{v.name}{''.join(f'_{i}' for i in p)}_in", _leaf_ty(v.ty, p))
                inputs.append(pv)
                by_var.setdefault(v, {})[p] = pv
            for v, leaves in by_var.items():
                pre.append(relax.VarBinding(v, _rebuild(v.ty, leaves)))
        if j < k - 1:
            outs, out_bindings = [], []
            for v, p in carried[j]:
                o = relax.Var(f"{v.name}{''.join(f'_{i}' for i in p)}_out", _leaf_ty(v.ty, p))
                out_bindings.append((o, _get(v, p)))
                outs.append(o)
        body_bindings = pre + [b for b in mine]
        if j < k - 1:
            fn = _make_function(inputs + stage_w, body_bindings, outs, out_bindings,
                                tvm.ir.TupleType([o.ty for o in outs]))
        else:
            fn = _make_function(inputs + stage_w, body_bindings, None, ret, func.ret_ty)
        attrs = {"global_symbol": stage_name(func_name, j), PREFIX + "stage": j,
                 "num_input": len(inputs)}
        if func.attrs is not None and "params" in func.attrs and weights:
            values = list(func.attrs["params"])
            widx = {w: i for i, w in enumerate(weights)}
            attrs["params"] = [values[widx[w]] for w in stage_w]
        funcs.append(fn.with_attrs(attrs))
        args.append((j, len(inputs), stage_w))
    return funcs, args, data


def _leaf_ty(ty, path):
    for i in path:
        ty = ty.fields[i]
    return ty


def _make_function(params, bindings, outs, ret, ret_ty):
    """A Relax function from original bindings (vars reused, then renamed by
    ``copy_with_new_vars`` so that every var is bound once in the module). With ``outs``,
    ``ret`` is the list of (output var, value) bindings and the function returns their tuple;
    otherwise it returns ``ret``."""
    bindings = list(bindings)
    if outs is not None:
        bindings += [relax.VarBinding(o, value) for o, value in ret]
        body_expr = relax.Tuple(list(outs))
    else:
        body_expr = ret
    seq = relax.SeqExpr([relax.DataflowBlock(bindings)], body_expr)
    fn = relax.Function(list(params), seq, ret_ty, True)
    fn = relax.BlockBuilder().normalize(fn)
    return relax.utils.copy_with_new_vars(fn)


def _rewrite(mod: tvm.IRModule, func_name: str, stage_of, stages: int, params, attrs: dict):
    func = mod[func_name]
    funcs, args, data = split_function(func, stage_of, stages, func_name, params)
    ctx = tvm.IRModule({gv: f for gv, f in mod.functions_items() if gv.name_hint != func_name},
                       attrs=mod.attrs)
    for gv in ctx.get_global_vars():
        if gv.name_hint.startswith(f"{func_name}_stage"):
            raise UnsupportedModelError(f"module already has a function {gv.name_hint!r}")
    bb = relax.BlockBuilder(ctx)
    gvs = [bb.add_func(f, stage_name(func_name, j)) for j, f in enumerate(funcs)]
    fattrs = dict(func.attrs) if func.attrs is not None else {}
    fattrs.update(attrs)
    with bb.function(func_name, list(func.params), attrs=fattrs, pure=func.is_pure):
        with bb.dataflow():
            carry = list(data)
            for j, (_, n_in, stage_w) in enumerate(args):
                call = relax.Call(gvs[j], list(carry) + list(stage_w))
                if j < stages - 1:
                    out = bb.emit(call, name_hint=f"stage{j}")
                    n_out = args[j + 1][1]
                    carry = [bb.emit(relax.TupleGetItem(out, i)) for i in range(n_out)]
                else:
                    out = bb.emit_output(call, name_hint="out")
        bb.emit_func_output(out)
    new = bb.finalize()
    return new.with_attrs(dict(mod.attrs)) if mod.attrs is not None else new


@tvm.transform.module_pass(opt_level=0, name="PartitionPipeline")
class PartitionPipeline:
    """Cut ``main`` into ``num_stages`` pipeline stage functions (see the module docstring).

    Parameters
    ----------
    num_stages : int
        Number of stages K (>= 1; K = 1 still gives ``main_stage0``).
    sram_bytes : int
        On-device parameter memory per stage (default 8 MiB, the Edge TPU's); enters O.
    method : str
        Partition solver (`memsched.partition.available()`): ``auto`` (certified optimum),
        ``exact``, ``inc-ilp``, ``learned``, ``param-balanced``.
    time_limit : float, optional
        Seconds for the solver (None: the solver's default).
    assignment : list of int, optional
        A stage per binding of ``main``'s dataflow block: skip the solver and use this cut
        (checked: monotone along dependencies, every stage non-empty).
    params : list of str, optional
        Names of ``main``'s parameters that are weights (default: those after its
        ``num_input`` attribute, else none).
    func_name : str
        The function to cut (default ``main``).
    """

    def __init__(self, num_stages: int, sram_bytes: int = 8 << 20, method: str = "auto",
                 time_limit: float | None = None, assignment: Sequence[int] | None = None,
                 params: Sequence[str] | None = None, func_name: str = "main"):
        from ..partition import PartitionError, available

        if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 1:
            raise PartitionError(f"num_stages must be a positive integer, got {num_stages!r}")
        if isinstance(sram_bytes, bool) or not isinstance(sram_bytes, int) or sram_bytes < 0:
            raise PartitionError(f"sram_bytes must be a non-negative integer, got "
                                 f"{sram_bytes!r}")
        if assignment is None and method.replace("_", "-") not in available():
            raise PartitionError(f"unknown partition method {method!r}; choose one of "
                                 f"{', '.join(sorted(available()))}")
        self.num_stages = num_stages
        self.sram_bytes = sram_bytes
        self.method = method
        self.time_limit = time_limit
        self.assignment = None if assignment is None else [int(s) for s in assignment]
        self.params = None if params is None else list(params)
        self.func_name = func_name

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        from ..partition import evaluate, param_balanced_cut, solve

        name = self.func_name
        if not any(gv.name_hint == name for gv in mod.get_global_vars()):
            raise UnsupportedModelError(f"module has no function {name!r}")
        func = mod[name]
        if not isinstance(func, relax.Function):
            raise UnsupportedModelError(f"{name!r} is not a Relax function")
        problem, _graph, _ = partition_problem(func, name, self.params)
        k = problem.check_stages(self.num_stages)
        t0 = time.perf_counter()
        if self.assignment is not None:
            cost = evaluate(problem, self.assignment, self.sram_bytes, k)
            base = evaluate(problem, param_balanced_cut(problem, k), self.sram_bytes, k)
            report = dict(assignment=list(self.assignment), P=cost.P, O=cost.O, C=cost.C,
                          m=list(cost.m), c=list(cost.c), lower_bounds={}, optimal=False,
                          method="given", seconds=time.perf_counter() - t0, baseline=base)
        else:
            r = solve(problem, k, self.sram_bytes, self.method, self.time_limit)
            report = dict(assignment=list(r.assignment), P=r.P, O=r.O, C=r.C, m=list(r.m),
                          c=list(r.c), lower_bounds=dict(r.lower_bounds), optimal=r.optimal,
                          method=r.method, seconds=r.seconds, baseline=r.baseline)
        base = report.pop("baseline")
        attrs = {PREFIX + "stages": k, PREFIX + "sram_bytes": int(self.sram_bytes),
                 PREFIX + "baseline": {"P": int(base.P), "O": int(base.O), "C": int(base.C)}}
        for key, val in report.items():
            if key == "seconds":
                val = float(round(val, 6))
            elif key == "optimal":
                val = bool(val)
            elif key == "lower_bounds":
                val = {n: int(b) for n, b in val.items()}
            elif isinstance(val, list):
                val = [int(x) for x in val]
            elif not isinstance(val, str):
                val = int(val)
            attrs[PREFIX + key] = val
        return _rewrite(mod, name, report["assignment"], k, self.params, attrs)


def pipeline_report(mod: tvm.IRModule, func_name: str = "main") -> dict:
    """The cut recorded by `PartitionPipeline` on ``func_name`` as plain Python values."""
    attrs = mod[func_name].attrs
    if attrs is None or PREFIX + "stages" not in attrs:
        raise ValueError(f"{func_name!r} has no PartitionPipeline report")
    out = {}
    for key in attrs.keys():
        if not str(key).startswith(PREFIX):
            continue
        out[str(key)[len(PREFIX):]] = _py(attrs[key])
    return out


def _py(v):
    if isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "items"):
        return {str(k): _py(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)) or hasattr(v, "__len__") and not isinstance(v, str):
        return [_py(x) for x in v]
    if hasattr(v, "value"):
        return v.value
    return v


def stage_functions(mod: tvm.IRModule, func_name: str = "main") -> list[str]:
    """Names of the stage functions of a partitioned module, in pipeline order."""
    k = int(pipeline_report(mod, func_name)["stages"])
    return [stage_name(func_name, j) for j in range(k)]


def stage_modules(mod: tvm.IRModule, func_name: str = "main") -> list[tvm.IRModule]:
    """One module per stage, holding that stage's function (under its own name) and what it
    calls, so that each device builds and loads only its own weights."""
    names = stage_functions(mod, func_name)
    out = []
    for name in names:
        drop = (set(names) | {func_name}) - {name}
        sub = tvm.IRModule({g: f for g, f in mod.functions_items() if g.name_hint not in drop},
                           attrs=mod.attrs)
        out.append(relax.transform.DeadCodeElimination([name])(sub))
    return out


def stage_params(mod: tvm.IRModule, func_name: str = "main") -> list[list[np.ndarray]]:
    """The weight values each stage function takes after its activation inputs (from the
    ``params`` attribute of ``keep_params_as_input`` models; empty lists otherwise)."""
    out = []
    for name in stage_functions(mod, func_name):
        attrs = mod[name].attrs
        vals = list(attrs["params"]) if attrs is not None and "params" in attrs else []
        out.append([v.numpy() for v in vals])
    return out

"""Patch-based execution written as a plain .tflite file that stock LiteRT and TFLite Micro run.

`tile_tflite` searches the split point and grid (`memsched.patches.search_patches`: TFLite
Micro's total arena = certified activation peak + persistent bytes, MAC overhead budget), then
rewrites subgraph 0 with builtin operators only:

* ``STRIDED_SLICE`` cuts each patch's window of the model input (with its halo) and crops a
  tensor's window where a consumer reads less of it;
* ``PAD`` (int8: the pad value is the input's zero point, i.e. real zero) makes a convolution's
  implicit padding explicit on the true borders of the feature map; ``PADV2`` with the dtype's
  minimum before a ``MAX_POOL_2D`` (which ignores padded cells); an original ``PAD``/``PADV2``
  keeps its kind and constant with the border amounts of the patch (dropped where a patch
  needs none);
* the region's ``CONV_2D`` / ``DEPTHWISE_CONV_2D`` / pools with ``VALID`` padding, element-wise
  ops and channel concatenations, copied with their weights (shared buffers, same tensors),
  options and quantization;
* ``CONCATENATION`` along W then along H reassembles each split tensor into its original
  tensor index, which the rest of the model reads unchanged.

Every new tensor copies the quantization of the tensor it holds a window of. Tensors the
rewrite leaves unused (the region's whole intermediates) are dropped and indices renumbered
(signature defs too). The rewritten model object then goes through `reorder.reorder_model`: the
certified operator order under TFLM's memory model and, with ``offline_plan=True``, the offsets,
and the independent checker (`check`). The input is parsed once and the written bytes checked
once.

A region the rewrite refuses (an AVERAGE_POOL_2D with SAME padding on a border patch, a grid
larger than the feature map, ...) is listed with its reason in ``result.search.refused``.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import numpy as np

from ..patches import SpatialModel
from ..patches.geometry import PAD_MIN
from ..patches.region import PatchPlan, Refused
from ..patches.search import BAND_GRIDS, Candidate, SearchResult, search_patches
from .read import TFLiteModelError, graph_of, read_tflite, schema
from .spatial import spatial_model
from .tflm_memory import TFLM_MODEL, TFLMMemory


class TileError(TFLiteModelError):
    """A tiling request that cannot be answered (bad grid, split tensor, model); one line."""


@dataclass
class TileResult:
    search: SearchResult
    choice: Candidate | None
    ops_before: int
    ops_after: int
    peak: int | None = None  # certified order's peak of the written model (TFLM model)
    lower_bound: int | None = None
    optimal: bool | None = None
    offline_arena: int | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    measured: dict = field(default_factory=dict)
    # {"original": [...], "patched": [...]}: stable footprint (bytes) of each operator in file
    # order under TFLM's memory model (the plot of the unpatched vs the patched schedule)
    curves: dict = field(default_factory=dict, repr=False)
    # what bounds the total from below (`SearchResult.bound`): the original operators'
    # persistent bytes + the largest of the model input, the operators before the region and
    # the largest operator after it
    bound: dict = field(default_factory=dict)
    # the second region's search (in the once-rewritten model), when it was kept
    second: SearchResult | None = None

    def as_dict(self, curves: bool = False) -> dict:
        """JSON-ready summary; ``curves``: also the memory curves (bytes live per step under
        TFLM's model) of the original file order and of the written patched order."""
        d = {"patched": self.choice is not None,
             "choice": self.choice.as_dict() if self.choice else None,
             "ops_before": self.ops_before, "ops_after": self.ops_after,
             "peak_bytes": self.peak, "lower_bound": self.lower_bound,
             "optimal": self.optimal, "offline_arena_bytes": self.offline_arena,
             "seconds": round(self.seconds, 3), "notes": self.notes, "bound": self.bound,
             "search": self.search.as_dict(),
             "second_region": self.second.choice.as_dict() if self.second else None}
        if self.measured:
            d["measured"] = self.measured
        if curves:
            d["curves"] = self.curves
        return d


def _parse_grid(grid) -> tuple[int, int] | None:
    if grid is None:
        return None
    if isinstance(grid, str):
        parts = grid.lower().replace("×", "x").split("x")
        try:
            grid = tuple(int(p) for p in parts)
        except ValueError:
            raise TileError(f"grid {grid!r} is not ROWSxCOLS (e.g. 3x3)") from None
    grid = tuple(int(g) for g in grid)
    if len(grid) != 2 or min(grid) < 1:
        raise TileError(f"grid {grid!r} is not two positive numbers ROWSxCOLS")
    return grid  # type: ignore[return-value]


def tile_tflite(src, dst: str | None = None, grid=None, split: str | None = None,
                max_overhead: float = 0.3, offline_plan: bool = False,
                time_limit: float = 10.0, region_start: int | None = None,
                second_region: bool = True) -> tuple[bytes, TileResult]:
    """Search and write a patch-based version of the .tflite model ``src`` (path or bytes).

    ``grid``: ``"RxC"`` or (rows, cols) to force the grid; ``split``: name of the tensor the
    region must end at; ``max_overhead``: extra MACs allowed for the default choice (0.3 =
    +30 %); ``region_start``: the operator the region must start at (default: searched over
    `region_starts`); ``second_region``: then search a second region starting right after the
    first one's reassembly, in the rewritten model, with the same evaluator (kept only when it
    lowers the total within the MAC budget; not with a forced grid, split or start). Returns
    (file bytes, `TileResult`); writes ``dst`` atomically when given. When no candidate lowers
    the total arena within the budget, the model is only reordered."""
    from .reorder import reorder_model

    t0 = time.perf_counter()
    g = _parse_grid(grid)
    if not max_overhead >= 0:
        raise TileError(f"max_overhead must be >= 0, not {max_overhead!r}")
    tg = read_tflite(src)
    label = src if isinstance(src, str) else "model.tflite"
    # TFLM's CONV_2D / DEPTHWISE_CONV_2D allocate the per-channel multiplier and shift arrays
    # for float models too (measured: same persistent bytes for the float and int8 model)
    memory, graph = _memory(tg, offline_plan)
    sm = spatial_model(tg)
    try:
        res = search_patches(sm, graph, tg.tensor_index, memory, grids=[g] if g else None,
                             split=split, max_overhead=max_overhead,
                             time_limit=0.6 * time_limit,
                             starts=region_starts(sm) if region_start is None
                             else [int(region_start)], extra_grids=BAND_GRIDS)
    except Refused as e:
        raise TileError(f"cannot tile {label!r}: {e}") from None
    choice = res.choice
    out = TileResult(res, choice, len(sm.ops), len(sm.ops))
    if g and not res.frontier:
        why = "; ".join(res.refused[:1]) or (
            f"no spatial region fits it (the spatial prefix ends at {res.prefix_end})")
        raise TileError(f"cannot tile {label!r} with grid {g[0]}x{g[1]}: {why}")
    original_curve = _curve(tg.graph)
    if choice is None:
        out.notes.append("no patch grid lowers TFLite Micro's total arena within the MAC budget; "
                         "the model is only reordered")
        written = tg
    else:
        plan = res.plan_of(choice)
        try:
            model = rewrite_model(tg, sm, plan)
        except Refused as e:
            raise TileError(f"cannot tile {label!r}: {e}") from None
        from .write import remove_offline_plan

        if remove_offline_plan(model) and not offline_plan:  # its tensor indices are gone
            out.notes.append("removed the file's offline memory plan (made for the unpatched "
                             "tensors); offline_plan=True writes one for the patched model")
        # the rewritten model object is scheduled as it is: no serialise-and-parse round trip
        written = graph_of(model, tg.name, label)
        if second_region and g is None and split is None and region_start is None:
            written, choice = _second_region(out, tg, sm, written, res, label, max_overhead,
                                             0.3 * time_limit, offline_plan)
            out.choice = choice
            if written is not None and choice is not res.choice:
                remove_offline_plan(written.model)
    left = time_limit - (time.perf_counter() - t0)  # the search had its share
    data, rr = reorder_model(written, label, out_label=dst, offline_plan=offline_plan,
                             inplace_quantize=offline_plan,
                             time_limit=max(0.5, left / 2), arena_time_limit=max(0.5, left / 2))
    out.ops_after = rr.ops
    out.peak, out.lower_bound, out.optimal = rr.peak, rr.lower_bound, rr.optimal
    out.offline_arena = rr.offline_arena
    out.notes += list(getattr(rr, "notes", []))
    if choice is not None and not offline_plan:
        out.notes.append("TFLite Micro's own planner may place the patched tensors in more than "
                         "the certified peak; offline_plan=True writes offsets that reach it")
    if out.second is not None:  # the written file is the second search's choice
        out.bound = out.second.bound(out.second.choice)
        out.bound["persistent_original"] = res.base_persistent
        out.bound["persistent_added"] = out.second.choice.persistent - res.base_persistent
        terms = ("model_input", "before_region", "after_region")
        by = max(terms, key=lambda k: out.bound[k])
        out.bound.update(bound_by=by, floor=res.base_persistent + out.bound[by])
        out.bound["above_floor"] = out.second.choice.total - out.bound["floor"]
    else:
        out.bound = res.bound(choice)
    out.curves = {"original": original_curve, "patched": _curve(written.graph, rr.order)}
    out.seconds = time.perf_counter() - t0
    if dst is not None:
        from ..fileio import write_atomic

        write_atomic(dst, data)
    return data, out


SECOND_REGION_TRIES = 4  # first-region candidates (best totals first) a second region follows


def _memory(tg, inplace: bool):
    """TFLite Micro's memory model for the search and the graph it prices: with ``inplace``
    (an offline plan will be written) float-to-int8 QUANTIZE operators run in place
    (`tflm_memory.quantize_aliases`)."""
    from .tflm_memory import TFLM_INPLACE, inplace_quantize_graph

    n = len(tg.subgraph.tensors)
    if inplace:
        return (TFLMMemory(activations=TFLM_INPLACE, n_tensors=n, quantized=True),
                inplace_quantize_graph(tg))
    return TFLMMemory(n_tensors=n, quantized=True), tg.graph


def _second_region(out: TileResult, tg, sm: SpatialModel, tg1, res1: SearchResult, label: str,
                   max_overhead: float, time_limit: float, inplace: bool = False):
    """A second patch region after the first one (multiple regions, each with its own grid:
    e.g. the stem in height bands, then the next blocks in a few patches). For the first
    search's best `SECOND_REGION_TRIES` candidates within the MAC budget (``tg1``: the model
    rewritten with its choice), the model rewritten with that candidate is searched again with
    the same evaluator, the region starting right after the first one's reassembly. Returns
    (the rewritten `TFLiteGraph`, the first-region candidate it follows); ``out.second`` holds
    the second search when a second region is kept (it lowers the total within the overall
    MAC budget)."""
    best = (res1.choice.total, tg1, res1.choice, None)
    deadline = time.perf_counter() + time_limit
    for first, plan1 in _first_regions(tg, sm, res1, max_overhead, time_limit / 4, inplace):
        left = deadline - time.perf_counter()
        if left <= 0.2:
            break
        try:
            cur = tg1 if first is res1.choice else graph_of(rewrite_model(tg, sm, plan1),
                                                             tg.name, label)
        except Refused:
            continue
        start = plan1.region.start + len(plan1.nodes)
        sm1 = spatial_model(cur)
        if start >= len(sm1.ops):
            continue
        memory, graph = _memory(cur, inplace)
        budget = (1 + max_overhead) / (1 + first.overhead) - 1  # relative to ``cur``
        try:
            res2 = search_patches(sm1, graph, cur.tensor_index, memory,
                                  max_overhead=max(budget, 0.0),
                                  time_limit=min(left, time_limit / 2), starts=[start],
                                  extra_grids=BAND_GRIDS)
        except Refused:
            continue
        c = res2.choice
        if c is None or c.total >= best[0]:
            continue
        try:
            model = rewrite_model(cur, sm1, res2.plan_of(c))
        except Refused:
            continue
        best = (c.total, graph_of(model, tg.name, label), first, res2)
    out.second = best[3]
    return best[1], best[2]


FIRST_GRIDS = ((2, 1), (3, 1), (4, 1), (5, 1), (6, 1), (8, 1), (2, 2), (2, 3), (3, 2), (3, 3))


def _first_regions(tg, sm: SpatialModel, res1: SearchResult, max_overhead: float,
                   time_limit: float, inplace: bool = False):
    """First regions for a second one to follow: the first search's choice, then, for the
    regions of its frontier that are shallower, the grids whose patched part alone (peak of
    the patched prefix, the rest of the model not counted: a second region will lower it)
    plus added persistent bytes is lowest. Yields (candidate, plan), at most
    `SECOND_REGION_TRIES`."""
    from ..memory import Problem
    from ..patches.region import grid_macs, plan_patches, regions
    from ..patches.search import heuristic_peak, patched_graph

    yield res1.choice, res1.plan_of(res1.choice)
    t_end = time.perf_counter() + time_limit
    memory, graph = _memory(tg, inplace)
    ends = {(c.region_start, c.region_ops) for c in res1.frontier
            if c.region_ops and c.region_ops < res1.choice.region_ops}
    total_macs = res1.original.macs
    scored = []
    for start, length in sorted(ends):
        regs = [r for r in regions(sm, [start])[0] if r.length == length]
        if not regs:
            continue
        r = regs[0]
        for g in FIRST_GRIDS:
            if time.perf_counter() > t_end:
                break
            if g[0] > r.hw[0] or g[1] > r.hw[1]:
                continue
            try:
                extra = grid_macs(sm, r, g) - sum(sm.op_macs(sm.ops[k]) for k in r.ops)
                if total_macs and extra / total_macs > max_overhead:
                    continue
                plan = plan_patches(sm, r, g)
            except Refused:
                continue
            pg = patched_graph(sm, graph, tg.tensor_index, plan, prefix_only=True)
            pk = heuristic_peak(pg, plan, Problem.from_graph(pg, memory.activations),
                                baselines=False)
            persist = memory.plan_persistent_delta(sm, plan)
            c = Candidate([sm.tensors[t].name for t in r.split], list(r.split), length, g, pk,
                          res1.base_persistent + persist, total_macs + extra,
                          extra / total_macs if total_macs else 0.0, 0, start,
                          note="first of two regions")
            scored.append((-length, pk + persist, c, plan))
    # the deepest shallower regions first (a second region takes over where their part of the
    # model is no longer the peak), each end's two best grids
    scored.sort(key=lambda x: (x[0], x[1]))
    per_end: dict = {}
    picked = [x for x in scored if per_end.setdefault(x[0], []).append(x) or
              len(per_end[x[0]]) <= 2]
    for *_, c, plan in picked[:SECOND_REGION_TRIES - 1]:
        yield c, plan


def region_starts(sm: SpatialModel) -> list[int]:
    """Where a patch region may start: at the model inputs, and after each of the first
    `MAX_START` operators when what crosses that boundary (tensors produced before it and read
    after, model inputs still read) is smaller than the model inputs: a leading QUANTIZE of a
    float input then runs whole and the float input dies before the patches, instead of being
    sliced per patch and kept live through all of them."""
    from ..patches.region import MAX_START

    def crossing(s: int) -> int:
        live = {t for k in range(s, len(sm.ops)) for t in sm.ops[k].inputs
                if t in sm.inputs or sm.producer.get(t, len(sm.ops)) < s}
        return sum(sm.tensors[t].nbytes for t in live)

    first = crossing(0)
    return [0] + [s for s in range(1, min(MAX_START, len(sm.ops) - 1) + 1)
                  if crossing(s) < first]


# ---------------------------------------------------------------------------- rewrite
def rewrite_model(tg, sm: SpatialModel, plan: PatchPlan):
    """A new ``ModelT``: the patched region (`PatchPlan` nodes, in patch order) in place of
    operators ``plan.region.start .. length - 1``, the rest unchanged, unused tensors
    dropped."""
    s = schema()
    model = copy.deepcopy(tg.model)
    from .write import inline_buffers

    inline_buffers(model, tg.data)
    sg = model.subgraphs[0]
    tensors = list(sg.tensors)
    buffers = list(model.buffers)
    codes = list(model.operatorCodes)
    old_ops = list(sg.operators)

    def opcode(name: str) -> int:
        code = getattr(s.BuiltinOperator, name)
        for i, c in enumerate(codes):
            if max(int(c.builtinCode), int(c.deprecatedBuiltinCode)) == code:
                return i
        codes.append(s.OperatorCodeT(deprecatedBuiltinCode=min(code, 127), builtinCode=code,
                                     version=1))
        return len(codes) - 1

    def const(name: str, arr: np.ndarray, ttype: int, quant=None) -> int:
        buffers.append(s.BufferT(data=np.frombuffer(np.ascontiguousarray(arr).tobytes(),
                                                    dtype=np.uint8)))
        tensors.append(s.TensorT(shape=list(arr.shape), type=ttype, buffer=len(buffers) - 1,
                                 name=name, quantization=copy.deepcopy(quant)))
        return len(tensors) - 1

    def like(t: int, hw, name: str) -> int:
        src = tensors[t]
        shape = [1, int(hw[0]), int(hw[1]), int(src.shape[3])]
        tensors.append(s.TensorT(shape=shape, type=src.type, buffer=0, name=name,
                                 quantization=copy.deepcopy(src.quantization)))
        return len(tensors) - 1

    strides = None
    final = {k: t for t, k in plan.result.items()}  # node -> original tensor it becomes
    node_t: list[int] = []
    new_ops = []
    for k, nd in enumerate(plan.nodes):
        ins = [r[1] if isinstance(r, tuple) else node_t[r] for r in nd.inputs]
        name = f"{_tname(tensors[nd.tensor])}/p{nd.patch}/{nd.kind}{k}"
        out = final.get(k)
        if out is None:
            out = like(nd.tensor, (nd.win.height, nd.win.width), name)
        node_t.append(out)
        if nd.kind == "slice":
            b = nd.base
            c = int(tensors[nd.tensor].shape[3])
            begin = np.array([0, nd.win.h0 - b.h0, nd.win.w0 - b.w0, 0], np.int32)
            end = np.array([1, nd.win.h1 - b.h0, nd.win.w1 - b.w0, c], np.int32)
            if strides is None:
                strides = const("memsched/patch_strides", np.ones(4, np.int32),
                                s.TensorType.INT32)
            bt = const(name + "/begin", begin, s.TensorType.INT32)
            et = const(name + "/end", end, s.TensorType.INT32)
            new_ops.append(s.OperatorT(opcodeIndex=opcode("STRIDED_SLICE"),
                                       inputs=[ins[0], bt, et, strides], outputs=[out],
                                       builtinOptionsType=s.BuiltinOptions.StridedSliceOptions,
                                       builtinOptions=s.StridedSliceOptionsT()))
        elif nd.kind == "pad":
            pads = np.array([[0, 0], [nd.pads[0], nd.pads[1]], [nd.pads[2], nd.pads[3]],
                             [0, 0]], np.int32)
            pt = const(name + "/paddings", pads, s.TensorType.INT32)
            if nd.pad_value == PAD_MIN:
                src = tensors[nd.tensor]
                val = _dtype_min(int(src.type), s)
                if val is None:
                    raise Refused(f"MAX_POOL_2D border padding for tensor type "
                                  f"{int(src.type)} (int8, uint8, int16, float32 only)")
                vt = const(name + "/value", val, int(src.type), src.quantization)
                new_ops.append(s.OperatorT(opcodeIndex=opcode("PADV2"),
                                           inputs=[ins[0], pt, vt], outputs=[out],
                                           builtinOptionsType=s.BuiltinOptions.PadV2Options,
                                           builtinOptions=s.PadV2OptionsT()))
            else:
                new_ops.append(s.OperatorT(opcodeIndex=opcode("PAD"), inputs=[ins[0], pt],
                                           outputs=[out],
                                           builtinOptionsType=s.BuiltinOptions.PadOptions,
                                           builtinOptions=s.PadOptionsT()))
        elif nd.kind == "concat":
            o = s.ConcatenationOptionsT()
            o.axis = nd.axis
            o.fusedActivationFunction = s.ActivationFunctionType.NONE
            new_ops.append(s.OperatorT(opcodeIndex=opcode("CONCATENATION"), inputs=list(ins),
                                       outputs=[out],
                                       builtinOptionsType=s.BuiltinOptions.ConcatenationOptions,
                                       builtinOptions=o))
        else:
            sop = sm.ops[nd.op]
            op = copy.deepcopy(old_ops[sop.index])
            acts = iter(ins)
            act_set = set(sop.inputs)
            new_in = []
            for t in op.inputs:
                new_in.append(next(acts) if int(t) in act_set else int(t))
            if sop.kind in ("PAD", "PADV2"):
                pads = np.array([[0, 0], [nd.pads[0], nd.pads[1]], [nd.pads[2], nd.pads[3]],
                                 [0, 0]], np.int32)
                new_in[1] = const(name + "/paddings", pads, s.TensorType.INT32)
            elif sop.cls == "window":
                op.builtinOptions.padding = s.Padding.VALID
            op.inputs = new_in
            op.outputs = [out]
            new_ops.append(op)
    sg.operators = old_ops[:plan.region.start] + new_ops + old_ops[plan.region.length:]
    sg.tensors = tensors
    model.buffers = buffers
    model.operatorCodes = codes
    _drop_unused_tensors(model)
    return model


def _curve(graph, order=None) -> list[int]:
    """Stable footprint of each operator of ``graph`` in ``order`` (default: file order) under
    TFLM's memory model."""
    from ..memory import Problem

    order = list(range(len(graph))) if order is None else list(order)
    return Problem.from_graph(graph, TFLM_MODEL).evaluate(order).steps


def _dtype_min(ttype: int, s):
    """The smallest value of a tensor type (MAX_POOL_2D's neutral padding), or None."""
    T = s.TensorType
    return {T.INT8: np.array(-128, np.int8), T.UINT8: np.array(0, np.uint8),
            T.INT16: np.array(-32768, np.int16),
            T.FLOAT32: np.array(np.finfo(np.float32).min, np.float32)}.get(ttype)


def _ints(x) -> list[int]:
    """A flatbuffer int vector (None, list or numpy array) as a list."""
    return [] if x is None else [int(t) for t in x]


def _tname(t) -> str:
    n = t.name
    return n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n or "t")


def _drop_unused_tensors(model) -> None:
    """Remove tensors no operator, subgraph input/output or signature refers to; renumber."""
    sg = model.subgraphs[0]
    used = set(_ints(sg.inputs)) | set(_ints(sg.outputs))
    for op in sg.operators:
        used |= {int(t) for t in (op.inputs if op.inputs is not None else []) if t >= 0}
        used |= {int(t) for t in (op.outputs if op.outputs is not None else []) if t >= 0}
        used |= {int(t) for t in (op.intermediates if op.intermediates is not None else [])}
    keep = sorted(used)
    remap = {t: i for i, t in enumerate(keep)}
    sg.tensors = [sg.tensors[t] for t in keep]

    def m(ts):
        return [remap[int(t)] if int(t) >= 0 else int(t) for t in ts]

    sg.inputs = m(_ints(sg.inputs))
    sg.outputs = m(_ints(sg.outputs))
    for op in sg.operators:
        op.inputs = m(op.inputs if op.inputs is not None else [])
        op.outputs = m(op.outputs if op.outputs is not None else [])
        if op.intermediates is not None:
            op.intermediates = m(op.intermediates)
    for sig in model.signatureDefs or []:
        if sig.subgraphIndex not in (0, None):
            continue
        for tm in list(sig.inputs or []) + list(sig.outputs or []):
            tm.tensorIndex = remap[int(tm.tensorIndex)]


# ---------------------------------------------------------------------------- checking
def compare_outputs(path_a: str, path_b: str, count: int = 2, seed: int = 0,
                    tflm: bool = True) -> dict:
    """Run two .tflite files on the same random inputs; outputs compared bit for bit with
    LiteRT (no default delegates) and, when installed, TFLite Micro."""
    from . import tflm as _tflm
    from .litert import make_interpreter, random_inputs

    ia, ib = make_interpreter(path_a), make_interpreter(path_b)
    feeds = random_inputs(ia.get_input_details(), count, seed)
    lit, tfl, maxdiff, note = True, None, 0, None
    for feed in feeds:
        outs = []
        for it in (ia, ib):
            by_name = {d["name"]: d["index"] for d in it.get_input_details()}
            for name, arr in feed.items():
                it.set_tensor(by_name[name], arr)
            it.invoke()
            outs.append([it.get_tensor(d["index"]).copy() for d in it.get_output_details()])
        for x, y in zip(*outs):
            if not np.array_equal(x, y):
                lit = False
                maxdiff = max(maxdiff, float(np.abs(x.astype(np.float64) - y).max()))
        if tflm and _tflm.available() and note is None:
            ins = [feed[d["name"]] for d in ia.get_input_details()]
            n = len(ia.get_output_details())
            try:
                oa = _tflm.run_tflm(path_a, ins, n)
            except RuntimeError as e:  # TFLM cannot run the original: nothing to compare
                note = f"TFLM cannot run the original model: {str(e)[-200:]}"
                continue
            try:
                ob = _tflm.run_tflm(path_b, ins, n)
                same = all(np.array_equal(x, y) for x, y in zip(oa, ob))
            except RuntimeError as e:
                same, note = False, f"TFLM cannot run the patched model: {str(e)[-200:]}"
            tfl = same if tfl is None else (tfl and same)
    return {"litert_equal": lit, "tflm_equal": tfl, "tflm_note": note, "max_abs_diff": maxdiff,
            "inputs": len(feeds)}


def measure_tile(src_path: str, dst_path: str, count: int = 2) -> dict:
    """TFLite Micro's minimal total arena (bisection) of both files, and output equality."""
    from . import tflm as _tflm

    out = compare_outputs(src_path, dst_path, count)
    if _tflm.available():
        a = _tflm.min_arena_bytes(src_path)
        b = _tflm.min_arena_bytes(dst_path)
        out.update({"tflm_arena_original": a, "tflm_arena_patched": b,
                    "tflm_arena_ratio": round(a / b, 3) if b else None,
                    "tflm_sections_original": _tflm.arena_sections(src_path, a),
                    "tflm_sections_patched": _tflm.arena_sections(dst_path, b)})
    return out

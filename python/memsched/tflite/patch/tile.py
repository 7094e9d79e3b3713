"""Patch-based execution written as a plain .tflite file that stock LiteRT and TFLite Micro run.

`tile_tflite` searches the regions, each with its split point and grid
(`memsched.patches.search_model`: TFLite Micro's total arena = certified activation peak +
persistent bytes, one MAC overhead budget for the whole model), then rewrites subgraph 0 with
builtin operators only, region by region:

* ``GATHER`` (consecutive indices along the one axis a window cuts: fewer instructions and
  persistent bytes) or ``STRIDED_SLICE`` (a window cutting rows and columns) cuts each
  patch's window of the model input (with its halo) and crops a tensor's window where a
  consumer reads less of it; a region input two patches pad may be padded once, whole, and
  the windows cut from it, pads included (`memsched.patches.plans.pad_sources`);
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

from ...patches import (PAD_MIN, Candidate, Clock, Described, PatchOptions, PatchPlan, Refused,
                        SearchResult, SpatialModel, entry_options, search_ways, unmet_grid)
from ..format.read import TFLiteModelError, graph_of, read_tflite, schema
from ..memory.instructions import tflm_time
from ..memory.model import (TFLM_MODEL, TFLMMemory, pad_constant, slice_constants,
                            tflm_runtime, with_scratch)
from ..plan.reorder import _scratch, _target_arena
from .describe import spatial_model


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
    # TFLite Micro's minimal total arena on ``target``, computed from the files
    # (`memory.arena.arena`): the written one and the original (None: not priced)
    target: str | None = None
    arena_bytes: int | None = None
    original_arena_bytes: int | None = None
    arena_unpriced: str | None = None  # why ``arena_bytes`` is None with a target
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
    # the written slices of narrow-channel maps read as rows (`memory.instructions.view_slices`)
    views: bool = False

    def as_dict(self, curves: bool = False) -> dict:
        """JSON-ready summary; ``curves``: also the memory curves (bytes live per step under
        TFLM's model) of the original file order and of the written patched order."""
        d = {"patched": self.choice is not None,
             "choice": self.choice.as_dict() if self.choice else None,
             "ops_before": self.ops_before, "ops_after": self.ops_after,
             "peak_bytes": self.peak, "lower_bound": self.lower_bound,
             "optimal": self.optimal, "offline_arena_bytes": self.offline_arena,
             "target": self.target, "arena_bytes": self.arena_bytes,
             "original_arena_bytes": self.original_arena_bytes,
             "arena_unpriced": self.arena_unpriced,
             "seconds": round(self.seconds, 3), "notes": self.notes, "bound": self.bound,
             "views": self.views,
             "search": self.search.as_dict(),
             # the regions after the first (the choice's ``regions`` lists them all)
             "second_region": self.choice.sequence[1].region_dict()
             if self.choice is not None and len(self.choice.sequence) > 1 else None}
        if self.measured:
            d["measured"] = self.measured
        if curves:
            d["curves"] = self.curves
        return d


def tile_tflite(src, dst: str | None = None, grid=None, split: str | None = None,
                max_overhead: float | None = None, offline_plan: bool = False,
                time_limit: float | None = None, region_start: int | None = None,
                second_region: bool | None = None, padding: str | None = None, *,
                max_regions: int | None = None, options: PatchOptions | None = None,
                target: str | None = "cortex-m", max_slowdown=...,
                views: bool | None = None) -> tuple[bytes, TileResult]:
    """Search and write a patch-based version of the .tflite model ``src`` (path or bytes).

    The search's options (`memsched.patches.PatchOptions`, given whole as ``options`` or by
    name; a name given here wins): ``grid``: ``"RxC"`` or (rows, cols) to force the grid;
    ``split``: name of the tensor the region must end at; ``max_overhead``: extra MACs allowed
    for the default choice (default 0.3 = +30 %); ``region_start``: the operator the region
    must start at (default: `memsched.patches.region_starts`); ``max_regions``: regions in
    sequence, each starting where the one before ends, each with its own grid (default 4;
    kept only when they lower the total within the one MAC budget; a forced grid, split or
    start asks for one; ``second_region``: its deprecated name, False = 1); ``padding``:
    ``max_slowdown``: the most instructions per ``Invoke()`` the choice may run, predicted
    for TFLite Micro with the CMSIS-NN kernels on a Cortex-M55
    (`memsched.tflite.memory.instructions`), as a factor of the original file's (default
    1.10; None: no bound); ``padding``:
    ``"explicit"`` (PADs at patch borders, exact windows) or ``"margins"`` (operators keep
    their SAME padding on wider windows: no PADs, fewer crops; more MACs); default: the
    search prices both; ``time_limit``: the search's wall-clock safety net in seconds (the
    work budgets decide; a note says when it stopped the search). ``target``: the device the
    file is planned for (`memory.arena.TARGETS`): ``cortex-m`` (default: a 32-bit Cortex-M with
    the CMSIS-NN kernels: the search prices TFLM's persistent bytes at 32-bit sizes and each
    copied kernel's scratch buffers, and the offline plan leaves room for them), ``host`` (the
    ``tflite-micro`` package's reference kernels) or None (tensors only, 64-bit prices).
    ``views``: read slices of narrow-channel maps as rows (`memory.instructions.view_slices`: a
    RESHAPE of the source to [1, H, W*C], one memcpy per row, a RESHAPE of the cut back; both
    in place under the offline plan, each costing its persistent bytes); only with
    ``offline_plan`` on ``cortex-m``. None (default): under a time bound the search runs with
    and without them and the lower total wins; True / False: always / never.
    Returns (file bytes, `TileResult`: ``arena_bytes`` is TFLite Micro's minimal arena of the
    written file on ``target``, computed from it); writes ``dst`` atomically when given. When
    no candidate lowers the total arena within the budget, the model is only reordered; a
    file that would need more than the original on ``target`` is never written: the original
    is (with a note)."""
    opts = entry_options(TileError, options, grid=grid, split=split, max_overhead=max_overhead,
                         time_limit=time_limit, region_start=region_start,
                         second_region=second_region, padding=padding, max_regions=max_regions,
                         max_slowdown=max_slowdown)
    from ..plan.reorder import reorder_model

    t0 = time.perf_counter()
    tg = read_tflite(src)
    label = src if isinstance(src, str) else "model.tflite"
    # TFLM's CONV_2D / DEPTHWISE_CONV_2D allocate the per-channel multiplier and shift arrays
    # for float models too (measured: same persistent bytes for the float and int8 model)
    scratch = _scratch(tg, target)
    sm = _with_workspace(spatial_model(tg), scratch)
    # row views (`memory.instructions.view_slices`): their RESHAPEs run in place under an
    # offline plan only, priced in time on the Cortex-M. They buy instructions with a
    # RESHAPE's persistent bytes each, so under a time bound the search runs with and without
    # them and the lower total wins (ties: fewer instructions); without a bound it asks for RAM
    # alone: none.
    able = bool(offline_plan and target == "cortex-m")
    if views and not able:
        raise TileError("views need offline_plan=True and target='cortex-m' (their RESHAPEs "
                        "run in place under the offline plan only)")
    tried = [False]
    if views or (views is None and able and opts.max_slowdown is not None):
        tried = [True] if views else [True, False]
    ways = []
    for v in tried:
        memory, graph = _memory(tg, offline_plan, target, scratch, v)
        # time is priced for the board the kernels' cost model was calibrated on
        time_model = tflm_time(tg, v) if target == "cortex-m" else None
        ways.append((Described(sm, graph, tg.tensor_index),
                     tflm_runtime(memory, time=time_model)))
    try:
        way, res = search_ways(ways, opts)
    except Refused as e:
        raise TileError(f"cannot tile {label!r}: {e}") from None
    views = tried[way]
    choice = res.choice
    out = TileResult(res, choice, len(sm.ops), len(sm.ops))
    if res.stopped:  # the safety net, not the work budgets: another machine may differ
        out.notes.append(Clock.note_of(res.stopped))
    unmet = unmet_grid(opts, res)
    if unmet:
        raise TileError(f"cannot tile {label!r} with {unmet}")
    original_curve = _curve(with_scratch(tg.graph, scratch))
    if choice is None:
        out.notes.append("no patch grid lowers TFLite Micro's total arena within the MAC budget; "
                         "the model is only reordered")
        written = tg
    else:
        try:
            model = rewrite_model(tg, sm, res.plans_of(choice), views=views)
        except Refused as e:
            raise TileError(f"cannot tile {label!r}: {e}") from None
        from ..format.write import remove_offline_plan

        if remove_offline_plan(model) and not offline_plan:  # its tensor indices are gone
            out.notes.append("removed the file's offline memory plan (made for the unpatched "
                             "tensors); offline_plan=True writes one for the patched model")
        # the rewritten model object is scheduled as it is: no serialise-and-parse round trip
        written = graph_of(model, tg.name, label)
    # the written order and offline plan are bounded by work too (`Budget.final_options`,
    # ``arena_nodes``), never by what time the search left: the same file on any machine
    # (without the native packer, CP-SAT plans the offsets under a fixed time limit)
    from ...packing import native_available

    work = opts.budget
    data, rr = reorder_model(written, label, out_label=dst, offline_plan=offline_plan,
                             inplace_quantize=offline_plan,
                             schedule_options=work.final_options(),
                             arena_time_limit=None if native_available() else
                             max(0.5, (opts.time_limit or 10.0) / 4),
                             arena_nodes=work.arena_nodes, target=target, views=views)
    if target is not None:
        out.target, out.arena_bytes = target, rr.arena_bytes
        why = [rr.arena_unpriced] if rr.arena_unpriced else []
        out.original_arena_bytes = _target_arena(tg.data, target, why)
        out.arena_unpriced = why[0] if why else None
        larger = None not in (out.arena_bytes, out.original_arena_bytes) and \
            out.arena_bytes > out.original_arena_bytes
        if larger and opts.forced:  # the caller's grid, split or start: written, with a note
            out.notes.append(f"the rewrite needs {out.arena_bytes:,} B on {target}, more than "
                             f"the original's {out.original_arena_bytes:,} B")
        elif larger:
            # never larger than the original on the target: the original is written
            out.notes.append(f"the rewrite needs {out.arena_bytes:,} B on {target}, the "
                             f"original {out.original_arena_bytes:,} B: the original is "
                             "written unchanged")
            data, out.arena_bytes, out.choice = bytes(tg.data), \
                out.original_arena_bytes, None
            if dst is not None:
                from ...fileio import write_atomic

                write_atomic(dst, data)
            out.seconds = time.perf_counter() - t0
            return data, out
    out.ops_after = rr.ops
    out.peak, out.lower_bound, out.optimal = rr.peak, rr.lower_bound, rr.optimal
    out.offline_arena = rr.offline_arena
    out.notes += list(getattr(rr, "notes", []))
    if views and choice is not None:
        from ..format.aliases import reshape_aliases

        n = len(reshape_aliases(written.model))
        out.views = n > 0
        if n:
            out.notes.append(f"windows read as rows: {n} RESHAPE view(s) in place under the "
                             "offline plan (one memcpy per row instead of one per pixel)")
    if choice is not None and not offline_plan:
        out.notes.append("TFLite Micro's own planner may place the patched tensors in more than "
                         "the certified peak; offline_plan=True writes offsets that reach it")
    out.bound = res.bound(choice)
    patched_graph = written.graph
    if views and choice is not None:  # the view RESHAPEs share their input's buffer
        from ..memory.model import view_graph

        patched_graph = view_graph(written)[0]
    out.curves = {"original": original_curve,  # the kernels' scratch included, as priced
                  "patched": _curve(with_scratch(patched_graph, _scratch(written, target)),
                                    rr.order)}
    out.seconds = time.perf_counter() - t0
    if dst is not None:
        from ...fileio import write_atomic

        write_atomic(dst, data)
    return data, out


def _memory(tg, inplace: bool, target: str | None = None, scratch: dict | None = None,
            views: bool = False):
    """TFLite Micro's memory model for the search and the graph it prices: with ``inplace``
    (an offline plan will be written) float-to-int8 QUANTIZE operators run in place
    (`memory.model.quantize_aliases`); persistent bytes at ``target``'s sizes
    (`memory.arena.persistent_price`; None: the measured 64-bit host prices) and each
    operator's ``scratch`` buffers as its workspace; ``views``: slices read as row views
    where that pays (`memory.instructions.view_slices`)."""
    from ..memory.model import PERSISTENT, TFLM_INPLACE, inplace_quantize_graph

    n = len(tg.subgraph.tensors)
    price = PERSISTENT
    if target is not None:
        from ..memory.arena import persistent_price

        price = persistent_price(target)
    if inplace:
        return (TFLMMemory(activations=TFLM_INPLACE, n_tensors=n, quantized=True,
                           price=price, views=views),
                with_scratch(inplace_quantize_graph(tg), scratch))
    return TFLMMemory(n_tensors=n, quantized=True, price=price), with_scratch(tg.graph, scratch)


def _with_workspace(sm: SpatialModel, scratch: dict | None) -> SpatialModel:
    """``sm`` with each operator's scratch buffers as its workspace (each patch copy of a
    kernel requests its own: CMSIS-NN's sizes do not shrink with the window)."""
    if not scratch:
        return sm
    from dataclasses import replace

    ops = [replace(op, workspace=sum(scratch.get(op.index, ()))) for op in sm.ops]
    return SpatialModel(ops, sm.tensors, sm.inputs, sm.outputs, sm.macs, sm.name)


# ---------------------------------------------------------------------------- rewrite
def rewrite_model(tg, sm: SpatialModel, plans, views: bool = False):
    """A new ``ModelT``: each patched region (`PatchPlan` nodes, in patch order; ``plans``: one
    plan or several, in model order) in place of its operators ``plan.region.start .. length -
    1``, the rest unchanged, unused tensors dropped. A region's split tensors are reassembled
    into their own tensor indices, which the next region reads like any region input.
    ``views``: the slices `memory.instructions.view_slices` picks are read as rows (a RESHAPE of the
    source to [1, H, W*C] shared by its slices, a STRIDED_SLICE of rows x columns, a RESHAPE
    of the cut back to NHWC): for a file with an offline plan, where the RESHAPEs run in
    place."""
    plans = [plans] if isinstance(plans, PatchPlan) else list(plans)
    s = schema()
    model = copy.deepcopy(tg.model)
    from ..format.write import inline_buffers

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

    consts: dict = {}  # one tensor per distinct unquantized constant: each costs an eval tensor

    def const(name: str, arr: np.ndarray, ttype: int, quant=None) -> int:
        data = np.ascontiguousarray(arr).tobytes()
        key = (ttype, tuple(arr.shape), data)
        if quant is None and key in consts:
            return consts[key]
        buffers.append(s.BufferT(data=np.frombuffer(data, dtype=np.uint8)))
        tensors.append(s.TensorT(shape=list(arr.shape), type=ttype, buffer=len(buffers) - 1,
                                 name=name, quantization=copy.deepcopy(quant)))
        if quant is None:
            consts[key] = len(tensors) - 1
        return len(tensors) - 1

    def like(t: int, hw, name: str) -> int:
        src = tensors[t]
        shape = [1, int(hw[0]), int(hw[1]), int(src.shape[3])]
        tensors.append(s.TensorT(shape=shape, type=src.type, buffer=0, name=name,
                                 quantization=copy.deepcopy(src.quantization)))
        return len(tensors) - 1

    segments = []  # the new operator list: whole operators between the patched regions
    at = 0
    for i, plan in enumerate(plans):
        segments += old_ops[at:plan.region.start]
        segments += _patched_ops(s, plan, sm, tensors, old_ops, opcode, const, like,
                                 f"/r{i}" if i else "", views)
        at = plan.region.length
    sg.operators = segments + old_ops[at:]
    sg.tensors = tensors
    model.buffers = buffers
    model.operatorCodes = codes
    _drop_unused_tensors(model)
    return model


def _patched_ops(s, plan: PatchPlan, sm: SpatialModel, tensors: list, old_ops: list, opcode,
                 const, like, tag: str = "", views: bool = False) -> list:
    """The operators of one patched region (`rewrite_model`; ``opcode`` / ``const`` / ``like``
    add operator codes, constant tensors and window tensors to the model being written;
    ``tag`` ends the new tensors' names, unique per region)."""
    from ..memory.instructions import view_slices
    from ..memory.model import VIEW_SUFFIX
    from ..memory.nodes import gather_axis, gather_indices, view_shapes

    final = {k: t for t, k in plan.result.items()}  # node -> original tensor it becomes
    node_t: list[int] = []
    new_ops = []
    viewed = view_slices(sm, plan.nodes, views)[0]
    rows: dict = {}  # a slice's source -> its row view tensor (one RESHAPE per source)

    def reshape(src: int, shape, name: str) -> int:
        """A RESHAPE of tensor ``src`` to ``shape`` (one input; the shape in its options)
        into a new tensor named ``name`` + `VIEW_SUFFIX` (the offline plan aliases it)."""
        t = tensors[src]
        tensors.append(s.TensorT(shape=list(shape), type=t.type, buffer=0,
                                 name=name + VIEW_SUFFIX,
                                 quantization=copy.deepcopy(t.quantization)))
        o = s.ReshapeOptionsT()
        o.newShape = list(shape)
        new_ops.append(s.OperatorT(opcodeIndex=opcode("RESHAPE"), inputs=[src],
                                   outputs=[len(tensors) - 1],
                                   builtinOptionsType=s.BuiltinOptions.ReshapeOptions,
                                   builtinOptions=o))
        return len(tensors) - 1
    for k, nd in enumerate(plan.nodes):
        ins = [r[1] if isinstance(r, tuple) else node_t[r] for r in nd.inputs]
        name = f"{_tname(tensors[nd.tensor])}/p{nd.patch}/{nd.kind}{k}{tag}"
        out = final.get(k)
        if out is None:
            out = like(nd.tensor, (nd.win.height, nd.win.width), name)
        node_t.append(out)
        axis = gather_axis(nd, int(tensors[nd.tensor].type)) \
            if nd.kind == "slice" and k not in viewed else None
        if axis is not None:
            # a window cutting one axis: a GATHER of consecutive indices along it, cheaper
            # than STRIDED_SLICE in instructions and persistent bytes (`memory.nodes`)
            it = const(name + "/indices", np.array(gather_indices(nd, axis), np.int32),
                       s.TensorType.INT32)
            o = s.GatherOptionsT()
            o.axis, o.batchDims = axis, 0
            new_ops.append(s.OperatorT(opcodeIndex=opcode("GATHER"), inputs=[ins[0], it],
                                       outputs=[out],
                                       builtinOptionsType=s.BuiltinOptions.GatherOptions,
                                       builtinOptions=o))
        elif nd.kind == "slice":
            # STRIDED_SLICE, not SLICE: TFLite Micro's SLICE would save 120 B of records per
            # cut (no Init, no options) but copies element by element, where STRIDED_SLICE
            # copies each contiguous run at once (measured on the M55: +8-27 % instructions
            # on the MobileNet rows of docs/patches.md for 0.1-2 % of arena)
            c = int(tensors[nd.tensor].shape[3])
            view = k in viewed
            begin, end, step = slice_constants(nd, c, view)
            bt = const(name + "/begin", np.array(begin, np.int32), s.TensorType.INT32)
            et = const(name + "/end", np.array(end, np.int32), s.TensorType.INT32)
            strides = const("memsched/patch_strides", np.array(step, np.int32),
                            s.TensorType.INT32)
            src, cut = ins[0], out
            if view:  # rows of the source's [1, H, W*C] view, one memcpy per row
                src_shape, cut_shape = view_shapes(nd, c)
                key = nd.inputs[0]
                if key not in rows:
                    rows[key] = reshape(ins[0], src_shape, f"{_tname(tensors[ins[0]])}/rows{tag}")
                src = rows[key]
                t = tensors[out]
                tensors.append(s.TensorT(shape=list(cut_shape), type=t.type, buffer=0,
                                         name=name + "/rows" + VIEW_SUFFIX,
                                         quantization=copy.deepcopy(t.quantization)))
                cut = len(tensors) - 1
            new_ops.append(s.OperatorT(opcodeIndex=opcode("STRIDED_SLICE"),
                                       inputs=[src, bt, et, strides], outputs=[cut],
                                       builtinOptionsType=s.BuiltinOptions.StridedSliceOptions,
                                       builtinOptions=s.StridedSliceOptionsT()))
            if view:  # the cut seen as its NHWC window, in place
                o = s.ReshapeOptionsT()
                o.newShape = [int(d) for d in tensors[out].shape]
                new_ops.append(s.OperatorT(opcodeIndex=opcode("RESHAPE"), inputs=[cut],
                                           outputs=[out],
                                           builtinOptionsType=s.BuiltinOptions.ReshapeOptions,
                                           builtinOptions=o))
        elif nd.kind == "pad":
            pads = np.array(pad_constant(nd), np.int32)
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
                pads = np.array(pad_constant(nd), np.int32)
                new_in[1] = const(name + "/paddings", pads, s.TensorType.INT32)
            elif sop.cls == "window" and not nd.implicit:  # margins: its own padding
                op.builtinOptions.padding = s.Padding.VALID
            op.inputs = new_in
            op.outputs = [out]
            new_ops.append(op)
    return new_ops


def _curve(graph, order=None) -> list[int]:
    """Stable footprint of each operator of ``graph`` in ``order`` (default: file order) under
    TFLM's memory model."""
    from ...memory import Problem

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
    from .. import tflm as _tflm
    from ..litert import make_interpreter, random_inputs

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
    from .. import tflm as _tflm

    out = compare_outputs(src_path, dst_path, count)
    if _tflm.available():
        a = _tflm.min_arena_bytes(src_path)
        b = _tflm.min_arena_bytes(dst_path)
        out.update({"tflm_arena_original": a, "tflm_arena_patched": b,
                    "tflm_arena_ratio": round(a / b, 3) if b else None,
                    "tflm_sections_original": _tflm.arena_sections(src_path, a),
                    "tflm_sections_patched": _tflm.arena_sections(dst_path, b)})
    return out

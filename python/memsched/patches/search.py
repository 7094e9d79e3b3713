"""Choose the split point and the patch grid: one evaluator, a Pareto frontier, a default.

For every candidate (region = spatial prefix ending at its split tensors, grid ``R x C``) the
evaluator prices

* **peak**: the activation peak of the patched graph under TFLite Micro's memory model
  (`memsched.importers.tflite_reorder.TFLM_MODEL`, the one evaluator of `memsched.memory`).
  During the search: the patched prefix run patch by patch (each row's patches, its row
  concatenation, then the final one) as an `OpGraph` of its own, and the rest of the model in
  file order -- after the region exactly the split tensors (and model inputs still read) are
  live, so the peak is the larger of the two parts. The frontier's candidates are then
  scheduled whole by the certified scheduler (`memsched.schedule(graph, "auto", TFLM_MODEL)`),
  whose order the rewrite writes;
* **persistent**: what TFLite Micro keeps per operator and per tensor in the tail of its arena
  (`TFLMPersistent`: node structs, eval tensors, each kernel's op data, and the per-channel
  quantization arrays that every copied int8 convolution repeats). Schedule-independent;
* **total** = peak + persistent: the arena a user must give TFLite Micro (the objective);
* **MACs** of the whole model (region operators on their patch windows).

The frontier keeps the candidates no other beats on both total and MACs; the default choice is
the lowest total within ``max_overhead`` extra MACs, ties to fewer patches. Candidates are
visited by MACs, and one whose lower bound (the rest of the model's peak, twice the split
tensors for the reassembly, plus its persistent bytes) cannot beat a cheaper candidate is
skipped: the frontier is exact for the evaluator, at a fraction of the work.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..graph import GraphBuilder, OpGraph
from ..memory import Problem
from .geometry import PAD_MIN, SpatialModel
from .region import PatchPlan, Refused, Region, grid_macs, plan_patches, regions

REFINE_SECONDS = 0.2  # the scheduler's limit per refined candidate
REFINE_WINDOW = 1.25  # refine candidates whose heuristic total is within this of the best
DEFAULT_GRIDS = ((1, 2), (2, 1), (1, 3), (3, 1), (2, 2), (1, 4), (4, 1), (2, 3), (3, 2),
                 (2, 4), (4, 2), (3, 3), (3, 4), (4, 3), (4, 4), (5, 5), (6, 6), (7, 7), (8, 8))


@dataclass(frozen=True)
class TFLMPersistent:
    """Bytes TFLite Micro allocates in the persistent (tail) section, per operator and tensor.

    Measured with the ``tflite-micro`` Python interpreter's recording allocator (reference
    kernels, 64-bit host): a ``NodeAndRegistration`` of 64 B per operator, a
    ``TfLiteEvalTensor`` of 24 B per tensor of the subgraph (constants included), each kernel's
    op data (``op_data``: measured per kind as the tail growth of int8 models with 1 and 11
    copies of the operator, minus node and tensors) and, for CONV_2D / DEPTHWISE_CONV_2D, the
    per-channel output multiplier and shift arrays: 2 x 4 B per output channel, each array
    16-byte aligned (TFLM's Prepare allocates them for float models too; ``quantized=False``
    leaves them out, for runtimes that do not)."""

    node: int = 64
    eval_tensor: int = 24
    op_data: tuple = (("CONV_2D", 108), ("DEPTHWISE_CONV_2D", 108), ("STRIDED_SLICE", 120),
                      ("PAD", 64), ("PADV2", 64), ("CONCATENATION", 88), ("ADD", 72),
                      ("MAX_POOL_2D", 72), ("AVERAGE_POOL_2D", 72), ("MUL", 53),
                      ("HARD_SWISH", 32), ("RELU", 32), ("QUANTIZE", 32), ("LEAKY_RELU", 35),
                      ("RELU6", 16), ("LOGISTIC", 16), ("TANH", 16))
    default_op_data: int = 48
    per_channel: int = 8

    def op(self, kind: str, cout: int = 0, quantized: bool = True, new_tensors: int = 1) -> int:
        data = dict(self.op_data).get(kind, self.default_op_data)
        chan = self.per_channel * cout if quantized and kind in ("CONV_2D",
                                                                  "DEPTHWISE_CONV_2D") else 0
        return self.node + data + _align16(chan // 2) * 2 + self.eval_tensor * new_tensors


def _align16(n: int) -> int:
    return -(-n // 16) * 16


PERSISTENT = TFLMPersistent()
# new constant tensors per inserted node: STRIDED_SLICE begin/end (strides shared), PAD paddings
NEW_CONSTS = {"slice": 2, "pad": 1, "concat": 0, "op": 0}
NODE_KIND = {"slice": "STRIDED_SLICE", "pad": "PAD", "concat": "CONCATENATION"}


@dataclass
class Candidate:
    split: list[str]  # split tensor names
    split_index: list[int]  # their file tensor indices
    region_ops: int
    grid: tuple[int, int]
    peak: int
    persistent: int
    macs: int
    overhead: float  # extra MACs / original MACs
    ops: int  # operators of the patched model
    certified: bool = False  # peak proven optimal for the patched graph
    lower_bound: int = 0
    note: str = ""

    @property
    def total(self) -> int:
        return self.peak + self.persistent

    @property
    def patches(self) -> int:
        return self.grid[0] * self.grid[1]

    def as_dict(self) -> dict:
        return {"split": self.split, "region_ops": self.region_ops,
                "grid": f"{self.grid[0]}x{self.grid[1]}", "patches": self.patches,
                "peak_bytes": self.peak, "persistent_bytes": self.persistent,
                "total_bytes": self.total, "macs": self.macs,
                "mac_overhead": round(self.overhead, 4), "ops": self.ops,
                "certified": self.certified, "note": self.note}


@dataclass
class SearchResult:
    original: Candidate  # the unpatched model (grid 1x1)
    frontier: list[Candidate]
    choice: Candidate | None
    evaluated: int
    skipped: int
    refused: list[str]
    prefix_end: str  # why the spatial prefix ends
    seconds: float
    plans: dict = field(default_factory=dict, repr=False)  # (region_ops, grid) -> PatchPlan

    def as_dict(self) -> dict:
        return {"original": self.original.as_dict(),
                "choice": self.choice.as_dict() if self.choice else None,
                "frontier": [c.as_dict() for c in self.frontier],
                "candidates_evaluated": self.evaluated, "candidates_pruned": self.skipped,
                "refused": self.refused, "prefix_end": self.prefix_end,
                "seconds": round(self.seconds, 3)}


# ---------------------------------------------------------------------------- persistent bytes
def model_persistent(sm: SpatialModel, n_tensors: int, quantized: bool,
                     price: TFLMPersistent = PERSISTENT) -> int:
    """Persistent bytes of the unpatched model (``n_tensors``: every tensor of the subgraph)."""
    return sum(price.op(op.kind, op.cout, quantized, 0) for op in sm.ops) + \
        price.eval_tensor * n_tensors


def plan_persistent_delta(sm: SpatialModel, plan: PatchPlan, quantized: bool,
                          price: TFLMPersistent = PERSISTENT) -> int:
    """Persistent bytes the patched region adds over the region it replaces."""
    add = 0
    for nd in plan.nodes:
        if nd.kind == "op":
            op = sm.ops[nd.op]
            add += price.op(op.kind, op.cout, quantized, 1)
        else:
            consts = NEW_CONSTS[nd.kind] + (nd.kind == "pad" and nd.pad_value == PAD_MIN)
            add += price.op(NODE_KIND[nd.kind], 0, quantized, 1 + consts)
    if any(nd.kind == "slice" for nd in plan.nodes):
        add += price.eval_tensor  # the shared strides tensor
    removed = sum(price.op(sm.ops[k].kind, sm.ops[k].cout, quantized, 1)
                  for k in plan.region.ops)
    removed -= price.eval_tensor * len(plan.region.split)  # split tensors keep their index
    return add - removed


# ---------------------------------------------------------------------------- graphs
def patched_graph(sm: SpatialModel, graph: OpGraph, tensor_index: list[int],
                  plan: PatchPlan | None, prefix_only: bool = False) -> OpGraph:
    """The patched model as an `OpGraph` (``Op.source``: ``("node", k)`` for the patched
    region's nodes, ``("op", v)`` for the model's other operators). ``graph``: the model's
    `OpGraph` with op ``v`` = operator ``v`` and ``tensor_index[t]`` the file index of its tensor
    ``t`` (`read_tflite`). ``prefix_only``: just the patched region, the tensors the rest of
    the model reads kept to the end."""
    b = GraphBuilder(f"{graph.name}.patched")
    tmap: dict[int, int] = {}  # file tensor index -> new tensor id
    for gt in graph.input_tensors:
        tmap[tensor_index[gt]] = b.input(graph.tensors[gt].name, graph.tensors[gt].nbytes)
    length = plan.region.length if plan else 0
    node_t: list[int] = []
    if plan:
        for k, nd in enumerate(plan.nodes):
            ins = [tmap[r[1]] if isinstance(r, tuple) else node_t[r] for r in nd.inputs]
            vid = b.op(f"patch{nd.patch}:{nd.kind}:{k}", nd.kind, ins,
                       [(f"n{k}", plan.node_bytes(sm, k))], source=("node", k))
            node_t.append(b.ops[vid].outputs[0])
        for t, k in plan.result.items():
            tmap[t] = node_t[k]
    if prefix_only:
        for t in list(tmap):
            if t in set(sm.outputs) or any(c >= length for c in sm.consumers.get(t, [])):
                b.mark_output(tmap[t])
        return b.build()
    for v in range(length, len(graph.ops)):
        op = graph.ops[v]
        vid = b.op(op.name, op.kind, [tmap[tensor_index[gt]] for gt in op.inputs],
                   [(graph.tensors[gt].name, graph.tensors[gt].nbytes) for gt in op.outputs],
                   source=("op", v))
        for gt, nt in zip(op.outputs, b.ops[vid].outputs):
            tmap[tensor_index[gt]] = nt
    for gt in graph.output_tensors:
        b.mark_output(tmap[tensor_index[gt]])
    return b.build()


def patch_order(graph: OpGraph, plan: PatchPlan | None = None, cut: int | None = None
                ) -> list[int]:
    """Patch by patch, each row's concatenation right after its last patch (the input order of
    `patched_graph`, which is built that way). With ``cut`` (and the ``plan``): the slices of
    the model inputs of patches ``cut..`` run right before patch ``cut``, which frees the
    inputs early at the price of holding those slices."""
    nodes = [v for v, op in enumerate(graph.ops) if isinstance(op.source, tuple)
             and op.source[0] == "node"]
    early: list[int] = []
    if plan is not None and cut is not None:
        early = [v for v in nodes if plan.nodes[graph.ops[v].source[1]].kind == "slice"
                 and isinstance(plan.nodes[graph.ops[v].source[1]].inputs[0], tuple)
                 and plan.nodes[graph.ops[v].source[1]].patch >= cut]
    concat = {v for v in nodes if graph.ops[v].kind == "concat"}
    waiting = {c: len(set(graph.ops[c].preds)) for c in concat}  # preds not yet run
    succs = graph.succs
    order: list[int] = []
    done: set[int] = set()

    def run(v: int) -> None:
        order.append(v)
        done.add(v)
        for c in set(succs[v]):  # a concatenation runs as soon as all its pieces exist
            if c in waiting:
                waiting[c] -= 1
                if waiting[c] == 0:
                    del waiting[c]
                    run(c)

    for v in nodes:
        if v in done or v in concat:
            continue
        if early and plan.nodes[graph.ops[v].source[1]].patch >= cut:
            for e in early:
                if e not in done:
                    run(e)
            early = []
            if v in done:
                continue
        run(v)
    order += [c for c in concat if c not in done]
    seen = set(order)
    order += [v for v in range(len(graph.ops)) if v not in seen]
    return order


def heuristic_peak(graph: OpGraph, plan: PatchPlan, problem: Problem,
                   baselines: bool = True, max_cuts: int = 6) -> int:
    """The best of: patch by patch with the model-input slices of the later patches moved
    before patch ``cut`` (``max_cuts`` cuts evenly spread over the patches), and, with
    ``baselines``, the scheduler package's best heuristic."""
    best = problem.evaluate(patch_order(graph, plan)).peak
    n = plan.patches
    cuts = sorted({1 + (k * (n - 1)) // max_cuts for k in range(max_cuts)} - {n}) if n > 1 else []
    for cut in cuts:
        best = min(best, problem.evaluate(patch_order(graph, plan, cut)).peak)
    if baselines:
        from ..schedulers import best_heuristic

        best = min(best, best_heuristic(problem)[1])
    return best


# ---------------------------------------------------------------------------- search
def search_patches(sm: SpatialModel, graph: OpGraph, tensor_index: list[int], *, grids=None,
                   split: str | None = None, max_overhead: float = 0.3,
                   quantized: bool = True, certify: bool = True, time_limit: float = 10.0,
                   frontier_overhead: float | None = None, n_tensors: int | None = None,
                   price: TFLMPersistent = PERSISTENT) -> SearchResult:
    """Evaluate candidates (region, grid) and return the frontier and the default choice.

    ``graph``: the model's `OpGraph` (op ``v`` = operator ``v``); ``grids``: (rows, cols) to try
    (default `DEFAULT_GRIDS`); ``split``: only regions ending at the tensor of that name;
    ``frontier_overhead``: skip candidates above this MAC overhead (default: ``max(1,
    3*max_overhead)``); ``certify``: refine the promising candidates and schedule the frontier
    with the certified scheduler; ``time_limit``: seconds for the whole call (roughly: building
    the candidates is not interrupted); ``n_tensors``: tensors of the subgraph (constants
    included: TFLM keeps an eval tensor for each).
    """
    from ..importers.tflite_reorder import TFLM_MODEL
    from ..schedulers import best_heuristic, schedule

    t0 = time.perf_counter()
    grids = list(grids or DEFAULT_GRIDS)
    cap = frontier_overhead if frontier_overhead is not None else max(1.0, 3 * max_overhead)
    # MACs per op: the geometry's count for spatial ops (PAD moves data: 0; element-wise: one
    # per output element), the importer's for the others, so a region's MACs whole and patched
    # are counted alike
    op_macs = [sm.op_macs(op) if op.cls != "other" else sm.macs[k]
               for k, op in enumerate(sm.ops)]
    total_macs = sum(op_macs)
    problem = Problem.from_graph(graph, TFLM_MODEL)
    steps = problem.evaluate(list(range(len(graph)))).steps
    suffix = [0] * (len(steps) + 1)
    for k in range(len(steps) - 1, -1, -1):
        suffix[k] = max(steps[k], suffix[k + 1])
    nt = n_tensors if n_tensors is not None else len(sm.tensors)
    base_persist = model_persistent(sm, nt, quantized, price)
    orig_peak = suffix[0]
    original = Candidate([], [], 0, (1, 1), orig_peak, base_persist, total_macs, 0.0,
                         len(sm.ops))
    regs, why = regions(sm)
    if split is not None:
        regs = [r for r in regs if any(sm.tensors[t].name == split for t in r.split)]
        if not regs:
            raise Refused(f"no patch region ends at tensor {split!r} (the spatial prefix ends "
                          f"at {why})")
    refused: list[str] = []
    plans: dict = {}
    # MACs first (separable per axis: cheap), then plans and peaks in MAC order, skipping a
    # candidate whose lower bound cannot beat a cheaper one (exact Pareto pruning)
    cands = []
    region_price = [0]
    for op in sm.ops:  # a PAD is not copied into interior patches: not counted
        region_price.append(region_price[-1] + (0 if op.kind in ("PAD", "PADV2") else
                                                price.op(op.kind, op.cout, quantized, 1)))
    for g in grids:
        over_cap = 0
        for r in regs:
            if g[0] > r.hw[0] or g[1] > r.hw[1]:
                continue
            try:
                pm = grid_macs(sm, r, g)
            except Refused as e:
                _refuse(refused, sm, r, g, e)
                continue
            macs = total_macs - sum(op_macs[k] for k in r.ops) + pm
            over = macs / total_macs - 1 if total_macs else 0.0
            if over > cap:
                # halos only grow with depth: three regions in a row over the cap end the grid
                over_cap += 1
                if over_cap >= 3:
                    break
                continue
            over_cap = 0
            cands.append((macs, g[0] * g[1], r.length, g, r))
    cands.sort(key=lambda c: (c[0], c[1], c[2]))
    evaluated = skipped = 0
    results: list[Candidate] = []
    best_total = None
    for macs, patches, length, g, r in cands:
        split_bytes = sum(sm.tensors[t].nbytes for t in r.split)
        # copies of the region's operators are the least the patches add to the tail
        lb = max(suffix[length], 2 * split_bytes) + base_persist + \
            (patches - 1) * region_price[length]
        if best_total is not None and lb >= best_total:
            skipped += 1
            continue
        try:
            plan = plan_patches(sm, r, g)
        except Refused as e:
            _refuse(refused, sm, r, g, e)
            continue
        persist = base_persist + plan_persistent_delta(sm, plan, quantized, price)
        if best_total is not None and max(suffix[length], 2 * split_bytes) + persist \
                >= best_total:
            skipped += 1
            continue
        pg = patched_graph(sm, graph, tensor_index, plan, prefix_only=True)
        pp = Problem.from_graph(pg, TFLM_MODEL)
        peak = max(heuristic_peak(pg, plan, pp, baselines=False), suffix[length])
        if best_total is None or peak + persist <= REFINE_WINDOW * best_total:
            # close to the best: the scheduler package's heuristics may do better
            peak = max(min(peak, best_heuristic(pp)[1]), suffix[length])
        evaluated += 1
        c = Candidate([sm.tensors[t].name for t in r.split], list(r.split), length, g, peak,
                      persist, macs, macs / total_macs - 1 if total_macs else 0.0,
                      len(sm.ops) - length + len(plan.nodes))
        results.append(c)
        plans[(length, g)] = plan
        if best_total is None or c.total < best_total:
            best_total = c.total
    # refine: the scheduler on the patched prefix of the most promising candidates (the
    # heuristic orders above can be 20 % off on the peak), best heuristic total first, within
    # half the time limit; skipped: a candidate whose lower bound cannot beat the best refined
    # total, or whose heuristic total is more than REFINE_WINDOW times it
    deadline = t0 + time_limit  # the call's whole budget, candidate building included
    refine_until = (t0 + time_limit / 2) if certify else 0.0
    best_refined = None
    for c in sorted(results, key=lambda c: (c.total, c.macs)):
        left = refine_until - time.perf_counter()
        if left <= 0:
            break
        plan = plans[(c.region_ops, c.grid)]
        floor = max(suffix[c.region_ops],
                    2 * sum(sm.tensors[t].nbytes for t in plan.region.split)) + c.persistent
        if best_refined is not None and (floor >= best_refined or
                                         c.total > REFINE_WINDOW * best_refined):
            continue
        pg = patched_graph(sm, graph, tensor_index, plan, prefix_only=True)
        s = schedule(pg, "auto", TFLM_MODEL, time_limit=min(REFINE_SECONDS, left))
        c.peak = min(c.peak, max(s.peak, suffix[c.region_ops]))
        c.note = "prefix scheduled"
        if best_refined is None or c.total < best_refined:
            best_refined = c.total
    frontier = pareto(results)
    if certify and frontier:
        per = max(0.1, (deadline - time.perf_counter()) / max(len(frontier), 1))
        for c in frontier:
            plan = plans[(c.region_ops, c.grid)]
            full = patched_graph(sm, graph, tensor_index, plan)
            s = schedule(full, "auto", TFLM_MODEL, time_limit=per)
            c.lower_bound = s.lower_bound
            if s.peak <= c.peak:
                c.peak = s.peak
            c.certified = bool(s.optimal and s.peak <= c.peak)
        frontier = pareto(frontier)
    choice = choose(frontier, original, max_overhead)
    return SearchResult(original, frontier, choice, evaluated, skipped, refused, why,
                        time.perf_counter() - t0, plans)


def _refuse(refused: list, sm: SpatialModel, r: Region, g, e: Exception) -> None:
    msg = f"split {sm.tensors[r.split[-1]].name!r} grid {g[0]}x{g[1]}: {e}"
    if msg not in refused:
        refused.append(msg)


def pareto(cands: list[Candidate]) -> list[Candidate]:
    """Candidates no other beats on both total bytes and MACs (by MACs, then patches)."""
    out: list[Candidate] = []
    for c in sorted(cands, key=lambda c: (c.macs, c.total, c.patches)):
        if not out or c.total < out[-1].total:
            out.append(c)
    return out


def choose(frontier: list[Candidate], original: Candidate, max_overhead: float
           ) -> Candidate | None:
    """Lowest total within the MAC budget, ties to fewer patches; None when nothing beats the
    original model."""
    ok = [c for c in frontier if c.overhead <= max_overhead + 1e-12 and c.total < original.total]
    if not ok:
        return None
    return min(ok, key=lambda c: (c.total, c.patches, c.macs))

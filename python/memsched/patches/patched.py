"""The patched model as an `OpGraph`, and the orders the patch search prices it in.

`patched_graph` is the one description of a patched model every evaluation goes through (the
search's pricing, the certified scheduler's run on the chosen plan); `patch_order` /
`heuristic_order` give the patch-by-patch orders the search prices a candidate with before
the scheduler refines the most promising ones (`memsched.patches.search`).
"""
from __future__ import annotations

from ..graph import GraphBuilder, OpGraph
from ..memory import Problem
from .geometry import SpatialModel
from .plans import PatchPlan

HEURISTIC_CUTS = 24  # patch-order variants per candidate (model-input slices moved earlier)

def patched_graph(sm: SpatialModel, graph: OpGraph, tensor_index: list[int],
                  plan, prefix_only: bool = False, begin: int = 0) -> OpGraph:
    """The patched model as an `OpGraph` (``Op.source``: ``("node", k, i)`` for node ``k`` of
    plan ``i``, ``("op", v)`` for the model's other operators). ``graph``: the model's
    `OpGraph` with op ``v`` = operator ``v`` and ``tensor_index[t]`` the file index of its tensor
    ``t`` (`read_tflite`). ``plan``: a `PatchPlan`, a list of them (disjoint regions in model
    order; each reads the split tensors of the ones before, reassembled) or None.
    ``prefix_only``: up to the (last) patched region, the tensors the rest of the model reads
    kept to the end. ``begin``: the operators before it are left out; the tensors they leave
    live (read from ``begin`` on, or model outputs) are made by one ``source`` operator, so
    they count as they would after those operators, whatever the runtime's memory model (the
    model as the regions before ``begin`` leave it: only those tensors cross)."""
    plans = [] if plan is None else list(plan) if isinstance(plan, (list, tuple)) else [plan]
    b = GraphBuilder(f"{graph.name}.patched")
    tmap: dict[int, int] = {}  # file tensor index -> new tensor id
    outs = set(sm.outputs)
    if begin:
        later = {t for v in range(begin, len(graph.ops)) for t in sm.ops[v].inputs} | outs
        for gt in graph.input_tensors:
            if tensor_index[gt] in later:
                tmap[tensor_index[gt]] = b.input(graph.tensors[gt].name,
                                                 graph.tensors[gt].nbytes)
        crossing = [gt for v in range(begin) for gt in graph.ops[v].outputs
                    if tensor_index[gt] in later]
        if crossing:
            vid = b.op("before", "source", [], [(graph.tensors[gt].name,
                                                 graph.tensors[gt].nbytes) for gt in crossing],
                       source=("before", begin))
            for gt, nt in zip(crossing, b.ops[vid].outputs):
                tmap[tensor_index[gt]] = nt
    else:
        for gt in graph.input_tensors:
            tmap[tensor_index[gt]] = b.input(graph.tensors[gt].name, graph.tensors[gt].nbytes)
    length = plans[-1].region.length if plans else 0

    def whole(v: int) -> None:
        op = graph.ops[v]
        vid = b.op(op.name, op.kind, [tmap[tensor_index[gt]] for gt in op.inputs],
                   [(graph.tensors[gt].name, graph.tensors[gt].nbytes) for gt in op.outputs],
                   source=("op", v), workspace=op.workspace,
                   inplace=[tmap[tensor_index[gt]] for gt in op.inplace])
        for gt, nt in zip(op.outputs, b.ops[vid].outputs):
            tmap[tensor_index[gt]] = nt

    at = begin
    for i, p in enumerate(plans):
        for v in range(at, p.region.start):  # before the region: whole
            whole(v)
        node_t: list[int] = []
        for k, nd in enumerate(p.nodes):
            ins = [tmap[r[1]] if isinstance(r, tuple) else node_t[r] for r in nd.inputs]
            ws = sm.ops[nd.op].workspace if nd.kind == "op" else 0
            vid = b.op(f"patch{nd.patch}:{nd.kind}:{k}" + (f":r{i}" if i else ""), nd.kind, ins,
                       [(f"n{k}" + (f"r{i}" if i else ""), p.node_bytes(sm, k))],
                       source=("node", k, i), workspace=ws)
            node_t.append(b.ops[vid].outputs[0])
        for t, k in p.result.items():
            tmap[t] = node_t[k]
        at = p.region.length
    if prefix_only:
        # what the rest of the model reads stays live to the end: read by one last ``sink``
        # operator, so it counts whatever the runtime's memory model says of model outputs
        kept = []
        for t in list(tmap):
            if t in outs:
                b.mark_output(tmap[t])
            elif any(c >= length for c in sm.consumers.get(t, [])):
                kept.append(tmap[t])
        if kept:
            b.op("after", "sink", kept, [], source=("after", length),
                 extra_preds=range(len(b.ops)))
        return b.build()
    for v in range(max(at, begin), len(graph.ops)):
        whole(v)
    for gt in graph.output_tensors:
        b.mark_output(tmap[tensor_index[gt]])
    return b.build()


def patch_order(graph: OpGraph, plan: PatchPlan | None = None, cut: int | None = None
                ) -> list[int]:
    """Patch by patch, each row's concatenation right after its last patch (the input order of
    `patched_graph`, which is built that way). With ``cut`` (and the ``plan``): the slices of
    the model inputs of patches ``cut..`` run right before patch ``cut``, which frees the
    inputs early at the price of holding those slices."""
    return _PatchOrders(graph, plan).order(cut)


class _PatchOrders:
    """`patch_order` for one graph and plan, what every cut shares computed once."""

    def __init__(self, graph: OpGraph, plan: PatchPlan | None):
        ops = graph.ops
        self.n = len(ops)
        self.nodes = nodes = [v for v, op in enumerate(ops) if isinstance(op.source, tuple)
                              and op.source[0] == "node"]
        # the operators before the region (built first by `patched_graph`) run first
        self.pre = list(range(nodes[0])) if nodes else []
        self.concat = [v for v in nodes if ops[v].kind == "concat"]
        self.npreds = {c: len(set(ops[c].preds)) for c in self.concat}
        self.succs = [set(s) for s in graph.succs]
        self.patch: dict[int, int] = {}  # node -> its patch, for the model-input slices
        self.slices: list[int] = []  # the slices of the model inputs
        if plan is not None:
            for v in nodes:
                nd = plan.nodes[ops[v].source[1]]
                self.patch[v] = nd.patch
                if nd.kind == "slice" and isinstance(nd.inputs[0], tuple):
                    self.slices.append(v)

    def order(self, cut: int | None = None) -> list[int]:
        patch = self.patch
        early = [v for v in self.slices if patch[v] >= cut] if cut is not None else []
        concat = set(self.concat)
        waiting = dict(self.npreds)  # preds not yet run
        succs = self.succs
        order: list[int] = list(self.pre)
        done: set[int] = set(self.pre)
        add, mark = order.append, done.add

        def run(v: int) -> None:
            # then a concatenation as soon as all its pieces exist, depth first (a loop, not
            # a recursive closure: that is a reference cycle the collector has to free)
            add(v)
            mark(v)
            stack = [iter(succs[v])]
            while stack:
                for c in stack[-1]:
                    if c in waiting:
                        waiting[c] -= 1
                        if waiting[c] == 0:
                            del waiting[c]
                            add(c)
                            mark(c)
                            stack.append(iter(succs[c]))
                            break
                else:
                    stack.pop()

        for v in self.nodes:
            if v in done or v in concat:
                continue
            if early and patch[v] >= cut:
                for e in early:
                    if e not in done:
                        run(e)
                early = []
                if v in done:
                    continue
            run(v)
        order += [c for c in concat if c not in done]
        if len(order) < self.n:
            seen = set(order)
            order += [v for v in range(self.n) if v not in seen]
        return order


def heuristic_peak(graph: OpGraph, plan: PatchPlan, problem: Problem,
                   baselines: bool = True, max_cuts: int = HEURISTIC_CUTS) -> int:
    """The best of: patch by patch with the model-input slices of the later patches moved
    before patch ``cut`` (``max_cuts`` cuts evenly spread over the patches), and, with
    ``baselines``, the scheduler package's best heuristic."""
    return heuristic_order(graph, plan, problem, baselines, max_cuts)[0]


def heuristic_order(graph: OpGraph, plan: PatchPlan, problem: Problem,
                    baselines: bool = True, max_cuts: int = HEURISTIC_CUTS
                    ) -> tuple[int, list[int]]:
    """(peak, order) of `heuristic_peak`'s best order of ``graph``'s operators."""
    orders = _PatchOrders(graph, plan)
    order = orders.order()
    best = (problem.evaluate(order).peak, order)
    n = plan.patches
    cuts = sorted({1 + (k * (n - 1)) // max_cuts for k in range(max_cuts)} - {n}) if n > 1 else []
    for cut in cuts:
        order = orders.order(cut)
        peak = problem.evaluate(order).peak
        if peak < best[0]:
            best = (peak, order)
    if baselines:
        from ..schedulers import best_heuristic

        order, peak, _ = best_heuristic(problem)
        if peak < best[0]:
            best = (peak, order)
    return best


def node_order(graph: OpGraph, order: list[int]) -> list[int]:
    """The plan node ids of a patched graph's operators (``source == ("node", k)``) in the
    order ``order`` runs them."""
    return [graph.ops[v].source[1] for v in order
            if isinstance(graph.ops[v].source, tuple) and graph.ops[v].source[0] == "node"]

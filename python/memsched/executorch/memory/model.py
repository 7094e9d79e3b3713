"""ExecuTorch's memory model at the point `MemoryPlanningPass` runs, as an `OpGraph`.

What ExecuTorch plans (``exir/memory_planning.py``, 1.5.1), and how it maps onto memsched:

* **Node order is the schedule.** A tensor spec lives from the index of the first FX node that
  refers to it (the node itself, or its args/kwargs) to the index of the last one, inclusive
  (``update_all_tensors_lifetime``); a placeholder's spec starts at 0, a mutable buffer's lives
  to the last node. We take each node's references with ExecuTorch's own function
  (``collect_specs_from_nodes`` with the same flags), so views (``memory.view`` refers to its
  base's spec), in-place results (``_alias_inplace_result_specs`` gives the result the input's
  spec) and ``getitem`` of multi-output allocations are exactly what ExecuTorch sees.
* **Which specs are planned**: the same filter as ``apply_algo`` (constants never; graph inputs,
  outputs and mutable buffers per the pass's flags).
* **Storage-backed specs** (``storage_base``, e.g. an out-variant writing into an argument) own
  no storage: they are placed inside their base, whose lifetime ExecuTorch extends over theirs.
  Here they are the base tensor.
* **Sizes**: ``allocated_memory`` at the pass's alignment (every shared object and offset is a
  multiple of it), so the peak of an order is the liveness lower bound of the arena.

Scheduling units ("groups"): every FX node that is not a placeholder, an ``alloc`` or a
``get_attr`` is an op, with the ``getitem`` nodes that unpack it; ``alloc``/``get_attr`` nodes
(no inputs) are emitted right before their first user. Within a group the peak is reached at
the op node (it refers to its inputs and to every ``alloc`` it writes), so the memsched step
footprint ``live + created`` of a group equals ExecuTorch's largest live sum over its nodes. A
pseudo op ``inputs`` (first) reads every planned placeholder spec: all of them are live at node
0 in ExecuTorch's rule; the ``output`` node is the last op. `ProgramModel.check_peak` compares
the two definitions on any order.

Dependencies: data edges of the FX graph, the definer of each spec before its other users,
and, for nodes with side effects (in-place ops such as ``copy_`` back to a mutable buffer,
delegate calls, control flow, anything not an out-variant op/view/getitem), their place
relative to every other node touching the same spec is kept as in the input order.
"""
from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field

from ...graph import GraphBuilder, OpGraph
from ...memory import MemoryModel
from ..errors import UnsupportedProgramError

# sizes are pre-aligned; every counted tensor lives from its first to its last reference
# in-place: only the calls the graph marks (`inplace`: the Cortex-M quantize over its input)
EXECUTORCH_MODEL = MemoryModel(count_inputs=True, count_outputs=True, inplace=True,
                               workspace=True, name="executorch", alignment=1)


@dataclass
class PlanFlags:
    """The options of `MemoryPlanningPass` that decide which specs are planned."""

    alloc_graph_input: bool = True
    alloc_graph_output: bool = True
    alloc_mutable_buffers: bool = True
    alignment: int = 16


class FastSignature:
    """A graph signature whose ``inputs_to_buffers`` / ``buffers_to_mutate`` are computed once.

    ExecuTorch asks the signature whether a node is a mutable buffer for every node it reads,
    and torch rebuilds those dicts from ``input_specs`` on each access: quadratic in the graph
    (seconds on 1,000-node programs). Same answers, read from a copy.
    """

    def __init__(self, graph_signature):
        self._gs = graph_signature
        self.inputs_to_buffers = dict(graph_signature.inputs_to_buffers)
        self.buffers_to_mutate = dict(graph_signature.buffers_to_mutate)

    def __getattr__(self, name):
        return getattr(self._gs, name)

    @staticmethod
    def of(graph_signature):
        if graph_signature is None or isinstance(graph_signature, FastSignature):
            return graph_signature
        return FastSignature(graph_signature)


def node_refs(node, graph_signature) -> list:
    """The tensor specs ``node`` refers to, as ExecuTorch's lifetime rule reads them."""
    from executorch.exir.memory_planning import collect_specs_from_nodes, filter_nodes

    out, seen = [], set()
    for spec in collect_specs_from_nodes(
            filter_nodes(itertools.chain([node], node.args, node.kwargs.values())),
            graph_signature, ignore_graph_input=False, ignore_const=False,
            ignore_out_var_node=False, dedup=False, do_assertion=False,
            ignore_dynamic_unbound_tensor=False):
        if id(spec) not in seen:
            seen.add(id(spec))
            out.append(spec)
    return out


def planned_specs(graph_module, graph_signature, flags: PlanFlags) -> list:
    """The specs `apply_algo` hands to the planning algorithm (same filter, same order)."""
    from executorch.exir.memory_planning import collect_specs_from_nodes

    return list(collect_specs_from_nodes(
        graph_module.graph.nodes, FastSignature.of(graph_signature), do_assertion=False,
        ignore_graph_input=not flags.alloc_graph_input,
        ignore_graph_output=not flags.alloc_graph_output,
        ignore_mutable_buffers=not flags.alloc_mutable_buffers))


def storage_parent(spec):
    """(the spec whose storage ``spec`` lives in, its byte offset there), or None: a
    storage-backed spec's ``storage_base``, or the base of a view (ExecuTorch's
    ``_ViewSpec`` shares its base's offset and lifetime fields: the same bytes)."""
    if spec.storage_base is not None:
        return spec.storage_base, spec.storage_base_offset
    if type(spec).__name__ == "_ViewSpec":
        return object.__getattribute__(spec, "_base"), 0
    return None


def storage_root(spec):
    seen = set()
    while (up := storage_parent(spec)) is not None:
        if id(spec) in seen:
            raise UnsupportedProgramError("circular storage_base chain in the program's specs")
        seen.add(id(spec))
        spec = up[0]
    return spec


def aligned_size(spec, alignment: int) -> int:
    from executorch.exir.tensor import calculate_aligned_num_bytes

    return calculate_aligned_num_bytes(spec.nbytes(), alignment)


def _is_mutable_buffer(node, graph_signature) -> bool:
    from executorch.exir.memory_planning import _is_mutable_buffer as et_is_mutable

    return et_is_mutable(node, graph_signature)


def _kind(node) -> str:
    """'alloc', 'getattr', 'getitem', 'view', 'outvar' (pure out-variant op), 'output',
    'placeholder' or 'effect' (anything else: kept in place relative to its specs' users)."""
    from executorch.exir import memory
    from executorch.exir.memory_planning import _is_out_var_node

    if node.op == "placeholder":
        return "placeholder"
    if node.op == "output":
        return "output"
    if node.op == "get_attr":
        return "getattr"
    if node.op != "call_function":
        return "effect"
    if node.target is memory.alloc:
        return "alloc"
    if node.target is operator.getitem:
        return "getitem"
    if node.target is memory.view:
        return "view"
    if _is_out_var_node(node) and node.meta.get("_share_alloc_with_arg_idx") is None:
        return "outvar"
    return "effect"


@dataclass
class ProgramModel:
    """The op graph of one graph module, and how to turn an order of its ops back into nodes.

    Op 0 is the ``inputs`` pseudo op, op ``len-1`` the ``output`` node; ``groups[v]`` are the
    FX nodes of op ``v`` in their input order (``None`` for the pseudo op).
    """

    graph: OpGraph
    groups: list
    placeholders: list
    lazy: list  # alloc / get_attr nodes, emitted right before their first user
    output: object
    specs: list  # planned root specs, tensor id order of `graph`'s tensors
    sizes: list
    flags: PlanFlags
    refs: dict  # node -> the specs it refers to (ExecuTorch's rule; independent of order)
    stats: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ orders
    def nodes_in_order(self, order) -> list:
        """FX nodes for the op order ``order`` (placeholders first, output last)."""
        out = list(self.placeholders)
        emitted = set(id(n) for n in out)
        lazy_ids = {id(n) for n in self.lazy}

        def emit(n):
            for m in n.all_input_nodes:
                if id(m) in lazy_ids and id(m) not in emitted:
                    emit(m)
            emitted.add(id(n))
            out.append(n)

        # lazy nodes nobody uses keep a place right after the placeholders
        used = set()
        for g in self.groups:
            for n in g or ():
                used.update(id(m) for m in n.all_input_nodes)
        for n in self.lazy:
            if id(n) not in used:
                emit(n)
        for v in order:
            for n in self.groups[v] or ():
                if id(n) not in emitted:
                    emit(n)
        if len(out) != len(self.placeholders) + len(self.lazy) + sum(
                len(g or ()) for g in self.groups):
            raise UnsupportedProgramError("internal: an order did not emit every node once")
        return out

    def input_order(self) -> list[int]:
        return list(range(len(self.groups)))


def build_model(graph_module, graph_signature, flags: PlanFlags) -> ProgramModel:
    """`ProgramModel` of ``graph_module`` (top level; submodules are planned by ExecuTorch on
    their own and are opaque ops here)."""
    graph_signature = FastSignature.of(graph_signature)
    nodes = list(graph_module.graph.nodes)
    kinds = {n: _kind(n) for n in nodes}
    for n in nodes:
        if kinds[n] == "alloc" and n.users and "spec" not in n.meta:
            raise UnsupportedProgramError(
                "alloc nodes without specs: build the model inside MemoryPlanningPass.run, "
                "after _set_alloc_node_spec")
    # references first: it also runs ExecuTorch's in-place spec aliasing, as apply_algo does
    refs = {n: node_refs(n, graph_signature) for n in nodes}
    planned = planned_specs(graph_module, graph_signature, flags)

    # alloc -> the out-variant op writing it
    owner = {}
    for n in nodes:
        for v in n.kwargs.values():
            for m in (v if isinstance(v, (list, tuple)) else [v]):
                if getattr(m, "op", None) is not None and kinds.get(m) == "alloc":
                    owner.setdefault(m, n)
    lazy = [n for n in nodes if kinds[n] in ("alloc", "getattr") and not n.all_input_nodes]
    lazy_set = set(lazy)
    placeholders = [n for n in nodes if kinds[n] == "placeholder"]
    output = [n for n in nodes if kinds[n] == "output"]
    if len(output) != 1 or nodes[-1] is not output[0]:
        raise UnsupportedProgramError("graph module without exactly one output node at the end")
    output = output[0]

    # groups: anchors in input order, getitems joined to the group they unpack
    group_of: dict = {}
    groups: list = [None]  # op 0: the inputs pseudo op
    for n in nodes:
        k = kinds[n]
        if k in ("placeholder",) or n in lazy_set:
            continue
        if k == "getitem":
            src = n.args[0]
            src = owner.get(src, src)
            if src in group_of:
                group_of[n] = group_of[src]
                groups[group_of[n]].append(n)
                continue
        group_of[n] = len(groups)
        groups.append([n])
    if group_of[output] != len(groups) - 1:
        raise UnsupportedProgramError("internal: the output node is not the last op")

    def gref(n):  # the group whose position decides node n's index
        if n in group_of:
            return group_of[n]
        if n in lazy_set:  # emitted right before its first user: no reference of its own
            return None
        return 0  # placeholders

    # specs referenced per group (lazy nodes' references belong to their users)
    roots: dict = {}
    greferences: list[list] = [[] for _ in groups]
    for n in nodes:
        g = gref(n)
        if g is None:
            continue
        for s in refs[n]:
            r = storage_root(s)
            roots.setdefault(id(r), r)
            greferences[g].append(r)
    planned_roots = {id(storage_root(s)) for s in planned if id(storage_root(s)) in roots}
    planned_roots |= {id(s) for s in planned if storage_root(s) is s}

    # definer of each root spec: the earliest group referring to it (input order)
    definer: dict = {}
    for g, rs in enumerate(greferences):
        for r in rs:
            definer.setdefault(id(r), g)

    # side-effect ordering: nodes of kind "effect" keep their place relative to every other
    # group touching one of their (non-constant) specs
    touching: dict = {}
    for g, rs in enumerate(greferences):
        for r in dict.fromkeys(id(x) for x in rs):
            touching.setdefault(r, []).append(g)
    extra: list[set] = [set() for _ in groups]
    n_effect = 0
    for g in range(1, len(groups)):
        if not any(kinds[n] == "effect" for n in groups[g]):
            continue
        n_effect += 1
        for r in dict.fromkeys(id(x) for x in greferences[g]):
            if roots[r].const:
                continue
            for u in touching.get(r, ()):
                if u < g:
                    extra[g].add(u)
                elif u > g:
                    extra[u].add(g)
    # data edges
    for g in range(1, len(groups)):
        for n in groups[g]:
            for m in n.all_input_nodes:
                gm_ = gref(m)
                if gm_ is not None and gm_ != g:
                    if gm_ > g:
                        raise UnsupportedProgramError(
                            f"node {n.name!r} reads {m.name!r}, which comes later")
                    extra[g].add(gm_)
    # every op after the inputs pseudo op, the output node after every op: an edge only where
    # no other edge implies it (the same partial order, so the same orders and certificates;
    # an edge from op 0 to every op hid the graph's chains and isolated subgraphs from the
    # search's fusion: NASNet-A CIFAR was not proven in 13 s, now in about 2 s)
    last = len(groups) - 1
    has_succ = {p for g in range(1, last) for p in extra[g]}
    for g in range(1, len(groups)):
        if not extra[g] - {0}:
            extra[g].add(0)
    extra[last].update(g for g in range(last) if g not in has_succ)

    # the op graph
    a = flags.alignment
    b = GraphBuilder(getattr(graph_module, "_memsched_name", "executorch"))
    tid: dict = {}
    specs: list = []
    sizes: list = []
    mutable_roots = {id(storage_root(s)) for n in placeholders
                     if _is_mutable_buffer(n, graph_signature) for s in refs[n]}
    for r in (roots[i] for i in roots):
        if id(r) in planned_roots and definer.get(id(r)) == 0:
            tid[id(r)] = b.input(_spec_name(r, len(specs)), aligned_size(r, a))
            specs.append(r)
            sizes.append(aligned_size(r, a))
            if id(r) in mutable_roots:
                b.mark_output(tid[id(r)])
    for g, group in enumerate(groups):
        rs = list(dict.fromkeys(id(x) for x in greferences[g]))
        ins = [tid[r] for r in rs if r in tid and r in planned_roots
               and definer[r] != g]
        outs = [r for r in rs if r in planned_roots and definer[r] == g and g != 0]
        name = "inputs" if group is None else group[0].name
        kind = "inputs" if group is None else kinds[group[0]]
        if g == 0:
            ins = [tid[r] for r in tid]
        v = b.op(name, kind, ins, [(_spec_name(roots[r], len(specs) + i), aligned_size(roots[r], a))
                                   for i, r in enumerate(outs)],
                 alias=not outs and kind == "view", source=g,
                 extra_preds=sorted(extra[g]), inplace=_inplace_inputs(group, tid))
        for r, t in zip(outs, b.ops[v].outputs):
            tid[r] = t
            specs.append(roots[r])
            sizes.append(aligned_size(roots[r], a))
    graph = b.build()
    return ProgramModel(graph, groups, placeholders, lazy, output, specs, sizes, flags, refs,
                        {"nodes": len(nodes), "ops": len(groups), "effects": n_effect,
                         "planned_specs": len(planned), "tensors": len(specs)})


def _spec_name(spec, i: int) -> str:
    return f"t{i}:{tuple(spec.shape)}:{spec.dtype}".replace(" ", "")


# ---------------------------------------------------------------------- ExecuTorch's lifetimes
def _inplace_inputs(group, tid) -> list[int]:
    """The tensor a call of ``group`` may write its output over (`inplace`: the Cortex-M
    quantize of a float tensor), for the model's in-place credit when it is read last."""
    from .inplace import input_it_may_overwrite

    out = []
    for n in group or ():
        x = input_it_may_overwrite(n)
        if x is not None and "spec" in x.meta and id(storage_root(x.meta["spec"])) in tid:
            out.append(tid[id(storage_root(x.meta["spec"]))])
    return out


def lifetimes_of_nodes(nodes, graph_signature, flags: PlanFlags, planned=None,
                       refs=None) -> dict:
    """``{id(root spec): [start, end, spec]}`` for the planned specs, from the node order
    ``nodes`` by ExecuTorch's rule (independent of the op graph: used to check it).
    ``refs``: each node's references when already known (they do not depend on the order)."""
    graph_signature = FastSignature.of(graph_signature)
    life: dict = {}
    last = len(nodes) - 1
    for i, n in enumerate(nodes):
        mutable = n.op == "placeholder" and _is_mutable_buffer(n, graph_signature)
        for s in (refs[n] if refs is not None else node_refs(n, graph_signature)):
            lo = 0 if n.op == "placeholder" else i
            hi = last if mutable else i
            cur = life.get(id(s))
            if cur is None:
                life[id(s)] = [lo, hi, s]
            else:
                cur[0], cur[1] = min(cur[0], lo), max(cur[1], hi)
    # a storage-backed spec's base lives over it (ExecuTorch's _extend_storage_base_lifetimes)
    for key in list(life):
        lo, hi, s = life[key]
        if storage_parent(s) is not None:
            r = storage_root(s)
            cur = life.setdefault(id(r), [lo, hi, r])
            cur[0], cur[1] = min(cur[0], lo), max(cur[1], hi)
    if planned is not None:
        keep = {id(storage_root(s)) for s in planned}
        life = {k: v for k, v in life.items() if k in keep and storage_root(v[2]) is v[2]}
    return life


def liveness_peak(nodes, graph_signature, flags: PlanFlags, planned, refs=None) -> int:
    """Largest sum of planned (aligned) bytes live at one node index of ``nodes``."""
    from ...arena_problem import max_live

    from .inplace import pairs_in

    life = lifetimes_of_nodes(nodes, graph_signature, flags, planned, refs)
    # a quantize writing over the float input it reads last holds one of the two at its call
    for i, si, so in pairs_in(nodes):
        f, q = life.get(id(si)), life.get(id(so))
        if f is not None and q is not None and f[1] == i and q[1] > i:
            q[0] = i + 1
    return max_live([(aligned_size(s, flags.alignment), lo, hi) for lo, hi, s in life.values()])

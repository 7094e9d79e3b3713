"""`OpGraph`: the one graph model every algorithm in memsched works on.

An `OpGraph` is a DAG of operators (`Op`) over storage tensors (`Tensor`):

* a **tensor** is one buffer with a byte size; it is produced by at most one op (graph inputs
  have no producer) and read by any number of ops;
* an **op** creates its ``outputs`` tensors and reads its ``inputs`` tensors; ``preds`` are the
  ops it must run after (the producers of what it reads, including *alias* ops);
* an **alias op** (reshape view, TupleGetItem, tuple construction) creates no storage: the value
  it defines refers to tensors that already exist, so readers of the alias read those tensors.
  It still occupies a slot in the schedule, at zero cost;
* ``workspace`` is scratch memory an op needs only while it runs;
* ``inplace`` lists input tensors whose buffer the op's output may take over when the input
  dies at this op (element-wise ops; used only when the memory model enables in-place reuse).

Weights and constants are not tensors of the graph: activation memory is what is scheduled.
Importers build the graph with `GraphBuilder` and keep ``Op.source`` pointing back to what the
op came from (a Relax binding index, an ONNX node index) so a schedule can be applied.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

# defined in memsched.errors (raised across layers); imported from here by older code
from .errors import GraphError, GraphTooLargeError, UnsupportedModelError  # noqa: F401

# Every byte count of a graph (tensor sizes, workspaces, and so any live set or peak) must fit
# in the native kernel's int64 with room to spare: a peak adds at most the whole graph once,
# bounds and gaps add a few such numbers, so the total is capped at 2**60 (1 EiB).
MAX_GRAPH_BYTES = 1 << 60


@dataclass
class Tensor:
    name: str
    nbytes: int
    producer: int | None = None  # op id, None for a graph input
    consumers: list[int] = field(default_factory=list)  # op ids, in insertion order
    is_input: bool = False
    is_output: bool = False


@dataclass
class Op:
    name: str
    kind: str
    inputs: tuple[int, ...]  # tensor ids read
    outputs: tuple[int, ...]  # tensor ids created
    preds: tuple[int, ...]  # op ids this op depends on
    workspace: int = 0
    inplace: tuple[int, ...] = ()
    alias: bool = False
    source: Any = None


class OpGraph:
    """Operators over storage tensors. Build it with `GraphBuilder`; treat it as immutable."""

    def __init__(self, ops: list[Op], tensors: list[Tensor], name: str = "graph"):
        self.ops = ops
        self.tensors = tensors
        self.name = name
        self.succs: list[list[int]] = [[] for _ in ops]
        for i, op in enumerate(ops):
            for p in op.preds:
                self.succs[p].append(i)
        self._check()

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        return len(self.ops)

    def __repr__(self) -> str:
        return f"OpGraph({self.name!r}, ops={len(self.ops)}, tensors={len(self.tensors)})"

    @property
    def input_tensors(self) -> list[int]:
        return [t for t, ten in enumerate(self.tensors) if ten.is_input]

    @property
    def output_tensors(self) -> list[int]:
        return [t for t, ten in enumerate(self.tensors) if ten.is_output]

    def _check(self) -> None:
        n = len(self.ops)
        forward = True  # every op after its preds: the ids are a topological order, no cycle
        for i, op in enumerate(self.ops):
            for p in op.preds:
                if not 0 <= p < n or p == i:
                    raise GraphError(f"op {op.name!r} depends on invalid op id {p}")
                forward = forward and p < i
            for t in op.outputs:
                if self.tensors[t].producer != i:
                    raise GraphError(f"tensor {self.tensors[t].name!r} has inconsistent producer")
        total = 0
        for t in self.tensors:
            if t.nbytes < 0:
                raise GraphError(f"tensor {t.name!r} has negative size {t.nbytes}")
            if t.nbytes > MAX_GRAPH_BYTES:
                raise GraphTooLargeError(f"tensor {t.name!r} has {t.nbytes:,} bytes, more than the "
                                 f"limit of 2**60 (absurd shape?)")
            total += t.nbytes
        for op in self.ops:
            if not 0 <= op.workspace <= MAX_GRAPH_BYTES:
                raise GraphTooLargeError(f"op {op.name!r} has workspace {op.workspace:,} bytes "
                                 "(negative or above 2**60)")
            total += op.workspace
        if total > MAX_GRAPH_BYTES:
            raise GraphTooLargeError(f"graph {self.name!r} holds {total:,} bytes in all, more "
                                     "than the limit of 2**60 (absurd shapes?)")
        # Kahn's algorithm doubles as the cycle check (needed only when some op precedes a
        # pred: builders add ops after what they read, so most graphs skip it)
        if not forward and len(self.topological_order()) != n:
            raise GraphError(f"graph {self.name!r} has a cycle")

    def topological_order(self) -> list[int]:
        """Kahn's algorithm, smallest op id first: the input order for a valid graph."""
        import heapq

        indeg = [len(set(op.preds)) for op in self.ops]
        heap = [i for i, d in enumerate(indeg) if d == 0]
        heapq.heapify(heap)
        order = []
        while heap:
            v = heapq.heappop(heap)
            order.append(v)
            for s in set(self.succs[v]):
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, s)
        return order

    def is_topological(self, order: Sequence[int]) -> bool:
        if sorted(order) != list(range(len(self.ops))):
            return False
        pos = {v: k for k, v in enumerate(order)}
        return all(pos[p] < pos[v] for v, op in enumerate(self.ops) for p in op.preds)

    def check_order(self, order: Sequence[int]) -> None:
        if not self.is_topological(order):
            raise GraphError("order is not a topological order of every op of the graph")

    def to_networkx(self):
        """A networkx DiGraph over op ids (edge u->v when v depends on u)."""
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(range(len(self.ops)))
        g.add_edges_from((p, i) for i, op in enumerate(self.ops) for p in op.preds)
        return g

    def subgraph(self, keep: Iterable[int], name: str | None = None) -> "OpGraph":
        """The ops in ``keep`` with the tensors they touch.

        Tensors produced outside ``keep`` become graph inputs; tensors read outside ``keep`` (or
        graph outputs) become graph outputs, so the memory model keeps them alive to the end.
        ``Op.source`` of the new ops is the op id in this graph.
        """
        keep = sorted(set(keep))
        b = GraphBuilder(name or f"{self.name}.sub")
        kset = set(keep)
        tmap: dict[int, int] = {}

        def tensor(t: int) -> int:
            if t not in tmap:
                ten = self.tensors[t]
                inside = ten.producer is not None and ten.producer in kset
                if not inside:
                    tmap[t] = b.input(ten.name, ten.nbytes)
            return tmap[t]

        omap: dict[int, int] = {}
        for v in self.topological_order():
            if v not in kset:
                continue
            op = self.ops[v]
            ins = [tensor(t) for t in op.inputs]
            new = b.op(op.name, op.kind, ins, [(self.tensors[t].name, self.tensors[t].nbytes)
                                               for t in op.outputs],
                       workspace=op.workspace, alias=op.alias, source=v,
                       extra_preds=[omap[p] for p in op.preds if p in kset],
                       inplace=[tmap[t] for t in op.inplace if t in tmap])
            omap[v] = new
            for t, nt in zip(op.outputs, b.ops[new].outputs):
                tmap[t] = nt
        for t, nt in tmap.items():
            ten = self.tensors[t]
            if ten.is_output or any(c not in kset for c in ten.consumers):
                if not b.tensors[nt].is_input:
                    b.mark_output(nt)
        return b.build()


class GraphBuilder:
    """Incremental construction of an `OpGraph`.

    ``b.input(name, nbytes)`` -> tensor id; ``b.op(name, kind, inputs, outputs)`` -> op id, where
    ``outputs`` is a list of ``(name, nbytes)``; the created tensor ids are ``b.ops[id].outputs``.
    Dependencies are the producers of the inputs plus ``extra_preds`` (e.g. an alias op whose
    value is read).
    """

    def __init__(self, name: str = "graph"):
        self.name = name
        self.ops: list[Op] = []
        self.tensors: list[Tensor] = []

    def input(self, name: str, nbytes: int) -> int:
        self.tensors.append(Tensor(name, int(nbytes), None, [], is_input=True))
        return len(self.tensors) - 1

    def op(self, name: str, kind: str, inputs: Sequence[int],
           outputs: Sequence[tuple[str, int]] = (), *, workspace: int = 0,
           alias: bool = False, source: Any = None, extra_preds: Sequence[int] = (),
           inplace: Sequence[int] = ()) -> int:
        vid = len(self.ops)
        tensors = self.tensors
        nt = len(tensors)
        ins = tuple(dict.fromkeys(int(t) for t in inputs))  # dedupe, keep order
        preds = []
        for t in ins:
            if not 0 <= t < nt:
                raise GraphError(f"op {name!r} reads unknown tensor id {t}")
            ten = tensors[t]
            if ten.producer is not None:
                preds.append(ten.producer)
        for t in ins:
            tensors[t].consumers.append(vid)
        outs = []
        for oname, nbytes in outputs:
            outs.append(len(tensors))
            tensors.append(Tensor(oname, int(nbytes), vid, []))
        if extra_preds:
            preds += list(extra_preds)
        self.ops.append(Op(name, kind, ins, tuple(outs),
                           tuple(dict.fromkeys(preds)) if len(preds) > 1 else tuple(preds),
                           int(workspace), tuple(t for t in inplace if t in ins) if inplace
                           else (), alias, source))
        return vid

    def mark_output(self, t: int) -> None:
        self.tensors[t].is_output = True

    def build(self) -> OpGraph:
        return OpGraph(self.ops, self.tensors, self.name)

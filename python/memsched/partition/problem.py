"""The pipeline-partition problem and its one evaluator (every solver's answer goes through it).

A model's operators ``0..n-1`` (an `OpGraph` in its given order) are cut into ``k`` pipeline
stages, one Edge TPU each. An *assignment* ``s`` maps op -> stage ``0..k-1`` with
``s(u) <= s(v)`` whenever ``v`` depends on ``u`` and every stage non-empty. Its cost
(Yin & Yu, "Accelerating Exact Combinatorial Optimization via RL-based Initialization", §III-D,
and issue 12 of this project, which fixes the details):

* ``m_j``: bytes of the distinct constant *buffers* used by the ops of stage ``j`` (tensors that
  share a buffer count once per stage; a buffer used in two stages counts in both);
  ``P = max_j m_j`` (peak parameter caching);
* ``O = sum_j max(0, m_j - SRAM)``: parameter bytes that overflow the on-chip SRAM and are
  streamed on every inference;
* ``c_j`` for boundary ``j`` (between stages ``j`` and ``j+1``): bytes of the activation tensors
  produced at a stage ``<= j`` (graph inputs: before stage 0) and read at a stage ``> j`` or
  returned as graph outputs; a tensor that skips stages is relayed, so it counts at every
  boundary it crosses. ``C = max_j c_j``.

The objective is the lexicographic minimum of ``(P, O, C)``. Alias ops (views) own no storage;
they read the tensors they view and count as readers like any op.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..graph import OpGraph

DEFAULT_SRAM = 8 << 20


class PartitionError(ValueError):
    """A partition request that cannot be answered: bad stage count, invalid assignment, ..."""


@dataclass(frozen=True)
class ActTensor:
    """An activation tensor as the partition objective sees it."""

    nbytes: int
    producer: int  # op id, -1 for a graph input (produced before stage 0)
    consumers: tuple[int, ...]
    is_output: bool


@dataclass
class PartitionProblem:
    """Operators with their parameter buffers and activation tensors.

    ``op_params[v]``: ids of the distinct constant buffers op ``v`` uses; ``param_bytes[b]``:
    bytes of buffer ``b``. Build it with `from_graph`.
    """

    n: int
    preds: list[tuple[int, ...]]
    succs: list[tuple[int, ...]]
    op_params: list[tuple[int, ...]]
    param_bytes: list[int]
    tensors: list[ActTensor]
    names: list[str]
    name: str = "graph"
    graph: OpGraph | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_graph(cls, graph: OpGraph, op_params: Sequence[Sequence[int]],
                   param_bytes: Sequence[int]) -> "PartitionProblem":
        n = len(graph.ops)
        if len(op_params) != n:
            raise PartitionError(f"op_params has {len(op_params)} entries for {n} ops")
        pb = [int(b) for b in param_bytes]
        if any(b < 0 for b in pb):
            raise PartitionError("param_bytes must be non-negative")
        ops_params = []
        for v, ps in enumerate(op_params):
            ids = tuple(dict.fromkeys(int(b) for b in ps))
            for b in ids:
                if not 0 <= b < len(pb):
                    raise PartitionError(f"op {graph.ops[v].name!r} uses unknown parameter "
                                         f"buffer {b}")
            ops_params.append(ids)
        preds = [tuple(sorted(set(op.preds))) for op in graph.ops]
        succs: list[list[int]] = [[] for _ in range(n)]
        for v, ps in enumerate(preds):
            for u in ps:
                succs[u].append(v)
        tensors = []
        for t in graph.tensors:
            prod = -1 if t.producer is None else int(t.producer)
            tensors.append(ActTensor(int(t.nbytes), prod, tuple(dict.fromkeys(t.consumers)),
                                     bool(t.is_output)))
        return cls(n, preds, [tuple(s) for s in succs], ops_params, pb, tensors,
                   [op.name for op in graph.ops], graph.name, graph)

    # ----------------------------------------------------------------- derived facts
    @property
    def total_param_bytes(self) -> int:
        """Bytes of the distinct buffers used by any op (each counted once)."""
        used = {b for ps in self.op_params for b in ps}
        return sum(self.param_bytes[b] for b in used)

    def op_param_bytes(self, v: int) -> int:
        return sum(self.param_bytes[b] for b in self.op_params[v])

    def topological_order(self) -> list[int]:
        """Smallest op id first (the given order when it is topological)."""
        import heapq

        indeg = [len(p) for p in self.preds]
        heap = [v for v in range(self.n) if indeg[v] == 0]
        heapq.heapify(heap)
        order = []
        while heap:
            v = heapq.heappop(heap)
            order.append(v)
            for s in self.succs[v]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, s)
        return order

    def asap_levels(self) -> list[int]:
        """Longest-path depth of every op from the sources (sources are level 0)."""
        level = [0] * self.n
        for v in self.topological_order():
            for u in self.preds[v]:
                level[v] = max(level[v], level[u] + 1)
        return level

    def check_stages(self, stages: int) -> int:
        if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
            raise PartitionError(f"stages must be a positive integer, got {stages!r}")
        if stages > self.n:
            raise PartitionError(f"cannot cut {self.n} operators into {stages} non-empty stages")
        return stages


@dataclass(frozen=True)
class Cost:
    """The objective of one assignment: ``P, O, C`` and the per-stage / per-boundary terms."""

    P: int
    O: int
    C: int
    m: list
    c: list

    @property
    def key(self) -> tuple[int, int, int]:
        """The lexicographic key ``(P, O, C)``: smaller is better."""
        return (self.P, self.O, self.C)

    def to_dict(self) -> dict:
        return {"P": self.P, "O": self.O, "C": self.C, "m": list(self.m), "c": list(self.c)}


def split_params(problem: PartitionProblem) -> tuple[list[int], list[tuple[int, list[int]]]]:
    """Parameter bytes each op alone uses (``own[v]``), and the buffers several ops share as
    ``(buffer, its ops)``: a shared buffer counts once in every stage using it. Empty buffers
    are left out."""
    users: dict[int, list[int]] = {}
    for v, ps in enumerate(problem.op_params):
        for b in ps:
            users.setdefault(b, []).append(v)
    own = [0] * len(problem.op_params)
    shared = []
    for b, us in users.items():
        if problem.param_bytes[b] == 0:
            continue
        if len(us) == 1:
            own[us[0]] += problem.param_bytes[b]
        else:
            shared.append((b, us))
    return own, shared


def check_assignment(problem: PartitionProblem, assignment: Sequence[int],
                     stages: int | None = None) -> list[int]:
    """The assignment as a list of ints; `PartitionError` unless it is valid."""
    s = list(assignment)
    if len(s) != problem.n:
        raise PartitionError(f"assignment has {len(s)} entries for {problem.n} ops")
    try:
        s = [int(x) for x in s]
    except (TypeError, ValueError):
        raise PartitionError("assignment entries must be integers") from None
    k = (max(s) + 1 if s else 0) if stages is None else stages
    if stages is not None:
        problem.check_stages(stages)
    for v, j in enumerate(s):
        if not 0 <= j < k:
            raise PartitionError(f"op {v} ({problem.names[v]!r}) is in stage {j}, outside "
                                 f"0..{k - 1}")
    for v, ps in enumerate(problem.preds):
        for u in ps:
            if s[u] > s[v]:
                raise PartitionError(f"op {v} ({problem.names[v]!r}) in stage {s[v]} depends "
                                     f"on op {u} ({problem.names[u]!r}) in later stage {s[u]}")
    empty = sorted(set(range(k)) - set(s))
    if empty:
        raise PartitionError(f"stage(s) {empty} of {k} are empty")
    return s


def evaluate(problem: PartitionProblem, assignment: Sequence[int],
             sram_bytes: int = DEFAULT_SRAM, stages: int | None = None) -> Cost:
    """``Cost(P, O, C, m, c)`` of a valid assignment (see the module docstring).

    ``stages`` defaults to ``max(assignment) + 1``. Raises `PartitionError` when the assignment
    is not monotone along the edges or leaves a stage empty.
    """
    if sram_bytes < 0:
        raise PartitionError(f"sram_bytes must be non-negative, got {sram_bytes}")
    s = check_assignment(problem, assignment, stages)
    k = max(s) + 1
    used: list[set[int]] = [set() for _ in range(k)]
    for v, ps in enumerate(problem.op_params):
        used[s[v]].update(ps)
    m = [sum(problem.param_bytes[b] for b in bs) for bs in used]
    c = [0] * max(k - 1, 0)
    for t in problem.tensors:
        if t.nbytes == 0:
            continue
        first = -1 if t.producer < 0 else s[t.producer]
        last = k - 1 if t.is_output else max((s[r] for r in t.consumers), default=first)
        # crosses boundaries first..last-1 (boundary j lies between stages j and j+1)
        for j in range(max(first, 0), last):
            c[j] += t.nbytes
    P = max(m)
    O = sum(max(0, mj - sram_bytes) for mj in m)
    C = max(c, default=0)
    return Cost(P, O, C, m, c)

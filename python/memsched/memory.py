"""The memory model: one definition of live memory and peak, used by every number memsched prints.

Definitions (SERENITY §3.1, HMCOS Def. 2.4):

* a tensor is **live** from the start of its producer to the end of its last consumer;
* with ``I`` the set of executed ops, ``live(I)`` is the bytes of tensors that are produced (or
  are counted graph inputs) and still have an unexecuted consumer (or are kept to the end);
* the **stable footprint** of op ``v`` run from ``I`` is
  ``live(I) + outputs(v) + workspace(v)`` (minus the input buffer that ``v`` overwrites in place,
  when in-place reuse is on and that input dies at ``v``);
* the **peak** of a schedule is the maximum stable footprint over its steps.

``live(I)`` depends only on the set ``I``, not on the order that produced it: that is what makes
the exact search over executed sets (`memsched.schedulers.exact`) possible.

`MemoryModel` holds the options; two presets:

* ``paper`` (default): graph inputs and outputs counted (outputs live to the end), weights not,
  no in-place reuse: the definition of the papers' tables.
* ``tvm``: what Relax's StaticPlanBlockMemory plans: function parameters and the returned
  tensor are not planned storage; reshape views / TupleGetItem own no storage (true in both);
  each tensor counts its size rounded up to 64 bytes, the offset alignment `PlanArena` gives
  it in the arena (the VM needs it for zero-copy tensors), so the model's peak is the arena a
  memsched build allocates (a MobileNet/ShuffleNet .pt2 has 96-byte batch-norm statistics).

``alignment`` (bytes, default 1) rounds every counted tensor up to a multiple of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .graph import OpGraph


@dataclass(frozen=True)
class MemoryModel:
    """Options of the memory model (see module docstring)."""

    count_inputs: bool = True
    count_outputs: bool = True
    inplace: bool = False
    workspace: bool = True
    name: str = "custom"
    alignment: int = 1

    @staticmethod
    def get(spec: "MemoryModel | str | None") -> "MemoryModel":
        if spec is None:
            return PAPER
        if isinstance(spec, MemoryModel):
            return spec
        try:
            return PRESETS[str(spec)]
        except KeyError:
            raise ValueError(f"unknown memory model {spec!r}; choose one of {sorted(PRESETS)}") \
                from None


PAPER = MemoryModel(True, True, False, True, "paper")
TVM = MemoryModel(False, False, False, True, "tvm", 64)  # 64: PlanArena's offset alignment
PRESETS = {"paper": PAPER, "tvm": TVM}


@dataclass
class Problem:
    """(graph, memory model) compiled to plain integers: what the schedulers search over.

    Ops are ``0..n-1``. A tensor is counted only if the model counts it; ``initial`` tensors are
    live before the first op, ``pinned`` ones stay live to the end once they exist, and ``base``
    bytes are live throughout (e.g. tensors crossing a sub-problem). Sub-problems for
    divide-and-conquer are `Problem`s too (`restrict`).
    """

    n: int
    preds: list[list[int]]
    creates: list[list[int]]  # counted tensors each op produces
    reads: list[list[int]]  # counted tensors each op reads
    workspace: list[int]
    inplace: list[list[int]]  # counted read tensors whose buffer the op may overwrite
    size: list[int]
    initial: list[bool]
    pinned: list[bool]
    consumers: list[list[int]]
    base: int = 0
    names: list[str] = field(default_factory=list)
    def __post_init__(self):
        self.full = (1 << self.n) - 1

    # derived bitmasks, built on first use: most problems the patch search builds are only
    # evaluated in a few orders (`evaluate` counts readers instead)
    @property
    def pred_mask(self) -> list[int]:
        got = self.__dict__.get("_pred_mask")
        if got is None:
            got = self._pred_mask = [sum(1 << p for p in set(ps)) for ps in self.preds]
        return got

    @property
    def cons_mask(self) -> list[int]:
        got = self.__dict__.get("_cons_mask")
        if got is None:
            got = self._cons_mask = [sum(1 << c for c in set(cs)) for cs in self.consumers]
        return got

    # ------------------------------------------------------------------ build
    @classmethod
    def from_graph(cls, graph: OpGraph, model: MemoryModel | str | None = None) -> "Problem":
        model = MemoryModel.get(model)
        counted = []
        for ten in graph.tensors:
            if ten.producer is None:
                counted.append(model.count_inputs and ten.is_input)
            elif ten.is_output and not model.count_outputs:
                counted.append(False)
            else:
                counted.append(True)
        tid = {}
        for t, c in enumerate(counted):
            if c:
                tid[t] = len(tid)
        size = [0] * len(tid)
        initial = [False] * len(tid)
        pinned = [False] * len(tid)
        consumers: list[list[int]] = [[] for _ in tid]
        a = max(1, int(model.alignment))
        for t, k in tid.items():
            ten = graph.tensors[t]
            size[k] = -(-ten.nbytes // a) * a
            initial[k] = ten.producer is None
            pinned[k] = ten.is_output and model.count_outputs
            consumers[k] = list(dict.fromkeys(ten.consumers))
        ops = graph.ops
        return cls(
            n=len(ops),
            preds=[list(op.preds) for op in ops],
            creates=[[tid[t] for t in op.outputs if t in tid] for op in ops],
            reads=[[tid[t] for t in op.inputs if t in tid] for op in ops],
            workspace=[op.workspace if model.workspace else 0 for op in ops],
            inplace=[[tid[t] for t in op.inplace if t in tid] if model.inplace else []
                     for op in ops],
            size=size, initial=initial, pinned=pinned, consumers=consumers,
            names=[op.name for op in ops],
        )

    def restrict(self, ops: Sequence[int], before: int) -> tuple["Problem", list[int]]:
        """The sub-problem of running ``ops`` right after the executed set ``before`` (a mask).

        Every op outside ``ops`` must be in ``before`` or come after all of ``ops`` (true for the
        segments between cut points). Returns the sub-problem and the map sub id -> op id.
        """
        ops = list(ops)
        local = {v: i for i, v in enumerate(ops)}
        seg_mask = sum(1 << v for v in ops)
        touched: dict[int, int] = {}
        for v in ops:
            for t in self.reads[v] + self.creates[v]:
                touched.setdefault(t, len(touched))
        base = self.base
        for t in range(len(self.size)):
            if t not in touched and self._exists(t, before) and self._live_after(t, before):
                base += self.size[t]
        size, initial, pinned, consumers = [], [], [], []
        for t in touched:
            size.append(self.size[t])
            initial.append(self._exists(t, before))
            inside = [local[c] for c in self.consumers[t] if c in local]
            consumers.append(inside)
            outside_later = self.cons_mask[t] & ~seg_mask & ~before
            pinned.append(self.pinned[t] or bool(outside_later))
        sub = Problem(
            n=len(ops),
            preds=[[local[p] for p in self.preds[v] if p in local] for v in ops],
            creates=[[touched[t] for t in self.creates[v]] for v in ops],
            reads=[[touched[t] for t in self.reads[v]] for v in ops],
            workspace=[self.workspace[v] for v in ops],
            inplace=[[touched[t] for t in self.inplace[v]] for v in ops],
            size=size, initial=initial, pinned=pinned, consumers=consumers, base=base,
            names=[self.names[v] if self.names else str(v) for v in ops],
        )
        return sub, ops

    def _exists(self, t: int, mask: int) -> bool:
        if self.initial[t]:
            return True
        prod = self._producer()[t]
        return prod >= 0 and bool(mask >> prod & 1)

    def _live_after(self, t: int, mask: int) -> bool:
        return self.pinned[t] or bool(self.cons_mask[t] & ~mask)

    def _producer(self) -> list[int]:
        if not hasattr(self, "_prod"):
            prod = [-1] * len(self.size)
            for v, ts in enumerate(self.creates):
                for t in ts:
                    prod[t] = v
            self._prod = prod
        return self._prod

    # ------------------------------------------------------------------ memory
    def live(self, mask: int) -> int:
        """Bytes live after executing the set ``mask`` (path independent)."""
        return self.base + sum(self.size[t] for t in range(len(self.size))
                               if self._exists(t, mask) and self._live_after(t, mask))

    def initial_live(self) -> int:
        if not hasattr(self, "_initial"):
            self._initial = self.live(0)
        return self._initial

    def step(self, mask: int, live: int, v: int) -> tuple[int, int]:
        """Run ``v`` from executed set ``mask`` with ``live`` bytes live.

        Returns (stable footprint of the step, live bytes afterwards).
        """
        new = mask | (1 << v)
        created = 0
        freed = 0
        for t in self.creates[v]:
            created += self.size[t]
            if not self.pinned[t] and not self.cons_mask[t]:
                freed += self.size[t]  # nobody reads it: dead right after v
        for t in self.reads[v]:
            if not self.pinned[t] and not (self.cons_mask[t] & ~new):
                freed += self.size[t]
        foot = live + created + self.workspace[v]
        for t in self.inplace[v]:
            if not self.pinned[t] and not (self.cons_mask[t] & ~new):
                foot -= min(self.size[t], created)
                break
        return foot, live + created - freed

    def static_bound(self, v: int) -> int:
        """A lower bound on the footprint of ``v`` whenever it runs: base, what it reads,
        creates and needs as workspace (minus the best in-place credit)."""
        created = sum(self.size[t] for t in self.creates[v])
        credit = max([min(self.size[t], created) for t in self.inplace[v] if not self.pinned[t]],
                     default=0)
        return (self.base + sum(self.size[t] for t in self.reads[v]) + created
                + self.workspace[v] - credit)

    def evaluate(self, order: Sequence[int]) -> "Profile":
        """The footprint of every step of ``order`` (`step`'s, with counts of each tensor's
        readers still to run instead of masks: O(reads) per step on large graphs; an order
        that runs an op twice takes the mask walk, `_evaluate_masks`)."""
        n = self.n
        if len(order) != n:
            return self._evaluate_masks(order)
        left, reader_of = self._readers()
        left = list(left)
        done = bytearray(n)
        size, pinned, reads = self.size, self.pinned, self.reads
        inplace, preds = self.inplace, self._pred_sets()
        made, dead, extra = self._per_op()
        live = self.initial_live()
        steps, lives = [], [live]
        step, after = steps.append, lives.append
        for v in order:
            if done[v]:
                return self._evaluate_masks(order)
            for q in preds[v]:
                if not done[q]:
                    raise ValueError(f"op {v} scheduled before one of its predecessors")
            done[v] = 1
            for t in reader_of[v]:
                left[t] -= 1
            created = made[v]
            freed = dead[v]
            for t in reads[v]:
                if not left[t] and not pinned[t]:
                    freed += size[t]
            foot = live + extra[v]
            for t in inplace[v]:
                if not pinned[t] and not left[t]:
                    foot -= min(size[t], created)
                    break
            live += created - freed
            step(foot)
            after(live)
        return Profile(list(order), steps, lives)

    def _per_op(self) -> tuple[list[int], list[int], list[int]]:
        """Per op: the bytes it creates, those of them nobody reads (dead right after it),
        and what it adds to the footprint while it runs (created + workspace)."""
        if not hasattr(self, "_made"):
            size, pinned, cons = self.size, self.pinned, self.consumers
            made = [sum(size[t] for t in ts) for ts in self.creates]
            dead = [sum(size[t] for t in ts if not pinned[t] and not cons[t])
                    for ts in self.creates]
            self._made = (made, dead, [m + w for m, w in zip(made, self.workspace)])
        return self._made

    def _readers(self) -> tuple[list[int], list[list[int]]]:
        """Per tensor its distinct readers' count; per op the tensors it is a reader of."""
        if not hasattr(self, "_read"):
            reader_of: list[list[int]] = [[] for _ in range(self.n)]
            left = []
            for t, cs in enumerate(self.consumers):
                cs = set(cs)
                left.append(len(cs))
                for c in cs:
                    reader_of[c].append(t)
            self._read = (left, reader_of)
        return self._read

    def _pred_sets(self) -> list[list[int]]:
        if not hasattr(self, "_preds"):
            self._preds = [list(set(ps)) for ps in self.preds]
        return self._preds

    def _evaluate_masks(self, order: Sequence[int]) -> "Profile":
        mask = 0
        live = self.initial_live()
        steps, lives = [], [live]
        for v in order:
            if self.pred_mask[v] & ~mask:
                raise ValueError(f"op {v} scheduled before one of its predecessors")
            foot, live = self.step(mask, live, v)
            mask |= 1 << v
            steps.append(foot)
            lives.append(live)
        if mask != self.full:
            raise ValueError("order does not schedule every op exactly once")
        return Profile(list(order), steps, lives)


@dataclass
class Profile:
    """Memory over time for one order: ``steps[k]`` is the stable footprint of the k-th op,
    ``lives[k]`` the live bytes before it (``lives[-1]``: after the last op)."""

    order: list[int]
    steps: list[int]
    lives: list[int]

    @property
    def peak(self) -> int:
        return max(self.steps, default=self.lives[0] if self.lives else 0)

    @property
    def peak_step(self) -> int:
        return max(range(len(self.steps)), key=self.steps.__getitem__) if self.steps else -1


def evaluate(graph: OpGraph, order: Sequence[int],
             model: MemoryModel | str | None = None) -> Profile:
    """Memory profile of running ``graph`` in ``order`` under ``model``."""
    graph.check_order(order)
    return Problem.from_graph(graph, model).evaluate(order)


def peak_memory(graph: OpGraph, order: Sequence[int] | None = None,
                model: MemoryModel | str | None = None) -> int:
    """Peak bytes of ``graph`` in ``order`` (default: the input order)."""
    if order is None:
        order = list(range(len(graph.ops)))
    return evaluate(graph, order, model).peak

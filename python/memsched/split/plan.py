"""One chromosome spelled out: who computes what, which pieces move, in which stage.

`evaluate` prices a population with array arithmetic; `build_plan` lists the same things for
one chromosome explicitly, so that the Relax rewrite (`memsched.transform.split_across_devices`)
and the RPC executor (`memsched.runtime.rpc_split`) run exactly what was priced:

* a `Task` per (operator, device with a non-empty slice): its output range and, per input
  (`InputUse`), the region it reads, assembled from `Part`\\ s in order along one axis: the part
  the device holds itself (cut out of its slice) and pieces received from the other owners;
* a `Transfer` per (operator input, owner) whose data another device needs: the host fetches the
  *hull* of what is needed from the owner (its whole slice, or a sub-region the owner cuts out
  with a small function first) and sends each receiver its piece; graph inputs are owned by the
  host (no fetch);
* `Stage`\\ s: a new stage starts at an operator that needs a transfer; within a stage every
  device runs its tasks as one function; slices still needed after the stage (or returned by the
  model) are the function's results;
* `gathers`: for every graph output, the owners' slices the host concatenates.

Regions are ``(c0, c1, h0, h1)``: channels ``[c0, c1)`` and rows ``[h0, h1)`` of a tensor
(everything else whole).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .encoding import Encoding, held, needed

Region = tuple  # (c0, c1, h0, h1)


def _r(x) -> Region:
    return tuple(int(v) for v in x)


def _inter(a: Region, b: Region) -> Region:
    return (max(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), min(a[3], b[3]))


def area(r: Region) -> int:
    return max(r[1] - r[0], 0) * max(r[3] - r[2], 0)


@dataclass
class Part:
    owner: int  # device; -1 = the host (graph input)
    region: Region


@dataclass
class InputUse:
    req: int  # index into op.inputs
    tensor: int
    need: Region
    parts: list  # Part, in concatenation order along `axis`
    axis: str  # "c" or "h": the axis the parts are stacked along

    def local_whole(self, device: int, held_region: Region | None) -> bool:
        """The need is exactly the device's own slice: pass it unchanged."""
        return (len(self.parts) == 1 and self.parts[0].owner == device
                and held_region == self.need)


@dataclass
class Task:
    op: int
    device: int
    out: tuple  # (a, b) along the op's dimension
    held: Region  # region of the output tensor the device keeps
    inputs: list  # InputUse, one per op input


@dataclass
class Transfer:
    op: int
    req: int
    tensor: int
    owner: int  # device, -1 = host
    hull: Region  # what the host fetches from the owner (the host's own region for -1)
    cut: bool  # the hull is a strict sub-region of the owner's slice
    pieces: list  # (receiver device, region)


@dataclass
class Stage:
    ops: list
    transfers: list
    tasks: dict  # device -> [Task] in execution order
    results: dict = field(default_factory=dict)  # device -> [tensor ids returned]
    reads: dict = field(default_factory=dict)  # device -> [tensor ids of earlier slices read]


@dataclass
class Plan:
    enc: Encoding
    X: np.ndarray
    stages: list
    held: dict  # (tensor, device) -> region the device holds
    gathers: dict  # graph output tensor -> [(owner, region)] in concatenation order
    gather_axis: dict  # graph output tensor -> "c" | "h"

    @property
    def problem(self):
        return self.enc.problem

    def received_bytes(self) -> np.ndarray:
        """(N, n) bytes each device receives per op (equal to `Evaluation.received`)."""
        prob = self.problem
        out = np.zeros((prob.n, self.enc.n))
        for st in self.stages:
            for tr in st.transfers:
                u = prob.tensors[tr.tensor].unit
                for k, reg in tr.pieces:
                    out[tr.op, k] += area(reg) * u
        return out


def _axis_of(dim: str) -> str:
    return "c" if dim == "cout" else "h"


def _held_region(enc: Encoding, X, t: int, k: int) -> Region | None:
    prob = enc.problem
    ten = prob.tensors[t]
    j = ten.producer
    if j < 0:
        return None
    r = _r(held(ten, enc.dims[j], X[j, k], X[j, k + 1]))
    return r if area(r) > 0 else None


def build_plan(enc: Encoding, X) -> Plan:
    X = np.asarray(enc.check_shape(X))
    if X.ndim != 2:
        raise ValueError("build_plan takes one chromosome (N, n+1)")
    prob, n = enc.problem, enc.n
    held_map: dict = {}
    stages: list[Stage] = []
    for i, op in enumerate(prob.ops):
        d = enc.dims[i]
        tasks, transfers = [], []
        for k in range(n):
            a, b = int(X[i, k]), int(X[i, k + 1])
            if b <= a:
                continue
            uses = []
            for ri, r in enumerate(op.inputs):
                ten = prob.tensors[r.tensor]
                need = _r(needed(r, ten, d, a, b))
                j = ten.producer
                if area(need) == 0:
                    uses.append(InputUse(ri, r.tensor, need, [], "c"))
                    continue
                if j < 0:
                    uses.append(InputUse(ri, r.tensor, need, [Part(-1, need)], "c"))
                    continue
                axis = _axis_of(enc.dims[j]) if enc.dims[j] != "whole" else "c"
                parts = []
                for o in range(n):
                    h = _held_region(enc, X, r.tensor, o)
                    if h is None:
                        continue
                    p = _inter(need, h)
                    if area(p) > 0:
                        parts.append(Part(o, p))
                parts.sort(key=lambda p: p.region[0] if axis == "c" else p.region[2])
                uses.append(InputUse(ri, r.tensor, need, parts, axis))
            ten_out = prob.tensors[op.output]
            hr = _r(held(ten_out, d, a, b))
            tasks.append(Task(i, k, (a, b), hr, uses))
            held_map[(op.output, k)] = hr
        # transfers: remote parts grouped by (input, owner)
        groups: dict = {}
        for task in tasks:
            for u in task.inputs:
                for p in u.parts:
                    if p.owner != task.device:
                        groups.setdefault((u.req, p.owner), []).append((task.device, p.region))
        for (ri, o), pieces in groups.items():
            t = op.inputs[ri].tensor
            regs = [r for _, r in pieces]
            hull = (min(r[0] for r in regs), max(r[1] for r in regs),
                    min(r[2] for r in regs), max(r[3] for r in regs))
            cut = o >= 0 and hull != held_map[(t, o)]
            transfers.append(Transfer(i, ri, t, o, hull, cut, pieces))
        if transfers or not stages:
            stages.append(Stage([], [], {}))
        st = stages[-1]
        st.ops.append(i)
        st.transfers += transfers
        for task in tasks:
            st.tasks.setdefault(task.device, []).append(task)
    # results and reads of every stage function
    for st in stages:
        last = st.ops[-1]
        for k, tasks in st.tasks.items():
            produced = {prob.ops[t.op].output for t in tasks}
            st.results[k] = [prob.ops[t.op].output for t in tasks
                             if prob.last_use(prob.ops[t.op].output) > last]
            reads = []
            for t in tasks:
                for u in t.inputs:
                    for p in u.parts:
                        if p.owner == k and u.tensor not in produced and u.tensor not in reads:
                            reads.append(u.tensor)
            st.reads[k] = reads
    gathers, gather_axis = {}, {}
    for t in prob.outputs:
        j = prob.tensors[t].producer
        if j < 0:
            continue
        axis = _axis_of(enc.dims[j]) if enc.dims[j] != "whole" else "c"
        owners = [(k, held_map[(t, k)]) for k in range(n) if (t, k) in held_map]
        owners.sort(key=lambda o: o[1][0] if axis == "c" else o[1][2])
        gathers[t], gather_axis[t] = owners, axis
    return Plan(enc, X, stages, held_map, gathers, gather_axis)

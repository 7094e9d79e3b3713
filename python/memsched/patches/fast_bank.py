"""When no plan fits the fast memory bank: the plan whose placement serves it most.

With a memory map (`PatchOptions.fast_memory`: the fastest bank's bytes) the search prefers a
plan whose arena fits that bank (`result.choose`). When none within the budgets does, the
lowest arena is not always the one the bank serves best: the bank holds a subset of the
buffers, and which subset fits depends on the program's sizes, lifetimes and reads, not on its
peak alone. So the search's best few plans within the budgets (`FAST_CANDIDATES`, lowest arena
first) are each placed across the banks by the real placement (`memsched.banks.place`: the
interval knapsack by CP-SAT and the exact packer per bank) on the patched model's activation
graph -- every counted tensor's bytes, its lifetime in the certified scheduler's order of the
whole patched model, traffic = bytes x (1 + the operators that read it), issue 59's objective
-- and the one whose fast bank serves the largest share of its traffic wins (ties: fewer
predicted instructions, then the lower arena). The share and not the bytes: a plan that
recomputes more moves more bytes through both banks (on ResNet-8 with a 24 KiB fast bank the
most fast bytes chose 86.5 % in the written program, the largest share 93.3 %). Bounded by work
(the scheduler's states, CP-SAT's deterministic time, the packer's node budget): the same
answer on any machine. An estimate: the written program's order and storages differ a little
from the activation graph's (within 0.2 point on the benchmarks' three plans; a 3 KiB bank of a
small test model chose a plan 1.2 points below the lowest arena's).
"""
from __future__ import annotations

from ..graph import OpGraph
from ..memory import MemoryModel
from .patched import patched_graph
from .result import Candidate, within

# plans placed when none fits the fast bank, lowest arena first: each costs one schedule of
# the whole patched model and one placement (ms on ResNet-8 and MobileNetV1-0.25, 6 s for 48
# on MobileNetV2-0.35 @144 with a bank no plan fits; its 449 candidates would take 47 s)
FAST_CANDIDATES = 48
# the bank after the fast one: room for anything (only the fast bank's traffic is compared)
_SLOW = 1 << 40
PACK_NODES = 200_000


def buffers_of(graph: OpGraph, order: list[int], model: MemoryModel) -> list:
    """The activation graph's counted tensors as `memsched.banks.Buffer`: bytes, the steps
    of ``order`` they are live at (a model input from the first step, a model output to the
    last), traffic = bytes x (1 + the operators reading it); then each operator's workspace
    where the model counts it (live at its step; traffic 2 x bytes: its operator writes and
    reads it); with the in-place pairs ``(input, output)`` the model lets share storage."""
    from ..banks import Buffer

    at = {v: k for k, v in enumerate(order)}
    last = len(order) - 1
    index: dict[int, int] = {}
    out: list = []
    for t, ten in enumerate(graph.tensors):
        if ten.producer is None:
            if not (model.count_inputs and ten.is_input):
                continue
            start = 0
        elif ten.is_output and not model.count_outputs:
            continue
        else:
            start = at[ten.producer]
        readers = set(ten.consumers)
        end = max([at[v] for v in readers] + [start])
        if ten.is_output:
            end = last
        if ten.nbytes <= 0:
            continue
        index[t] = len(out)
        out.append(Buffer(int(ten.nbytes), start, end, int(ten.nbytes) * (1 + len(readers))))
    if model.workspace:  # an operator's scratch: live at its step, written and read by it
        for v, op in enumerate(graph.ops):
            if op.workspace > 0 and v in at:
                out.append(Buffer(int(op.workspace), at[v], at[v], 2 * int(op.workspace)))
    pairs = []
    if model.inplace:
        for op in graph.ops:
            for t in op.inplace:
                for o in op.outputs:
                    if t in index and o in index:
                        pairs.append((index[t], index[o]))
    return out, pairs


def fast_traffic(ev, plans: list, fast_memory: int) -> tuple[int, int]:
    """(traffic the fast bank of ``fast_memory`` bytes serves, total traffic) for the model
    with ``plans`` patched (`evaluator.Evaluator` ``ev``), placed by `memsched.banks.place`
    in the certified scheduler's order of the whole patched model."""
    from ..banks import Bank, default_pack, place
    from ..schedulers import schedule

    full = patched_graph(ev.sm, ev.graph, ev.tensor_index, plans)
    s = schedule(full, "auto", ev.model, **ev.meter.schedule_options())
    bufs, pairs = buffers_of(full, list(s.order), ev.model)
    # the banks' default alignment (`memsched.banks.Bank`, ExecuTorch's planner's): patch
    # pieces are small, and their padding decides what fits a small bank
    a = max(Bank.alignment, int(ev.model.alignment))
    banks = [Bank("fast", int(fast_memory), a), Bank("slow", _SLOW, a)]
    try:
        bp = place(bufs, banks, default_pack(bufs, PACK_NODES), shared=pairs)
    except ValueError:  # cannot place (e.g. a pair the placement refuses): no better
        return 0, sum(b.traffic for b in bufs)
    return bp.traffic[0], bp.total_traffic


def _ins(c: Candidate) -> float:
    return c.instructions if c.instructions is not None else float("inf")


def best_for_bank(ev, pool: list[Candidate], plans_of, reference: Candidate,
                  choice: Candidate | None) -> Candidate | None:
    """``choice`` unless the request has a fast bank that ``choice`` does not fit: then,
    among the `FAST_CANDIDATES` lowest-arena plans of ``pool`` within the budgets that beat
    ``reference`` (the unpatched model in its best order), the one whose fast bank serves
    the largest share of the traffic (module docstring). ``plans_of(c)``: candidate
    ``c``'s `PatchPlan`s."""
    req = ev.request
    fast = req.fast_memory
    if fast is None or req.forced or choice is None or choice.peak <= fast:
        return choice
    seen, ok = set(), []
    for c in pool:
        if id(c) in seen or not within(c, req.max_overhead, req.max_slowdown) or \
                c.peak >= reference.peak:
            continue
        seen.add(id(c))
        ok.append(c)
    ok.sort(key=lambda c: (c.peak, c.total, c.patches, c.macs, _ins(c)))
    ok = [choice] + [c for c in ok[:FAST_CANDIDATES] if c is not choice]
    best, best_key = choice, None
    for c in ok:
        if ev.meter.out("placing plans across the banks"):
            break
        fast_t, total_t = fast_traffic(ev, plans_of(c), fast)
        # the share, not the bytes: a plan that moves more bytes (more recomputed maps)
        # serves more from the fast bank and more from the slow one too
        key = (-fast_t / max(1, total_t), _ins(c), c.peak, c.total)
        if best_key is None or key < best_key:
            best, best_key = c, key
    return best

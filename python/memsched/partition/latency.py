"""A documented Edge TPU pipeline latency model (for comparing cuts, not a measurement).

Stage ``j`` of a cut takes

    T_j = MACs_j / mac_rate                      (compute)
        + max(0, m_j - SRAM) / offchip_rate      (parameters streamed from host memory)
        + (in_j + out_j) / link_rate             (activations over the host link)

where ``in_j`` is ``c_{j-1}`` (the model's input bytes for stage 0) and ``out_j`` is ``c_j``
(the model's output bytes for the last stage); the host relays tensors between devices, so each
boundary crosses two links. A pipeline's steady-state time per inference is ``max_j T_j``; one
inference's end-to-end latency is ``sum_j T_j``.

Defaults (options of `EdgeTPUCostModel`): 8 MiB SRAM; the USB 3.0 link of a Coral USB
Accelerator at a practical 320 MB/s, which also carries the streamed parameters; 4 TOPS int8
(2 TMAC/s) at 25 % utilisation, 0.5 TMAC/s.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .problem import DEFAULT_SRAM, PartitionProblem, evaluate


@dataclass(frozen=True)
class EdgeTPUCostModel:
    sram_bytes: int = DEFAULT_SRAM
    offchip_bytes_per_s: float = 320e6
    link_bytes_per_s: float = 320e6
    macs_per_s: float = 0.5e12

    def stage_seconds(self, problem: PartitionProblem, assignment: Sequence[int],
                      macs: Sequence[int]) -> list[float]:
        cost = evaluate(problem, assignment, self.sram_bytes)
        k = len(cost.m)
        comp = [0.0] * k
        for v, j in enumerate(assignment):
            comp[j] += macs[v]
        model_in = sum(t.nbytes for t in problem.tensors if t.producer < 0)
        model_out = sum(t.nbytes for t in problem.tensors if t.is_output)
        times = []
        for j in range(k):
            in_b = model_in if j == 0 else cost.c[j - 1]
            out_b = model_out if j == k - 1 else cost.c[j]
            times.append(comp[j] / self.macs_per_s
                         + max(0, cost.m[j] - self.sram_bytes) / self.offchip_bytes_per_s
                         + (in_b + out_b) / self.link_bytes_per_s)
        return times

    def pipeline(self, problem: PartitionProblem, assignment: Sequence[int],
                 macs: Sequence[int]) -> tuple[float, float]:
        """(steady-state seconds per inference = max stage, end-to-end seconds = sum)."""
        t = self.stage_seconds(problem, assignment, macs)
        return max(t), sum(t)


def balance_latency(problem: PartitionProblem, stages: int, macs: Sequence[int],
                    model: EdgeTPUCostModel | None = None, time_limit: float | None = 10.0,
                    hint: Sequence[int] | None = None,
                    candidates: Sequence[Sequence[int]] = ()) -> tuple[list[int], dict]:
    """The cut minimising the slowest stage's modelled time ``max_j T_j`` (the pipeline's
    steady-state time per inference), every stage non-empty, dependencies respected (the CP-SAT
    model of `memsched.partition.cpsat` with this objective). Parameters beyond the SRAM are
    streamed, so the SRAM rule is part of ``T_j``.

    The solver works in integer time units (the smallest per-unit cost = 64 units, so the MAC
    term is exact to 1/128); ``optimal`` refers to that integer model. Returns ``(assignment,
    stats)`` with ``stats["optimal"]``, ``stats["stage_seconds"]`` (the float model) and
    ``stats["seconds"]``. Without a proof within ``time_limit`` it returns the best cut found,
    never worse than ``hint`` (default: the param-balanced cut) or any of ``candidates``
    (e.g. the (P, O, C) optimum), the best of which also seeds the search.
    """
    import time as _time

    from .cpsat import CutModel, Infeasible
    from .param_balanced import param_balanced_cut

    model = model or EdgeTPUCostModel()
    problem.check_stages(stages)
    t0 = _time.perf_counter()
    pool = [list(hint) if hint is not None else param_balanced_cut(problem, stages)]
    pool += [list(c) for c in candidates]
    hint = min(pool, key=lambda c: max(model.stage_seconds(problem, c, macs)))
    per = {"mac": 1.0 / model.macs_per_s, "offchip": 1.0 / model.offchip_bytes_per_s,
           "link": 1.0 / model.link_bytes_per_s}
    unit = min(per.values()) / 64.0
    st = {key: max(1, int(round(v / unit))) for key, v in per.items()}
    st["macs"] = [int(x) for x in macs]
    st["in"] = sum(t.nbytes for t in problem.tensors if t.producer < 0)
    st["out"] = sum(t.nbytes for t in problem.tensors if t.is_output)
    best = hint
    optimal = False
    if stages > 1:
        try:
            cut = CutModel(problem, stages, model.sram_bytes, [0] * problem.n,
                           [stages - 1] * problem.n, "T", stage_time=st)
            optimal, found, _, _ = cut.solve(time_limit, hint=hint)
            if found is not None and max(model.stage_seconds(problem, found, macs)) <= \
                    max(model.stage_seconds(problem, best, macs)):
                best = found
        except Infeasible:
            pass
    else:
        optimal = True
    times = model.stage_seconds(problem, best, macs)
    return best, {"optimal": bool(optimal), "stage_seconds": times,
                  "seconds": _time.perf_counter() - t0}

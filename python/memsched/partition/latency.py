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

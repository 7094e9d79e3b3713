"""The Edge TPU compiler's segmentation rule: balance parameter bytes along one order.

``edgetpu_compiler --num_segments K`` walks the operators in one topological order (the model's
own) and starts segment ``j`` once the running parameter sum has reached ``j * total / K``. Every
table compares against this cut. Stages are contiguous runs of the order, so the cut is monotone
along every edge; when the parameter thresholds would leave a stage empty (a few heavy ops, a
parameter-free tail), the cut is moved just enough to give every stage at least one op.
"""
from __future__ import annotations

from .base import register
from .problem import PartitionProblem


def param_balanced_cut(problem: PartitionProblem, stages: int,
                       order: list[int] | None = None) -> list[int]:
    """Stage of every op under the param-balanced rule along ``order`` (default: the input
    order, smallest op id first)."""
    problem.check_stages(stages)
    order = problem.topological_order() if order is None else list(order)
    n, k = problem.n, stages
    total = problem.total_param_bytes
    seen: set[int] = set()
    running = 0
    raw = []
    for v in order:
        # op v starts stage j when the parameters of the ops before it reach j * total / k
        j = sum(1 for i in range(1, k) if total > 0 and running * k >= i * total) \
            if total > 0 else (len(raw) * k) // n
        raw.append(j)
        for b in problem.op_params[v]:
            if b not in seen:
                seen.add(b)
                running += problem.param_bytes[b]
    # every stage non-empty: stage of the i-th op in [k - (n - i), i], non-decreasing, steps <= 1
    stage_of_pos = []
    prev = -1
    for i, j in enumerate(raw):
        j = max(j, k - (n - i), prev)
        j = min(j, prev + 1, k - 1)
        stage_of_pos.append(j)
        prev = j
    s = [0] * n
    for i, v in enumerate(order):
        s[v] = stage_of_pos[i]
    return s


@register("param-balanced", "the Edge TPU compiler's rule: cut the input order at j*total/k "
                            "parameter bytes")
def param_balanced(problem: PartitionProblem, stages: int, sram_bytes: int,
                   time_limit: float | None = None, order: list[int] | None = None, **_):
    return param_balanced_cut(problem, stages, order), {}, False, {}

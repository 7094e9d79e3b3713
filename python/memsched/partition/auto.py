"""``auto``: the certified optimum by the fastest route measured.

The exact lexicographic solve (`exact.lexicographic`, with the combinatorial bounds of
`memsched.partition.bounds` first) from the better of two starting cuts: the param-balanced cut
and the best cut of one topological order into contiguous runs (`param_balanced.linear_cut`,
milliseconds). A start close to the optimum narrows every op's stage window under
``P <= P_best - 1``; on NASNet-A Large (765 ops) the param-balanced cut is 25 % above the optimum
at k = 6, the linear cut 0.1 %. Inc-ILP (`method="inc-ilp"`) spent most of its time in its
relaxation-window solves and time boxes there, so ``auto`` no longer takes that route.
"""
from __future__ import annotations

from .base import register
from .exact import lexicographic
from .param_balanced import linear_cut, param_balanced_cut
from .problem import evaluate


@register("auto", "certified lexicographic optimum: bounds first, then CP-SAT, from the "
                  "better of the param-balanced and linear cuts")
def auto(problem, stages, sram_bytes, time_limit=None, workers=1, seed=0, **_):
    if stages == 1:
        return [0] * problem.n, {}, True, {"route": "trivial"}
    starts = {"param-balanced": param_balanced_cut(problem, stages),
              "linear": linear_cut(problem, stages)}
    name = min(starts, key=lambda x: evaluate(problem, starts[x], sram_bytes, stages).key)
    assignment, lbs, optimal, stats = lexicographic(problem, stages, sram_bytes, starts[name],
                                                    time_limit, workers=workers, seed=seed)
    stats = dict(stats, route="exact", initial=name)
    return assignment, lbs, optimal, stats

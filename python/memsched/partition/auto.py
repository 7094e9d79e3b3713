"""``auto``: the certified optimum by the fastest route measured.

Inc-ILP (`inc_ilp`) from the param-balanced cut: the relaxation window around that cut holds
the optimum or a near-optimal cut, whose ``P`` narrows every op's stage window for the global
certificate; when a window grows to hold every op the route is the full exact solve. On the ten
Keras benchmark models this certified all 30 (model, k) instances in at most 0.32 s (mean 0.09 s;
full exact: at most 0.89 s). Starting from the learned cut instead costs its numpy inference
(0.05-0.3 s on those models) and saved nothing there, so ``auto`` does not use it;
``method="inc-ilp"`` (learned start, the paper's route) does.
"""
from __future__ import annotations

from .base import register
from .inc_ilp import inc_ilp


@register("auto", "certified lexicographic optimum: Inc-ILP from the param-balanced cut")
def auto(problem, stages, sram_bytes, time_limit=None, **options):
    options.setdefault("initial", "param-balanced")
    assignment, lbs, optimal, stats = inc_ilp(problem, stages, sram_bytes, time_limit,
                                              **options)
    stats = dict(stats, route="inc-ilp")
    return assignment, lbs, optimal, stats

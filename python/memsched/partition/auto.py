"""``auto``: the certified optimum by the fastest route measured.

Inc-ILP (`inc_ilp`) from the better of the learned (greedy decoding) and the param-balanced cut:
the relaxation
window around a good cut holds the optimum, its answer tightens every op's stage window for
the global certificate, and the whole route falls back to the full exact solve when a window
grows to hold every op. On the ten Keras benchmark models every instance is certified (README).
"""
from __future__ import annotations

from .base import register
from .inc_ilp import inc_ilp


@register("auto", "certified lexicographic optimum: Inc-ILP from the better of the learned "
                  "and param-balanced cuts")
def auto(problem, stages, sram_bytes, time_limit=None, **options):
    options.setdefault("initial", "best")
    options.setdefault("samples", 0)  # greedy learned cut: sampling costs more than it saves here
    assignment, lbs, optimal, stats = inc_ilp(problem, stages, sram_bytes, time_limit,
                                              **options)
    stats = dict(stats, route="inc-ilp")
    return assignment, lbs, optimal, stats

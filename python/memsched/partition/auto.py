"""``auto``: the certified optimum by the fastest route available.

Today: the exact lexicographic CP-SAT solves (`exact`), hinted with the param-balanced cut.
"""
from __future__ import annotations

from .base import register
from .exact import exact


@register("auto", "certified lexicographic optimum by the fastest available route")
def auto(problem, stages, sram_bytes, time_limit=None, **options):
    assignment, lbs, optimal, stats = exact(problem, stages, sram_bytes, time_limit, **options)
    stats = dict(stats, route="exact")
    return assignment, lbs, optimal, stats

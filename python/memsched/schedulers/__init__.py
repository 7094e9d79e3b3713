"""Schedulers: one module each, one signature.

``schedule(graph, algorithm, memory_model, time_limit)`` -> `Schedule` (order, peak, lower
bound, optimal flag, seconds, stats). `available()` lists the algorithm names.
"""
from .base import Schedule, available, schedule, trivial_bound  # noqa: F401
from . import heuristics, exact, reference, ilp  # noqa: F401  (registration)
from .heuristics import BASELINES, best_heuristic  # noqa: F401
from .exact import cut_segments  # noqa: F401

"""Schedulers: one module each, one signature.

``schedule(graph, algorithm, memory_model, time_limit)`` -> `Schedule` (order, peak, lower
bound, optimal flag, seconds, stats). `available()` lists the algorithm names.
"""
from .base import Schedule, available, schedule, trivial_bound  # noqa: F401
from . import heuristics, exact, reference, ilp, hmcos, btsearch, auto  # noqa: F401  (registration)
from . import native_exact  # noqa: F401  (registers exact_native; loads the library lazily)
from .heuristics import BASELINES, best_heuristic  # noqa: F401
from .exact import cut_segments  # noqa: F401

"""Pipeline partition for Edge TPU stages: problem, evaluator and solvers (one module each).

    from memsched.partition import PartitionProblem, evaluate, solve
    problem = PartitionProblem.from_graph(graph, op_params, param_bytes)
    result = solve(problem, stages=4, sram_bytes=8 << 20, method="auto")
    result.assignment, result.P, result.O, result.C, result.lower_bounds, result.optimal

Methods: ``auto``, ``exact``, ``inc-ilp``, ``learned``, ``param-balanced`` (`available()`).
The objective is defined once, in `memsched.partition.problem`.
"""
from .problem import (DEFAULT_SRAM, ActTensor, Cost, PartitionError,  # noqa: F401
                      PartitionProblem, check_assignment, evaluate)
from .base import PartitionResult, available, solve, trivial_bounds  # noqa: F401
from . import param_balanced, exact, inc_ilp, learned, auto  # noqa: F401  (registration)
from .param_balanced import param_balanced_cut  # noqa: F401

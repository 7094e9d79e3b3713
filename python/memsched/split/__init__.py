"""Split a model across devices (GenEFlow, MemoriaNova §3.3): problem, encoding, cost model,
evaluator and solvers, one module each.

    from memsched.split import from_relax, Encoding, CostModel, solve
    problem = from_relax(mod)                       # ops in MemoryAwareSchedule's order
    result = solve(problem, cost, method="ga")      # also single, uniform, greedy
    result.X, result.evaluation.row()

Every number goes through `memsched.split.evaluate.evaluate`.
"""
from .problem import (InputReq, SplitError, SplitOp, SplitProblem, TensorInfo,  # noqa: F401
                      from_relax)
from .encoding import Encoding, choose_dims, even_split  # noqa: F401
from .cost import CostModel, Device, Link, OpTimes, load_profile, save_profile  # noqa: F401
from .evaluate import Evaluation, evaluate  # noqa: F401
from .solve import METHODS, SplitResult, compare, solve  # noqa: F401

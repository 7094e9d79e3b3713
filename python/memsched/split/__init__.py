"""Split a model across devices (GenEFlow, MemoriaNova §3.3): problem, encoding, cost model,
evaluator and solvers, one module each.

    from memsched.split import Encoding, CostModel, solve
    from memsched.transform.split_relax import from_relax   # the TVM adapter builds it
    problem = from_relax(mod)                       # ops in MemoryAwareSchedule's order
    result = solve(problem, cost, method="ga")      # also single, uniform, greedy
    result.X, result.evaluation.row()

Every number goes through `memsched.split.evaluate.evaluate`.
"""
from .problem import InputReq, SplitError, SplitOp, SplitProblem, TensorInfo  # noqa: F401
from .encoding import Encoding, choose_dims, even_split  # noqa: F401
from .cost import CostModel, Device, Link, OpTimes, load_profile, save_profile  # noqa: F401
from .evaluate import Evaluation, evaluate  # noqa: F401
from .solve import METHODS, SplitResult, compare, solve  # noqa: F401

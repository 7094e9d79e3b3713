"""Errors of the ExecuTorch package: each a ``ValueError`` with a one-line message, so the
command line can map them to exit status 2 like every other bad input."""
from __future__ import annotations

from ..errors import ModelLoadError


class ExecutorchError(ModelLoadError):
    """Base of the errors raised by `memsched.executorch` (a `ValueError`: the command line
    maps it to one line and exit status 2)."""


class UnsupportedProgramError(ExecutorchError):
    """A program memsched cannot re-plan safely (a node kind it does not know, a spec defined
    after a reader, ...); the message names the node."""


class PlanCheckError(ExecutorchError):
    """A memory plan that fails the independent check: two co-live tensors overlap in one
    arena, or a tensor reaches past its arena's planned size."""


class OutputsDifferError(PlanCheckError):
    """``--measure`` found the rewritten program computing something else (exit status 1 on
    the command line; nothing is written)."""


class PteFileError(ExecutorchError):
    """A ``.pte`` file that cannot be read: truncated, foreign, or an unknown layout."""

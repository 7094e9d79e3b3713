"""Graph transforms that simplify a scheduling problem without changing its optimum."""
from .fusion import FusedGroup, Simplified, contract, find_groups, simplify  # noqa: F401

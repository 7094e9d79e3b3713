"""TVM passes of memsched (one file each), re-exported from `memsched`."""
from .memory_aware_schedule import MemoryAwareSchedule  # noqa: F401
from .rewrite_concat_conv import RewriteConcatConv  # noqa: F401

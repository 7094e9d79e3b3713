"""TVM passes of memsched (one file each), re-exported from `memsched`."""
from .memory_aware_schedule import MemoryAwareSchedule  # noqa: F401
from .rewrite_concat_conv import RewriteConcatConv  # noqa: F401
from .plan_arena import PlanArena  # noqa: F401
from .fuse_isolated_subgraphs import FuseIsolatedSubgraphs  # noqa: F401
from .partition_pipeline import PartitionPipeline  # noqa: F401
from .split_across_devices import SplitAcrossDevices  # noqa: F401
from .tile_patches import TilePatches  # noqa: F401

# The native library registers the memsched.* PassContext config keys (memsched.algorithm,
# memsched.time_limit_s, memsched.memory_model); without it they are unknown to TVM.
from .. import native as _native  # noqa: E402

_native.available()

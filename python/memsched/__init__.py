"""tvm-memsched: peak-memory-optimal operator scheduling and memory passes for Apache TVM Relax.

Graph model and algorithms import without TVM; the passes (`MemoryAwareSchedule`, ...) import
TVM on first use.
"""
from .graph import GraphBuilder, GraphError, OpGraph  # noqa: F401
from .memory import MemoryModel, Problem, Profile, evaluate, peak_memory  # noqa: F401
from .schedulers import Schedule, available, schedule  # noqa: F401

__version__ = "0.1.0"

# memsched.* PassContext config keys: registered as soon as TVM is imported (now, or by an
# import hook after `import tvm`), without importing TVM here (see memsched.native).
from .native import register_config_keys_on_tvm_import as _register_keys  # noqa: E402

_register_keys()

_LAZY = {
    "MemoryAwareSchedule": "memsched.transform.memory_aware_schedule",
    "RewriteConcatConv": "memsched.transform.rewrite_concat_conv",
    "PlanArena": "memsched.transform.plan_arena",
    "FuseIsolatedSubgraphs": "memsched.transform.fuse_isolated_subgraphs",
    "PartitionPipeline": "memsched.transform.partition_pipeline",
    "SplitAcrossDevices": "memsched.transform.split_across_devices",
    "TilePatches": "memsched.transform.tile_patches",
    "edgetpu_pipeline": "memsched.relax_pipeline",
    "pipeline": "memsched.relax_pipeline",
    "pipeline_passes": "memsched.relax_pipeline",
    "planned_bytes": "memsched.tvm_memory",
    "from_relax": "memsched.importers.relax",
    "from_onnx": "memsched.importers.onnx",
    "load_graph": "memsched.importers.load",
    "load_relax": "memsched.importers.load",
    "pipeline_runner": "memsched.tflite.litert",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'memsched' has no attribute {name!r}")

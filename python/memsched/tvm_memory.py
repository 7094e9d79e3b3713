"""TVM's real memory: the storage StaticPlanBlockMemory plans for a module.

`planned_bytes` runs the build pipeline up to memory planning and sums the sizes of the
``relax.memory.alloc_storage`` calls: the bytes the VM allocates for activations. Function
parameters and the returned tensor are not planned storage.
"""
from __future__ import annotations

import tvm
from tvm import relax


def storage_sizes(mod: tvm.IRModule, func_name: str | None = None) -> list[int]:
    """Sizes of the ``alloc_storage`` calls of a planned module (one function or all)."""
    sizes: list[int] = []
    op = tvm.ir.Op.get("relax.memory.alloc_storage")

    def visit(e):
        if isinstance(e, tvm.ir.Call) and e.op.same_as(op):
            shape = e.args[0]
            if isinstance(shape, relax.ShapeExpr) and hasattr(shape.values[0], "value"):
                sizes.append(int(shape.values[0].value))  # symbolic sizes are not static plans

    for gv, f in mod.functions_items():
        if isinstance(f, relax.Function) and (func_name is None or gv.name_hint == func_name):
            relax.analysis.post_order_visit(f.body, visit)
    return sizes


def planned_bytes(mod: tvm.IRModule, *, target: str = "llvm", func_name: str | None = "main",
                  **pipeline_options) -> int:
    """Bytes of storage TVM plans for ``mod`` under `memsched.pipeline(**pipeline_options)`
    (``schedule=False`` keeps TVM's own order, ``plan_arena=False`` TVM's own token plan:
    both give what plain ``tvm.compile`` plans)."""
    from .relax_pipeline import pipeline_passes

    seq = tvm.transform.Sequential(pipeline_passes(stop_after_planning=True, **pipeline_options))
    with tvm.target.Target(target):
        planned = seq(mod)
    return sum(storage_sizes(planned, func_name))

"""Compose memsched's passes with TVM's own into a ``relax_pipeline`` for ``tvm.compile``.

TVM's default CPU build pipeline (``relax.get_pipeline("default")``) plans memory in binding
order (StaticPlanBlockMemory). `pipeline` is that pipeline with the memory-aware reorder placed
where it decides the plan: after legalization (and optional fusion) and reshape-view
rewriting, before ToNonDataflow/StaticPlanBlockMemory, so the scheduler sees the kernels that
really run and the views that really own no storage.

    ex = tvm.compile(mod, target="llvm", relax_pipeline=memsched.pipeline())
"""
from __future__ import annotations

import tvm
from tvm import relax


def pipeline_passes(*, schedule: bool = True, algorithm: str | None = None,
                    time_limit: float | None = -1.0, memory_model: str = "tvm",
                    fold_constants: bool = True, fuse: bool = False, before=(),
                    plan_arena: bool | str = "auto", stop_after_planning: bool = False,
                    tile_patches=None) -> list:
    """The list of passes of `pipeline` (see there)."""
    from .transform import MemoryAwareSchedule

    t = relax.transform
    passes = list(before)
    if fold_constants:
        passes.append(t.FoldConstant())  # weight-only computations must not look like activations
    if tile_patches:  # patch-based execution of the spatial prefix, before scheduling
        from .transform.tile_patches import TilePatches

        passes.append(tile_patches if isinstance(tile_patches, tvm.transform.Pass) else
                      TilePatches(**tile_patches) if isinstance(tile_patches, dict) else
                      TilePatches())
    passes += [relax.backend.DispatchSampling(), relax.backend.DispatchSortScan(),
               t.LegalizeOps()]
    if fuse:
        passes += [t.AnnotateTIROpPattern(), t.FoldConstant(), t.FuseOps(), t.FuseTIR()]
    passes.append(t.RewriteDataflowReshape())
    if schedule:
        passes.append(MemoryAwareSchedule(algorithm=algorithm, time_limit=time_limit,
                                          memory_model=memory_model))
    passes += [t.ToNonDataflow(), t.RemovePurityChecking(), t.CallTIRRewrite(),
               t.StaticPlanBlockMemory()]
    if plan_arena:
        from .transform.plan_arena import PlanArena

        # True: greedy packing; or a PlanArena method name ("greedy", "cpsat", "auto")
        method = plan_arena if isinstance(plan_arena, str) else "greedy"
        passes.append(PlanArena(method=method))
    if stop_after_planning:
        return passes
    passes += [t.RewriteCUDAGraph(), t.LowerAllocTensor(), t.KillAfterLastUse(),
               t.LowerRuntimeBuiltin(), t.ComputePrimValue(), t.VMShapeLower(),
               t.AttachGlobalSymbol()]
    return passes


def pipeline(**options) -> tvm.transform.Pass:
    """A ``relax_pipeline`` for ``tvm.compile``: TVM's default CPU build pipeline with
    `MemoryAwareSchedule` before memory planning.

    Options: ``schedule`` (False gives the plain TVM order, for comparison), ``algorithm``,
    ``time_limit``, ``memory_model`` (default ``"tvm"``), ``fold_constants`` (default True),
    ``fuse`` (FuseOps/FuseTIR before scheduling), ``before`` (passes run first, e.g.
    ``[RewriteConcatConv()]``), ``tile_patches`` (True, a dict of `TilePatches` options or a
    `TilePatches` pass: run the spatial prefix patch by patch, after FoldConstant),
    ``plan_arena`` (default ``"auto"``: pack StaticPlanBlockMemory's
    storage into one arena at offsets, greedy then CP-SAT when greedy is above the liveness
    bound; ``False`` keeps TVM's token plan, which can stay far above the schedule's peak).
    """
    seq = tvm.transform.Sequential(pipeline_passes(**options), name="memsched_pipeline")

    @tvm.transform.module_pass(opt_level=0, name="memsched.pipeline")
    def _pipeline(mod, _ctx):
        return seq(mod)

    return _pipeline


def edgetpu_pipeline(stages: int, sram_bytes: int = 8 << 20, method: str = "auto",
                     time_limit: float | None = None, assignment=None, params=None,
                     **options) -> tvm.transform.Pass:
    """A ``relax_pipeline`` that cuts ``main`` into ``stages`` pipeline stage functions
    (`PartitionPipeline`: certified lexicographic (P, O, C) optimum from `memsched.partition`)
    before codegen, then builds like `pipeline` (each stage function scheduled and planned on
    its own):

        ex = tvm.compile(mod, "llvm", relax_pipeline=memsched.edgetpu_pipeline(stages=2))
        vm["main"](x)          # the whole model, bit-equal to the unsplit build
        vm["main_stage0"](x)   # stage 0 alone: what one device of the pipeline runs

    ``sram_bytes``, ``method``, ``time_limit``, ``assignment``, ``params`` go to
    `PartitionPipeline`; other options (``schedule``, ``plan_arena``, ``fuse``, ``before``...)
    to `pipeline`. Constants are folded first so that weight-only computations are not cut as
    activations.
    """
    from .transform.partition_pipeline import PartitionPipeline

    part = PartitionPipeline(stages, sram_bytes=sram_bytes, method=method,
                             time_limit=time_limit, assignment=assignment, params=params)
    before = list(options.pop("before", ()))
    seq = tvm.transform.Sequential(
        pipeline_passes(before=[relax.transform.FoldConstant()] + before + [part], **options),
        name="memsched_edgetpu_pipeline")

    @tvm.transform.module_pass(opt_level=0, name="memsched.edgetpu_pipeline")
    def _pipeline(mod, _ctx):
        return seq(mod)

    return _pipeline

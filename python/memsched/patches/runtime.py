"""What a runtime is to the patch search: what it costs (`RuntimeMemory`) and what its adapter
can write (`Runtime`). The search's second parameter, beside the adapter's description of its
graph and the user's `PatchOptions`; nothing about a file format lives elsewhere in `patches/`.

The three runtimes' descriptions are built by their adapters: `memsched.tflite.memory.model`
(TFLite Micro: the arena plus the bytes it keeps per operator, SAME padding, at most ten
inputs per CONCATENATION, contiguous row bands), `memsched.transform.tile_patches` (TVM's
planned storage, declared padding, no reassembly of a batch norm's tuple) and
`memsched.executorch.patch.tile` (ExecuTorch's arena plus the method allocator's records,
fixed padding; on channels-last maps the Cortex-M layout contract, `Layout`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..memory import MemoryModel
from .geometry import SOp, SpatialModel

PADDING_RULES = ("same", "fixed", "declared")


@dataclass(frozen=True)
class RuntimeMemory:
    """A runtime's memory model, as the patch search prices a candidate (the objective's one
    parameter).

    ``activations``: how tensors count towards the activation peak (the scheduler's
    `MemoryModel`: are model inputs and outputs in the arena, alignment). The three methods
    give the bytes the runtime keeps besides the activations, per operator and tensor; here 0,
    for runtimes whose planned arena holds activations only (TVM's planned storage, ExecuTorch's
    arenas). TFLite Micro's subclass lives with its runtime (`memsched.tflite.memory.model`)."""

    name: str
    activations: MemoryModel

    def model_persistent(self, sm: SpatialModel) -> int:
        """Persistent bytes of the unpatched model."""
        return 0

    def copy_price(self, op: SOp) -> int:
        """The least persistent bytes one more copy of ``op`` adds (a lower bound's part)."""
        return 0

    def plan_persistent_delta(self, sm: SpatialModel, plan) -> int:
        """Persistent bytes the patched region (a `PatchPlan`) adds over the region it
        replaces."""
        return 0


class RuntimeTime:
    """What a runtime's kernels cost in instructions on its target CPU, as the patch search
    prices a candidate's time (`Runtime.time`; None: no model, and the search bounds MACs
    alone, as for TVM). A candidate's instructions are ``program(sm)`` minus ``op(sm, k)`` of
    each operator its regions replace plus ``plan(sm, p)`` of each region's plan. The
    runtimes' subclasses live with their adapters, on their kernels' cost models
    (`memsched.tflite.memory.instructions`, `memsched.executorch.memory.instructions`)."""

    name: str = ""  # the target the figures are for, e.g. "Cortex-M55 (CMSIS-NN, MVE)"

    def program(self, sm: SpatialModel) -> int:
        """Instructions of one inference of the unpatched program: every operator and the
        runtime's fixed cost per inference and per operator."""
        raise NotImplementedError

    def op(self, sm: SpatialModel, k: int) -> int:
        """Instructions of operator ``k`` of the unpatched program, its per-operator fixed
        cost included."""
        raise NotImplementedError

    def plan(self, sm: SpatialModel, plan) -> int:
        """Instructions of every node the adapter writes for ``plan`` (a `PatchPlan`): the
        operators' copies on their windows, cuts, pads, concatenations, the layout views and
        requantizations it adds, each with its per-operator fixed cost. Raises a
        ``ValueError`` for a node its cost model has no kernel for (the candidate is then
        unpriced: never chosen under a time bound)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Layout:
    """A runtime's layout contract for the nodes a patch rewrite writes: the cutting and
    reassembling nodes (``cut_kinds``: slices, border pads, concatenations) run on another form
    of a feature map than its operators (ExecuTorch's Cortex-M kernels: operators on
    channels-last NCHW, cuts on the same bytes seen as NHWC), and each change of form is a
    view the rewrite writes and the memory model prices (`conversions`)."""

    native: str = "native"
    cut: str = "nhwc"
    cut_kinds: tuple = ("slice", "pad", "concat")

    def form_of(self, kind: str) -> str:
        """The form plan node kind ``kind`` reads its inputs in and writes its output in."""
        return self.cut if kind in self.cut_kinds else self.native

    def conversions(self, plan) -> set[tuple]:
        """The views the rewrite of ``plan`` writes: one ``(source, form)`` per tensor read in
        a form it was not made in (``source``: a plan node id, or ``("in", tensor)`` for a
        region input, made native), the region's results included (read natively by the rest
        of the graph). Each view is made once and shared."""
        made: dict = {}
        need = set()
        for nid, nd in enumerate(plan.nodes):
            form = self.form_of(nd.kind)
            for s in nd.inputs:
                k = ("in", s[1]) if isinstance(s, tuple) else s
                if made.get(k, self.native) != form:
                    need.add((k, form))
            made[nid] = form
        for nid in plan.result.values():
            if made[nid] != self.native:
                need.add((nid, self.native))
        return need


@dataclass(frozen=True)
class Runtime:
    """What a runtime costs and what its adapter can write (the search's second parameter).

    ``memory``: what it costs (`RuntimeMemory`). ``implicit_padding``: the adapter can write
    an operator with its own padding on a window of its input, so plans with margins may be
    priced (`memsched.patches.margins`); ``padding_rule``: how such an operator pads a window,
    ``"same"`` (TFLite: SAME by the window's size, or VALID), ``"fixed"`` (torch: its own
    amounts on both sides), ``"declared"`` (Relax: its own amounts before and after);
    ``default_padding``: the plan asked for when the options name none (None: explicit, and the
    best candidates with margins too). ``max_concat_inputs``: the most inputs one
    concatenation takes (more pieces are chained; None: no limit). ``band_grids``: cutting
    rows is cheap (contiguous pieces of a row-major map), so taller grids are tried too
    (`memsched.patches.evaluator.BAND_GRIDS`). ``se``: the adapter rewrites squeeze-and-excitation
    blocks (reduce / vector / scale operators). ``no_split_kinds``: operator kinds whose
    outputs it cannot reassemble (a region never ends at them). ``layout``: its layout contract
    for cuts (`Layout`; None: one form for every node). ``time``: what its kernels cost in
    instructions (`RuntimeTime`; None: no model, the search bounds MACs alone).
    ``own_padding``: ``(op, pads) -> bool``, whether the adapter writes a window operator on a
    border patch with the border pads (top, bottom, left, right) as the kernel's own padding
    instead of a pad node before it (`plans.plan_patches`: the operator node then reads the
    clipped window, ``implicit=True``, ``pads`` the border's; None: never). ``pad_sources``:
    the search also prices each explicit plan with its region inputs padded once, whole
    (`plans.pad_sources`: one pad node instead of one per border patch, for a runtime whose
    every node costs persistent records, TFLite Micro) and keeps the lower total."""

    memory: RuntimeMemory
    implicit_padding: bool = False
    padding_rule: str | None = None
    default_padding: str | None = None
    max_concat_inputs: int | None = None
    band_grids: bool = False
    se: bool = False
    no_split_kinds: tuple = ()
    layout: Layout | None = None
    time: RuntimeTime | None = None
    own_padding: Callable | None = None
    pad_sources: bool = False

    def __post_init__(self):
        if self.implicit_padding and self.padding_rule not in PADDING_RULES:
            raise ValueError(f"a runtime with implicit padding names its rule "
                             f"{PADDING_RULES}, not {self.padding_rule!r}")
        if self.max_concat_inputs is not None and self.max_concat_inputs < 2:
            raise ValueError("max_concat_inputs must be >= 2")

    @property
    def name(self) -> str:
        return self.memory.name

    def no_split(self, sm: SpatialModel) -> list[int]:
        """The tensors of ``sm`` a region must not end at (outputs of ``no_split_kinds``)."""
        return [sm.ops[k].output for k in range(len(sm.ops))
                if sm.ops[k].kind in self.no_split_kinds]


def runtime_of(memory) -> Runtime:
    """``memory`` as a `Runtime` (a bare `RuntimeMemory`: one that writes explicit plans
    only, no SE, no limits) -- what the search's internal entry points accept."""
    return memory if isinstance(memory, Runtime) else Runtime(memory)

"""Keep computations on constants out of the planned arena: ExecuTorch's constant propagation,
switched on by `memsched.executorch.backend_config`.

Why. Exported the standard way (``to_edge(torch.export.export(model, inputs))``), an
``nn.Linear`` becomes ``permute_copy(weight)`` + ``addmm``: the weight is transposed at run
time, into a tensor of the planned arena (MobileNetV2's 1280 x 1000 fp32 classifier:
5,120,000 B, four times the rest of its patched plan). The same holds for any pure op whose
inputs are all parameters, buffers or constants (``t_copy``, ``view_copy``, arithmetic on
constants). The patch search (`memsched.executorch.patch_pass`) models the nodes that read
an activation, so its peak left those bytes out and the report promised less than the
program planned. Folded into constants, they are written once into the program's constant
data (the transposed weight replaces the parameter when nothing else reads it: no bigger
``.pte``) and nothing is left for the arena that the search does not see.

How. Folding needs the parameters' values and registers the new tensors in the program's
graph signature and ``constants`` (the emitter writes a placeholder's data from there). Both
live on the ``ExportedProgram``; a pass in ``ExecutorchBackendConfig.passes`` receives only
its graph module, whose placeholders carry fake tensors. ExecuTorch's own
``executorch.exir.passes.constant_prop_pass`` does both on the ``ExportedProgram``, and
``to_executorch`` runs it (through ``quant_fusion_and_const_prop_pass``) before ``passes``,
so before `TilePatchesPass` and planning, when ``do_quant_fusion_and_const_prop`` is set.
`backend_config` sets it unless the caller chose (``do_quant_fusion_and_const_prop=False``:
ExecuTorch's default, the transposes at run time, not priced by the patch search).

The same switch runs ExecuTorch's ``QuantFusionPass`` first (reference ``dequantize -> op ->
quantize`` patterns into quantized kernels). An fp32 program has no such pattern, and a
program lowered by a backend (the Cortex-M flow's ``cortex_m::`` kernels) has none left (a
small int8 Cortex-M program keeps the same operators); its dead-code elimination only drops
nodes no output needs, and constant propagation drops constants nothing reads. Folded values
are computed by the same ATen operators the portable kernels implement (a permute or view
moves the bytes unchanged), so outputs stay those of ExecuTorch's default program.
"""
from __future__ import annotations

OPTION = "do_quant_fusion_and_const_prop"


def fold_constants(executorch_config_options: dict) -> dict:
    """``executorch_config_options`` (keyword arguments of ``ExecutorchBackendConfig``) with
    ExecuTorch's constant propagation on, unless the caller set `OPTION` (see module
    docstring). Changes and returns the dict."""
    executorch_config_options.setdefault(OPTION, True)
    return executorch_config_options


__all__ = ["OPTION", "fold_constants"]

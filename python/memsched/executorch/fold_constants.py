"""Keep computations on constants out of the planned arena, without changing what the program
computes: the constant folding `memsched.executorch.backend_config` switches on.

Why. Exported the standard way (``to_edge(torch.export.export(model, inputs))``), an
``nn.Linear`` becomes ``permute_copy(weight)`` + ``addmm``: the weight is transposed at run
time, into a tensor of the planned arena (MobileNetV2's 1280 x 1000 fp32 classifier:
5,120,000 B, four times the rest of its patched plan). The patch search
(`memsched.executorch.patch.tile`) models the nodes that read an activation, so its peak left
those bytes out and the report promised less than the program planned. Folded into
constants, they are written once into the program's constant data (the transposed weight
replaces the parameter when nothing else reads it: no bigger ``.pte``) and nothing is left
for the arena that the search does not see.

What, by default (``fold_constants="layout"``). Only value-exact operators whose tensor
inputs are all parameters, constant buffers or constants already folded: operators whose
output is a rearrangement or copy of their inputs' values (`LAYOUT_OPS`: permute, transpose,
view / reshape, expand, squeeze / unsqueeze, slice, select, index, gather, cat, stack, split,
clone, ``_to_copy`` and the dim-order copies), and only when every data input has the
output's dtype, so no value is converted. A copy is bit-exact by construction, so the program
computes bit for bit what ExecuTorch's default program (``to_executorch()``) computes. Values
the method returns are left to run time (a folded output would need a copy of its own).

``fold_constants="arithmetic"``: ExecuTorch's own ``do_quant_fusion_and_const_prop`` (its
``QuantFusionPass`` and ``constant_prop_pass``): every pure operator on constants is computed
while lowering, arithmetic included (``x * (c1 / c2)``, ``rsqrt`` of a buffer, a relative
position bias MLP on a constant table, a batch norm's scale ...). Smaller programs and fewer
operators at run time, but the folded values come from ATen on the host, not from the
kernels the program runs, and they may differ in the last bits (torchvision's swin_v2_s:
outputs up to 1.3e-6 away from the default program's): equal up to rounding, not bit-equal.
``fold_constants="none"`` (or False) folds nothing: ExecuTorch's default. The spelling of
earlier versions still holds: ``do_quant_fusion_and_const_prop=True`` is "arithmetic",
``=False`` is "none".

How. Folding needs the parameters' values and registers the new tensors in the program's
graph signature and ``constants`` (the emitter writes a placeholder's data from there). Both
live on the ``ExportedProgram``; a pass in ``ExecutorchBackendConfig.passes`` is called with
its graph module only, whose placeholders carry fake tensors. ``to_executorch`` (ExecuTorch
1.5) hands the ``ExportedProgram`` to a ``SpecPropPass``'s ``update_placeholder_tensor_specs``
right after the pass ran on the program's own graph module, so `FoldLayoutConstantsPass`, the
first of ``passes``, is a ``SpecPropPass`` that leaves the graph module alone when called and
folds (`fold_layout_constants`) in that call, before `TilePatchesPass` and planning; the
real ``SpecPropPass`` after ``passes`` recomputes every node's spec. The new constants are
registered with ExecuTorch's own helpers from ``constant_prop_pass``.
"""
from __future__ import annotations

import functools
import operator

OPTION = "do_quant_fusion_and_const_prop"
MODES = ("layout", "arithmetic", "none")

# operators whose output values are input values moved, repeated or selected (schema names,
# overloads included): folding them on the host is bit-exact
LAYOUT_OPS = frozenset({
    "aten::permute", "aten::permute_copy", "aten::t", "aten::t_copy", "aten::transpose",
    "aten::transpose_copy", "aten::view", "aten::view_copy", "aten::_unsafe_view",
    "aten::reshape", "aten::expand", "aten::expand_copy", "aten::squeeze",
    "aten::squeeze_copy", "aten::unsqueeze", "aten::unsqueeze_copy", "aten::slice",
    "aten::slice_copy", "aten::select", "aten::select_copy", "aten::narrow",
    "aten::narrow_copy", "aten::diagonal_copy", "aten::as_strided_copy", "aten::unfold_copy",
    "aten::alias", "aten::alias_copy", "aten::detach", "aten::detach_copy",
    "aten::lift_fresh_copy", "aten::clone", "aten::_to_copy", "aten::contiguous",
    "aten::cat", "aten::stack", "aten::split", "aten::split_copy", "aten::split_with_sizes",
    "aten::split_with_sizes_copy", "aten::unbind", "aten::unbind_copy", "aten::repeat",
    "aten::flip", "aten::roll", "aten::pixel_shuffle", "aten::pixel_unshuffle",
    "aten::slice_scatter", "aten::select_scatter", "aten::index", "aten::index_select",
    "aten::gather", "aten::embedding",
    "dim_order_ops::_to_dim_order_copy", "dim_order_ops::_clone_dim_order",
})
# of these, the ones whose later tensor arguments are indices (only the first one is data)
_INDEXING = frozenset({"aten::index", "aten::index_select", "aten::gather", "aten::embedding"})


def _schema_name(target) -> str | None:
    schema = getattr(target, "_schema", None)
    return schema.name if schema is not None else None


def _val(arg):
    return arg.meta.get("val") if hasattr(arg, "meta") else None


def value_exact(node) -> bool:
    """Whether ``node``, with constant inputs, may be folded bit-exactly: a `LAYOUT_OPS`
    operator (or a ``getitem`` of one's results) whose data inputs have its output's dtype."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    name = _schema_name(node.target)
    if name not in LAYOUT_OPS:
        return False
    out = _val(node)
    outs = out if isinstance(out, (list, tuple)) else [out]
    dtypes = {getattr(o, "dtype", None) for o in outs}
    if len(dtypes) != 1 or None in dtypes:
        return False
    data = node.args[:1] if name in _INDEXING else list(node.args) + list(node.kwargs.values())
    flat = []
    for a in data:
        flat.extend(a if isinstance(a, (list, tuple)) else [a])
    # a dtype change (a ``_to_copy`` that converts, a ``cat`` that promotes) rounds: arithmetic
    return all(getattr(_val(a), "dtype", None) in dtypes for a in flat if hasattr(a, "meta"))


def fold_layout_constants(exported_program) -> int:
    """Fold the value-exact operators on constants (`value_exact`) of ``exported_program``
    into new constants of the program, in place; returns how many operators it folded.
    Values the graph returns stay computed at run time."""
    import torch
    from executorch.exir.passes.constant_prop_pass import (
        create_constant_nodes_and_return_specs, get_constant_placeholder_dict)
    from torch.utils import _pytree as pytree

    graph = exported_program.graph
    const = get_constant_placeholder_dict(exported_program)
    if not const:
        return 0
    outputs = set(graph.output_node().all_input_nodes)

    def is_const(a):
        return not isinstance(a, torch.fx.Node) or a in const

    folded = 0
    for node in graph.nodes:
        if node in outputs or node.is_impure() or not value_exact(node):
            continue
        args = pytree.tree_leaves((node.args, node.kwargs))
        if not all(is_const(a) for a in args):
            continue
        a, kw = pytree.tree_map_only(torch.fx.Node, const.__getitem__,
                                     (node.args, node.kwargs))
        with torch.no_grad():
            value = node.target(*a, **kw)
        if isinstance(value, torch.Tensor):
            if 0 in value.stride():
                value = value.contiguous()  # ExecuTorch's tensors have no zero strides (expand)
            elif value._base is not None:
                value = value.clone()  # a view (aten.t, not t_copy) would write its base's bytes
        const[node] = value
        folded += 1
    # a list of results (split) becomes a constant only through its getitems: one read at run
    # time keeps it there
    for node in reversed(list(const)):
        if not isinstance(const[node], torch.Tensor) and \
                any(u not in const for u in node.users):
            del const[node]
            folded -= 1
    # constants no operator reads (the float weights the quantizer replaced): dropped too, as
    # ExecuTorch's own folding does -- each is a value, a tensor record and data in the .pte
    # (136 on the int8 MLPerf MobileNetV1-0.25: 7,960 B of method allocator)
    unused = [n for n in const if n.op == "placeholder" and not n.users]
    if not folded and not unused:
        return 0
    signature = exported_program.graph_signature
    specs = {s.arg.name: s for s in signature.input_specs}
    specs.update(create_constant_nodes_and_return_specs(const, exported_program))
    # in place: ``to_executorch`` planned with a signature holding this very list
    signature.input_specs[:] = [specs[n.name] for n in graph.find_nodes(op="placeholder")]
    graph.eliminate_dead_code()
    exported_program.graph_module.recompile()
    return folded


def fold_mode(mode, executorch_config_options: dict) -> str:
    """The folding ``backend_config(fold_constants=mode, **executorch_config_options)``
    asks for: one of `MODES` (see module docstring)."""
    given = executorch_config_options.get(OPTION)
    if mode is None:
        if given is None:
            return "layout"
        return "arithmetic" if given else "none"
    if mode is True:
        mode = "layout"
    elif mode is False:
        mode = "none"
    if mode not in MODES:
        raise ValueError(f"fold_constants={mode!r}: expected one of {MODES}, True or False")
    if given is not None and bool(given) != (mode == "arithmetic"):
        raise TypeError(f"fold_constants={mode!r} contradicts {OPTION}={given!r}")
    return mode


def fold_constants(executorch_config_options: dict, mode=None) -> dict:
    """``executorch_config_options`` (keyword arguments of ``ExecutorchBackendConfig``) with
    the folding `fold_mode` chooses: "layout" puts `FoldLayoutConstantsPass` first in
    ``passes``, "arithmetic" sets `OPTION`, "none" neither. Changes and returns the dict."""
    mode = fold_mode(mode, executorch_config_options)
    executorch_config_options[OPTION] = mode == "arithmetic"
    if mode == "layout":
        executorch_config_options["passes"] = \
            [FoldLayoutConstantsPass()] + list(executorch_config_options.get("passes") or [])
    return executorch_config_options


class FoldLayoutConstantsPass:
    """The pass of ``fold_constants="layout"`` (see module docstring); ``folded``: operators
    folded per method. Built lazily as a ``SpecPropPass`` subclass so that importing this
    module does not import ExecuTorch."""

    def __new__(cls, *args, **kwargs):
        return _pass_class()(*args, **kwargs)


@functools.cache
def _pass_class():
    from executorch.exir.passes.spec_prop_pass import SpecPropPass
    from torch.fx.passes.infra.pass_base import PassResult

    class _FoldLayoutConstantsPass(SpecPropPass):
        __doc__ = FoldLayoutConstantsPass.__doc__

        def __init__(self):
            super().__init__()
            self.folded: list[int] = []

        def __call__(self, graph_module):
            # no retrace: the next call must see the program's own graph module
            return PassResult(graph_module, False)

        def update_placeholder_tensor_specs(self, exported_program, graph_module):
            if graph_module is not exported_program.graph_module:
                raise RuntimeError("FoldLayoutConstantsPass: to_executorch did not hand over "
                                   "the program of this graph module; fold_constants="
                                   "'arithmetic' or 'none' work without it")
            self.folded.append(fold_layout_constants(exported_program))

    return _FoldLayoutConstantsPass


__all__ = ["LAYOUT_OPS", "MODES", "OPTION", "FoldLayoutConstantsPass", "fold_constants",
           "fold_layout_constants", "fold_mode", "value_exact"]

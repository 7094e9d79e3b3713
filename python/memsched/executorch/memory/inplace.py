"""The one alias a kernel allows: the Cortex-M ``quantize_per_tensor`` writing its int8 output
over the float input it reads for the last time.

ExecuTorch's ``cortex_m::quantize_per_tensor`` (``backends/cortex_m/ops``) is one forward
loop over ``numel``: it reads input element ``i`` (``a`` bytes) and then writes output
element ``i`` (``b <= a`` bytes). Writing output ``i`` must not reach input ``i + 1`` before it
is read: ``off_out + b (i + 1) <= off_in + a (i + 1)`` for every ``i``, i.e.
``off_out <= off_in + (a - b)`` (`may_share`). With the model's planned float input that saves
the int8 copy at the peak (a 224x224x3 input: 602,112 B float, 150,528 B int8). Nothing else
may overlap; the kernel checks none of this, so the plan is proven
(`memsched.executorch.memory.check`) before it is written.
"""
from __future__ import annotations


def is_quantize(node) -> bool:
    """A Cortex-M ``quantize_per_tensor`` call (functional or out variant)."""
    t = str(getattr(node, "target", ""))
    return getattr(node, "op", None) == "call_function" and "cortex_m" in t and \
        "quantize_per_tensor" in t and "dequantize" not in t


def _itemsize(dtype) -> int:
    import torch

    return torch.empty((), dtype=dtype).element_size()


def _val_of(node):
    out = node.kwargs.get("out") if hasattr(node, "kwargs") else None
    return (out if hasattr(out, "meta") else node).meta.get("val")


def input_it_may_overwrite(node):
    """The input node quantize ``node`` may write over (same elements, a wider float, one dim
    order), or None. Whether that input is read for the last time is the order's business."""
    if not is_quantize(node) or not node.args or not hasattr(node.args[0], "meta"):
        return None
    x, y = node.args[0].meta.get("val"), _val_of(node)
    if x is None or y is None or not hasattr(x, "dim_order") or not hasattr(y, "dim_order"):
        return None
    if x.numel() != y.numel() or x.element_size() <= y.element_size() or \
            tuple(x.dim_order()) != tuple(y.dim_order()):
        return None
    return node.args[0]


def output_spec(node):
    out = node.kwargs.get("out")
    return (out if hasattr(out, "meta") else node).meta.get("spec")


def may_share(in_spec, out_spec, off_in: int, off_out: int) -> bool:
    """Whether the output placed at ``off_out`` may overlap the input at ``off_in``: the rule
    of the kernel's forward loop (module docstring). The specs: ExecuTorch's ``TensorSpec``
    or anything with ``element_bytes`` (`memory.liveness.plan_graph`'s storages)."""
    a, b = _element_bytes(in_spec), _element_bytes(out_spec)
    return off_out <= off_in + (a - b)


def _element_bytes(spec) -> int:
    """A spec's element size: ``element_bytes`` when it has one (a `.pte`'s tensors, read
    without torch), else its torch ``dtype``'s."""
    n = getattr(spec, "element_bytes", None)
    return int(n) if n is not None else _itemsize(spec.dtype)


def pairs(graph_module) -> list[tuple]:
    """``(node index, input spec, output spec)`` of every quantize that may overwrite its input
    and reads it last (no later node refers to it, no view or storage shares it) in the
    graph's node order (after ``ToOutVarPass``, specs set)."""
    return pairs_in(list(graph_module.graph.nodes))


def pairs_in(nodes) -> list[tuple]:
    """`pairs` for the node order ``nodes``."""
    index = {n: i for i, n in enumerate(nodes)}
    out = []
    for i, n in enumerate(nodes):
        x = input_it_may_overwrite(n)
        if x is None or "spec" not in x.meta or output_spec(n) is None:
            continue
        si, so = x.meta["spec"], output_spec(n)
        if getattr(si, "const", False) or getattr(si, "storage_base", None) is not None or \
                getattr(so, "storage_base", None) is not None:
            continue
        if any(index[u] > i or u.op == "output" or "view" in str(u.target) for u in x.users):
            continue
        out.append((i, si, so))
    return out


__all__ = ["input_it_may_overwrite", "is_quantize", "may_share", "pairs", "pairs_in"]

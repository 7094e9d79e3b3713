"""Memory layout of a patch rewrite on channels-last feature maps: which plan node runs on
which form of a tensor, and the zero-copy views between the forms.

ExecuTorch stores a channels-last NCHW tensor (dim order (0, 2, 3, 1)) as NHWC bytes. The
kernels a patch rewrite writes read memory differently (read from their C++ source, and
measured with the Cortex-M backend's kernels, `docs/executorch_patches.md`):

* the Cortex-M convolutions, depthwise convolutions and pools (and the portable ones in an
  fp32 program exported channels-last) need their input and output channels-last;
  element-wise kernels (``quantized_add``, ...) read flat memory, so every operand must have
  one layout -- channels-last, like the feature maps they combine;
* the portable ``slice_copy`` needs equal dim orders in and out, and it, ``constant_pad_nd``,
  ``as_strided_copy`` and ``cat`` compute on logical indices as if the bytes were contiguous:
  on a channels-last buffer they run and are wrong.

So the cutting and reassembling nodes (slices, border pads, concatenations) run on the
*NHWC form*: the same bytes seen as a contiguous ``[N, H, W, C]`` tensor (a ``permute`` by
(0, 2, 3, 1)), and every operator on the *native form* (channels-last NCHW). The rewrite writes
each change of form as an ``aten.permute_copy`` whose input and output have the same bytes in
the same order -- exact under any kernel, eager ones included -- and
`lower_layout_views` turns those into ``memory.view`` at planning time: no instruction, no
planned bytes, one tensor record each (`VIEW_RECORD`). `conversions` says which views a plan
needs; the search prices them (`records.ExecutorchRecords`) and the rewrite writes exactly
those.
"""
from __future__ import annotations

NATIVE, NHWC = "native", "nhwc"
TO_NHWC, TO_NATIVE = (0, 2, 3, 1), (0, 3, 1, 2)
# plan node kinds that cut or reassemble: they run on the NHWC form
_ON_NHWC = ("slice", "pad", "concat")


def form_of(kind: str) -> str:
    """The form plan node kind ``kind`` reads its inputs in and writes its output in."""
    return NHWC if kind in _ON_NHWC else NATIVE


def conversions(plan) -> set[tuple]:
    """The views the rewrite of ``plan`` on channels-last feature maps writes: one
    ``(source, form)`` per tensor read in a form it was not made in (``source``: a plan node
    id, or ``("in", tensor)`` for a region input, made native), the region's results included
    (read natively by the rest of the graph). Each view is made once and shared."""
    made = {}
    need = set()

    def key(s):
        return ("in", s[1]) if isinstance(s, tuple) else s

    for nid, nd in enumerate(plan.nodes):
        form = form_of(nd.kind)
        for s in nd.inputs:
            k = key(s)
            if made.get(k, NATIVE) != form:
                need.add((k, form))
        made[nid] = form
    for nid in plan.result.values():
        if made[nid] != NATIVE:
            need.add((nid, NATIVE))
    return need


def permuted_val(fake, v, perm):
    """The fake value of ``permute(v, perm)`` with the strides of the same bytes (a permute
    of a view, not a contiguous copy): what ExecuTorch records as the result's dim order."""
    import torch

    with fake:
        return torch.empty_strided([int(v.shape[p]) for p in perm],
                                   [int(v.stride()[p]) for p in perm], dtype=v.dtype,
                                   device=v.device)


MARK = "memsched_layout_view"


def mark(node):
    """Mark a layout view with the dim order of its result: ExecuTorch's passes after the
    rewrite re-run ``permute_copy`` on fake tensors, which makes its result contiguous."""
    node.meta[MARK] = tuple(int(d) for d in node.meta["val"].dim_order())
    return node


def same_bytes(in_dim_order, perm, out_dim_order) -> bool:
    """Whether ``permute(x, perm)`` with output dim order ``out_dim_order`` has the same bytes
    in the same order as ``x`` with ``in_dim_order``: output dim ``d`` is input dim
    ``perm[d]``, so walking the output's dims outermost first must walk the input's."""
    return len(perm) == len(in_dim_order) == len(out_dim_order) and \
        [int(perm[d]) for d in out_dim_order] == [int(d) for d in in_dim_order]


def _strides(shape, dim_order) -> tuple:
    out, step = [0] * len(shape), 1
    for d in reversed(dim_order):
        out[d] = step
        step *= int(shape[d])
    return tuple(out)


def lower_layout_views(graph_module) -> int:
    """Replace, in ``graph_module`` after ``ToOutVarPass``, each ``permute_copy.out`` whose
    output has its input's bytes in the same order (`same_bytes`) by ``memory.view`` on the
    input's storage, with the output's own dim order (ExecuTorch's views are contiguous:
    ``_ViewSpec`` is given the permute's strides). Not for graph outputs (the runtime may
    repoint them) or inputs without a spec. Returns how many; the emitter elides planned
    static views (no instruction, a tensor record)."""
    from executorch.exir import memory
    from executorch.exir.passes.replace_view_copy_with_view_pass import _ViewSpec

    done = 0
    for n in list(graph_module.graph.nodes):
        if n.op != "call_function" or "permute_copy" not in str(n.target) or \
                not str(n.target).endswith(".out") and \
                "out" not in str(getattr(n.target, "_overloadname", "")):
            continue
        x, perm = n.args[0], n.args[1]
        out = n.kwargs.get("out")
        spec = n.meta.get("spec")
        if not hasattr(x, "meta") or "spec" not in x.meta or spec is None or \
                any(u.op == "output" for u in n.users):
            continue
        base = x.meta["spec"]
        dim_order = n.meta.get(MARK, tuple(spec.dim_order))
        if getattr(base, "const", False) or not same_bytes(base.dim_order, perm, dim_order):
            continue
        shape = list(spec.shape)
        view = _ViewSpec(base, shape)
        view.dim_order = tuple(dim_order)
        view.stride = _strides(shape, dim_order)
        n.target = memory.view
        n.args = (x, shape)
        n.kwargs = {}
        n.meta["spec"] = view
        if out is not None and hasattr(out, "op") and not out.users:
            graph_module.graph.erase_node(out)
        done += 1
    if done:
        graph_module.graph.lint()
        graph_module.recompile()
    return done

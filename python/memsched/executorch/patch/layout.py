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
planned bytes, one tensor record each (`records.Prices.view`). `conversions` says which
views a plan needs; the search prices them (`records.ExecutorchRecords`) and the rewrite
writes exactly those.
"""
from __future__ import annotations

from ...patches import Layout

# the layout contract the search prices and the rewrite writes (`memsched.patches.Layout`):
# cuts on the NHWC form, operators on the native (channels-last NCHW) form
CHANNELS_LAST = Layout(native="native", cut="nhwc", cut_kinds=("slice", "pad", "concat"))
NATIVE, NHWC = CHANNELS_LAST.native, CHANNELS_LAST.cut
TO_NHWC, TO_NATIVE = (0, 2, 3, 1), (0, 3, 1, 2)
CHANNELS_LAST_ORDER = (0, 2, 3, 1)  # the dim order of a channels-last NCHW tensor
form_of = CHANNELS_LAST.form_of  # the form a plan node kind runs on
conversions = CHANNELS_LAST.conversions  # the views a plan needs


def flat_windows(plan) -> set[int]:
    """The plan's slice nodes that cut both rows and columns (a strided window) and that only
    native-form nodes read: `patch.rewrite` copies each as ``[N, rows, W x C]`` on the NHWC
    form and sees it as the native map through one view (`lower_layout_views`), and the
    search prices its ``as_strided_copy`` with 3-item lists (`records`)."""
    native_only: dict = {}
    for nd in plan.nodes:
        native = form_of(nd.kind) == NATIVE
        for r in nd.inputs:
            if not isinstance(r, tuple):
                native_only[r] = native_only.get(r, True) and native
    out = set()
    for k, nd in enumerate(plan.nodes):
        if nd.kind == "slice" and native_only.get(k, True) and all(nd.cuts()):
            out.add(k)
    return out


def same_bytes(in_dim_order, perm, out_dim_order, shape=None) -> bool:
    """Whether ``permute(x, perm)`` with output dim order ``out_dim_order`` has the same bytes
    in the same order as ``x`` with ``in_dim_order``: output dim ``d`` is input dim
    ``perm[d]``, so walking the output's dims outermost first must walk the input's.
    ``shape``: ``x``'s sizes; its dims of size 1 are then left out on both sides (they move
    no byte: a one-channel map is channels-last and contiguous at once, and ExecuTorch's
    ``dim_order_from_stride`` labels it neither -- ``(0, 2, 1, 3)`` for ``[1, 1, H, W]``
    channels-last -- while the NHWC form is ``(0, 1, 2, 3)``)."""
    if not len(perm) == len(in_dim_order) == len(out_dim_order):
        return False
    keep = (lambda d: True) if shape is None else (lambda d: int(shape[int(d)]) != 1)
    return [int(perm[d]) for d in out_dim_order if keep(perm[d])] == \
        [int(d) for d in in_dim_order if keep(d)]


def _strides(shape, dim_order) -> tuple:
    out, step = [0] * len(shape), 1
    for d in reversed(dim_order):
        out[d] = step
        step *= int(shape[d])
    return tuple(out)


def _is(node, name: str) -> bool:
    return getattr(node, "op", None) == "call_function" and name in str(node.target)


def lower_layout_views(graph_module) -> int:
    """Turn, in ``graph_module`` after ``ToOutVarPass``, the layout changes that keep every
    byte in place into ``memory.view`` on the input's storage with the result's own dim order
    (ExecuTorch's ``_ViewSpec`` is contiguous: it is given the result's strides):

    * ``permute_copy.out`` whose result has its input's bytes in the same order
      (`same_bytes`): a channels-last map seen as NHWC;
    * ``_clone_dim_order.out(permute_copy.out(x, perm), dim_order=d)`` with the permute read
      by the clone only and ``same_bytes(x, perm, d)`` (sizes 1 left out): NHWC bytes seen
      as channels-last NCHW (two copies in eager, none here);
    * a window copied as ``[N, rows, W x C]`` and seen as ``[N, rows, W, C]``
      (``view_copy`` of an ``as_strided_copy``, `patch.rewrite`; ExecuTorch's own pass has
      made it a ``memory.view`` by now): a view too.

    A view read only by a view made here is folded into it (the window's reshape into the
    operator's channels-last view: one tensor record, as before; a region's result seen
    natively and then as NHWC by the next region: one record fewer).

    Not for graph outputs (the runtime may repoint them), constants or inputs without a spec.
    Returns how many; the emitter elides planned static views (no instruction, one tensor
    record each); a view of a user input outside the plan (``alloc_graph_input=False``) is
    an ``et_view`` call (`records.Prices.view`)."""
    from executorch.exir import memory
    from executorch.exir.passes.replace_view_copy_with_view_pass import _ViewSpec

    graph = graph_module.graph
    done = 0

    def to_view(n, x, dim_order, drop=()):
        shape = list(n.meta["spec"].shape)
        base = x.meta["spec"]
        while isinstance(base, _ViewSpec):  # a view of a view shares the first's storage
            base = object.__getattribute__(base, "_base")
        view = _ViewSpec(base, shape)
        view.dim_order = tuple(int(d) for d in dim_order)
        view.stride = _strides(shape, view.dim_order)
        allocs = [a for a in [n.kwargs.get("out")] + [d.kwargs.get("out") for d in drop]
                  if hasattr(a, "op")]
        n.target, n.args, n.kwargs = memory.view, (x, shape), {}
        n.meta["spec"] = view
        for d in drop:
            graph.erase_node(d)
        for a in allocs:
            if not a.users:
                graph.erase_node(a)
        # a view read by this view alone (a row-contiguous window's reshape, a region's
        # result seen natively and then as NHWC by the next region): read its source
        # instead, one tensor record fewer (the search prices both: an estimate on the
        # high side)
        while x.target is memory.view and len(x.users) == 1:
            n.args = (x.args[0], shape)
            graph.erase_node(x)
            x = n.args[0]

    def usable(n, x) -> bool:
        return hasattr(x, "meta") and "spec" in x.meta and "spec" in n.meta and \
            not getattr(x.meta["spec"], "const", False) and \
            not any(u.op == "output" for u in n.users)

    def pair(n):
        """(permute, its input, perm, dim order) when ``n`` is a ``_clone_dim_order`` of a
        permute read by it alone that keeps every byte in place; else None."""
        if not (_is(n, "_clone_dim_order") and _is(n.args[0], "permute_copy") and
                len(n.args[0].users) == 1):
            return None
        p = n.args[0]
        x, perm, d = p.args[0], p.args[1], n.kwargs.get("dim_order")
        if d is not None and usable(n, x) and \
                same_bytes(x.meta["spec"].dim_order, perm, d, x.meta["spec"].shape):
            return p, x, perm, d
        return None

    for n in list(graph.nodes):
        if n.graph is not graph or n.op != "call_function":
            continue
        if _is(n, "_clone_dim_order"):
            found = pair(n)
            if found is not None:
                p, x, _, d = found
                to_view(n, x, d, drop=(p,))
                done += 1
        elif _is(n, "view_copy") and _is(n.args[0], "as_strided_copy") and \
                n.kwargs.get("out") is not None and usable(n, n.args[0]):
            # a window's reshape when ExecuTorch's remove_view_copy is off
            to_view(n, n.args[0], tuple(range(len(n.meta["spec"].shape))))
            done += 1
        elif _is(n, "permute_copy") and n.kwargs.get("out") is not None:
            x, perm = n.args[0], n.args[1]
            if len(n.users) == 1 and pair(next(iter(n.users))) is not None:
                # the first half of a pair: the clone's view takes both, with the clone's
                # dim order (on a one-channel map the permute alone keeps the bytes too, but
                # its contiguous result would leave the clone a real copy that checks dim
                # orders)
                continue
            if usable(n, x) and same_bytes(x.meta["spec"].dim_order, perm,
                                           n.meta["spec"].dim_order, x.meta["spec"].shape):
                to_view(n, x, n.meta["spec"].dim_order)
                done += 1
    if done:
        graph.lint()
        graph_module.recompile()
    return done

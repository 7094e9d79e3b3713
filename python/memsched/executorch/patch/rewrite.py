"""The rewrite half of the ExecuTorch patch adapter: apply a patch plan of `memsched.patches`
to an edge-dialect graph module described by `memsched.executorch.patch.describe` (per patch
slices, border pads, the region's operators on the windows, reassembly by ``cat``).
"""
from __future__ import annotations

import copy
import operator

from ...patches import PAD_MIN, Refused
from . import cortex_m as _cm
from . import layout as _layout
from .describe import TUPLE_FIRST, EdgeModel, _aten_name, _keepdim, _pair, put_acts

def _min_value(dtype):
    import torch

    if dtype.is_floating_point:
        return float("-inf")
    return int(torch.iinfo(dtype).min)


def rewrite(gm, em: EdgeModel, plan, order=None) -> tuple[int, int]:
    """Apply ``plan`` to ``gm`` in place (the module whose nodes ``em`` names): returns
    (values added, instructions added). ``order``: the plan's node ids in the order to write
    them (the search's priced schedule, `Candidate.node_order`; default: the plan's order).
    ExecuTorch runs the graph's node order, and its planner keeps it unless it finds better."""
    import torch
    from executorch.exir.dialects._ops import ops as exir_ops
    from torch._guards import detect_fake_mode

    aten = exir_ops.edge.aten
    sm = em.sm
    graph = gm.graph
    fake = detect_fake_mode([n.meta["val"] for n in graph.nodes if "val" in n.meta])
    before = sum(1 for n in graph.nodes if n.op == "call_function")
    values_before = len(graph.nodes)
    final = {nid: t for t, nid in plan.result.items()}
    region_nodes = _region_nodes(em, plan)
    # the patches go right after the region's last node: everything they read (region inputs,
    # weights) is defined before it, and nothing before it reads what they make
    first = max(region_nodes, key=list(graph.nodes).index).next
    made: dict = {}

    def call(target, args, like=None, val=None):
        """A new call before ``first``; its fake value ``val`` when the plan knows it (a
        window's shape), else from fake-tensor propagation (about 10 ms a call on patch
        shapes, which are new to its cache each time)."""
        with graph.inserting_before(first):
            node = graph.call_function(target, tuple(args))
        if val is None:
            fargs = [_fake_of(a) for a in args]
            with fake:
                val = target(*fargs)
        node.meta["val"] = val
        if like is not None:
            for key in ("stack_trace", "nn_module_stack", "debug_handle", "from_node"):
                if key in like.meta:
                    node.meta[key] = like.meta[key]
        return node

    def _fake_of(a):
        if isinstance(a, (list, tuple)):
            return type(a)(_fake_of(x) for x in a)
        if hasattr(a, "op"):
            return a.meta["val"]
        return a

    cl = em.channels_last
    form_made: dict = {}  # plan node id -> the form it was written in (patch.layout)
    views: dict = {}

    def src(s, form=_layout.NATIVE):
        """Plan source ``s`` in ``form``: on channels-last maps, a view when it was made in
        the other form (`patch.layout.conversions` prices the same ones), made once."""
        node = em.node_of[s[1]] if isinstance(s, tuple) else made[s]
        have = _layout.NATIVE if isinstance(s, tuple) else form_made[s]
        if not cl or have == form:
            return node
        key = (("in", s[1]) if isinstance(s, tuple) else s, form)
        if key not in views:
            if form == _layout.NHWC:  # a channels-last map's bytes, seen as NHWC: contiguous
                views[key] = call(aten.permute_copy.default, [node, list(_layout.TO_NHWC)])
            else:  # NHWC bytes seen as NCHW are channels-last: say so (fake and eager alike)
                p = call(aten.permute_copy.default, [node, list(_layout.TO_NATIVE)])
                with graph.inserting_before(first):
                    views[key] = graph.call_function(
                        exir_ops.edge.dim_order_ops._clone_dim_order.default, (p,),
                        {"dim_order": list(_layout.CHANNELS_LAST_ORDER)})
                with fake:
                    views[key].meta["val"] = p.meta["val"].clone(
                        memory_format=torch.channels_last)
        return views[key]

    flat = _layout.flat_windows(plan) if cl else set()  # windows copied row-contiguous
    order = list(range(len(plan.nodes))) if order is None else list(order)
    if sorted(order) != list(range(len(plan.nodes))):
        raise Refused("the node order is not a permutation of the plan's nodes")
    for nid in order:
        nd = plan.nodes[nid]
        form = _layout.form_of(nd.kind) if cl else _layout.NATIVE
        ins = [src(s, form) for s in nd.inputs]
        dtype = em.dtype_of.get(nd.tensor)
        # H and W of the form the cutting nodes run on: NHWC on channels-last maps
        # (patch.layout), NCHW otherwise; the plan's axes are 1 (H) and 2 (W)
        hd, wd = (1, 2) if cl else (2, 3)
        like = _nhwc if cl else _windowed
        if nd.kind == "slice":
            x, base = ins[0], nd.base
            h0, h1 = nd.win.h0 - base.h0, nd.win.h1 - base.h0
            w0, w1 = nd.win.w0 - base.w0, nd.win.w1 - base.w0
            rows, cols = nd.cuts()
            xv = x.meta["val"]
            val = like(fake, xv, h1 - h0, w1 - w0)
            if rows and cols:
                # one strided copy of the window: two slice_copy calls would hold a
                # full-width band of rows between them
                st = [int(v) for v in xv.stride()]
                size = [int(d) for d in xv.shape]
                size[hd], size[wd] = h1 - h0, w1 - w0
                offset = h0 * st[hd] + w0 * st[wd]
                if nid in flat and st[3] == 1 and st[wd] == size[3]:
                    # on the NHWC form a window row is one contiguous run of W x C values:
                    # copied as [N, rows, W x C] (the portable kernel's innermost loop then
                    # runs the whole row, not C values per call: 3 instead of 37
                    # instructions a value on the M55) and seen as [N, rows, W, C] again
                    # (a view: `patch.layout.lower_layout_views` folds it into the layout
                    # view that follows)
                    rows3 = [size[0], size[hd], size[wd] * size[3]]
                    with fake:
                        fv = torch.empty(rows3, dtype=xv.dtype, device=xv.device)
                    x3 = call(aten.as_strided_copy.default,
                              [x, rows3, [st[0], st[hd], 1], offset], val=fv)
                    node = call(aten.view_copy.default, [x3, size], val=val)
                else:
                    node = call(aten.as_strided_copy.default, [x, size, st, offset], val=val)
            elif rows:
                node = call(aten.slice_copy.Tensor, [x, hd, h0, h1, 1], val=val)
            else:  # a copy even of the whole source: the plan prices the window apart
                node = call(aten.slice_copy.Tensor, [x, wd, w0, w1, 1], val=val)
        elif nd.kind == "pad":
            top, bottom, left, right = nd.pads
            xv = ins[0].meta["val"]
            if nd.pad_value == PAD_MIN:
                value = _min_value(dtype or xv.dtype)
            elif not xv.dtype.is_floating_point:
                value = _cm.zero_point(em, nd.tensor)  # what a padded cell stands for
            else:
                value = 0.0
            val = like(fake, xv, int(xv.shape[hd]) + top + bottom,
                       int(xv.shape[wd]) + left + right)
            if cl and _cm.cm_pad_fits(xv.shape, xv.dtype):
                # int8 on the NHWC form: the backend's arm_pad_s8, pads in the (contiguous)
                # form's own order N, H, W, C
                node = call(exir_ops.edge.cortex_m.pad.default,
                            [ins[0], [0, top, left, 0], [0, bottom, right, 0], int(value)],
                            val=val)
            else:
                # constant_pad_nd's pads run from the last dim: (C,) W, H on NHWC; W, H on
                # NCHW
                pads = ([0, 0] if cl else []) + [left, right, top, bottom]
                node = call(aten.constant_pad_nd.default, [ins[0], pads, value], val=val)
        elif nd.kind == "concat":
            node = call(aten.cat.default, [list(ins), hd if nd.axis == 1 else wd],
                        val=like(fake, ins[0].meta["val"], nd.win.height, nd.win.width))
        elif nd.kind == "partial":  # the sum over the patch's own cells (ins[0]: that window)
            orig = em.nodes[nd.op]
            node = call(aten.sum.dim_IntList,
                        [ins[0], [2, 3], _keepdim(orig, _aten_name(orig.target))], orig)
        elif nd.kind == "accumulate":
            node = call(aten.add.Tensor, [ins[0], ins[1]], em.nodes[nd.op])
        elif nd.kind == "reduce":  # the sum of the partials, divided by H*W for a mean
            op = sm.ops[nd.op]
            node = ins[0] if op.divisor == 1 else \
                call(aten.div.Scalar, [ins[0], float(op.divisor)], em.nodes[nd.op])
        elif nd.kind == "vector":  # the vector operator, once, on the new vectors
            orig = em.nodes[nd.op]
            node = _copy_call(graph, first, fake, orig, _with_acts(orig, em.act_pos[nd.op],
                                                                    ins))
        else:
            orig = em.nodes[nd.op]
            op = sm.ops[nd.op]
            name = _aten_name(orig.target)
            args = list(orig.args)
            if _cm.is_cortex_m(orig.target):
                node = _cm.rebuild(call, graph, first, orig, op, nd, ins, em.act_pos[nd.op])
            elif op.is_pad:
                top, bottom, left, right = nd.pads
                node = call(orig.target, [ins[0], [left, right, top, bottom]] + args[2:3],
                            orig)
            elif name == "convolution.default":
                # margins: its own padding on the window; else VALID on a padded input
                args[0] = ins[0]
                args[4] = list(args[4]) if nd.implicit else [0, 0]
                node = call(orig.target, args, orig, _windowed(fake, orig.meta["val"],
                                                               nd.win.height, nd.win.width))
            elif name == "max_pool2d_with_indices.default":
                ks = list(_pair(args[1]))
                st = list(_pair(args[2])) if len(args) > 2 and args[2] else ks
                dl = list(_pair(args[4])) if len(args) > 4 else [1, 1]
                pd = list(_pair(args[3])) if nd.implicit and len(args) > 3 else [0, 0]
                pool = call(orig.target, [ins[0], ks, st, pd, dl, False], orig,
                            _windowed(fake, orig.meta["val"], nd.win.height, nd.win.width))
                node = call(operator.getitem, [pool, 0], em.node_of[op.output],
                            pool.meta["val"][0])
            elif name == "avg_pool2d.default":
                ks = list(_pair(args[1]))
                st = list(_pair(args[2])) if len(args) > 2 and args[2] else ks
                include = bool(args[5]) if len(args) > 5 else True
                div = args[6] if len(args) > 6 else None
                pd = list(_pair(args[3])) if nd.implicit and len(args) > 3 else [0, 0]
                node = call(orig.target, [ins[0], ks, st, pd, False, include, div], orig,
                            _windowed(fake, orig.meta["val"], nd.win.height, nd.win.width))
            elif name == "cat.default":
                node = call(orig.target, [list(ins)] + args[1:], orig,
                            _windowed(fake, orig.meta["val"], nd.win.height, nd.win.width))
            else:
                node = _copy_call(graph, first, fake, orig,
                                  _with_acts(orig, em.act_pos[nd.op], ins),
                                  _windowed(fake, orig.meta["val"], nd.win.height,
                                            nd.win.width))
                if name in TUPLE_FIRST:  # batch norm: its activation is element 0
                    node = call(operator.getitem, [node, 0], em.node_of[op.output],
                                node.meta["val"][0])
        made[nid] = node
        form_made[nid] = form
        if nid in final:
            old = em.node_of[final[nid]]
            old.replace_all_uses_with(src(nid), delete_user_cb=lambda u: u not in region_nodes)
    # remove the region's original nodes (consumers now read the reassembled tensors)
    for n in reversed(list(graph.nodes)):
        if n in region_nodes and not n.users:
            graph.erase_node(n)
    _cm.drop_unused_scratch(graph)  # the removed Cortex-M calls' scratch buffers
    left = [n for n in region_nodes if n.graph is graph and n in set(graph.nodes)]
    if left:
        raise Refused(f"region node {left[0].name} is still read after the rewrite")
    graph.lint()
    gm.recompile()
    after = sum(1 for n in graph.nodes if n.op == "call_function")
    return len(graph.nodes) - values_before, after - before


def _with_acts(orig, act_pos, ins) -> list:
    """``orig``'s args with its activation args (at ``act_pos``) replaced by ``ins``."""
    return put_acts(orig.args, act_pos, ins)


def _nhwc(fake, v, h: int, w: int):
    """A contiguous fake ``[N, h, w, C]`` like the NHWC-form value ``v``."""
    import torch

    with fake:
        return torch.empty((int(v.shape[0]), h, w, int(v.shape[3])), dtype=v.dtype,
                           device=v.device)


def _windowed(fake, v, h: int, w: int):
    """A fake value like ``v`` (a contiguous 4-D fake tensor, or a tuple whose element 0 is
    one: a max pool's or a batch norm's result) for an ``h x w`` window of it: same dtype;
    tuple elements of other shapes (saved statistics) kept. None when ``v`` is none of these
    (the caller then propagates)."""
    import torch

    if isinstance(v, (tuple, list)):
        if not v or not isinstance(v[0], torch.Tensor) or v[0].dim() != 4 or \
                not v[0].is_contiguous():
            return None
        return type(v)(_windowed(fake, x, h, w) if isinstance(x, torch.Tensor) and
                       x.shape == v[0].shape else x for x in v)
    if not isinstance(v, torch.Tensor) or v.dim() != 4 or not v.is_contiguous():
        return None  # other dim orders: fake propagation says what the edge ops make
    with fake:
        return torch.empty((int(v.shape[0]), int(v.shape[1]), h, w), dtype=v.dtype,
                           device=v.device)


def _copy_call(graph, first, fake, orig, args, val=None):
    """A copy of call ``orig`` (its target and kwargs, its metadata) on ``args``, inserted
    before ``first``; its fake value ``val`` when known (else propagated)."""
    def fake_of(a):
        if isinstance(a, (list, tuple)):
            return type(a)(fake_of(x) for x in a)
        return a.meta["val"] if hasattr(a, "op") else a

    kw = dict(orig.kwargs)
    with graph.inserting_before(first):
        node = graph.call_function(orig.target, tuple(args), kw)
    if val is None:
        with fake:
            val = orig.target(*[fake_of(a) for a in args],
                              **{k: fake_of(v) for k, v in kw.items()})
    node.meta["val"] = val
    for key in ("stack_trace", "nn_module_stack", "debug_handle", "from_node"):
        if key in orig.meta:
            node.meta[key] = orig.meta[key]
    return node


def _region_nodes(em: EdgeModel, plan) -> set:
    out = set()
    for k in plan.region.ops:
        n = em.nodes[k]
        out.add(n)
        out.update(u for u in n.users if u.target is operator.getitem)
    return out


def _copy_module(gm):
    """A new GraphModule over a copy of ``gm``'s graph (node metadata shallow-copied, fake
    tensors shared; attributes and submodules shared, not changed by the rewrite), and the
    map old node -> new node."""
    import torch.fx

    g = torch.fx.Graph(owning_module=None, tracer_cls=gm.graph._tracer_cls)
    nmap: dict = {}
    out = g.graph_copy(gm.graph, nmap)
    g.output(out)
    old_out = next(n for n in gm.graph.nodes if n.op == "output")
    new_out = next(n for n in g.nodes if n.op == "output")
    new_out.meta = copy.copy(old_out.meta)
    nmap[old_out] = new_out
    g._codegen = copy.deepcopy(gm.graph._codegen)
    new = torch.fx.GraphModule(gm, g, gm.__class__.__name__)
    new.meta = copy.copy(getattr(gm, "meta", {}))
    return new, nmap

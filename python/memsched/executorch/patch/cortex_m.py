"""The Cortex-M int8 operators (``cortex_m::`` kernels on CMSIS-NN) for the ExecuTorch patch
adapter: what each one computes, as the patch geometry sees it, and how to rebuild its call
on a window.

The graph is the edge program after ``CortexMPassManager`` (ExecuTorch 1.5.1): int8 feature
maps in logical NCHW with dim order (0, 2, 3, 1) (channels last), weights and requantization
tables as constants, and every CMSIS-NN scratch buffer an ``exir.memory.alloc`` node passed as
the kernel's last argument(s), sized by the backend for the kernel's shapes
(``scratch_buffer_sizes.required_cmsis_nn_buffer_sizes``). Facts read from
``backends/cortex_m/ops/operators.py`` (the Python reference implementations, which are what
the tests run):

* ``quantized_conv2d`` / ``quantized_depthwise_conv2d``: the int32 accumulation adds
  ``input_offset`` (= minus the input zero point) to every input cell and convolves with zero
  padding, so a padded cell stands for the *input zero point*: a patch's explicit border pad
  pads with ``-input_offset`` (`zero_point`), not 0. Weights OHWI (conv) / IHWO (depthwise).
* ``quantized_avg_pool2d`` averages real cells only (``count_include_pad=False``): implicit
  padding cannot be made explicit, so such a pool is a window op without a border pad.
* ``quantized_max_pool2d``: padding is never the maximum: a border pad of -128 is equivalent.
* ``quantize_per_tensor`` / ``dequantize_per_tensor``, ``quantized_add`` / ``quantized_mul``
  (two same-shape activations), ``quantized_activation`` (a 256-entry table), ``minimum`` /
  ``maximum`` (a constant operand), ``quantized_div``: element-wise.
* ``pad`` (``cortex_m::pad``): its pads are in the tensor's *physical* order (NHWC for a
  channels-last tensor), its value an int.

Anything else (``quantized_linear``, ``softmax``, ``transpose``, the experimental ``_nhwc``
variants whose logical shape is NHWC) is not spatially local here: it ends the region and the
report names it.
"""
from __future__ import annotations

from ...patches import PAD_MIN, PAD_NONE, PAD_ZERO, SOp

# name -> (activation arg positions, MACs per output element or None for a window op's own)
ELTWISE = {
    "quantize_per_tensor.default": ((0,), 1),
    "dequantize_per_tensor.default": ((0,), 1),
    "quantized_add.default": ((0, 4), 1),
    "quantized_mul.default": ((0, 2), 1),
    "quantized_div.default": ((0, 2), 1),
    "quantized_activation.default": ((0,), 1),
    "minimum.default": ((0,), 1),
    "maximum.default": ((0,), 1),
}
# window ops: name -> (kernel, stride, padding, dilation arg positions; None: (1, 1))
WINDOW = {
    "quantized_conv2d.default": (None, 3, 4, 5),
    "quantized_depthwise_conv2d.default": (None, 3, 4, 5),
    "quantized_avg_pool2d.default": (1, 2, 3, None),
    "quantized_max_pool2d.default": (1, 2, 3, 4),
}
CEIL_MODE = {"quantized_avg_pool2d.default": 4, "quantized_max_pool2d.default": 5}
# where the input zero point is, as the kernel's offset (zero point = -offset)
INPUT_OFFSET = {"quantized_conv2d.default": 6, "quantized_depthwise_conv2d.default": 7}


def is_cortex_m(target) -> bool:
    """An edge op of the ``cortex_m`` namespace."""
    return getattr(target, "namespace", None) == "cortex_m" or \
        str(getattr(target, "_name", "")).startswith("cortex_m::")


def op_name(target) -> str:
    """``quantized_conv2d.default`` for ``cortex_m::quantized_conv2d.default``."""
    name = str(getattr(target, "_name", "")).split("::", 1)[-1]
    return f"{name}.{getattr(target, '_overloadname', 'default')}"


def _val(a):
    return a.meta.get("val") if hasattr(a, "meta") else None


def _pair(v) -> tuple[int, int]:
    v = [int(x) for x in v] if isinstance(v, (tuple, list)) else [int(v)]
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def scratch_bytes(n) -> int:
    """Bytes of the CMSIS-NN scratch buffers (``memory.alloc`` args) ``n`` writes while it
    runs: the per-op workspace of the memory model."""
    total = 0
    for a in n.args:
        if hasattr(a, "op") and a.op == "call_function" and \
                getattr(a.target, "__name__", "") == "alloc":
            v = _val(a)
            total += int(v.numel()) * v.element_size() if v is not None else 0
    return total


def _other(k, kind, ins, out, why) -> SOp:
    return SOp(k, kind, "other", ins, out, reason=why)


def classify(k, n, ins, out, pos, tensors) -> SOp:
    """The `SOp` of Cortex-M call ``n`` (operator ``k``; ``ins``/``pos``: its activation
    tensors and their arg positions; ``tensors``: the model's `STensor` s)."""
    name = op_name(n.target)
    kind = f"cortex_m.{name}"
    o = tensors[out]
    args = list(n.args)
    ws = scratch_bytes(n)
    if name in ELTWISE:
        acts, macs = ELTWISE[name]
        if [p[0] for p in pos] != list(acts[:len(pos)]) or len(pos) < 1:
            return _other(k, kind, ins, out, f"{kind} with an activation where a constant is")
        for t in ins:
            if tensors[t].shape != o.shape:
                return _other(k, kind, ins, out, f"{kind} broadcasts an activation")
        for i, a in enumerate(args):
            if (i,) not in pos and hasattr(a, "op"):
                v = _val(a)
                if v is None or (v.numel() != 1 and name not in ("quantized_activation.default",)):
                    return _other(k, kind, ins, out, f"{kind} with an operand that varies "
                                  "over space")
        return SOp(k, kind, "eltwise", ins, out, macs_per_out=macs, cout=o.channels,
                   workspace=ws)
    if name == "pad.default":
        v = _val(args[0])
        if v is None or v.dim() != 4:
            return _other(k, kind, ins, out, "cortex_m.pad of a tensor that is not 4-D")
        pre, post = [int(x) for x in args[1]], [int(x) for x in args[2]]
        if tuple(v.dim_order()) != (0, 2, 3, 1):  # physical = logical NCHW: as (N, H, W, C)
            pre, post = [pre[0], pre[2], pre[3], pre[1]], [post[0], post[2], post[3], post[1]]
        if pre[0] or post[0] or pre[3] or post[3] or min(pre + post) < 0:
            return _other(k, kind, ins, out, "cortex_m.pad that pads batch or channels")
        return SOp(k, kind, "window", ins, out, (1, 1), (1, 1), (1, 1), (pre[1], pre[2]),
                   (post[1], post[2]), PAD_ZERO, 0, o.channels, workspace=ws, is_pad=True)
    if name in WINDOW:
        if pos != [(0,)]:
            return _other(k, kind, ins, out, f"{kind} with an activation weight")
        if name in CEIL_MODE and bool(args[CEIL_MODE[name]]):
            return _other(k, kind, ins, out, f"{kind} with ceil_mode")
        ki, si, pi, di = WINDOW[name]
        if ki is None:
            w = _val(args[1])  # OHWI (conv) or IHWO (depthwise): kernel at dims 1, 2
            ks = (int(w.shape[1]), int(w.shape[2]))
            macs = ks[0] * ks[1] * (int(w.shape[3]) if "depthwise" not in name else 1)
        else:
            ks = _pair(args[ki])
            macs = ks[0] * ks[1]
        st = _pair(args[si]) if args[si] else ks
        pd = _pair(args[pi])
        dl = _pair(args[di]) if di is not None else (1, 1)
        if "avg_pool" in name:
            pv = PAD_NONE if any(pd) else PAD_ZERO
        elif "max_pool" in name:
            pv = PAD_MIN
        else:
            pv = PAD_ZERO
        H, W = tensors[ins[0]].hw
        oh = (H + 2 * pd[0] - (ks[0] - 1) * dl[0] - 1) // st[0] + 1
        ow = (W + 2 * pd[1] - (ks[1] - 1) * dl[1] - 1) // st[1] + 1
        if (oh, ow) != o.hw:
            return _other(k, kind, ins, out, f"{kind} output shape does not follow its padding")
        after = (max((oh - 1) * st[0] + (ks[0] - 1) * dl[0] + 1 - H - pd[0], 0),
                 max((ow - 1) * st[1] + (ks[1] - 1) * dl[1] + 1 - W - pd[1], 0))
        return SOp(k, kind, "window", ins, out, ks, st, dl, pd, after, pv, macs, o.channels,
                   workspace=ws)
    return _other(k, kind, ins, out, f"{kind} is not spatially local")


# the kernels that take a border patch's pads as their own padding (`own_padding`)
OWN_PADDING = ("cortex_m.quantized_conv2d.default", "cortex_m.quantized_depthwise_conv2d.default")


def own_padding(op: SOp, pads) -> bool:
    """Whether a border patch of Cortex-M convolution ``op`` can take its border pads
    ``pads`` = (top, bottom, left, right) as the kernel's own ``padding`` = (top, left), no
    pad node before it (`memsched.patches.Runtime.own_padding`). CMSIS-NN reads every tap
    through bounds checks, the top / left padding from the parameter, the bottom / right
    implied by the output size; the backend's shape function (and its reference kernel)
    make ``(H + 2 * top - (K - 1) * d - 1) // s + 1`` rows, which is the patch's (on its
    exact window: ``(oh - 1) * s + (K - 1) * d + 1 = H + top + bottom``) exactly when
    ``0 <= top - bottom < s``; the same for the columns. So on a stride-2 map a top / left
    border (the bottom / right one needs no padding there), on any stride a patch padded
    equally on both sides; the padded cells are the input zero point in both forms. A 1 x N
    kernel on one row runs CMSIS-NN's ``arm_convolve_1_x_n_s8``, which refuses a left pad
    larger than the right: only equal ones there."""
    if op.kind not in OWN_PADDING or op.pad_value != PAD_ZERO:
        return False
    top, bottom, left, right = pads
    (sh, sw), (kh, kw) = op.stride, op.kernel
    if not (0 <= top - bottom < sh and 0 <= left - right < sw):
        return False
    return not (kh == 1 and kw > 1 and left != right)


def cm_pad_fits(shape, dtype) -> bool:
    """Whether a border pad of the NHWC form ``shape`` = [N, H, W, C] (contiguous) can be
    ``cortex_m::pad`` (``arm_pad_s8``: one memset / memcpy per row) instead of the portable
    ``constant_pad_nd`` (a recursion to the padded dim, the fill value by value: about 4x the
    instructions on the M55): int8, and a shape both the runtime and the backend's shape
    function read as contiguous (logical = physical order: they take a 4-D tensor with
    dim 1 or dims 2 and 3 of size 1 for channels-last, `is_channels_last_tensor`, and would
    pad the wrong dims)."""
    if str(dtype).replace("torch.", "") != "int8" or len(shape) != 4:
        return False
    n, h, w, c = (int(x) for x in shape)
    return h > 1 and w > 1 and c > 1


# ---------------------------------------------------------------------------- rewrite
def zero_point(em, t: int) -> int:
    """The int8 value a padded cell of tensor ``t`` stands for: the input zero point of the
    Cortex-M convolutions that read it (their ``-input_offset``)."""
    node = em.node_of[t]
    zps = {-int(u.args[INPUT_OFFSET[op_name(u.target)]]) for u in node.users
           if is_cortex_m(u.target) and op_name(u.target) in INPUT_OFFSET}
    if len(zps) > 1:
        from ...patches import Refused

        raise Refused(f"{node.name} is read by convolutions with different zero points")
    return zps.pop() if zps else 0


def _physical(x, pads) -> tuple[list, list]:
    """(pre, post) pads of ``cortex_m::pad`` for (top, bottom, left, right) on H and W: in
    the physical order of ``x`` (NHWC when channels-last; a slice of a channels-last tensor
    is contiguous NCHW in the edge dialect)."""
    top, bottom, left, right = pads
    if tuple(_val(x).dim_order()) == (0, 2, 3, 1):
        return [0, top, left, 0], [0, bottom, right, 0]
    return [0, 0, top, left], [0, 0, bottom, right]


def rebuild(call, graph, first, orig, op: SOp, nd, ins, act_pos):
    """The Cortex-M call ``orig`` on the windows ``ins`` of plan node ``nd``: window ops with
    padding 0 (the border pads are explicit) and their own scratch buffers, sized by the
    backend's function for the patch's shapes; ``pad`` with the patch's border pads."""
    import torch
    from executorch.exir import memory

    name = op_name(orig.target)
    args = list(orig.args)
    for p, x in zip(act_pos, ins):
        args[p[0]] = x
    if op.is_pad:
        args[1], args[2] = _physical(args[0], nd.pads)
        return call(orig.target, args, orig)
    if name not in WINDOW:  # element-wise: a scratch buffer (none today) of its own size
        for i, a in enumerate(args):
            if hasattr(a, "op") and getattr(a.target, "__name__", "") == "alloc":
                args[i] = _alloc(graph, first, _val(a).shape[0], memory, torch)
        return call(orig.target, args, orig)
    # padding 0 (the border pads are explicit), or the border's (top, left) when the kernel
    # pads the clipped window itself (`own_padding`)
    args[WINDOW[name][2]] = [nd.pads[0], nd.pads[2]] if nd.implicit else [0, 0]
    scratch = [i for i, a in enumerate(args)
               if hasattr(a, "op") and getattr(a.target, "__name__", "") == "alloc"]
    for i in scratch:
        args[i] = _alloc(graph, first, 0, memory, torch)
    node = call(orig.target, args, orig)
    sizes = _scratch_sizes(node, orig)
    for i, size in zip(scratch, sizes):
        a = args[i]
        a.args = (((int(size),), torch.uint8),)
        a.meta["val"] = torch.empty((int(size),), dtype=torch.uint8, device="meta")
    return node


def _alloc(graph, first, size, memory, torch):
    with graph.inserting_before(first):
        a = graph.call_function(memory.alloc, (((int(size),), torch.uint8),))
    a.meta["val"] = torch.empty((int(size),), dtype=torch.uint8, device="meta")
    return a


def _scratch_sizes(node, orig) -> list[int]:
    """The backend's scratch sizes for ``node``, for the CMSIS-NN backend (MVE or DSP) whose
    sizes reproduce the ones the Cortex-M passes gave ``orig``; ``orig``'s own sizes when
    neither does (an unknown backend: never less than the whole op's buffers)."""
    from executorch.backends.cortex_m.library import cmsis_nn
    from executorch.backends.cortex_m.passes.scratch_buffer_sizes import (
        required_cmsis_nn_buffer_sizes)

    have = [int(_val(a).shape[0]) for a in orig.args
            if hasattr(a, "op") and getattr(a.target, "__name__", "") == "alloc"]
    for backend in (cmsis_nn.Backend.MVE, cmsis_nn.Backend.DSP):
        try:
            if list(required_cmsis_nn_buffer_sizes(orig, backend) or []) == have:
                return list(required_cmsis_nn_buffer_sizes(node, backend))
        except Exception:  # noqa: BLE001 - no size function for this backend / op
            continue
    return have


def drop_unused_scratch(graph) -> int:
    """Erase the scratch buffers nothing reads any more (those of the region's original
    calls): ExecuTorch would still plan them. Returns how many."""
    dead = [n for n in graph.nodes if n.op == "call_function" and not n.users and
            getattr(n.target, "__name__", "") == "alloc"]
    for n in dead:
        graph.erase_node(n)
    return len(dead)

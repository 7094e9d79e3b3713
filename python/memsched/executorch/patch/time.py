"""The patch search's time model for ExecuTorch's Cortex-M flow (`ExecutorchTime`, a
`memsched.patches.RuntimeTime`): the instructions of the edge graph's calls and of every node
the patch rewrite writes for a plan (the operators' copies on windows, window copies, border
pads, ``cat``, per-patch quantize, views), priced by the kernels' cost model of
`memsched.executorch.memory.instructions`; `time_model` attaches it where every call has a model."""
from __future__ import annotations

from ...patches import RuntimeTime
from .cortex_m import cm_pad_fits
from ..memory.instructions import (COEFFICIENTS, EXECUTE_INSTRUCTIONS, TARGET, T, args_of_node,
                                   node_instructions, op_instructions, op_key)
_NO_INSTRUCTION = ("getitem", "alloc", "view_copy", "permute_copy", "view", "sym_size")


def _graph_nodes(em):
    return list(em.nodes[0].graph.nodes) if em.nodes else []


class ExecutorchTime(RuntimeTime):
    """The patch search's time model of an edge graph of the Cortex-M int8 flow
    (`memsched.patches.RuntimeTime`): per operator its kernel's instructions on the M55
    (`node_instructions`), and per plan node what `patch.rewrite` writes for it: the
    operator's copy on its windows (padding 0: the borders are explicit), a window cut
    (``slice_copy`` on one axis, ``as_strided_copy`` on both: ``[N, rows, W x C]`` when
    `patch.layout.flat_windows` says the rewrite copies it row-contiguous), a border pad
    (``constant_pad_nd`` on the NHWC form), a concatenation (``cat``); the layout views are
    free (`patch.layout.lower_layout_views` folds them at planning time) except a view of a
    model input the caller owns (an ``et_view`` instruction at every execute).

    ``unknown``: the graph's calls no kernel model covers; `executorch_runtime` attaches
    this model only when there are none."""

    name = TARGET

    def __init__(self, em):
        from .layout import CHANNELS_LAST

        self.em = em
        self.cl = em.channels_last
        self.layout = CHANNELS_LAST if self.cl else None
        self.unplanned = frozenset(() if em.planned_inputs else em.sm.inputs)
        self._op = {}
        # per operator, its FX call's arguments (`args_of_node`): the same for each of its
        # copies on windows, and a fake tensor's dim order costs ~30 us to read
        self._args: dict = {}
        self._copies: dict = {}  # (operator, window shapes, own padding) -> instructions
        self.unknown: dict = {}
        self._program = EXECUTE_INSTRUCTIONS
        index = {id(n): k for k, n in enumerate(em.nodes)}
        for node in _graph_nodes(em):
            if node.op != "call_function":
                continue
            short = op_key(node.target).split("::")[-1]
            tname = getattr(node.target, "__name__", short)
            if short in _NO_INSTRUCTION or tname in _NO_INSTRUCTION:
                # views and layout changes become memory.view (no instruction) except on a
                # model input the caller owns
                src = node.args[0] if node.args else None
                if (short in ("view_copy", "permute_copy") and getattr(src, "op", "") ==
                        "placeholder" and not em.planned_inputs):
                    self._program += int(COEFFICIENTS["view"]["c"])
                continue
            n = node_instructions(node)
            if n is None:
                key = op_key(node.target)
                self.unknown[key] = self.unknown.get(key, 0) + 1
                n = 0
            self._program += n
            if id(node) in index:
                self._op[index[id(node)]] = n

    # -- RuntimeTime
    def program(self, sm) -> int:
        return self._program

    def op(self, sm, k: int) -> int:
        return self._op.get(k, 0)

    def plan(self, sm, plan) -> int:
        from .layout import flat_windows

        flat = flat_windows(plan) if self.cl else set()
        total = 0
        for nid, nd in enumerate(plan.nodes):
            total += self._node(sm, plan, nid, nd, flat)
        if self.layout is not None:
            for src, _ in self.layout.conversions(plan):
                if isinstance(src, tuple) and src[1] in self.unplanned:
                    total += int(COEFFICIENTS["view"]["c"])
        return total

    # -- the rewrite's nodes
    def _shape(self, sm, t: int, win) -> list:
        """[N, H, W, C] of tensor ``t`` on window ``win`` (None: the whole tensor)."""
        n, h, w, c = (list(sm.tensors[t].shape) + [1, 1, 1, 1])[:4]
        if win is not None:
            h, w = win.height, win.width
        return [n, h, w, c]

    def _dtype(self, sm, t: int) -> str:
        dt = self.em.dtype_of.get(t)
        if dt is not None:
            return str(dt).replace("torch.", "")
        return {1: "int8", 2: "int16", 4: "float32"}.get(sm.tensors[t].itemsize, "int8")

    def _src_win(self, plan, s):
        """(tensor, window) a plan node's input ``s`` holds."""
        if isinstance(s, tuple):
            return s[1], None
        nd = plan.nodes[s]
        return nd.tensor, nd.win

    def _nhwc(self, sm, t, win) -> T:
        return T(tuple(self._shape(sm, t, win)), self._dtype(sm, t), (0, 1, 2, 3))

    def _native(self, sm, t, win) -> T:
        n, h, w, c = self._shape(sm, t, win)
        return T((n, c, h, w), self._dtype(sm, t), (0, 2, 3, 1) if self.cl else (0, 1, 2, 3))

    def _node(self, sm, plan, nid, nd, flat) -> int:
        kind = nd.kind
        if kind == "slice":
            t, base = self._src_win(plan, nd.inputs[0]) if nd.inputs else (nd.tensor, None)
            src = self._nhwc(sm, nd.tensor, nd.base if nd.base is not None else base)
            out = self._nhwc(sm, nd.tensor, nd.win)
            rows, cols = nd.cuts()
            if rows and cols:
                if nid in flat:
                    n, h, w, c = out.sizes
                    out = T((n, h, w * c), out.dtype, (0, 1, 2))
                return op_instructions("aten::as_strided_copy", [src, None, None, 0, out]) or 0
            return op_instructions("aten::slice_copy", [src, 1 if rows else 2, 0, 0, 1, out]) or 0
        if kind == "pad":
            t, win = self._src_win(plan, nd.inputs[0])
            src = self._nhwc(sm, t, win)
            out = self._nhwc(sm, nd.tensor, nd.win)
            top, bottom, left, right = nd.pads
            if self.cl and cm_pad_fits(src.sizes, src.dtype):  # as the rewrite writes it
                return op_instructions("cortex_m::pad", [src, [0, top, left, 0],
                                                         [0, bottom, right, 0], 0, out]) or 0
            pads = [0, 0, left, right, top, bottom] if self.cl else [left, right, top, bottom]
            return op_instructions("aten::constant_pad_nd", [src, pads, 0, out]) or 0
        if kind == "concat":
            ins = [self._nhwc(sm, *self._src_win(plan, s)) for s in nd.inputs]
            out = self._nhwc(sm, nd.tensor, nd.win)
            return op_instructions("aten::cat", [ins, nd.axis, out]) or 0
        if kind in ("op", "vector") and nd.op >= 0:
            return self._op_copy(sm, plan, nd)
        return 0  # squeeze-and-excitation sums: not in the Cortex-M flow's graphs

    def _op_copy(self, sm, plan, nd) -> int:
        """The operator's kernel on its windows: its FX arguments with the activations'
        shapes replaced by the windows' and the padding by 0."""
        from .cortex_m import WINDOW
        from .describe import put_acts

        em = self.em
        node = em.nodes[nd.op]
        name = getattr(node.target, "__name__", "")
        ins = [self._src_win(plan, s) for s in nd.inputs]
        pads = (nd.pads[0], nd.pads[2]) if name in WINDOW and nd.implicit else None
        # the kernel's cost depends on the windows' shapes alone: a grid's patches mostly
        # share them, across plans too
        key = (nd.op, tuple((t, None) if w is None else (t, w.height, w.width) for t, w in ins),
               nd.tensor, nd.win.height if nd.win is not None else None,
               nd.win.width if nd.win is not None else None, pads)
        got = self._copies.get(key)
        if got is not None:
            return got
        whole = self._args.get(nd.op)
        if whole is None:
            whole = self._args[nd.op] = args_of_node(node)
        args = put_acts(whole, em.act_pos[nd.op],  # a copy: ``whole`` stays as it is
                        [self._native(sm, t, w) for t, w in ins])
        args[-1] = self._native(sm, nd.tensor, nd.win)
        if name in WINDOW:  # padding 0, or the border's (top, left) (`own_padding`)
            args[WINDOW[name][2]] = list(pads) if pads is not None else [0, 0]
        n = op_instructions(node.target, args)
        got = self._copies[key] = self._op.get(nd.op, 0) if n is None else n
        return got


def time_model(em) -> ExecutorchTime | None:
    """`ExecutorchTime` of ``em`` when every call of its graph has a kernel model (the
    Cortex-M int8 flow), else None (the search then bounds MACs alone)."""
    try:
        t = ExecutorchTime(em)
    except (AttributeError, KeyError, IndexError, TypeError, ValueError):
        return None
    return t if not t.unknown else None


__all__ = ["ExecutorchTime", "time_model"]

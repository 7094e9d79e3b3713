"""Example models built in Relax with no downloads: irregularly wired networks small enough to
compile and run in seconds, used by the README, the CLI (``example:NAME``) and the tests.

* ``randwire``: a randomly wired cell network (RandWire-like: Watts-Strogatz DAG, each node
  aggregates its inputs by sum, then ReLU-conv), channels varying per node.
* ``nas_cell``: two stacked NASNet-like cells (five two-branch blocks each, separable-ish convs,
  pooling, identity, a final concat).
* ``two_branch``: the smallest case where order matters: two conv branches of very different
  sizes.

``emit`` chooses the order the bindings are emitted in: ``"bfs"`` (level by level, as several
frontends emit; usually bad for memory) or ``"dfs"`` (depth-first).
"""
from __future__ import annotations

import random

import numpy as np

EXAMPLES = ("randwire", "nas_cell", "two_branch")


def _rng_weights(rng: np.random.Generator, shape):
    fan_in = int(np.prod(shape[1:])) or 1
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype("float32")


class _Net:
    """A tiny DAG description: nodes with an op and inputs, emitted later in a chosen order."""

    def __init__(self):
        self.nodes: list[tuple[str, tuple, list[int]]] = []  # (op, params, inputs)

    def add(self, op, params, inputs):
        self.nodes.append((op, params, list(inputs)))
        return len(self.nodes) - 1


def _emit_order(net: _Net, emit: str) -> list[int]:
    n = len(net.nodes)
    succs = [[] for _ in range(n)]
    indeg = [0] * n
    for v, (_, _, ins) in enumerate(net.nodes):
        for u in set(ins):
            succs[u].append(v)
            indeg[v] += 1
    ready = [v for v in range(n) if indeg[v] == 0]
    order = []
    while ready:
        v = ready.pop(0) if emit == "bfs" else ready.pop()
        order.append(v)
        new = []
        for s in succs[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                new.append(s)
        ready.extend(new if emit == "bfs" else reversed(new))
    return order


def _to_relax(net: _Net, in_shape, emit: str, seed: int, name: str = "main"):
    from tvm import relax

    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(in_shape, "float32"))
    shapes: dict[int, tuple] = {}
    with bb.function(name, [x]):
        with bb.dataflow():
            vals: dict[int, object] = {}
            order = _emit_order(net, emit)
            last = order[-1]
            for v in order:
                op, params, ins = net.nodes[v]
                args = [vals[u] for u in ins]
                if op == "input":
                    expr, shape = None, in_shape
                    vals[v] = x
                    shapes[v] = shape
                    continue
                if op == "conv":
                    cout, k = params
                    cin = shapes[ins[0]][1]
                    w = relax.const(_rng_weights(rng, (cout, cin, k, k)))
                    expr = relax.op.nn.conv2d(args[0], w, padding=k // 2)
                    shape = (1, cout) + tuple(shapes[ins[0]][2:])
                elif op == "relu":
                    expr, shape = relax.op.nn.relu(args[0]), shapes[ins[0]]
                elif op == "sum":
                    expr = args[0]
                    for a in args[1:]:
                        expr = bb.emit(relax.op.add(expr, a))
                    expr, shape = relax.op.nn.relu(expr), shapes[ins[0]]
                elif op == "maxpool":
                    expr = relax.op.nn.max_pool2d(args[0], (3, 3), (1, 1), (1, 1))
                    shape = shapes[ins[0]]
                elif op == "concat":
                    expr = relax.op.concat(args, axis=1)
                    shape = (1, sum(shapes[u][1] for u in ins)) + tuple(shapes[ins[0]][2:])
                else:  # pragma: no cover - builder bug
                    raise ValueError(op)
                vals[v] = bb.emit_output(expr) if v == last else bb.emit(expr)
                shapes[v] = shape
        bb.emit_func_output(vals[last])
    return bb.get()


def randwire_net(nodes: int = 12, seed: int = 0, k: int = 4, p: float = 0.75,
                 channels=(4, 8, 16, 32)) -> _Net:
    """A Watts-Strogatz random DAG (edges oriented low -> high id) with RandWire's node op."""
    import networkx as nx

    rng = random.Random(seed)
    ws = nx.connected_watts_strogatz_graph(nodes, k, p, seed=seed)
    net = _Net()
    x = net.add("input", (), [])
    stem = net.add("conv", (rng.choice(channels), 3), [x])
    ids = {}
    for v in range(nodes):
        preds = sorted(u for u in ws.neighbors(v) if u < v)
        srcs = [ids[u] for u in preds] or [stem]
        # align channel counts with 1x1 convs before summing (RandWire uses equal widths; we
        # vary widths to make the memory problem non-trivial)
        c = rng.choice(channels)
        aligned = [net.add("conv", (c, 1), [s]) for s in srcs]
        agg = net.add("sum", (), aligned) if len(aligned) > 1 else \
            net.add("relu", (), aligned)
        ids[v] = net.add("conv", (c, 3), [agg])
    sinks = [ids[v] for v in range(nodes) if not any(u > v for u in ws.neighbors(v))]
    net.add("concat", (), sinks) if len(sinks) > 1 else net.add("relu", (), sinks)
    return net


def nas_cell_net(cells: int = 2, c: int = 8) -> _Net:
    net = _Net()
    x = net.add("input", (), [])
    prev_prev = prev = net.add("conv", (c, 3), [x])
    for _ in range(cells):
        hs = [net.add("conv", (c, 1), [prev_prev]), net.add("conv", (c, 1), [prev])]
        for b in range(5):
            i, j = b % len(hs), (b * 3 + 1) % len(hs)
            left = net.add("conv", (c, 3), [net.add("relu", (), [hs[i]])])
            right = net.add("maxpool", (), [hs[j]]) if b % 2 else \
                net.add("conv", (c, 1), [net.add("relu", (), [hs[j]])])
            hs.append(net.add("sum", (), [left, right]))
        out = net.add("concat", (), hs[2:])
        prev_prev, prev = prev, net.add("conv", (c * 2, 1), [out])
    return net


def two_branch_net() -> _Net:
    net = _Net()
    x = net.add("input", (), [])
    big = net.add("conv", (64, 3), [x])
    big2 = net.add("conv", (8, 1), [big])
    small = net.add("conv", (8, 3), [x])
    small2 = net.add("conv", (8, 3), [small])
    net.add("concat", (), [big2, small2])
    return net


def _to_onnx(net: _Net, in_shape, emit: str, seed: int):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, shapes, names = [], [], {}, {}
    order = _emit_order(net, emit)
    for v in order:
        op, params, ins = net.nodes[v]
        args = [names[u] for u in ins]
        out = f"v{v}"
        if op == "input":
            names[v], shapes[v] = "x", in_shape
            continue
        if op == "conv":
            cout, k = params
            w = f"w{v}"
            inits.append(numpy_helper.from_array(
                _rng_weights(rng, (cout, shapes[ins[0]][1], k, k)), w))
            nodes.append(helper.make_node("Conv", [args[0], w], [out], pads=[k // 2] * 4,
                                          name=f"conv{v}"))
            shapes[v] = (1, cout) + tuple(shapes[ins[0]][2:])
        elif op in ("relu", "sum"):
            cur = args[0]
            for j, a in enumerate(args[1:]):
                nodes.append(helper.make_node("Add", [cur, a], [f"{out}_add{j}"],
                                              name=f"add{v}_{j}"))
                cur = f"{out}_add{j}"
            nodes.append(helper.make_node("Relu", [cur], [out], name=f"relu{v}"))
            shapes[v] = shapes[ins[0]]
        elif op == "maxpool":
            nodes.append(helper.make_node("MaxPool", args, [out], kernel_shape=[3, 3],
                                          pads=[1] * 4, name=f"pool{v}"))
            shapes[v] = shapes[ins[0]]
        elif op == "concat":
            nodes.append(helper.make_node("Concat", args, [out], axis=1, name=f"concat{v}"))
            shapes[v] = (1, sum(shapes[u][1] for u in ins)) + tuple(shapes[ins[0]][2:])
        names[v] = out
    last = order[-1]
    graph = helper.make_graph(
        nodes, "memsched_example",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
        [helper.make_tensor_value_info(names[last], TensorProto.FLOAT, list(shapes[last]))],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="memsched.examples")
    model.ir_version = 8  # onnxruntime rejects onnx's newest IR version
    return model


def _to_tflite(net: _Net, in_shape, emit: str, seed: int, quantized: bool = False) -> bytes:
    """The net as a .tflite flatbuffer (NHWC; CONV_2D/ADD/RELU/MAX_POOL_2D/CONCATENATION),
    operators in ``emit`` order. ``quantized``: int8 activations (one scale for every
    activation, so ADD/CONCATENATION need no requantization), int8 weights, int32 biases."""
    from .tflite_synth import TFLiteBuilder

    rng = np.random.default_rng(seed)
    b = TFLiteBuilder(f"example_{'int8' if quantized else 'float'}")
    s = b.s
    act_scale = 0.05

    def act(name, shape):
        if quantized:
            return b.tensor(name, shape, s.TensorType.INT8, scale=act_scale, zero_point=0)
        return b.tensor(name, shape, s.TensorType.FLOAT32)

    def opts(cls, **kw):
        o = cls()
        for k, v in kw.items():
            setattr(o, k, v)
        return o

    n, c, h, w = in_shape
    tens, shapes = {}, {}
    order = _emit_order(net, emit)
    for v in order:
        op, params, ins = net.nodes[v]
        if op == "input":
            shapes[v] = (n, h, w, c)
            tens[v] = act("x", shapes[v])
            b.inputs = [tens[v]]
            continue
        src = [tens[u] for u in ins]
        ish = shapes[ins[0]]
        if op == "conv":
            cout, k = params
            wf = _rng_weights(rng, (cout, ish[3], k, k)).transpose(0, 2, 3, 1)  # OHWI
            if quantized:
                wscale = max(float(np.abs(wf).max()), 1e-6) / 127.0
                wt = b.tensor(f"w{v}", wf.shape, s.TensorType.INT8,
                              b.buffer(np.round(wf / wscale).astype(np.int8)), scale=wscale,
                              zero_point=0)
                bt = b.tensor(f"b{v}", [cout], s.TensorType.INT32,
                              b.buffer(np.zeros(cout, np.int32)), scale=act_scale * wscale,
                              zero_point=0)
            else:
                wt = b.tensor(f"w{v}", wf.shape, s.TensorType.FLOAT32,
                              b.buffer(np.ascontiguousarray(wf)))
                bt = b.tensor(f"b{v}", [cout], s.TensorType.FLOAT32,
                              b.buffer(np.zeros(cout, np.float32)))
            shapes[v] = ish[:3] + (cout,)
            tens[v] = act(f"v{v}", shapes[v])
            b.op("CONV_2D", [src[0], wt, bt], [tens[v]], s.BuiltinOptions.Conv2DOptions,
                 opts(s.Conv2DOptionsT, padding=s.Padding.SAME, strideW=1, strideH=1,
                      dilationWFactor=1, dilationHFactor=1))
        elif op in ("relu", "sum"):
            cur = src[0]
            for j, a in enumerate(src[1:]):
                nxt = act(f"v{v}_add{j}", ish)
                b.op("ADD", [cur, a], [nxt], s.BuiltinOptions.AddOptions, opts(s.AddOptionsT))
                cur = nxt
            shapes[v] = ish
            tens[v] = act(f"v{v}", ish)
            b.op("RELU", [cur], [tens[v]])
        elif op == "maxpool":
            shapes[v] = ish
            tens[v] = act(f"v{v}", ish)
            b.op("MAX_POOL_2D", src, [tens[v]], s.BuiltinOptions.Pool2DOptions,
                 opts(s.Pool2DOptionsT, padding=s.Padding.SAME, strideW=1, strideH=1,
                      filterWidth=3, filterHeight=3))
        elif op == "concat":
            shapes[v] = ish[:3] + (sum(shapes[u][3] for u in ins),)
            tens[v] = act(f"v{v}", shapes[v])
            b.op("CONCATENATION", src, [tens[v]], s.BuiltinOptions.ConcatenationOptions,
                 opts(s.ConcatenationOptionsT, axis=3))
    b.outputs = [tens[order[-1]]]
    return b.finish()


def _net(name: str, seed: int, **kw):
    if name == "randwire":
        return randwire_net(seed=seed, **kw), (1, 8, 16, 16)
    if name == "nas_cell":
        return nas_cell_net(**kw), (1, 8, 16, 16)
    if name == "two_branch":
        return two_branch_net(), (1, 8, 32, 32)
    raise ValueError(f"unknown example {name!r}; choose one of {EXAMPLES}")


def example_onnx(name: str = "randwire", emit: str = "bfs", seed: int = 0, **kw):
    """The named example as an ONNX ModelProto (Conv/Add/Relu/MaxPool/Concat, opset 13)."""
    net, shape = _net(name, seed, **kw)
    return _to_onnx(net, shape, emit, seed)


def example_tflite(name: str = "randwire", emit: str = "bfs", seed: int = 0,
                   quantized: bool = False, **kw) -> bytes:
    """The named example as .tflite bytes (float32, or int8 with ``quantized``)."""
    net, shape = _net(name, seed, **kw)
    return _to_tflite(net, shape, emit, seed, quantized)


def example_model(name: str = "randwire", emit: str = "bfs", seed: int = 0, **kw):
    """A Relax IRModule of the named example (see module docstring)."""
    net, shape = _net(name, seed, **kw)
    return _to_relax(net, shape, emit, seed)


def example_inputs(mod, seed: int = 0) -> list[np.ndarray]:
    """Random inputs matching the parameters of ``mod['main']``."""
    rng = np.random.default_rng(seed)
    out = []
    for p in mod["main"].params:
        shape = [int(d) for d in p.ty.shape.values]
        out.append(rng.standard_normal(shape).astype(str(p.ty.dtype)))
    return out

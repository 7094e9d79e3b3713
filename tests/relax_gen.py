"""Random Relax modules for property tests of every pass against TVM's own pipelines.

`random_module(seed)` builds one dataflow block of element-wise unary/binary ops, reductions,
concat/split (tuples and TupleGetItem), conv2d, values read many times and tuple outputs, on
small NCHW tensors. Run through `relax.transform.DataflowUseInplaceCalls` (+ LegalizeOps) such
blocks get ``call_tir_inplace`` bindings that overwrite a dying argument: exactly what a
reordering pass must not move across another reader of that argument.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

H = W = 4


def _shape(x):
    return [int(d) for d in x.ty.shape.values]


def random_module(seed: int, n_ops: int = 14) -> tvm.IRModule:
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 4, H, W], "float32"))
    y = relax.Var("y", relax.TensorType([1, 4, H, W], "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            pool = [x, y]  # values of shape (1, C, H, W)
            uses = {x: 0, y: 0}

            def pick():
                # favour values already used (values read many times) and recent ones
                k = len(pool)
                w = np.array([1.0 + uses[v] + 2.0 * (i >= k - 3) for i, v in enumerate(pool)])
                v = pool[int(rng.choice(k, p=w / w.sum()))]
                uses[v] += 1
                return v

            def emit(expr, name):
                v = bb.emit(expr, name_hint=name)
                pool.append(v)
                uses[v] = 0
                return v

            for i in range(n_ops):
                kind = rng.choice(["unary", "binary", "reduce", "concat_split", "conv",
                                   "tuple"], p=[.25, .3, .1, .1, .15, .1])
                a = pick()
                ca = _shape(a)[1]
                if kind == "unary":
                    f = rng.choice([relax.op.negative, relax.op.nn.relu, relax.op.sigmoid,
                                    relax.op.tanh, relax.op.exp])
                    emit(f(relax.op.clip(a, -3.0, 3.0)) if f is relax.op.exp else f(a), f"u{i}")
                elif kind == "binary":
                    same = [v for v in pool if _shape(v)[1] == ca]
                    b = same[int(rng.integers(len(same)))]
                    uses[b] += 1
                    f = rng.choice([relax.op.add, relax.op.multiply, relax.op.subtract])
                    emit(f(a, b), f"b{i}")
                elif kind == "reduce":
                    r = bb.emit(relax.op.sum(a, axis=[1], keepdims=True), name_hint=f"r{i}")
                    emit(relax.op.add(a, r), f"rb{i}")  # broadcast back to (1, C, H, W)
                elif kind == "concat_split":
                    b = pick()
                    c = bb.emit(relax.op.concat([a, b], axis=1), name_hint=f"c{i}")
                    cs = _shape(c)[1]
                    parts = bb.emit(relax.op.split(c, [ca], axis=1) if cs != 2 * ca else
                                    relax.op.split(c, 2, axis=1), name_hint=f"s{i}")
                    emit(relax.TupleGetItem(parts, int(rng.integers(2))), f"g{i}")
                    if rng.random() < 0.5:  # the concat itself is read later too
                        pool.append(c)
                        uses[c] = 0
                elif kind == "conv":
                    co = int(rng.choice([2, 4]))
                    wt = rng.uniform(-1, 1, size=(co, ca, 3, 3)).astype("float32")
                    emit(relax.op.nn.conv2d(a, relax.const(wt), padding=[1, 1]), f"k{i}")
                else:  # a tuple value, read through TupleGetItem later
                    b = pick()
                    t = bb.emit(relax.Tuple([a, b]), name_hint=f"t{i}")
                    emit(relax.TupleGetItem(t, int(rng.integers(2))), f"tg{i}")
            # outputs: every value nobody reads (TVM drops dead bindings, and a miscompiled
            # dead value would go unseen) plus a few values that are also read inside
            sinks = [v for v in pool[2:] if uses[v] == 0]
            extra = [pool[int(k)] for k in rng.choice(len(pool), size=int(rng.integers(0, 3)))]
            outs = list(dict.fromkeys([pool[-1]] + sinks + extra))
            res = bb.emit_output(relax.Tuple(outs) if len(outs) > 1 else outs[0])
        bb.emit_func_output(res)
    return bb.get()


def inputs_for(seed: int):
    rng = np.random.default_rng(10_000 + seed)
    return [rng.uniform(-1, 1, size=(1, 4, H, W)).astype("float32") for _ in range(2)]


def build_run(mod, inputs, **compile_kw):
    """Build with ``tvm.compile`` and run ``main``; a flat list of numpy outputs."""
    ex = tvm.compile(mod, target="llvm", **compile_kw)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
    return _flatten(out)


def _flatten(out):
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [a for o in out for a in _flatten(o)]


def inplace_legalized(mod):
    """What a user pipeline that enables in-place calls hands to a later pass."""
    mod = relax.transform.DataflowUseInplaceCalls()(mod)
    return relax.transform.LegalizeOps()(mod)


def count_inplace(mod) -> int:
    found = []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and \
                e.op.name == "relax.call_tir_inplace":
            found.append(e)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return len(found)

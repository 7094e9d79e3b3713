"""Benchmark: optimal peak memory with RewriteConcatConv + MemoryAwareSchedule versus ordering only.

SERENITY (§3.3, identity graph rewriting) reports -10.7% peak on average from rewriting on top of
its optimal schedule. This prints a markdown table: model, bindings, sites rewritten / matched,
the optimal peak of the ordering alone, of rewrite (memory-aware) + ordering, and of rewriting
every site (force) + ordering, with the change and whether every search was certified optimal.
Peaks are memsched's model (``tvm`` by default: what StaticPlanBlockMemory plans; ``paper``
counts inputs/outputs), computed on the Relax graph before legalization.

Models: `memsched.generators.examples` (nas_cell, randwire, two_branch) and three built here with
BlockBuilder: a DARTS-like network (V2 normal cell: ReLU-Conv-BN preprocessing of the two
previous cells' concats, separable / dilated convs, skip connections), a DenseNet-like dense
block (concat -> BN -> ReLU -> 1x1 conv), and a NAS cell whose concat feeds a depthwise conv.
``--zoo NAME...`` adds networks of ``benchmarks.zoo`` (torch.export import; slow).

    .venv/bin/python benchmarks/tvm/rewrite_concat_conv.py [--time-limit 10] [--memory-model tvm]
        [--planned] [--zoo darts-v2-cifar ...]

``--planned`` adds TVM's real planned storage (default CPU pipeline) for
`memsched.pipeline()` and `memsched.pipeline(before=[RewriteConcatConv()])`, with TVM's
StaticPlanBlockMemory alone and with PlanArena after it, and checks the two compiled modules
give the same outputs.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import numpy as np  # noqa: E402


# ----------------------------------------------------------------------------- models
class _Builder:
    """Small helpers over relax.BlockBuilder with seeded weights (BN folded into conv + bias)."""

    def __init__(self, bb, seed=0):
        from tvm import relax

        self.bb, self.relax = bb, relax
        self.rng = np.random.default_rng(seed)

    def const(self, shape, scale=1.0):
        return self.relax.const((self.rng.standard_normal(shape) * scale).astype("float32"))

    def conv(self, x, cout, k=1, stride=1, dilation=1, groups=1, bias=True):
        op = self.relax.op
        cin = int(x.ty.shape.values[1])
        w = self.const((cout, cin // groups, k, k), 1.0 / np.sqrt(cin // groups * k * k))
        y = self.bb.emit(op.nn.conv2d(x, w, strides=stride, padding=dilation * (k // 2),
                                      dilation=dilation, groups=groups))
        if bias:
            y = self.bb.emit(op.add(y, self.const((1, cout, 1, 1), 0.1)))
        return y

    def relu(self, x):
        return self.bb.emit(self.relax.op.nn.relu(x))

    def add(self, a, b):
        return self.bb.emit(self.relax.op.add(a, b))

    def concat(self, xs):
        return self.bb.emit(self.relax.op.concat(xs, axis=1))

    def sep_conv(self, x, c, k=3):  # DARTS: (ReLU, dw k x k, pw 1x1, BN) twice
        for _ in range(2):
            cin = int(x.ty.shape.values[1])
            x = self.conv(self.conv(self.relu(x), cin, k, groups=cin, bias=False), c, 1)
        return x

    def dil_conv(self, x, c, k=3):  # ReLU, dw k x k dilation 2, pw 1x1, BN
        cin = int(x.ty.shape.values[1])
        return self.conv(self.conv(self.relu(x), cin, k, dilation=2, groups=cin, bias=False),
                         c, 1)


def _function(build, shape, seed=0):
    import tvm  # noqa: F401
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(build(_Builder(bb, seed), x))
        bb.emit_func_output(out)
    return bb.get()


# DARTS_V2 normal cell (Liu et al. 2019): (op, input state) pairs for nodes 2..5, concat 2..5.
DARTS_V2_NORMAL = [("sep_conv_3x3", 0), ("sep_conv_3x3", 1), ("sep_conv_3x3", 0),
                   ("sep_conv_3x3", 1), ("sep_conv_3x3", 1), ("skip_connect", 0),
                   ("skip_connect", 0), ("dil_conv_3x3", 2)]


def darts_like(cells=4, c=16, hw=16, seed=0):
    """Stem conv then ``cells`` DARTS-V2 normal cells at one resolution; each cell preprocesses
    the two previous cells' outputs (concats of 4 nodes) with ReLU -> 1x1 conv."""

    def build(b, x):
        s0 = s1 = b.conv(x, 3 * c, 3)
        for _ in range(cells):
            states = [b.conv(b.relu(s0), c, 1), b.conv(b.relu(s1), c, 1)]
            for n in range(4):
                outs = []
                for op, j in DARTS_V2_NORMAL[2 * n: 2 * n + 2]:
                    h = states[j]
                    outs.append(h if op == "skip_connect" else
                                b.sep_conv(h, c) if op == "sep_conv_3x3" else b.dil_conv(h, c))
                states.append(b.add(*outs))
            s0, s1 = s1, b.concat(states[2:])
        return b.bb.emit(b.relax.op.mean(s1, axis=[2, 3], keepdims=True))

    return _function(build, (1, 3, hw, hw), seed)


def densenet_like(layers=6, growth=12, c0=24, hw=16, seed=0):
    """One dense block: each layer BN -> ReLU -> 1x1 conv (4k) -> ReLU -> 3x3 conv (k) on the
    concat of all previous outputs (BN as relax.nn.batch_norm in inference mode)."""

    def bn(b, x):
        from tvm import relax

        c = int(x.ty.shape.values[1])
        ps = [b.const((c,), 0.1) for _ in range(3)]
        var = relax.const(b.rng.uniform(0.5, 1.5, c).astype("float32"))
        t = b.bb.emit(relax.op.nn.batch_norm(x, ps[0], ps[1], ps[2], var, axis=1,
                                             training=False))
        return b.bb.emit(relax.TupleGetItem(t, 0))

    def build(b, x):
        feats = [b.conv(x, c0, 3)]
        for _ in range(layers):
            cat = b.concat(feats) if len(feats) > 1 else feats[0]
            h = b.conv(b.relu(bn(b, cat)), 4 * growth, 1)
            feats.append(b.conv(b.relu(h), growth, 3))
        return b.concat(feats)

    return _function(build, (1, 3, hw, hw), seed)


def dw_cell(branches=4, c=16, hw=32, mult=2, seed=0):
    """Wide branches concatenated, then a depthwise 3x3 (multiplier ``mult``) and a narrow 1x1
    conv: kernel-wise partitioning of the depthwise conv."""

    def build(b, x):
        h = b.conv(x, c, 3)
        brs = [b.relu(b.conv(h, 2 * c, 3)) for _ in range(branches)]
        cat = b.concat(brs)
        cin = int(cat.ty.shape.values[1])
        d = b.conv(cat, cin * mult, 3, groups=cin, bias=False)
        return b.conv(b.relu(d), c, 1)

    return _function(build, (1, 3, hw, hw), seed)


def models(zoo=()):
    from memsched.generators.examples import example_model

    yield "examples/nas_cell", lambda: example_model("nas_cell")
    yield "examples/nas_cell (3 cells)", lambda: example_model("nas_cell", cells=3)
    yield "examples/randwire", lambda: example_model("randwire")
    yield "examples/two_branch", lambda: example_model("two_branch")
    yield "darts-like (4 cells, C=16, 16x16)", lambda: darts_like()
    yield "darts-like (6 cells, C=24, 32x32)", lambda: darts_like(6, 24, 32)
    yield "densenet-like (6 layers, k=12)", lambda: densenet_like()
    yield "densenet-like (12 layers, k=32, 32x32)", lambda: densenet_like(12, 32, 64, 32)
    yield "dw-cell (4 branches, m=2)", lambda: dw_cell()
    for name in zoo:
        def load(name=name):
            from benchmarks.zoo import build_relax

            return build_relax(name, fold_bn=True)
        yield f"zoo/{name}", load


# ----------------------------------------------------------------------------- measuring
def _attr(mod, key, default=None):
    a = mod["main"].attrs
    if a is None or key not in a:
        return default
    v = a[key]
    return v.value if hasattr(v, "value") else v


def measure(mod, time_limit, memory_model, planned=False):
    import tvm

    from memsched.transform import MemoryAwareSchedule, RewriteConcatConv

    order = MemoryAwareSchedule(time_limit=time_limit, memory_model=memory_model)
    t0 = time.perf_counter()
    only = order(mod)
    t1 = time.perf_counter()
    rw = RewriteConcatConv(time_limit=time_limit, memory_model=memory_model)
    both = tvm.transform.Sequential([rw, order])(mod)
    t2 = time.perf_counter()
    forced = tvm.transform.Sequential([RewriteConcatConv(force=True, time_limit=time_limit,
                                                         memory_model=memory_model),
                                       order])(mod)
    row = {
        "bindings": sum(len(b.bindings) for b in mod["main"].body.blocks),
        "sites": _attr(both, "memsched.rewrite_sites", 0),
        "candidates": _attr(both, "memsched.rewrite_candidates", 0),
        "order": _attr(only, "memsched.peak_after"),
        "both": _attr(both, "memsched.peak_after"),
        "forced": _attr(forced, "memsched.peak_after"),
        "optimal": all(_attr(m, "memsched.optimal", 0) for m in (only, both))
        and _attr(both, "memsched.rewrite_optimal", 1) == 1,
        "seconds_order": t1 - t0, "seconds_both": t2 - t1,
    }
    if planned:
        import memsched
        from memsched.generators.examples import example_inputs
        from tvm import relax

        for arena in (False, True):
            for key, before in (("order", []), ("both", [RewriteConcatConv(
                    time_limit=time_limit, memory_model=memory_model)])):
                row[f"planned_{key}{'_arena' if arena else ''}"] = memsched.planned_bytes(
                    mod, time_limit=time_limit, memory_model=memory_model, before=before,
                    plan_arena=arena)
        ins = example_inputs(mod)
        outs = []
        for before in ([], [RewriteConcatConv(time_limit=time_limit,
                                              memory_model=memory_model)]):
            ex = tvm.compile(mod, target="llvm", relax_pipeline=memsched.pipeline(
                before=before, time_limit=time_limit, memory_model=memory_model))
            vm = relax.VirtualMachine(ex, tvm.cpu())
            outs.append(vm["main"](*[tvm.runtime.tensor(a) for a in ins]).numpy())
        row["max_abs_diff"] = float(np.abs(outs[0] - outs[1]).max())
    return row


def _kib(b):
    return "-" if b is None else f"{b / 1024:,.1f}"


def _pct(new, old):
    return "-" if not old or new is None else f"{100.0 * (new - old) / old:+.1f}%"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=10.0,
                    help="seconds per exact search (default 10)")
    ap.add_argument("--memory-model", default="tvm", choices=["tvm", "paper"])
    ap.add_argument("--planned", action="store_true",
                    help="also TVM's planned storage (compiles; slower)")
    ap.add_argument("--zoo", nargs="*", default=(), help="benchmarks.zoo network names")
    args = ap.parse_args(argv)
    import warnings

    warnings.simplefilter("ignore")
    head = ("| model | bindings | sites rewritten / matched | order only (KiB) | rewrite + order "
            "(KiB) | change | force all + order (KiB) | change | optimal | time order / "
            "rewrite+order (s) |")
    sep = "|---|---:|---:|---:|---:|---:|---:|---:|:---:|---:|"
    if args.planned:
        head += (" TVM planned: order (KiB) | rewrite + order (KiB) | with PlanArena: order "
                 "(KiB) | rewrite + order (KiB) | max abs diff |")
        sep += "---:|---:|---:|---:|---:|"
    print(f"memory model: {args.memory_model}; time limit {args.time_limit:g} s per search\n")
    print(head)
    print(sep)
    changes = []
    for name, load in models(args.zoo):
        r = measure(load(), args.time_limit, args.memory_model, args.planned)
        if r["candidates"]:
            changes.append((r["both"] - r["order"]) / r["order"])
        line = (f"| {name} | {r['bindings']} | {r['sites']} / {r['candidates']} | "
                f"{_kib(r['order'])} | {_kib(r['both'])} | {_pct(r['both'], r['order'])} | "
                f"{_kib(r['forced'])} | {_pct(r['forced'], r['order'])} | "
                f"{'yes' if r['optimal'] else 'no'} | "
                f"{r['seconds_order']:.1f} / {r['seconds_both']:.1f} |")
        if args.planned:
            line += (f" {_kib(r['planned_order'])} | {_kib(r['planned_both'])} | "
                     f"{_kib(r['planned_order_arena'])} | {_kib(r['planned_both_arena'])} | "
                     f"{r['max_abs_diff']:.1e} |")
        print(line, flush=True)
    if changes:
        print(f"\nmean change over models with a matched site: "
              f"{100.0 * sum(changes) / len(changes):+.1f}% ({len(changes)} models)")


if __name__ == "__main__":
    main()

"""Benchmark: public-model-like graphs whose heuristic order is already optimal.

ConvNeXt-tiny and DPN-68 as exported by torchvision/timm have residual (and, in DPN, dense
concatenation) blocks: the peak sits inside a block while a skip tensor waits for the merge,
the best baseline order is already optimal, and the only work left is *proving* it. Before the
ancestry bound (`memsched.schedulers.bounds`), `auto` spent its whole time limit searching.
These graphs are built op by op with `memsched.graph.GraphBuilder` at ImageNet resolution
(batch 1, float32), with the op granularity of an ONNX export (permutes, layer norms, GELUs,
channel splits), no torch or TVM needed.

    .venv/bin/python benchmarks/search/public_like.py [--time-limit 10]

Prints a markdown table: graph, ops, best baseline peak, ours, lower bound, optimal, proof
(`auto` stats), scheduling seconds.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from memsched import schedule  # noqa: E402
from memsched.graph import GraphBuilder, OpGraph  # noqa: E402
from memsched.memory import Problem  # noqa: E402
from memsched.schedulers import best_heuristic  # noqa: E402

F32 = 4


def convnext_tiny_like() -> OpGraph:
    """ConvNeXt-T: stem 4x4/4, stages (3, 3, 9, 3) x dims (96, 192, 384, 768); a block is
    dwconv7 -> permute -> layernorm -> linear 4d -> gelu -> linear d -> scale -> permute -> add,
    layer norms and GELUs decomposed into element-wise ops as in an opset-13 ONNX export."""
    b = GraphBuilder("convnext_tiny_like")
    hw = 56
    x = b.input("x", 3 * 224 * 224 * F32)

    def op(name, kind, ins, nbytes):
        v = b.op(name, kind, ins, [(name, nbytes)])
        return b.ops[v].outputs[0]

    def layernorm(name, t, nbytes, c):  # ONNX opset < 17: decomposed, two diamonds
        mean = op(name + "_mean", "reduce", [t], nbytes // c)
        dev = op(name + "_sub", "sub", [t, mean], nbytes)
        sq = op(name + "_pow", "pow", [dev], nbytes)
        var = op(name + "_var", "reduce", [sq], nbytes // c)
        std = op(name + "_sqrt", "sqrt", [op(name + "_eps", "add", [var], nbytes // c)],
                 nbytes // c)
        t = op(name + "_div", "div", [dev, std], nbytes)
        return op(name + "_beta", "add", [op(name + "_gamma", "mul", [t], nbytes)], nbytes)

    def gelu(name, t, nbytes):  # x * 0.5 * (1 + erf(x / sqrt 2)): a diamond
        e = op(name + "_erf", "erf", [op(name + "_div", "div", [t], nbytes)], nbytes)
        e = op(name + "_add", "add", [e], nbytes)
        return op(name + "_half", "mul", [op(name + "_mul", "mul", [t, e], nbytes)], nbytes)

    d = 96
    h = op("stem", "conv", [x], d * hw * hw * F32)
    h = layernorm("stem_ln", h, d * hw * hw * F32, d)
    for s, (depth, dim) in enumerate(zip((3, 3, 9, 3), (96, 192, 384, 768))):
        if s:
            h = layernorm(f"down{s}_ln", h, d * hw * hw * F32, d)
            hw //= 2
            h = op(f"down{s}_conv", "conv", [h], dim * hw * hw * F32)
        d = dim
        act = d * hw * hw * F32
        for k in range(depth):
            p = f"s{s}b{k}_"
            t = op(p + "dw", "conv", [h], act)
            t = op(p + "perm1", "transpose", [t], act)
            t = layernorm(p + "ln", t, act, d)
            t = op(p + "fc1", "matmul", [t], 4 * act)
            t = gelu(p + "gelu", t, 4 * act)
            t = op(p + "fc2", "matmul", [t], act)
            t = op(p + "scale", "mul", [t], act)
            t = op(p + "perm2", "transpose", [t], act)
            h = op(p + "add", "add", [h, t], act)
    h = op("pool", "mean", [h], d * F32)
    h = layernorm("head_ln", h, d * F32, d)
    h = op("head", "matmul", [h], 1000 * F32)
    b.mark_output(h)
    return b.build()


def dpn68_like() -> OpGraph:
    """DPN-68: stem 3x3/2 + maxpool, stages k_sec (3, 4, 12, 3), inc_sec (16, 32, 32, 64); a
    block reads concat(residual, dense), runs 1x1 -> grouped 3x3 -> 1x1, splits the result into
    a residual part (added) and a dense part (concatenated onto the dense path)."""
    b = GraphBuilder("dpn68_like")
    x = b.input("x", 3 * 224 * 224 * F32)

    def op(name, kind, ins, nbytes):
        v = b.op(name, kind, ins, [(name, nbytes)])
        return b.ops[v].outputs[0]

    hw = 112
    h = op("stem_conv", "conv", [x], 10 * hw * hw * F32)
    h = op("stem_relu", "relu", [h], 10 * hw * hw * F32)
    hw //= 2
    h = op("stem_pool", "maxpool", [h], 10 * hw * hw * F32)
    res_c, dense_c = 64, 0
    res, dense = h, None
    for s, (k, inc, width) in enumerate(zip((3, 4, 12, 3), (16, 32, 32, 64),
                                            (64, 128, 256, 512))):
        out_c = 64 * 2 ** s
        for i in range(k):
            p = f"s{s}b{i}_"
            inp = res if dense is None else op(p + "cat_in", "concat", [res, dense],
                                               (res_c + dense_c) * hw * hw * F32)
            stride = 2 if (i == 0 and s) else 1
            if i == 0:  # projection: new residual and dense paths
                nhw = hw // stride
                proj = op(p + "proj", "conv", [inp], (out_c + 2 * inc) * nhw * nhw * F32)
                res = op(p + "proj_res", "slice", [proj], out_c * nhw * nhw * F32)
                dense = op(p + "proj_dense", "slice", [proj], 2 * inc * nhw * nhw * F32)
                res_c, dense_c = out_c, 2 * inc
            t = op(p + "c1", "conv", [inp], width * hw * hw * F32)
            t = op(p + "r1", "relu", [t], width * hw * hw * F32)
            hw //= stride
            t = op(p + "c2", "conv", [t], width * hw * hw * F32)
            t = op(p + "r2", "relu", [t], width * hw * hw * F32)
            t = op(p + "c3", "conv", [t], (out_c + inc) * hw * hw * F32)
            tr = op(p + "out_res", "slice", [t], out_c * hw * hw * F32)
            td = op(p + "out_dense", "slice", [t], inc * hw * hw * F32)
            res = op(p + "add", "add", [res, tr], res_c * hw * hw * F32)
            dense_c += inc
            dense = op(p + "cat", "concat", [dense, td], dense_c * hw * hw * F32)
    h = op("final_cat", "concat", [res, dense], (res_c + dense_c) * hw * hw * F32)
    h = op("pool", "mean", [h], (res_c + dense_c) * F32)
    h = op("head", "matmul", [h], 1000 * F32)
    b.mark_output(h)
    return b.build()


GRAPHS = {"convnext-tiny-like": convnext_tiny_like, "dpn68-like": dpn68_like}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--model", default="paper", help="memory model (paper, tvm)")
    args = ap.parse_args(argv)
    print("| graph | ops | best heuristic (B) | ours (B) | lower bound (B) | optimal | proof | "
          "time (s) |")
    print("|---|---:|---:|---:|---:|:---:|---|---:|")
    for name, build in GRAPHS.items():
        g = build()
        _, hpeak, hname = best_heuristic(Problem.from_graph(g, args.model))
        t = time.perf_counter()
        s = schedule(g, "auto", args.model, time_limit=args.time_limit)
        dt = time.perf_counter() - t
        print(f"| {name} | {len(g)} | {hpeak:,} ({hname}) | {s.peak:,} | {s.lower_bound:,} | "
              f"{'yes' if s.optimal else 'no'} | {s.stats.get('proof')} | {dt:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()

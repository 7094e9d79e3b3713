"""TilePatches on MobileNetV2-class Relax models: planned activation bytes of plain TVM, of
memsched.pipeline() (MemoryAwareSchedule + PlanArena), and of memsched.pipeline(tile_patches=
True) (TilePatches + MemoryAwareSchedule + PlanArena), MAC overhead, outputs equal.

    .venv/bin/python benchmarks/tvm/patches_tvm.py [--models mbv2-0.35-144,mbv2-1.0-96] [--json]

Models are built directly in Relax (`memsched.generators.relax_cnn.mobilenet_v2`: batch norm
folded into biases, ReLU6 as clip, random weights; ``-int8``: int8 activations, int32
accumulation, shift-and-clip requantization). Outputs: the patched build against the plain
`tvm.compile` build on one random input (integer: bit-equal; float: max abs difference).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

MODELS = {
    "mbv2-0.35-144": dict(alpha=0.35, size=144),
    "mbv2-0.35-96": dict(alpha=0.35, size=96),
    "mbv2-1.0-96": dict(alpha=1.0, size=96),
    "mbv2-1.0-144": dict(alpha=1.0, size=144),
    "mbv2-0.35-144-int8": dict(alpha=0.35, size=144, integer=True),
    "mbv2-1.0-96-int8": dict(alpha=1.0, size=96, integer=True),
    # an int8 .tflite (memsched.generators.tflite_synth.mobilenet_like: MobileNet-v1-like,
    # 13 blocks, width 32, residual ADDs) through TVM's own TFLite frontend (quantize /
    # dequantize around float kernels)
    "tflite-mobilenet_like-int8-96": dict(tflite=dict(quantized=True, size=96)),
    # squeeze-and-excitation: Keras MobileNetV3Small (alpha 1.0, 128 px) int8 .tflite, built
    # by benchmarks/tflite/patches_keras.py, through TVM's TFLite frontend
    "mbv3s-1.0-128-int8-keras": dict(tflite_path="/tmp/keras_models/mbv3s_1.0_128.tflite"),
    "mbv3s-1.0-224-int8-keras": dict(tflite_path="/tmp/keras_models/mbv3s_1.0_224.tflite"),
    # a MobileNetV3-Small-like Relax model (memsched.generators.relax_cnn.mobilenet_v3_small:
    # hardswish, SE blocks with relu + hardsigmoid), float32 and integer
    "mbv3s-1.0-128": dict(mbv3=dict(alpha=1.0, size=128)),
    "mbv3s-1.0-128-int": dict(mbv3=dict(alpha=1.0, size=128, integer=True)),
    "mbv3s-1.0-224-int": dict(mbv3=dict(alpha=1.0, size=224, integer=True)),
}
DEFAULT = ["mbv2-0.35-144", "mbv2-1.0-96", "mbv2-0.35-144-int8", "mbv2-1.0-96-int8"]


def build(name: str):
    """(Relax module, integer outputs?) of a benchmark model."""
    spec = dict(MODELS[name])
    if "tflite_path" in spec:
        from memsched.importers.load import load_relax

        return load_relax(spec["tflite_path"], None), True
    if "mbv3" in spec:
        from memsched.generators.relax_cnn import mobilenet_v3_small

        return mobilenet_v3_small(**spec["mbv3"]), spec["mbv3"].get("integer", False)
    if "tflite" in spec:
        import os
        import tempfile

        from memsched.generators.tflite_synth import mobilenet_like
        from memsched.importers.load import load_relax

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "model.tflite")
            with open(path, "wb") as f:
                f.write(mobilenet_like(**spec["tflite"]))
            return load_relax(path, None), True
    from memsched.generators.relax_cnn import mobilenet_v2

    return mobilenet_v2(**spec), spec.get("integer", False)


def run_model(name: str, max_overhead: float = 0.3, time_limit: float = 10.0,
              exact_reductions: bool = True) -> dict:
    import tvm
    from tvm import relax

    import memsched
    from memsched.generators.relax_cnn import random_input
    from memsched.transform.tile_patches import TilePatches

    mod, integer = build(name)
    folded = relax.transform.FoldConstant()(mod)
    ops = len(folded["main"].body.blocks[0].bindings)
    t0 = time.perf_counter()
    # the patch search at its defaults: bounded by its work budgets, with its own 60-s safety
    # net (``time_limit`` here is MemoryAwareSchedule's and PlanArena's)
    tiled = TilePatches(max_overhead=max_overhead,
                        exact_reductions=exact_reductions)(folded)
    search_s = time.perf_counter() - t0
    attrs = tiled["main"].attrs
    plain = memsched.planned_bytes(mod, schedule=False, plan_arena=False)
    mas = memsched.planned_bytes(mod, time_limit=time_limit)
    patched = memsched.planned_bytes(tiled, time_limit=time_limit)

    conv_over, split_shape = None, None
    if "memsched.patches_grid" in attrs:
        conv_over, split_shape = _conv_pool_overhead(folded, attrs, exact_reductions)
    x = random_input(mod, 1)

    def run(m, pipe=None):
        ex = tvm.compile(m, target="llvm", relax_pipeline=pipe) if pipe is not None \
            else tvm.compile(m, target="llvm")
        vm = relax.VirtualMachine(ex, tvm.cpu())
        return vm["main"](tvm.runtime.tensor(x)).numpy()

    ref = run(mod)  # plain tvm.compile of the original
    # the module measured above (TilePatches' choice), built by memsched.pipeline()
    # (MemoryAwareSchedule + PlanArena): the same as pipeline(tile_patches=...) on ``mod``
    out = run(tiled, memsched.pipeline(time_limit=time_limit))
    diff = float(np.abs(ref.astype("float64") - out.astype("float64")).max())
    return {
        "model": name, "ops": ops,
        "plain_tvm_bytes": plain, "mas_arena_bytes": mas, "patched_bytes": patched,
        "grid": str(attrs["memsched.patches_grid"]) if "memsched.patches_grid" in attrs
        else None,
        "split": str(attrs["memsched.patches_split"]) if "memsched.patches_split" in attrs
        else None,
        "se_patches": str(attrs.get("memsched.patches_se", "")),
        "region_ops": int(attrs["memsched.patches_region_ops"])
        if "memsched.patches_region_ops" in attrs else 0,
        "regions": str(attrs["memsched.patches_regions"])
        if "memsched.patches_regions" in attrs else "",
        "ratio_vs_plain": round(plain / patched, 2), "ratio_vs_mas": round(mas / patched, 2),
        "mac_overhead": float(attrs["memsched.patches_mac_overhead"])
        if "memsched.patches_mac_overhead" in attrs else 0.0,
        "conv_pool_mac_overhead": conv_over, "split_shape": split_shape,
        "search_seconds": round(search_s, 2),
        "outputs_equal": bool(diff == 0.0) if integer else None,
        "max_abs_diff": diff,
        "skipped": str(attrs["memsched.patches_skipped"])
        if "memsched.patches_skipped" in attrs else None,
        "prefix_end": str(attrs.get("memsched.patches_prefix_end", "")),
    }


def _conv_pool_overhead(folded, attrs, exact_reductions: bool = True):
    """MAC overhead counting only conv/pool multiply-accumulates (the pass's own count also
    charges one per element-wise output element), over every region
    (``memsched.patches_regions``: ``first-last:RxC[+keep]@split``), and the first region's
    split tensor's shape."""
    from memsched.patches.plans import plan_patches
    from memsched.patches.regions import regions
    from memsched.transform.tile_patches import describe_block

    func = folded["main"]
    bm = describe_block(func, func.body.blocks[0])
    sm = bm.sm
    conv = [k for k, op in enumerate(sm.ops) if op.cls == "window" and op.kind != "PAD"]
    whole = sum(sm.op_macs(sm.ops[k]) for k in conv)
    extra, shape = 0, None
    for entry in str(attrs["memsched.patches_regions"]).split("; "):
        ops, rest = entry.split(":", 1)
        start, last = (int(x) for x in ops.split("-"))
        label = rest.split("@", 1)[0]
        grid = tuple(int(g) for g in label.replace("+keep", "").split("x"))
        # the regions the pass chose from: float means only if it accepted them
        region = next(r for r in regions(sm, [start], se=True,
                                         exact_reductions=exact_reductions)[0]
                      if r.length == last + 1)
        plan = plan_patches(sm, region, grid, keep=label.endswith("+keep"))
        extra += sum(sm.op_macs(sm.ops[nd.op], nd.win) for nd in plan.nodes
                     if nd.kind == "op" and nd.op in conv) - \
            sum(sm.op_macs(sm.ops[k]) for k in conv if start <= k <= last)
        if shape is None:
            shape = "x".join(str(int(d)) for d in bm.var_of[region.split[-1]].ty.shape.values)
    return round(extra / whole, 4), shape


def _then(regions: str) -> str:
    """The regions after the first (``; then RxC @ split (ops a-b)``)."""
    out = ""
    for entry in regions.split("; ")[1:]:
        ops, rest = entry.split(":", 1)
        label, split = rest.split("@", 1)
        out += f"; then {label} @ {split} (ops {ops})"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(DEFAULT),
                    help=f"comma-separated, from {', '.join(MODELS)}")
    ap.add_argument("--max-overhead", type=float, default=0.3)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--float-reductions", action="store_true",
                    help="let regions run through float means (exact_reductions=False: "
                    "partial sums equal up to rounding)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    print("| model | ops | plain TVM (B) | MAS+PlanArena (B) | TilePatches+MAS+PlanArena (B) "
          "| grid @ split (region ops) | ratio vs plain / vs MAS | MAC overhead (conv+pool "
          "only) | search s | outputs |")
    print("|---|---:|---:|---:|---:|---|---|---|---:|---|")
    for name in args.models.split(","):
        r = run_model(name.strip(), args.max_overhead, args.time_limit,
                      not args.float_reductions)
        rows.append(r)
        eq = ("bit-equal" if r["outputs_equal"] else f"DIFFER {r['max_abs_diff']:g}") \
            if r["outputs_equal"] is not None else f"max abs diff {r['max_abs_diff']:.2g}"
        print(f"| {r['model']} | {r['ops']} | {r['plain_tvm_bytes']:,} | "
              f"{r['mas_arena_bytes']:,} | {r['patched_bytes']:,} | "
              f"{r['grid']} @ {r['split']} {r['split_shape']} ({r['region_ops']})"
              f"{', SE: ' + r['se_patches'] if r['se_patches'] else ''}"
              f"{_then(r['regions'])} | "
              f"{r['ratio_vs_plain']}x / {r['ratio_vs_mas']}x | "
              f"+{100 * r['mac_overhead']:.1f} % ({_pct(r['conv_pool_mac_overhead'])}) | "
              f"{r['search_seconds']} | {eq} |", flush=True)
    if args.json:
        print(json.dumps(rows))
    return 0


def _pct(x) -> str:
    return "-" if x is None else f"+{100 * x:.1f} %"


if __name__ == "__main__":
    sys.exit(main())

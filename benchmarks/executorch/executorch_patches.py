"""Patch-based execution in ExecuTorch: planned bytes, MACs and CPU latency (issue 33).

Each model (plain torch.nn, random weights, batch norm folded into conv biases) is exported
three times and lowered with ExecuTorch's default ``ExecutorchBackendConfig()``, with
``memsched.executorch.backend_config()`` (certified order + exact packer, no patches) and with
``backend_config(tile_patches=True)``. Planned bytes are read back from each written program
(``non_const_buffer_sizes``); MACs are the patch pass's count from the edge graph; latency is
the median of ``--runs`` executions in ``executorch.runtime`` (portable fp32 kernels); outputs
of the patched program are compared with the default program's on one random input; the
method allocator's bytes are measured by loading each program in libexecutorch
(`executorch_method_bytes.py`, needs g++).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/executorch/executorch_patches.py \
        --models mbv2-0.35-144,mbv2-1.0-224,mcunet-like-160
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from torch import nn


def make_divisible(v: float, divisor: int = 8) -> int:
    """Keras' ``_make_divisible``: round to a multiple of ``divisor``, never below 90 %."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new < 0.9 * v:
        new += divisor
    return new


def conv(cin: int, cout: int, k: int = 1, s: int = 1, g: int = 1, bn: bool = False) -> list:
    """A convolution as users write it: ``Conv2d(bias=False)`` + ``BatchNorm2d`` with
    ``bn``, else with the batch norm folded into its bias."""
    c = nn.Conv2d(cin, cout, k, s, k // 2, groups=g, bias=not bn)
    return [c, nn.BatchNorm2d(cout)] if bn else [c]


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int, kernel: int = 3,
                 bn: bool = False):
        super().__init__()
        hidden = cin * expand
        layers = []
        if expand != 1:
            layers += conv(cin, hidden, bn=bn) + [nn.ReLU6()]
        layers += conv(hidden, hidden, kernel, stride, hidden, bn) + [nn.ReLU6()]
        layers += conv(hidden, cout, bn=bn)
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


MBV2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
               (6, 160, 3, 2), (6, 320, 1, 1))


class MobileNetV2(nn.Module):
    """Keras' MobileNetV2 layer list (stem 3x3/2, inverted residuals (t, c, n, s), ReLU6,
    1x1 to 1280, mean, linear), width multiplier ``alpha`` with divisible-by-8 rounding."""

    def __init__(self, alpha: float = 1.0, classes: int = 1000, blocks=MBV2_BLOCKS,
                 kernels=None, stem: int = 32, last: int | None = None, bn: bool = False):
        super().__init__()
        c = make_divisible(stem * alpha)
        layers = conv(3, c, 3, 2, bn=bn) + [nn.ReLU6()]
        i = 0
        for t, ch, n, s in blocks:
            out = make_divisible(ch * alpha)
            for j in range(n):
                k = kernels[i] if kernels else 3
                layers.append(InvertedResidual(c, out, s if j == 0 else 1, t, k, bn))
                c = out
                i += 1
        last = last or (make_divisible(1280 * alpha) if alpha > 1.0 else 1280)
        layers += conv(c, last, bn=bn) + [nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(last, classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


# MCUNet-like: MobileNetV2 backbone with searched kernel sizes (3/5/7) and expansions (3-6),
# narrow stem, 160 px (the shape of MCUNet's ImageNet models, not its trained weights)
MCUNET_BLOCKS = ((1, 8, 1, 1), (4, 16, 2, 2), (3, 24, 3, 2), (6, 40, 3, 2), (5, 48, 2, 1),
                 (6, 96, 3, 2), (6, 160, 1, 1))
MCUNET_KERNELS = (3, 7, 3, 5, 5, 3, 7, 5, 3, 5, 5, 7, 5, 3, 7)


class SqueezeExcite(nn.Module):
    """MobileNetV3's SE: mean over H, W -> 1x1 conv -> ReLU -> 1x1 conv -> hardsigmoid, times
    the feature map."""

    def __init__(self, c: int, squeeze: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))


class V3Block(nn.Module):
    def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, hs: bool, s: int,
                 bn: bool = False):
        super().__init__()
        act = nn.Hardswish if hs else nn.ReLU
        layers = conv(cin, exp, bn=bn) + [act()] if exp != cin else []
        layers += conv(exp, exp, k, s, exp, bn) + [act()]
        if se:
            layers.append(SqueezeExcite(exp, make_divisible(exp / 4)))
        layers += conv(exp, cout, bn=bn)
        self.body = nn.Sequential(*layers)
        self.residual = s == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


# torchvision's MobileNetV3-Small: (kernel, expansion, out, SE, hardswish, stride)
MBV3S_BLOCKS = ((3, 16, 16, 1, 0, 2), (3, 72, 24, 0, 0, 2), (3, 88, 24, 0, 0, 1),
                (5, 96, 40, 1, 1, 2), (5, 240, 40, 1, 1, 1), (5, 240, 40, 1, 1, 1),
                (5, 120, 48, 1, 1, 1), (5, 144, 48, 1, 1, 1), (5, 288, 96, 1, 1, 2),
                (5, 576, 96, 1, 1, 1), (5, 576, 96, 1, 1, 1))


class MobileNetV3Small(nn.Module):
    """torchvision's MobileNetV3-Small layer list (hardswish stem 3x3/2 to 16, the blocks
    above with SE squeeze make_divisible(exp / 4), 1x1 to 576, mean, 1024, 1000), width
    ``alpha``; batch norm folded (no BN layers)."""

    def __init__(self, alpha: float = 1.0, classes: int = 1000, bn: bool = False):
        super().__init__()
        c = make_divisible(16 * alpha)
        layers = conv(3, c, 3, 2, bn=bn) + [nn.Hardswish()]
        for k, exp, out, se, hs, s in MBV3S_BLOCKS:
            exp, out = make_divisible(exp * alpha), make_divisible(out * alpha)
            layers.append(V3Block(c, k, exp, out, bool(se), bool(hs), s, bn))
            c = out
        last = make_divisible(576 * alpha)
        layers += conv(c, last, bn=bn) + [nn.Hardswish()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Linear(last, 1024), nn.Hardswish(),
                                  nn.Linear(1024, classes))

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


MLPERF = {  # ExecuTorch's own MLPerf Tiny ports (Arm): module, class, example input shape
    "mlperf-mbv1": ("mobilenet_v1_025", "MobileNetV1025", (1, 3, 96, 96)),
    "mlperf-resnet8": ("resnet8", "ResNet8", (1, 3, 32, 32)),
    "mlperf-dscnn": ("ds_cnn", "DSCNNKWS", (1, 1, 49, 10)),
}


def build(name: str):
    """(module, input) of a model name: ``mbv2-ALPHA-RES``, ``mbv3s-ALPHA-RES`` (MobileNetV3-
    Small-like, squeeze-and-excitation blocks), ``mcunet-like-RES`` (batch norm folded), the
    same as written with ``BatchNorm2d`` (``mbv2bn-``, ``mbv3sbn-``, ``mcunetbn-like-``), or
    ExecuTorch's MLPerf Tiny ports (``mlperf-mbv1``, ``mlperf-resnet8``, ``mlperf-dscnn``)."""
    import importlib

    parts = name.split("-")
    bn = parts[0].endswith("bn")
    kind = parts[0][:-2] if bn else parts[0]
    torch.manual_seed(0)
    if name in MLPERF:
        mod, cls, shape = MLPERF[name]
        m = getattr(importlib.import_module(f"executorch.examples.models.mlperf_tiny.{mod}"),
                    cls)()
        _init_bn(m)
        return m.eval(), torch.randn(*shape)
    if kind == "mbv2":
        alpha, res = float(parts[1]), int(parts[2])
        m = MobileNetV2(alpha, bn=bn)
    elif kind == "mbv3s":
        alpha, res = float(parts[1]), int(parts[2])
        m = MobileNetV3Small(alpha, bn=bn)
    elif kind == "mcunet" and parts[1] == "like":
        res = int(parts[2])
        m = MobileNetV2(1.0, blocks=MCUNET_BLOCKS, kernels=MCUNET_KERNELS, stem=16, last=640,
                        bn=bn)
    else:
        raise SystemExit(f"unknown model {name!r}")
    for p in m.parameters():  # small random weights keep activations in range
        nn.init.normal_(p, 0.0, 0.05)
    _init_bn(m)
    return m.eval(), torch.randn(1, 3, res, res)


def _init_bn(m) -> None:
    """Trained-looking batch norms (scale near 1, positive variance): random statistics."""
    for b in m.modules():
        if isinstance(b, nn.BatchNorm2d):
            nn.init.uniform_(b.weight, 0.5, 1.5)
            nn.init.normal_(b.bias, 0.0, 0.05)
            b.running_mean.normal_(0.0, 0.05)
            b.running_var.uniform_(0.5, 1.5)


def lower(model, x, config):
    from executorch.exir import to_edge

    with torch.no_grad():
        ep = torch.export.export(model, (x,))
    t0 = time.perf_counter()
    et = to_edge(ep).to_executorch(config)
    return et, time.perf_counter() - t0


def run_times(buffer: bytes, x, runs: int):
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(buffer).load_method("forward")
    out = method.execute([x])[0].clone()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        method.execute([x])
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def pte_counts(buffer: bytes) -> tuple[int, int]:
    from memsched.executorch.format.read import read_program

    plan = read_program(buffer).program.execution_plan[0]
    return len(plan.values), sum(len(c.instructions) for c in plan.chains)


def measure(name: str, runs: int, time_limit: float, max_overhead: float, grid=None,
            const_prop: bool = True, se_patches: str | None = None,
            price_records: bool = True, exact_reductions: bool = True,
            share: bool = False) -> dict:
    from executorch.exir import ExecutorchBackendConfig

    import memsched.executorch as mx
    from memsched.executorch.format.read import planned_sizes

    from executorch_method_bytes import method_allocator_bytes

    model, x = build(name)
    with torch.no_grad():
        ref = model(x)
    row = {"model": name, "price_records": price_records, "share_values": share}
    progs = {}
    # constant propagation folds the classifier's weight permute (1280 x 1000 fp32 = 5.1 MB
    # planned otherwise) into a constant: the same option for all three configs
    opts = {"do_quant_fusion_and_const_prop": const_prop}
    et, s = lower(model, x, ExecutorchBackendConfig(**opts))
    progs["default"] = et.buffer
    row["default_s"] = round(s, 1)
    cfg = mx.backend_config(time_limit=time_limit, **opts)
    et, s = lower(model, x, cfg)
    # share: memsched's programs written with equal values shared (mx.share_values) and the
    # patch search priced so; ExecuTorch's default as its emitter writes it
    progs["memsched"] = mx.share_values(et.buffer)[0] if share else et.buffer
    row["memsched_s"] = round(s, 1)
    cfg = mx.backend_config(time_limit=time_limit, tile_patches=True,
                            max_overhead=max_overhead, grid=grid, se_patches=se_patches,
                            price_records=price_records, exact_reductions=exact_reductions,
                            share_values=share, **opts)
    et, s = lower(model, x, cfg)
    progs["patches"] = mx.share_values(et.buffer)[0] if share else et.buffer
    row["patches_s"] = round(s, 1)
    rep = list(mx.report(cfg).values())[0]
    tr = rep.patches
    base = None
    for k, buf in progs.items():
        row[f"{k}_bytes"] = sum(planned_sizes(buf)["forward"])
        out, sec = run_times(buf, x, runs)
        base = out if base is None else base
        row[f"{k}_ms"] = round(1000 * sec, 2)
        row[f"{k}_diff"] = float((out - base).abs().max())
        row[f"{k}_vs_eager"] = float((out - ref).abs().max())
        row[f"{k}_values"], row[f"{k}_instructions"] = pte_counts(buf)
        # the method allocator's records (values, tensors, instructions), measured by loading
        # the program in libexecutorch (benchmarks/executorch/executorch_method_bytes.py)
        row[f"{k}_method_bytes"] = method_allocator_bytes(buf)["bytes"]
    row["bit_equal"] = row["patches_diff"] == 0.0
    row.update({"grid": tr.grid, "se_patches": tr.se_patches, "split": ",".join(tr.split),
                "region_ops": tr.region_ops, "second_grid": tr.second_grid,
                "second_split": ",".join(tr.second_split), "second_region": tr.second_region,
                "regions": tr.regions,
                "macs": tr.macs_before, "macs_patched": tr.macs or tr.macs_before,
                "mac_overhead": tr.mac_overhead, "skipped": tr.skipped,
                "records_added_model": tr.records_added,
                "certified_order": bool(rep.order and rep.order.optimal)})
    return row


def table(rows: list[dict]) -> str:
    head = ("| model | MACs | ExecuTorch default (B) | memsched (B) | memsched + patches (B) | "
            "default / patches | grid @ split (region ops) | MAC overhead | "
            "+values / +instructions (.pte) | method allocator memsched -> patches (B) | "
            "arena + method allocator, default -> patches (B) | "
            "latency default / memsched / patches (ms) | "
            "max abs diff vs default |")
    lines = [head, "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        ratio = r["default_bytes"] / r["patches_bytes"]
        diff = "0 (bit-equal)" if r["bit_equal"] else f"{r['patches_diff']:.2e}"
        se = f" SE: {r['se_patches']}" if r.get("se_patches") else ""
        regs = r.get("regions") or []

        def margins(g) -> str:
            return " with margins" if g.get("padding") == "margins" else ""

        for g in regs[1:]:  # every region after the first
            se += (f"; then {g['grid']}{margins(g)} @ {','.join(g['split'])} "
                   f"(ops {g['region_start']}-{g['region_ops'] - 1})")
        first = margins(regs[0]) if regs else ""
        where = f"{r['grid']}{first} @ {r['split']} ({r['region_ops']}){se}" if r["grid"] \
            else f"none: {r['skipped']}"
        before = r["default_bytes"] + r["default_method_bytes"]
        after = r["patches_bytes"] + r["patches_method_bytes"]
        lines.append(
            f"| {r['model']} | {r['macs']:,} | {r['default_bytes']:,} | {r['memsched_bytes']:,}"
            f" | {r['patches_bytes']:,} | {ratio:.2f}x | {where} | "
            f"+{100 * r['mac_overhead']:.1f} % | "
            f"+{r['patches_values'] - r['memsched_values']} / "
            f"+{r['patches_instructions'] - r['memsched_instructions']} | "
            f"{r['memsched_method_bytes']:,} -> {r['patches_method_bytes']:,} | "
            f"{before:,} -> {after:,} ({before / after:.2f}x) | "
            f"{r['default_ms']} / {r['memsched_ms']} / {r['patches_ms']} | {diff} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mbv2-0.35-144,mbv2-1.0-224,mcunet-like-160")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--max-overhead", type=float, default=0.3)
    ap.add_argument("--grid", default=None)
    ap.add_argument("--no-const-prop", action="store_true",
                    help="lower without do_quant_fusion_and_const_prop")
    ap.add_argument("--se-patches", choices=("recompute", "keep"), default=None,
                    help="force how patches after an SE block's mean get their feature maps")
    ap.add_argument("--arena-only", action="store_true",
                    help="choose patches on the planned arena alone (price_records=False), "
                    "not on arena + method-allocator records")
    ap.add_argument("--float-reductions", action="store_true",
                    help="let regions run through float SE means (exact_reductions=False: "
                    "partial sums equal up to rounding)")
    ap.add_argument("--share-values", action="store_true",
                    help="memsched's programs priced and written with equal values shared "
                         "(memsched.executorch.share_values)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        row = measure(name, args.runs, args.time_limit, args.max_overhead, args.grid,
                      not args.no_const_prop, args.se_patches, not args.arena_only,
                      not args.float_reductions, args.share_values)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps(rows, indent=1) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

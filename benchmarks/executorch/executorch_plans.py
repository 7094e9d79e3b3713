"""ExecuTorch's planned arena with its default config vs `memsched.executorch.backend_config()`.

    .venv/bin/python benchmarks/executorch/executorch_plans.py [--models a,b] [--quick] [--no-run]
                                                    [--time-limit S] [--json out.json]

Each model is exported once with ``torch.export`` and lowered twice from the same edge program
(ExecuTorch's default ``to_executorch()``, then memsched's config). Columns: planned bytes read
back from each serialized program (``non_const_buffer_sizes``), ExecuTorch's greedy on
memsched's order (what the packer had to beat), the lower bound (the scheduler's proven bound
on the liveness peak over all orders; no arena of any order is smaller), ``optimal`` when the
planned bytes equal it, seconds of each ``to_executorch``, and whether the two programs' outputs
are bit-equal in ExecuTorch's runtime on a random input (``--no-run`` skips running).

Models: plain ``torch.nn`` models written here (MobileNet-like, Inception-like, a residual
stack with a mutable buffer) and networks of ``benchmarks.zoo`` (fp32, portable kernels).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

ZOO = ["randwire-ws-1", "hrnet-w18-small-v1", "resnet-50", "amoebanet-a-cifar",
       "nasnet-a-cifar", "darts-v2-cifar", "densenet-121", "mobilenet-v2"]
OWN = ["mobilenet-like-0.5", "inception-like", "residual-buffer"]
QUICK = OWN + ["darts-v2-cifar", "nasnet-a-cifar"]


def own_model(name: str):
    """Plain torch.nn models (no torchvision: it does not load with the CPU torch here)."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def cbr(cin, cout, k=1, s=1, g=1):
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, groups=g, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU6())

    class Inverted(nn.Module):
        def __init__(self, cin, cout, s, e):
            super().__init__()
            h = cin * e
            self.body = nn.Sequential(cbr(cin, h), cbr(h, h, 3, s, h),
                                      nn.Conv2d(h, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.res = s == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.res else y

    class MobileNetLike(nn.Module):
        """MobileNetV2 at width 0.5, 96x96 input (MLPerf-Tiny-like size)."""

        def __init__(self):
            super().__init__()
            cfg = [(1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 3, 2), (6, 32, 4, 2), (6, 48, 3, 1),
                   (6, 80, 3, 2), (6, 160, 1, 1)]
            layers, c = [cbr(3, 16, 3, 2)], 16
            for e, cout, n, s in cfg:
                for i in range(n):
                    layers.append(Inverted(c, cout, s if i == 0 else 1, e))
                    c = cout
            layers.append(cbr(c, 640))
            self.features = nn.Sequential(*layers)
            self.fc = nn.Linear(640, 10)

        def forward(self, x):
            return self.fc(self.features(x).mean(dim=(2, 3)))

    class InceptionLike(nn.Module):
        """Three inception blocks of four branches of different widths, 32x32 input."""

        def __init__(self):
            super().__init__()
            self.stem = cbr(3, 32, 3)
            blocks, c = [], 32
            for w in (16, 24, 32):
                blocks.append(nn.ModuleList([
                    cbr(c, w), nn.Sequential(cbr(c, w // 2), cbr(w // 2, w, 3)),
                    nn.Sequential(cbr(c, w // 4), cbr(w // 4, w, 5)),
                    nn.Sequential(nn.MaxPool2d(3, 1, 1), cbr(c, w))]))
                c = 4 * w
            self.blocks = nn.ModuleList(blocks)
            self.fc = nn.Linear(c, 10)

        def forward(self, x):
            h = self.stem(x)
            for b in self.blocks:
                h = torch.cat([m(h) for m in b], 1)
            return self.fc(h.mean(dim=(2, 3)))

    class ResidualBuffer(nn.Module):
        """A residual stack with a running-sum buffer updated in place each call."""

        def __init__(self):
            super().__init__()
            self.stem = cbr(3, 16, 3)
            self.blocks = nn.ModuleList(nn.Sequential(cbr(16, 64), cbr(64, 16, 3))
                                        for _ in range(4))
            self.side = nn.ModuleList(cbr(16, 48) for _ in range(4))
            self.register_buffer("total", torch.zeros(1))

        def forward(self, x):
            h = self.stem(x)
            sides = []
            for b, s in zip(self.blocks, self.side):
                sides.append(s(h))
                h = h + b(h)
            self.total.add_(h.mean())
            return torch.cat(sides, 1).mean(dim=(2, 3)) + self.total

    models = {"mobilenet-like-0.5": (MobileNetLike, 96), "inception-like": (InceptionLike, 32),
              "residual-buffer": (ResidualBuffer, 32)}
    cls, size = models[name]
    m = cls().eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m, torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))


def build(name: str):
    if name in OWN:
        return own_model(name)
    from benchmarks import zoo

    return zoo.build_torch(name)


def run_program(buffer, x):
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(buffer).load_method("forward")
    return [o.clone() for o in method.execute([x])]


def measure(name: str, time_limit: float, run: bool) -> dict:
    import torch
    from executorch.exir import to_edge

    import memsched.executorch as mx
    from memsched.executorch import pte

    model, x = build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(model, (x,))
        edge = to_edge(ep)
        t0 = time.perf_counter()
        base = copy.deepcopy(edge).to_executorch()
        t_base = time.perf_counter() - t0
        config = mx.backend_config(time_limit=time_limit)
        t0 = time.perf_counter()
        ours = edge.to_executorch(config)
        t_ours = time.perf_counter() - t0
    (rep,) = mx.report(config).values()
    greedy_default = sum(pte.planned_sizes(base.buffer)["forward"][1:])
    planned = sum(pte.planned_sizes(ours.buffer)["forward"][1:])
    assert planned == rep.planned_bytes and planned <= greedy_default
    o = rep.order
    lower = o.lower_bound if o is not None else None
    row = {"model": name, "ops": o.ops if o else None, "greedy": greedy_default,
           "greedy_on_memsched_order": rep.greedy_bytes, "memsched": planned,
           "input_order_peak": o.input_peak if o else None, "order_peak": o.peak if o else None,
           "lower_bound": lower, "optimal": lower is not None and planned == lower,
           "order_optimal": bool(o and o.optimal), "ratio": greedy_default / max(planned, 1),
           "seconds_default": round(t_base, 2), "seconds_memsched": round(t_ours, 2),
           "memsched_work_seconds": round(rep.seconds, 2), "note": rep.note, "bit_equal": None}
    if run:
        a, b = run_program(base.buffer, x), run_program(ours.buffer, x)
        row["bit_equal"] = len(a) == len(b) and all(torch.equal(u, v) for u, v in zip(a, b))
    return row


def table(rows) -> str:
    head = ("| model | ops | ExecuTorch greedy (B) | memsched (B) | lower bound (B) | optimal | "
            "greedy / memsched | greedy on memsched's order (B) | s default | s memsched | "
            "bit-equal |")
    out = [head, "|---|---:|---:|---:|---:|:---:|---:|---:|---:|---:|:---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | error: {r['error']} |" + " |" * 9)
            continue
        out.append(
            f"| {r['model']} | {r['ops']} | {r['greedy']:,} | {r['memsched']:,} | "
            f"{r['lower_bound']:,} | {'yes' if r['optimal'] else 'no'} | {r['ratio']:.2f}x | "
            f"{r['greedy_on_memsched_order']:,} | {r['seconds_default']:.1f} | "
            f"{r['seconds_memsched']:.1f} | "
            f"{'-' if r['bit_equal'] is None else ('yes' if r['bit_equal'] else 'NO')} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated names (default: own models + zoo)")
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--no-run", action="store_true", help="do not run the programs")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    names = args.models.split(",") if args.models else (QUICK if args.quick else OWN + ZOO)
    rows = []
    for name in names:
        t0 = time.perf_counter()
        try:
            rows.append(measure(name, args.time_limit, not args.no_run))
        except Exception as e:  # one bad model must not hide the others' numbers
            rows.append({"model": name, "error": f"{type(e).__name__}: {str(e)[:120]}"})
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 58 item 3, "fewer quantize calls per region", on ExecuTorch's Cortex-M int8 flow: the
search's choice against the same search with the float input quantized once, on the M55.

    flock /tmp/qemu.lock env OMP_NUM_THREADS=1 .venv/bin/python \
        benchmarks/executorch/quantize_once.py [--models mobilenet_v1_025,...] [--slowdowns 1.1]

With the caller's input, a region that starts at operator 0 quantizes the float input window by
window (one ``quantize_per_tensor`` per patch, on each patch's float window); a region that
starts after the leading quantize ("quantize once, then slice") runs it whole and cuts the
patches' windows from its int8 output, which stays live through the region. The shared rule
(`memsched.patches.starts.region_starts`) offers both starts and the search prices both with
the RAM and time models. Here the second search may not start at 0 (the rule's starts without
0, a benchmark-only substitution of `memsched.patches.evaluator.region_starts`), so the two
choices at the same ``max_slowdown`` run side by side on the board (`memsched.board`): RAM
(planned + method + temp allocators), instructions per ``Method::execute``, outputs bit-equal
to ExecuTorch's default program's (docs/executorch_patches.md, "The patch machinery's share").
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

MODELS = "mobilenet_v1_025,resnet8,mbv2bn-0.35-144,mobilenet_v2"


def _programs(name: str, slowdowns):
    """Yields (max_slowdown, mode, plan summary, search factor, predicted, default program,
    program, input) for the search's choice and the quantize-once one."""
    import memsched.patches.evaluator as evaluator
    from memsched.executorch.memory.instructions import program_instructions
    from memsched.patches.starts import region_starts
    from time_budget import _et_total, et_default, et_patched

    edge, x, base = et_default(name, False)
    modes = {"search": region_starts,
             "quantize once": lambda sm: [s for s in region_starts(sm) if s > 0] or [0]}
    try:
        for s in slowdowns:
            for mode, starts in modes.items():
                evaluator.region_starts = starts
                ours, p = et_patched(edge, s, False)
                plan = p.summary().split(", MACs")[0] if p.patched else "unpatched"
                yield (s, mode, plan, p.slowdown or 1.0,
                       _et_total(program_instructions(ours)), base, ours, x)
    finally:
        evaluator.region_starts = region_starts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--slowdowns", default="1.1")
    a = ap.parse_args(argv)
    from executorch_cortex_m import _on_board

    slowdowns = [None if v.lower() == "none" else float(v) for v in a.slowdowns.split(",")]
    print("| model | max_slowdown | first region | plan | board RAM default -> patched (B) | "
          "RAM ratio | instructions, board (patched / default) | predicted | on the M55 |")
    print("|---|---:|---|---|---:|---:|---:|---:|---|")
    for name in a.models.split(","):
        for s, mode, plan, factor, pred, base, ours, x in _programs(name, slowdowns):
            m = _on_board(base, ours, x, None, f"{name}-{mode.replace(' ', '-')}")
            if "board_default" not in m:
                print(f"| {name} | {s} | {mode} | {plan} | {m.get('run')} |", flush=True)
                continue
            (d, p), (rd, rp) = m["instructions"], (m["board_default"], m["board_memsched"])
            print(f"| {name} | {s} | {mode} | {plan} | {rd:,} -> {rp:,} | {rd / rp:.2f}x | "
                  f"{p:,} / {d:,} ({p / d:.4f}x) | {pred:,} (search {factor:.4f}x) | "
                  f"{m['run']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""fp32 MobileNetV2 @224 exported the standard way: ExecuTorch's default plan vs
``backend_config(tile_patches=True)`` (issue 45, item 4).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/executorch/executorch_fp32_patches.py
        [--size 224] [--time-limit S] [--json out.json]

The model: torchvision's MobileNetV2 layer for layer in plain ``torch.nn`` (batch norm,
ReLU6, ``nn.Linear`` classifier; `executorch_cortex_m.mobilenet_v2`, random weights), exported
with ``to_edge(torch.export.export(model.eval(), (x,)))``: no ``do_quant_fusion_and_const_prop``
by the user. Lowered with ``to_executorch()`` and with ``to_executorch(backend_config(
tile_patches=True))``; for each written program: the planned arena
(``pte.planned_sizes(buffer)["forward"][1:]``) and the method allocator's bytes when
ExecuTorch's runtime loads it (`executorch_method_bytes.method_allocator_bytes`). The patch
search's modelled peak (``report(config)[method].patches.peak_after``) and the plan report's
bytes are printed next to the planned arena read back; both programs run in
``executorch.runtime`` on one random input and are compared bit for bit.
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
sys.path.insert(0, HERE)


def measure(size: int = 224, time_limit: float = 10.0) -> dict:
    import torch
    from executorch.exir import to_edge
    from executorch_cortex_m import mobilenet_v2, run_program
    from executorch_method_bytes import method_allocator_bytes

    import memsched.executorch as mx
    from memsched.executorch import pte

    torch.manual_seed(0)
    model, x = mobilenet_v2().eval(), torch.randn(1, 3, size, size)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        edge = to_edge(torch.export.export(model, (x,)))
        t0 = time.perf_counter()
        base = copy.deepcopy(edge).to_executorch()
        t_base = time.perf_counter() - t0
        config = mx.backend_config(time_limit=time_limit, tile_patches=True)
        t0 = time.perf_counter()
        ours = copy.deepcopy(edge).to_executorch(config)
        t_ours = time.perf_counter() - t0
    (rep,) = mx.report(config).values()
    row = {"size": size, "time_limit": time_limit, "seconds_default": round(t_base, 1),
           "seconds_memsched": round(t_ours, 1), "summary": rep.summary()}
    for name, prog in (("default", base), ("memsched", ours)):
        arena = sum(pte.planned_sizes(prog.buffer)["forward"][1:])
        method = method_allocator_bytes(prog.buffer)["bytes"]
        row[name] = {"arena": arena, "method_allocator": method, "total": arena + method,
                     "pte_bytes": len(prog.buffer)}
    row["report_planned"] = rep.planned_bytes
    row["modelled_peak_after"] = rep.patches.peak_after if rep.patches else None
    row["modelled_records"] = (rep.patches.records_before + rep.patches.records_added
                               if rep.patches else None)
    got, want = run_program(ours.buffer, x), run_program(base.buffer, x)
    row["bit_equal"] = all(torch.equal(a, b) for a, b in zip(got, want))
    row["max_abs_diff"] = max(float((a - b).abs().max()) for a, b in zip(got, want))
    row["ratio_arena"] = row["default"]["arena"] / row["memsched"]["arena"]
    row["ratio_total"] = row["default"]["total"] / row["memsched"]["total"]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    row = measure(a.size, a.time_limit)
    print(row["summary"])
    for name in ("default", "memsched"):
        r = row[name]
        print(f"{name:9s} arena {r['arena']:>11,} B  method allocator {r['method_allocator']:>9,} B"
              f"  total {r['total']:>11,} B  (.pte {r['pte_bytes']:,} B)")
    print(f"modelled peak {row['modelled_peak_after']:,} B, report {row['report_planned']:,} B, "
          f"written arena {row['memsched']['arena']:,} B; modelled records "
          f"{row['modelled_records']:,} B, measured method allocator "
          f"{row['memsched']['method_allocator']:,} B")
    print(f"arena {row['ratio_arena']:.2f}x, arena + method allocator {row['ratio_total']:.2f}x;"
          f" outputs {'bit-equal' if row['bit_equal'] else 'differ'} "
          f"(max abs diff {row['max_abs_diff']:.3g})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(row, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

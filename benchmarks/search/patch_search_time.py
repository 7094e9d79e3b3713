"""The patch search at its defaults: seconds, what it chose, and the same answer on a busy
machine (issue 46).

For each model the one search (`memsched.patches.search_model`) runs at the default
`PatchOptions` under its runtime's description, ``--runs`` times, with ``--busy`` processes
burning the other cores during the runs after the first; every run must give the same choice
(regions, grids, total bytes), since the search is bounded by work, not by the clock.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/search/patch_search_time.py \\
        [--models et-mbv2-1.0-224,tvm-mbv2-0.35-96,tflite-mbv2-0.35-144] [--runs 2] [--busy 1]

Models: ``et-NAME`` (a `benchmarks/executorch/executorch_patches.py` model through ExecuTorch's edge
dialect, the portable fp32 flow), ``tvm-NAME`` (a `benchmarks/tvm/patches_tvm.py` Relax model),
``tflite-NAME`` (a `benchmarks/tflite/patches.py` .tflite model; the search only, not the rewrite).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
for _d in ("executorch", "tvm", "tflite"):  # the models of each runtime's patch benchmark
    sys.path.insert(0, os.path.join(HERE, "..", _d))

DEFAULT = "et-mbv2-1.0-224,tvm-mbv2-0.35-96,tflite-mbv2-0.35-144"


def describe(name: str):
    """(Described, Runtime) of a benchmark model."""
    from memsched.patches import Described

    kind, rest = name.split("-", 1)
    if kind == "et":
        import torch
        from executorch.exir import to_edge
        from executorch_patches import build

        from memsched.executorch.patch.describe import describe_graph
        from memsched.executorch.patch.tile import executorch_runtime

        model, x = build(rest)
        with torch.no_grad():
            edge = to_edge(torch.export.export(model, (x,)))
        em = describe_graph(edge.exported_program().graph_module)
        return Described(em.sm, em.graph, em.tensor_index), executorch_runtime(em)
    if kind == "tvm":
        from patches_tvm import build
        from tvm import relax

        from memsched.transform.tile_patches import TVM_RUNTIME
        from memsched.transform.tile_patches_describe import describe_block

        mod, _ = build(rest)
        func = relax.transform.FoldConstant()(mod)["main"]
        block = [b for b in func.body.blocks if isinstance(b, relax.DataflowBlock)][0]
        bm = describe_block(func, block)
        return Described(bm.sm, bm.graph, bm.tensor_index), TVM_RUNTIME
    if kind == "tflite":
        from patches import MODELS

        from memsched.tflite.format.read import read_tflite
        from memsched.tflite.patch.describe import spatial_model
        from memsched.tflite.memory.model import tflm_runtime
        from memsched.tflite.patch.tile import _memory

        tg = read_tflite(MODELS[rest]())
        mem, graph = _memory(tg, True)  # as `memsched tile --offline-plan` (the table's)
        return Described(spatial_model(tg), graph, tg.tensor_index), tflm_runtime(mem)
    raise SystemExit(f"unknown model {name!r} (et-, tvm- or tflite-)")


def _burn(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--busy", type=int, default=1, help="CPU-burning processes after run 1")
    ap.add_argument("--float-reductions", action="store_true",
                    help="PatchOptions(exact_reductions=False): regions through float SE means")
    a = ap.parse_args(argv)
    from memsched.patches import PatchOptions, search_model

    print("| model | ops | seconds (run 1; runs with --busy) | CPU s (run 1) | total (B) | MACs "
          "| regions | priced | same every run |")
    print("|---|---:|---|---:|---:|---:|---|---:|---|")
    for name in a.models.split(","):
        described, runtime = describe(name.strip())
        seen, secs, cpu = [], [], []
        for run in range(a.runs):
            stop, procs = mp.Event(), []
            if run and a.busy:
                procs = [mp.Process(target=_burn, args=(stop,)) for _ in range(a.busy)]
                for p in procs:
                    p.start()
            t0, c0 = time.perf_counter(), time.process_time()
            res = search_model(described, runtime,
                               PatchOptions(exact_reductions=not a.float_reductions))
            secs.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)  # the search is one thread: load-proof
            stop.set()
            for p in procs:
                p.join()
            c = res.choice
            key = (tuple((r.region_start, r.region_ops, r.label) for r in c.sequence),
                   c.total, c.macs) if c is not None else None
            seen.append((key, res.stopped))
        (key, stopped) = seen[0]
        regions = "; ".join(f"{s}-{e - 1} {g}" for s, e, g in key[0]) if key else "none"
        same = all(k == key for k, _ in seen)
        print(f"| {name} | {len(described.sm.ops)} | {secs[0]:.1f}"
              f"{' (' + ', '.join(f'{s:.1f}' for s in secs[1:]) + ')' if secs[1:] else ''} | "
              f"{cpu[0]:.1f} | {key[1] if key else '-':,} | {key[2] if key else '-':,} | "
              f"{regions} | {res.priced} | {'yes' if same else 'NO'}"
              f"{'; stopped by the time limit: ' + stopped if stopped else ''} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

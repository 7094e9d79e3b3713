"""Planned activation bytes: TVM's StaticPlanBlockMemory vs PlanArena vs the liveness peak.

    python -m benchmarks.tvm.plan_arena                       # memsched's example models
    python -m benchmarks.tvm.plan_arena --zoo darts-v2-cifar densenet-121 [--cpsat 30] [--run]
    python -m benchmarks.tvm.plan_arena --zoo --tag hmcos

For each model and binding order (the order the importer emitted; with ``--schedule`` also
memsched's memory-aware order), the model is lowered through `memsched.pipeline` up to memory
planning and measured three ways: the sum of StaticPlanBlockMemory's storages, the arena of
`PlanArena` (greedy; with ``--cpsat S`` also CP-SAT under S seconds), and the liveness peak of
the planned tensors (the arena's lower bound without alignment). ``--run`` also compiles both
plans, runs them in the VM and checks the outputs are bit-equal.
"""
from __future__ import annotations

import argparse
import sys
import time


def _models(args):
    if args.zoo is None:
        from memsched.generators.examples import example_model

        for name in ("two_branch", "nas_cell", "randwire"):
            for emit in ("bfs", "dfs"):
                yield f"{name}/{emit}", (lambda n=name, e=emit: example_model(n, emit=e))
        yield "randwire24/dfs", (lambda: example_model("randwire", emit="dfs", seed=2, nodes=24))
        return
    sys.path.insert(0, ".")
    from benchmarks.zoo import build_relax, names

    nets = args.zoo or names(args.tag)
    for n in nets:
        yield n, (lambda n=n: build_relax(n, fold_bn=True))


def _measure(mod, schedule: bool, cpsat: float | None, run: bool):
    import numpy as np
    import tvm
    from tvm import relax

    from memsched.relax_pipeline import pipeline, pipeline_passes
    from memsched.transform.plan_arena import PlanArena
    from memsched.tvm_memory import storage_sizes

    with tvm.target.Target("llvm"):
        planned = tvm.transform.Sequential(
            pipeline_passes(schedule=schedule, stop_after_planning=True, plan_arena=False))(mod)
    row = {"tvm": sum(storage_sizes(planned))}
    t0 = time.perf_counter()
    g = PlanArena()
    packed = g(planned)
    row["greedy_s"] = time.perf_counter() - t0
    res = g.results.get("main")
    row["greedy"] = sum(storage_sizes(packed))
    row["live"] = res.live_peak if res else row["tvm"]
    row["lb"] = res.lower_bound if res else row["tvm"]
    row["tensors"] = res.tensors if res else 0
    if cpsat is not None:
        t0 = time.perf_counter()
        c = PlanArena(method="cpsat", time_limit=cpsat)
        row["cpsat"] = sum(storage_sizes(c(planned)))
        row["cpsat_s"] = time.perf_counter() - t0
        cres = c.results.get("main")
        row["lb"] = cres.lower_bound if cres else row["lb"]
        row["optimal"] = bool(cres.optimal) if cres else True
    if run:
        rng = np.random.default_rng(0)
        args = [tvm.runtime.tensor(rng.standard_normal([int(d) for d in p.ty.shape.values])
                                   .astype(str(p.ty.dtype))) for p in mod["main"].params]
        outs = []
        for arena in (False, True):
            ex = tvm.compile(mod, target="llvm",
                             relax_pipeline=pipeline(schedule=schedule, plan_arena=arena))
            r = relax.VirtualMachine(ex, tvm.cpu())["main"](*args)
            outs.append([r.numpy()] if hasattr(r, "numpy") else [x.numpy() for x in r])
        row["equal"] = all(np.array_equal(a, b) for a, b in zip(*outs))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zoo", nargs="*", default=None, help="zoo networks (none: all of --tag)")
    ap.add_argument("--tag", default=None, help="zoo tag when --zoo has no names")
    ap.add_argument("--schedule", action="store_true", help="also memsched's reorder")
    ap.add_argument("--cpsat", type=float, default=None, metavar="S",
                    help="also CP-SAT with S seconds per function")
    ap.add_argument("--run", action="store_true", help="compile, run, compare outputs")
    args = ap.parse_args(argv)

    def kib(b):
        return f"{b / 1024:,.0f}"

    hdr = ["model", "order", "tensors", "TVM KiB", "arena KiB", "x"]
    if args.cpsat is not None:
        hdr += ["CP-SAT KiB", "opt", "CP-SAT s"]
    hdr += ["live KiB", "TVM/live", "arena/live", "greedy s"]
    if args.run:
        hdr.append("bit-equal")
    print(" | ".join(hdr))
    for name, build in _models(args):
        t0 = time.perf_counter()
        mod = build()
        build_s = time.perf_counter() - t0
        for schedule in ((False, True) if args.schedule else (False,)):
            r = _measure(mod, schedule, args.cpsat, args.run)
            best = min(r["greedy"], r.get("cpsat", r["greedy"]))
            cells = [name, "memsched" if schedule else "input", str(r["tensors"]),
                     kib(r["tvm"]), kib(r["greedy"]), f"{r['tvm'] / max(best, 1):.2f}"]
            if args.cpsat is not None:
                cells += [kib(r["cpsat"]), "yes" if r["optimal"] else "no",
                          f"{r['cpsat_s']:.1f}"]
            cells += [kib(r["live"]), f"{r['tvm'] / max(r['live'], 1):.2f}",
                      f"{best / max(r['live'], 1):.3f}", f"{r['greedy_s']:.2f}"]
            if args.run:
                cells.append(str(r["equal"]))
            print(" | ".join(cells), flush=True)
        print(f"  ({name}: built in {build_s:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

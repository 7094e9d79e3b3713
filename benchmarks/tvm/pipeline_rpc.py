"""Pipelined TVM over RPC: zoo networks cut into k = 2..4 stages, one local server per stage.

    python -m benchmarks.tvm.pipeline_rpc                                   # default networks
    python -m benchmarks.tvm.pipeline_rpc --zoo resnet-50 densenet-121 --k 2 3 4 -n 8
    python -m benchmarks.tvm.pipeline_rpc --zoo darts-v2-cifar --methods auto param-balanced \\
        --json out.json

For every network: import (zoo, folded BN), build the unsplit model once and run it on one
server (``TVM_NUM_THREADS=1``): outputs and single-VM throughput. Then for every k and cut
method (``auto``: the certified lexicographic (P, O, C) optimum of `memsched.partition`;
``param-balanced``: the Edge TPU compiler's rule; ``flops-balanced``: equal estimated
operation counts per stage, a CPU reference that ignores P/O/C), `PartitionPipeline` cuts
``main``, every stage is built on its own and served by its own local server, N inputs are
streamed through the stages with the host relaying tensors, and every output is compared with
the unsplit build's (bit-equal expected). Printed per row: the cut (P, O, C in MiB, proven?),
pipelined throughput (n / total time, and steady state: outputs per second once the k stages
are full), speedup over one VM, per-stage compute + transfer seconds while streaming,
and each stage's seconds for one input with nothing overlapping ("alone": what the stage costs
without contention). On this 2-core machine k servers share 2 cores with the host: at most ~2x.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

DEFAULT = ("resnet-50", "densenet-121", "darts-v2-cifar", "nasnet-a-cifar", "mobilenet-v2")


def _mib(b) -> str:
    return f"{b / 2**20:.2f}"


def bench_network(name, mod, pool, ks, methods, n, sram, seed=0, log=print):
    import tvm

    from memsched.cli.pipeline import build_stages, random_inputs
    from memsched.runtime.rpc_pipeline import (Stage, compare_outputs, run_pipeline,
                                               run_single)
    from memsched.transform.partition_pipeline import (PartitionPipeline,
                                                       flops_balanced_assignment,
                                                       pipeline_report)

    inputs = random_inputs(mod["main"], n, seed)
    t0 = time.perf_counter()
    full = tvm.compile(mod, target="llvm")
    log(f"  {name}: unsplit build {time.perf_counter() - t0:.1f} s")
    ref_outs, single = run_single(Stage(full, "main"), pool.session(0), inputs)
    log(f"  {name}: one VM {single:.3f} inputs/s")
    rows = []
    for k in ks:
        for method in methods:
            t0 = time.perf_counter()
            if method == "flops-balanced":  # a CPU reference cut, not an Edge TPU objective
                cut = flops_balanced_assignment(mod["main"], k)
                new = PartitionPipeline(k, sram_bytes=sram, assignment=cut)(mod)
            else:
                new = PartitionPipeline(k, sram_bytes=sram, method=method)(mod)
            rep = pipeline_report(new)
            solve_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            stages = build_stages(new)
            build_s = time.perf_counter() - t0
            res = run_pipeline(stages, pool, inputs)
            equal, diff = compare_outputs(res.outputs, ref_outs)
            slow = max(range(k), key=lambda j: res.stage_times[j].latency)
            row = {
                "network": name, "k": k, "method": method, "bindings": len(rep["assignment"]),
                "P": rep["P"], "O": rep["O"], "C": rep["C"], "optimal": rep["optimal"],
                "lower_bounds": rep["lower_bounds"], "m": rep["m"], "c": rep["c"],
                "solve_s": round(solve_s, 3), "build_s": round(build_s, 2),
                "n": n, "outputs_equal": equal, "max_abs_diff": diff,
                "throughput_per_s": res.throughput_per_s, "single_vm_per_s": single,
                "speedup": res.throughput_per_s / single,
                "steady_per_s": res.steady_per_s,
                "steady_speedup": (res.steady_per_s or 0) / single,
                "stage_latency_s": res.stage_latency_s,
                "stage_compute_s": [t.mean("compute") for t in res.stage_times],
                "stage_transfer_s": [t.mean("upload") + t.mean("download")
                                     for t in res.stage_times],
                "slowest_stage": slow,
                "stage_sequential_s": res.sequential_s,
            }
            rows.append(row)
            log(f"  {name} k={k} {method}: P={_mib(row['P'])} O={_mib(row['O'])} "
                f"C={_mib(row['C'])} MiB{' (proven)' if row['optimal'] else ''}, "
                f"{row['throughput_per_s']:.3f}/s = {row['speedup']:.2f}x one VM, "
                f"equal={equal}, stage latency "
                f"{'/'.join(f'{x:.2f}' for x in row['stage_latency_s'])} s")
    return rows


def print_table(rows) -> None:
    head = ("network", "k", "cut", "P MiB", "O MiB", "C MiB", "proven", "equal",
            "pipelined /s", "steady /s", "one VM /s", "speedup (steady)",
            "stage latency s (compute+transfer)",
            "stages alone s")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        lat = " / ".join(f"{c:.2f}+{t:.2f}" for c, t in zip(r["stage_compute_s"],
                                                            r["stage_transfer_s"]))
        print(f"| {r['network']} | {r['k']} | {r['method']} | {_mib(r['P'])} | "
              f"{_mib(r['O'])} | {_mib(r['C'])} | {'yes' if r['optimal'] else 'no'} | "
              f"{'yes' if r['outputs_equal'] else 'NO'} | {r['throughput_per_s']:.3f} | "
              f"{r['steady_per_s'] or 0:.3f} | {r['single_vm_per_s']:.3f} | "
              f"{r['speedup']:.2f}x ({r['steady_speedup']:.2f}x) | {lat} | "
              f"{' / '.join(f'{x:.2f}' for x in r.get('stage_sequential_s', []))} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", nargs="*", default=list(DEFAULT), help="zoo network names")
    ap.add_argument("--k", nargs="*", type=int, default=[2, 3, 4], help="stage counts")
    ap.add_argument("--methods", nargs="*", default=["auto", "param-balanced"],
                    help="auto, param-balanced, any memsched.partition method, flops-balanced")
    ap.add_argument("-n", type=int, default=8, help="inputs streamed per run (default 8)")
    ap.add_argument("--sram", type=int, default=8 << 20, help="SRAM bytes (default 8 MiB)")
    ap.add_argument("--image-size", type=int, help="override the input size of every net")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args(argv)
    sys.path.insert(0, ".")
    from benchmarks.zoo import build_relax

    from memsched.runtime.rpc_servers import ServerPool

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    rows = []
    with ServerPool(local=max(args.k)) as pool:
        for name in args.zoo:
            t0 = time.perf_counter()
            kw = {"image_size": args.image_size} if args.image_size else {}
            mod = build_relax(name, fold_bn=True, **kw)
            log(f"{name}: imported in {time.perf_counter() - t0:.1f} s")
            rows += bench_network(name, mod, pool, args.k, args.methods, args.n, args.sram,
                                  log=log)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(rows, f, indent=1)
    print_table(rows)
    return 0 if all(r["outputs_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

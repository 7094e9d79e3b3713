"""Certified order under ExecuTorch's lifetimes: seconds of search per zoo network.

For each network of ``benchmarks.zoo``: ``torch.export`` -> ``to_edge`` -> ``to_executorch``
with `memsched.executorch.backend_config()`; the `ProgramModel` the planning pass builds (the
graph after ``ToOutVarPass``: out-variant allocations, views, ``getitem`` s, inclusive
lifetimes) is captured and scheduled again, timed alone, with memsched's ``auto`` scheduler
(``--time-limit``, default 10 s). Prints ops, fused ops, the peak, the proven lower bound,
proven or not, the search's seconds (median of ``--repeat`` runs) and which A* kernel ran (the
C++ one is loaded before timing; ``python`` means libmemsched_native is not built here, and
the figures are then not comparable). ``--as-built-before`` also times the graph with the
edges the model had before issue 41 (the inputs pseudo op before every op, the output op after
every op); the scheduler now drops such implied edges itself (`memsched.simplify.edges`), so
the two search the same problem. ``--save DIR`` pickles each captured graph (``NAME.fx.pkl``,
``NAME.pte.pkl``) to time other versions of the scheduler on them. ``--pte`` also builds the
graph the ``.pte`` commands search (`memsched.executorch.pte.plan_graph` on the program
ExecuTorch's default config writes) and times it the same way: its optimum must be the FX
graph's (the two are one problem).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/executorch/executorch_proof.py \
        [--models a,b] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", ".."))


def capture(name: str, pte: bool = False):
    """The op graph of ``name``'s forward method under ExecuTorch's memory model (with
    ``pte``: also the ``.pte`` graph of the default config's program, else None)."""
    import torch
    from executorch.exir import to_edge

    import memsched.executorch as mx
    import memsched.executorch.plan.reorder as reorder
    from benchmarks import zoo

    caught = {"pte": None}
    original = reorder.schedule_model

    def keep(model, time_limit=10.0):
        caught["graph"] = model.graph
        return original(model, time_limit=0.2)

    reorder.schedule_model = keep
    try:
        model, x = zoo.build_torch(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            to_edge(torch.export.export(model, (x,))).to_executorch(
                mx.backend_config(time_limit=0.2))
        if pte:
            from memsched.executorch.memory.liveness import plan_graph
            from memsched.executorch.format.read import read_program

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                buf = to_edge(torch.export.export(model, (x,))).to_executorch().buffer
            caught["pte"] = plan_graph(read_program(buf).program.execution_plan[0])[0]
    finally:
        reorder.schedule_model = original
    return caught["graph"], caught["pte"]


def with_all_edges(graph):
    """``graph`` with the inputs pseudo op (op 0) before every op and every op before the
    output op (the last), as the model was built before."""
    from memsched.graph import GraphBuilder

    b = GraphBuilder(graph.name)
    tmap = {t: b.input(graph.tensors[t].name, graph.tensors[t].nbytes)
            for t in graph.input_tensors}
    last = len(graph.ops) - 1
    for v, op in enumerate(graph.ops):
        data = {graph.tensors[t].producer for t in op.inputs}
        extra = [p for p in op.preds if p not in data]
        extra += [0] if v > 0 else []
        extra += list(range(last)) if v == last else []
        vid = b.op(op.name, op.kind, [tmap[t] for t in op.inputs],
                   [(graph.tensors[t].name, graph.tensors[t].nbytes) for t in op.outputs],
                   alias=op.alias, source=op.source, extra_preds=sorted(set(extra) - {v}))
        for t, nt in zip(op.outputs, b.ops[vid].outputs):
            tmap[t] = nt
    for t in graph.output_tensors:
        b.mark_output(tmap[t])
    return b.build()


def solve(graph, time_limit: float, repeat: int) -> dict:
    from memsched.executorch.memory.model import EXECUTORCH_MODEL
    from memsched.schedulers import schedule

    secs, s = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        s = schedule(graph, "auto", EXECUTORCH_MODEL, time_limit=time_limit)
        secs.append(time.perf_counter() - t0)
    return {"peak": int(s.peak), "bound": int(s.lower_bound), "proven": bool(s.optimal),
            "seconds": round(statistics.median(secs), 3), "fused": s.stats.get("fused_ops") or "-",
            "kernel": s.stats.get("astar_kernel") or "-"}


def main(argv=None) -> int:
    from benchmarks import zoo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(zoo.names()))
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--as-built-before", action="store_true")
    ap.add_argument("--pte", action="store_true", help="also the .pte commands' graph")
    ap.add_argument("--save", default=None, help="directory to pickle the graphs to")
    args = ap.parse_args(argv)
    from memsched.native import available

    available()  # the native kernel's first load is not timed

    head = "| network | ops | fused | peak (B) | bound (B) | proven | search s | A* |"
    rule = "|---|---:|---:|---:|---:|---|---:|---|"
    if args.as_built_before:
        head += " before: peak (B) | proven | search s |"
        rule += "---:|---|---:|"
    if args.pte:
        head += " .pte: ops | peak (B) | proven | search s |"
        rule += "---:|---:|---|---:|"
    print(head)
    print(rule)
    for name in args.models.split(","):
        g, pg = capture(name, args.pte)
        if args.save:
            import pickle

            os.makedirs(args.save, exist_ok=True)
            for kind, graph in (("fx", g), ("pte", pg)):
                if graph is not None:
                    with open(os.path.join(args.save, f"{name}.{kind}.pkl"), "wb") as f:
                        pickle.dump(graph, f)
        r = solve(g, args.time_limit, args.repeat)
        line = (f"| {name} | {len(g.ops)} | {r['fused']} | {r['peak']:,} | {r['bound']:,} | "
                f"{'yes' if r['proven'] else 'no'} | {r['seconds']} | {r['kernel']} |")
        if args.as_built_before:
            o = solve(with_all_edges(g), args.time_limit, 1)
            line += f" {o['peak']:,} | {'yes' if o['proven'] else 'no'} | {o['seconds']} |"
        if pg is not None:
            o = solve(pg, args.time_limit, args.repeat)
            same = "" if not (o["proven"] and r["proven"]) or o["peak"] == r["peak"] \
                else " (optimum differs!)"
            line += (f" {len(pg.ops)} | {o['peak']:,}{same} | {'yes' if o['proven'] else 'no'}"
                     f" | {o['seconds']} |")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

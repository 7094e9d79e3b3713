"""Ablation of the whole-network techniques (like Table IV of Zhong et al., ICCAD 2023).

Per graph: ops, ops after fusion (`memsched.simplify`), CP-SAT variables (the paper's count
``V`` of Eq. 1-10 with and without topology-aware pruning, on the original and the fused
problem), and the time each configuration needs to *prove* the optimum (``>T`` when it did
not within the time limit, with the remaining gap), then the best peak, the best lower bound
and whether it is optimal. Configurations:

* ``exact``: the best-first search alone (with divide-and-conquer at cut points);
  ``exact-native``: the same in C++ (when libmemsched_native is built);
* ``ilp``: CP-SAT alone (per segment); ``ilp+fuse``: CP-SAT on the fused problem;
* ``auto``: everything (fusion, cut points, HMCOS, A*, CP-SAT); ``no-fuse``, ``no-divide``,
  ``no-hmcos``, ``no-astar``, ``no-cpsat``: auto without that stage;
* ``no-branchcut``: auto without the branching min-cut bound; ``no-new-bounds``: auto with the
  trivial bound only (no ancestry, min-cut or branching bounds, `memsched.schedulers.bounds`);
* ``btsearch``, ``hmcos``, ``ilp-part``: peaks of the other schedulers (not proofs).

``--bounds`` prints the lower-bound ablation instead: per graph, the best known peak (``auto``)
and the global lower bound of each search-free technique on the fused segments (trivial,
ancestry, min-cut, branching min-cut with ``--time-limit`` per graph), with seconds.

    .venv/bin/python benchmarks/search/ablation.py                  # synthetic cells (fast)
    .venv/bin/python benchmarks/search/ablation.py --cells large --time-limit 60
    .venv/bin/python benchmarks/search/ablation.py --zoo nasnet-a-mobile hrnet-w18-small-v1
    .venv/bin/python benchmarks/search/ablation.py --zoo-tag ilp --segments  # every segment optimal
    .venv/bin/python benchmarks/search/ablation.py --bounds --cells large --random 32:2 32:3

``--zoo`` builds networks of `benchmarks.zoo` (torch.export -> Relax, ~30-60 s each; cached as
pickled OpGraphs in out/zoo_cache/) and imports them with
``memsched.importers.relax.from_relax(benchmarks.zoo.build_relax(name, fold_bn=True))``
(``--no-fold-bn``: batch norms kept, as in benchmarks/tvm/run.py).
``--segments`` asks for every segment's own optimum (on ImageNet networks the global peak is
usually in the stem, proven by the trivial bound alone). ``--model`` picks the memory model
(``tvm`` default, ``paper``). One configuration runs at a time (single-threaded CP-SAT).
"""
from __future__ import annotations

import argparse
import os
import pickle
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, ROOT)

from memsched.memory import Problem  # noqa: E402
from memsched.schedulers.base import run, trivial_bound  # noqa: E402
from memsched.schedulers.ilp import count_variables  # noqa: E402
from memsched.simplify import simplify  # noqa: E402

CONFIGS = {
    # name: (algorithm, options, proves)
    "exact": ("exact", {}, True),
    "exact-native": ("exact_native", {}, True),
    "ilp": ("ilp", {}, True),
    "ilp+fuse": ("ilp", {"_fused": True}, True),
    "auto": ("auto", {}, True),
    "no-fuse": ("auto", {"fuse": False}, True),
    "no-divide": ("auto", {"divide": False}, True),
    "no-hmcos": ("auto", {"hmcos": False}, True),
    "no-astar": ("auto", {"astar_search": False}, True),
    "no-cpsat": ("auto", {"cpsat": False}, True),
    "no-branchcut": ("auto", {"branch_share": 0.0}, True),
    "no-new-bounds": ("auto", {"strong_bounds": False}, True),
    "btsearch": ("btsearch", {}, True),
    "hmcos": ("hmcos", {}, False),
    "ilp-part": ("ilp-partition", {}, False),
}
DEFAULT = ["exact", "ilp", "ilp+fuse", "auto", "no-fuse", "no-divide", "no-hmcos", "no-cpsat",
           "no-branchcut", "no-new-bounds", "btsearch", "hmcos"]


def bound_row(name: str, p: Problem, time_limit: float, native: bool | None) -> list[str]:
    """The lower-bound ablation row: best peak (auto) and each bound with its seconds."""
    from memsched.limits import Deadline
    from memsched.schedulers.bounds import ancestry_bound, branch_cut_bound, mincut_bound
    from memsched.schedulers.exact import cut_segments
    from memsched.schedulers.heuristics import best_heuristic

    order, _, _, _ = run(p, "auto", time_limit=time_limit, native=native)
    peak = p.evaluate(order).peak
    q = simplify(p).problem
    before = 0
    subs = []
    for seg in cut_segments(q):
        sub, _ = q.restrict(seg, before)
        before |= sum(1 << v for v in seg)
        subs.append(sub)
    cols = [name, str(p.n), str(q.n), f"{peak:,}"]
    for label, fn in (("trivial", trivial_bound), ("ancestry", ancestry_bound),
                      ("mincut", mincut_bound)):
        t = time.perf_counter()
        b = max((fn(s) for s in subs), default=0)
        cols.append(f"{b:,} ({time.perf_counter() - t:.2f} s)")
    # branching: the segments whose min-cut bound is below the peak, time shared among them
    t = time.perf_counter()
    d = Deadline(time_limit)
    b = max((mincut_bound(s) for s in subs), default=0)
    open_ = [s for s in subs if best_heuristic(s)[1] > b]
    for i, s in enumerate(open_):
        lb, _, _ = branch_cut_bound(s, peak, d.share(1 / (len(open_) - i)))
        b = max(b, lb)
    cols.append(f"{b:,} ({time.perf_counter() - t:.2f} s)")
    cols.append("yes" if b >= peak else "no")
    return cols


def zoo_graph(name: str, cache_dir: str, fold_bn: bool = True):
    path = os.path.join(cache_dir, f"{name}{'' if fold_bn else '.nofold'}.pkl")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    from benchmarks import zoo
    from memsched.importers.relax import from_relax

    t = time.perf_counter()
    g = from_relax(zoo.build_relax(name, fold_bn=fold_bn))
    os.makedirs(cache_dir, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(g, f)
    print(f"<!-- built {name}: {len(g)} ops in {time.perf_counter() - t:.0f} s -->", flush=True)
    return g


def run_config(p: Problem, fused: Problem, name: str, time_limit: float, segments: bool,
               native: bool):
    algo, opts, proves = CONFIGS[name]
    opts = dict(opts)
    prob = fused if opts.pop("_fused", False) else p
    if algo == "auto":
        opts["native"] = native
        opts["segment_optimal"] = segments
    t0 = time.perf_counter()
    order, lb, optimal, stats = run(prob, algo, time_limit=time_limit, **opts)
    dt = time.perf_counter() - t0
    peak = prob.evaluate(order).peak
    lb = min(max(lb, trivial_bound(prob)), peak)
    if segments and algo == "auto":
        optimal = stats.get("segments_proven", 0) == stats.get("segments", -1)
    else:
        optimal = optimal or lb >= peak
    return {"peak": peak, "lb": lb, "optimal": optimal and proves, "seconds": dt,
            "stats": stats}


def fmt_time(r, time_limit):
    if r is None:
        return "-"
    if r["optimal"]:
        return f"{r['seconds']:.2f}"
    gap = (r["peak"] - r["lb"]) / r["peak"] if r["peak"] else 0.0
    return f">{time_limit:g} ({100 * gap:.1f}%)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", choices=["small", "large", "none"], default="small")
    ap.add_argument("--zoo", nargs="*", default=[])
    ap.add_argument("--zoo-tag", default=None, help="all zoo networks with this tag")
    ap.add_argument("--model", default="tvm")
    ap.add_argument("--time-limit", type=float, default=30.0)
    ap.add_argument("--configs", nargs="*", default=DEFAULT, choices=list(CONFIGS))
    ap.add_argument("--segments", action="store_true",
                    help="prove every segment's own optimum (runs the auto configurations only)")
    ap.add_argument("--native", choices=["off", "on", "auto"], default="off",
                    help="C++ A* kernel in the auto configurations: off (default: Python only, "
                         "a clean ablation), on, or auto (auto's own policy)")
    ap.add_argument("--no-fold-bn", action="store_true",
                    help="keep batch norms separate (benchmarks/tvm/run.py's graphs)")
    ap.add_argument("--cache", default=os.path.join(ROOT, "out", "zoo_cache"))
    ap.add_argument("--bounds", action="store_true",
                    help="the lower-bound ablation table (see module docstring)")
    ap.add_argument("--random", nargs="*", default=[], metavar="NODES:SEED",
                    help="add memsched.generators.examples randwire graphs, e.g. 32:2")
    args = ap.parse_args(argv)

    if args.segments:
        args.configs = [c for c in args.configs if CONFIGS[c][0] == "auto"]
    graphs = []
    if args.cells != "none":
        from memsched.generators.cell_graphs import cell_suite

        graphs += list(cell_suite(args.cells).items())
    names = list(args.zoo)
    if args.zoo_tag:
        from benchmarks import zoo

        names += [n for n in zoo.names(args.zoo_tag) if n not in names]
    for name in names:
        graphs.append((name, zoo_graph(name, args.cache, not args.no_fold_bn)))
    for spec in args.random:
        from memsched.generators.examples import example_onnx
        from memsched.importers.onnx import from_onnx

        nodes, seed = (int(x) for x in spec.split(":"))
        graphs.append((f"randwire(nodes={nodes}, seed={seed})",
                       from_onnx(example_onnx("randwire", seed=seed, nodes=nodes))))
    if args.bounds:
        native = {"off": False, "on": True, "auto": None}[args.native]
        print(f"<!-- memory model {args.model}, auto and branching limited to "
              f"{args.time_limit:g} s each; global lower bounds over the fused segments -->")
        cols = ["graph", "ops", "fused", "best peak (auto)", "trivial", "ancestry", "min-cut",
                "branching min-cut", "proves"]
        print("| " + " | ".join(cols) + " |")
        print("|" + "|".join("---" for _ in cols) + "|")
        for name, g in graphs:
            p = Problem.from_graph(g, args.model)
            print("| " + " | ".join(bound_row(name, p, args.time_limit, native)) + " |",
                  flush=True)
        return 0

    cols = ["graph", "ops", "fused", "V", "V pruned", "V fused"]
    cols += [f"T {c}" for c in args.configs] + ["peak", "lower bound", "optimal"]
    print(f"<!-- memory model {args.model}, time limit {args.time_limit:g} s per "
          f"configuration{', every segment' if args.segments else ''}, native A* in auto: "
          f"{args.native}; T: seconds to prove optimality, >limit (gap) otherwise -->")
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    for name, g in graphs:
        p = Problem.from_graph(g, args.model)
        simp = simplify(p)
        q = simp.problem
        row = [name, str(p.n), str(q.n), str(count_variables(p, prune=False)),
               str(count_variables(p)), str(count_variables(q))]
        best_peak, best_lb, proven = None, 0, False
        for c in args.configs:
            native = {"off": False, "on": True, "auto": None}[args.native]
            r = run_config(p, q, c, args.time_limit, args.segments, native)
            row.append(fmt_time(r, args.time_limit) if CONFIGS[c][2] else
                       f"{r['seconds']:.2f} (peak {r['peak']})")
            best_peak = r["peak"] if best_peak is None else min(best_peak, r["peak"])
            best_lb = max(best_lb, r["lb"])
            proven = proven or r["optimal"]
        row += [str(best_peak), str(min(best_lb, best_peak)),
                "yes" if best_lb >= best_peak else "no"]
        print("| " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

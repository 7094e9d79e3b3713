"""Memory banks (issue 59): the fast bank's share of the activation traffic, memsched against
ExecuTorch's ``banked_memory_planning_pass``, on the emulated Cortex-M55.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/executorch/executorch_banks.py
        [--models mobilenet_v1_025,mbv2bn-0.35-144,resnet8] [--fractions 0.5,0.25]
        [--slowdowns 1.1,none] [--no-board] [--json out.json]

Each model int8 through the Cortex-M flow (the M55's MVE export, `executorch_cortex_m.edge_int8`),
the caller's input (``alloc_graph_input=False``). Maps: a fast bank ("dtcm", mem_id 1) of each
fraction of ExecuTorch's default arena, and an 8 MiB slow bank ("sram", mem_id 2). Rows:

* ``executorch``: ``banked_memory_planning_pass(map)`` (largest buffer first into the fastest
  bank with room);
* ``memsched``: ``backend_config(memory_map=map)`` (the certified order, the fast bank's traffic
  first, the exact packer per bank);
* ``memsched+patches``: ``backend_config(memory_map=map, tile_patches=True, share_values=True)``
  at the default ``max_slowdown`` (1.10): the search prefers plans that fit the fast bank.

Columns: bytes per bank, the fast bank's traffic share as the written file says it
(`memsched analyze X.pte --json`: ``fast_bank_traffic_share``; a planned tensor's traffic is its
bytes x (1 + the kernel calls that read it)), the proven bound on memsched's fast traffic, and
the board: outputs bit-equal to ExecuTorch's default program, instructions per execute against
it. QEMU has no timing model: the share is the measure, not time.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))

MODELS = ("mobilenet_v1_025", "mbv2bn-0.35-144", "resnet8")


def _lower(edge, config) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return copy.deepcopy(edge).to_executorch(config).buffer


def _banks(program: bytes, mm) -> dict:
    from memsched.executorch.format.read import read_program
    from memsched.executorch.plan.pte_banks import bank_rows
    from memsched.executorch.memory.liveness import plan_graph

    plan = read_program(program).program.execution_plan[0]
    _, info = plan_graph(plan, 16)
    return bank_rows(plan, info, [(b.name, b.size, b.mem_id) for b in mm.banks])


def rows_of(name: str, fractions, on_board: bool, slowdowns=(1.1,)) -> list[dict]:
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.banked_memory_planning import (Bank, TargetMemoryMap,
                                                        banked_memory_planning_pass)
    from executorch.exir.passes import MemoryPlanningPass

    import memsched.executorch as mx
    from executorch_cortex_m import edge_int8
    from time_budget import _et_build

    model, shape = _et_build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge, x = edge_int8(copy.deepcopy(model), shape, 4, None)
    default = _lower(edge, ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False)))
    from memsched.executorch.format.read import planned_sizes

    arena = sum(next(iter(planned_sizes(default).values()))[1:])
    base = _board(default, x, f"{name}-default") if on_board else None
    rows = []
    for frac in fractions:
        mm = TargetMemoryMap([Bank("dtcm", int(arena * frac) // 16 * 16, 1),
                              Bank("sram", 8 << 20, 2)])
        plans = [("executorch", ExecutorchBackendConfig(
            memory_planning_pass=banked_memory_planning_pass(mm, alloc_graph_input=False)))]
        plans.append(("memsched", mx.backend_config(memory_map=mm, alloc_graph_input=False)))
        for slow in slowdowns:
            label = "memsched+patches" + ("" if slow == 1.1 else
                                          f" (max_slowdown={slow})")
            plans.append((label, mx.backend_config(
                memory_map=mm, alloc_graph_input=False, tile_patches=True, share_values=True,
                max_slowdown=slow)))
        for planner, cfg in plans:
            row = {"model": name, "fraction": frac, "fast_bytes": mm.banks[0].size,
                   "default_arena": arena, "planner": planner}
            try:
                program = _lower(edge, cfg)
            except Exception as e:  # noqa: BLE001 -- a planner that cannot place: say so
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                rows.append(row)
                _progress(row)
                continue
            if planner.startswith("memsched+patches"):
                program = mx.share_values(program)[0]
            if planner.startswith("memsched"):
                (rep,) = mx.report(cfg).values()
                row["bound_share"] = round(rep.banks[0].traffic_bound /
                                           max(1, sum(b.traffic for b in rep.banks)), 4)
                row["report_share"] = round(rep.fast_share(), 4)
                if rep.patches is not None:
                    row["patches"] = rep.patches.summary().split(", MACs")[0] \
                        if rep.patches.patched else "unpatched"
            b = _banks(program, mm)
            row["bytes"] = [r["bytes"] for r in b["banks"]]
            row["share"] = b["fast_bank_traffic_share"]
            if on_board and base is not None:
                m = _board(program, x, f"{name}-{frac}-{planner}")
                row["equal"] = m.get("outputs") == base.get("outputs") and m["status"] == 0
                if base.get("instructions") and m.get("instructions"):
                    row["instructions"] = round(m["instructions"] / base["instructions"], 3)
            rows.append(row)
            _progress(row)
    return rows


def _board(program: bytes, x, tag: str) -> dict:
    from memsched import board

    work = Path(tempfile.mkdtemp(prefix=f"banks-{tag}-"))
    res, outs = board.run_pte(program, [x], work)
    return {"status": res.get("status"), "outputs": outs,
            "instructions": res.get("execute_instructions")}


def _progress(r: dict) -> None:
    print(f"  {r['model']} {r['fraction']} {r['planner']}: "
          f"{r.get('error') or (r['bytes'], r['share'], r.get('equal'))}", file=sys.stderr,
          flush=True)


def table(rows) -> str:
    out = ["| model | fast bank | planner | bytes per bank (dtcm, sram) | fast share | "
           "bound | board: bit-equal, instructions |",
           "|---|---:|---|---|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['fast_bytes']:,} B ({r['fraction']:.0%}) | "
                       f"{r['planner']} | {r['error']} | | | |")
            continue
        board = "" if "equal" not in r else \
            f"{'yes' if r['equal'] else 'NO'}, {r.get('instructions', '?')}x"
        patches = f" ({r['patches']})" if r.get("patches") else ""
        out.append(f"| {r['model']} | {r['fast_bytes']:,} B ({r['fraction']:.0%}) | "
                   f"{r['planner']}{patches} | {', '.join(f'{b:,}' for b in r['bytes'])} | "
                   f"{r['share']:.1%} | {r['bound_share']:.1%} |" if 'bound_share' in r else
                   f"| {r['model']} | {r['fast_bytes']:,} B ({r['fraction']:.0%}) | "
                   f"{r['planner']} | {', '.join(f'{b:,}' for b in r['bytes'])} | "
                   f"{r['share']:.1%} | |")
        out[-1] += f" {board} |"
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--fractions", default="0.5,0.25")
    ap.add_argument("--slowdowns", default="1.1",
                    help="max_slowdown of the patched rows (none: no bound)")
    ap.add_argument("--no-board", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    rows = []
    for name in a.models.split(","):
        rows += rows_of(name, [float(f) for f in a.fractions.split(",")], not a.no_board,
                        [None if v == "none" else float(v) for v in a.slowdowns.split(",")])
    print(table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

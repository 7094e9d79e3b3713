"""Where a Cortex-M program's instructions go, per operator, on the emulated Cortex-M55.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/executorch/executorch_instructions.py
        [--models mobilenet_v1_025,resnet8] [--planned] [--predicted]

For each model (the int8 Cortex-M flow of `executorch_cortex_m.py`, the M55's MVE export):
ExecuTorch's default program and memsched's (``backend_config(tile_patches=True,
share_values=True)``, written with `memsched.executorch.share_values`), with the caller's
input (``--planned``: the input in the arena). Each program runs on the board
(`memsched.board`) once per prefix of its instruction chain: the chain cut after instruction
``k`` executes exactly the program's first ``k`` instructions (the counts are deterministic),
so the difference between two prefixes is what instruction ``k`` costs. Prints, per operator,
the calls and the ``execute`` instructions they take in each program on the board, beside
memsched's prediction for the same calls (`memsched.executorch.memory.instructions`, per
instruction of the written program; its total adds the runtime's fixed cost per execute)
(docs/executorch_patches.md, "Where the instructions go"). One board run per instruction:
about a minute for MLPerf MobileNetV1-0.25 (31 + ~150 runs); MobileNetV2 @224 takes an hour.
``--predicted``: memsched's prediction alone, per operator (no board; seconds a model, any
model of `time_budget.py`, ``mbv2bn-0.35-144`` too).
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import warnings
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))


def programs(name: str, planned: bool) -> tuple[dict, object]:
    """({"default": bytes, "memsched": bytes}, the example input) for model ``name``."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    import executorch_cortex_m as ecm
    import memsched.executorch as mx

    from time_budget import _et_build

    model, shape = _et_build(name)  # ecm.build's models and executorch_patches' mbv2bn-*
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge, x = ecm.edge_int8(copy.deepcopy(model), shape, 4, None)
        base = copy.deepcopy(edge).to_executorch(ExecutorchBackendConfig(
            memory_planning_pass=MemoryPlanningPass(alloc_graph_input=planned)))
        ours = copy.deepcopy(edge).to_executorch(mx.backend_config(
            tile_patches=True, alloc_graph_input=planned, share_values=True))
    return {"default": base.buffer, "memsched": mx.share_values(ours.buffer)[0]}, x


def prefix_counts(program: bytes, x, work: Path) -> tuple:
    """(the first method's plan, its instructions, the board's ``execute`` instructions of the
    program cut after 0, 1, ..., all of them): instruction ``k`` costs ``counts[k + 1] -
    counts[k]``."""
    from memsched import board
    from memsched.executorch.format.pte import read_pte, write_pte

    pte = read_pte(program)
    plan = pte.program.execution_plan[0]
    if len(plan.chains) != 1:
        raise SystemExit("a program with more than one chain")
    instrs = list(plan.chains[0].instructions)
    counts = []
    for k in range(len(instrs) + 1):
        cut = copy.deepcopy(pte)
        cut.program.execution_plan[0].chains[0].instructions = instrs[:k]
        res, _ = board.run_pte(write_pte(cut), [x], work / f"k{k}")
        if res.get("status"):
            raise SystemExit(f"the board failed after {k} instructions: {res.get('error')}")
        counts.append(int(res["execute_instructions"]))
    return plan, instrs, counts


def per_operator(program: bytes, x, work: Path) -> tuple[dict, int, int]:
    """({operator: [calls, instructions, predicted]}, all instructions of one execute, the
    predicted total) of ``program``."""
    from memsched.executorch.memory.instructions import program_instructions

    plan, instrs, counts = prefix_counts(program, x, work)
    pred = program_instructions(program)[plan.name]
    # one predicted row per instruction of the chain, in its order (None: no cost model)
    guess = [r["instructions"] for r in pred.per_instruction]
    names = [plan.operators[i.instr_args.op_index].name
             if hasattr(i.instr_args, "op_index") else type(i.instr_args).__name__
             for i in instrs]
    by: dict = defaultdict(lambda: [0, 0, 0])
    for k, n in enumerate(names):
        by[n][0] += 1
        by[n][1] += counts[k + 1] - counts[k]
        by[n][2] += guess[k] or 0
    return dict(by), counts[-1], pred.total


def predicted_per_operator(program: bytes) -> tuple[dict, int, int]:
    """`per_operator`'s rows from memsched's prediction alone (the board's columns 0)."""
    from memsched.executorch.format.pte import read_pte
    from memsched.executorch.memory.instructions import program_instructions

    plan = read_pte(program).program.execution_plan[0]
    pred = program_instructions(program)[plan.name]
    by: dict = defaultdict(lambda: [0, 0, 0])
    for i, r in zip(plan.chains[0].instructions, pred.per_instruction):
        n = plan.operators[i.instr_args.op_index].name \
            if hasattr(i.instr_args, "op_index") else type(i.instr_args).__name__
        by[n][0] += 1
        by[n][2] += r["instructions"] or 0
    return dict(by), 0, pred.total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mobilenet_v1_025")
    ap.add_argument("--planned", action="store_true", help="the input in the arena")
    ap.add_argument("--predicted", action="store_true",
                    help="memsched's prediction alone (no board): calls, predicted")
    a = ap.parse_args(argv)
    from memsched import board

    if not a.predicted:
        try:
            board.firmware("executorch")
        except board.BoardUnavailable as e:
            print(f"the board: {e}")
            return 2
    for name in a.models.split(","):
        progs, x = programs(name, a.planned)
        rows, totals, preds = {}, {}, {}
        with tempfile.TemporaryDirectory() as d:
            for label, buf in progs.items():
                rows[label], totals[label], preds[label] = predicted_per_operator(buf) \
                    if a.predicted else per_operator(buf, x, Path(d) / label)
        print(f"\n{name} (input {'planned' if a.planned else 'the caller'}'s), execute "
              "instructions on the M55\n")
        cols = "calls, predicted" if a.predicted else "calls, board / predicted"
        print(f"| operator | default: {cols} | memsched: {cols} |")
        print("|---|---:|---:|")
        ops = sorted(set(rows["default"]) | set(rows["memsched"]),
                     key=lambda o: -rows["memsched"].get(o, [0, 0, 0])[2 if a.predicted else 1])
        for o in ops:
            cells = [(f"{v[0]}, {v[2]:,}" if a.predicted else f"{v[0]}, {v[1]:,} / {v[2]:,}")
                     if v else "--"
                     for v in (rows["default"].get(o), rows["memsched"].get(o))]
            print(f"| `{o}` | {cells[0]} | {cells[1]} |")
        td, tm = totals["default"], totals["memsched"]
        pd, pm = preds["default"], preds["memsched"]
        if a.predicted:
            print(f"| **all** (predicted, with the fixed cost per execute) | **{pd:,}** | "
                  f"**{pm:,} ({pm / pd:.4f}x)** |", flush=True)
            continue
        print(f"| **all** (predicted: with the fixed cost per execute) | **{td:,} / {pd:,}** "
              f"({100 * (pd - td) / td:+.2f} %) | **{tm:,} ({tm / td:.3f}x) / {pm:,}** "
              f"({100 * (pm - tm) / tm:+.2f} %) |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

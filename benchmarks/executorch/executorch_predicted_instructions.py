"""Predicted against measured: the instructions of one ``Method::execute`` of Cortex-M
programs on the emulated Cortex-M55 (`memsched.executorch.memory.instructions` vs `memsched.board`).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/executorch/executorch_predicted_instructions.py
        [--models mobilenet_v1_025,resnet8,stack] [--planned both|yes|no]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/executorch/executorch_predicted_instructions.py
        --calibrate OUT.jsonl [--fit OUT.jsonl,...]

Default mode: per model (the int8 Cortex-M flow of `executorch_cortex_m.py`, the M55's MVE
export; ``stack``: a small test stack of `tests/cortex_m_models.py`), ExecuTorch's default
program and memsched's (``backend_config(tile_patches=True, share_values=True)``), with the
caller's input and with the input planned: one board run each, a table of predicted,
measured and the error.

``--calibrate``: the calibration programs (`CALIBRATION`: small int8 networks, default and
patched) run once per prefix of their chain (the chain cut after instruction ``k``; counts
are deterministic, so the difference of two prefixes is instruction ``k``'s cost), each
instruction's operator, arguments and instructions appended to OUT.jsonl. ``--fit``: a
non-negative least-squares fit of each kernel's coefficients over its features
(`instructions.FEATURES`), weighted by 1/sqrt(instructions) so small calls count, written
into `instructions.py` between its COEFFICIENTS markers.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import pprint
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "python"))
sys.path.insert(0, str(HERE.parents[1] / "tests"))
sys.path.insert(0, str(HERE))

# (tag, module expression over cortex_m_models' cba / Block / stack and torch.nn as nn,
# input shape, input planned): the programs the coefficients were fitted on
CALIBRATION = [
    ("s1", 'stack(["conv3s2", "dw3", "block", "conv1"])', (1, 3, 24, 24), False),
    ("s2", 'stack(["conv3", "conv1", "dw3", "conv3s2", "maxpool", "avgpool"])', (1, 3, 32, 32),
     False),
    ("s3", 'stack(["block", "conv1", "block", "dw3", "conv3s2", "conv1", "dw3"])',
     (1, 3, 40, 40), False),
    ("s4", 'stack(["conv3s2", "conv1", "conv1", "dw3", "block"])', (1, 3, 48, 48), True),
    ("c5", "nn.Sequential(cba(3, 16, 5, 2), cba(16, 24, 3, 1), cba(24, 24, 3, 2, 24), "
     "cba(24, 40, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(40, 10))",
     (1, 3, 33, 33), False),
    ("c6", "nn.Sequential(cba(3, 12, 3, 1), cba(12, 12, 3, 1, 12), cba(12, 20, 1), "
     "nn.MaxPool2d(2, 2), cba(20, 36, 3, 1), cba(36, 36, 3, 2, 36), nn.AdaptiveAvgPool2d(1), "
     "nn.Flatten(), nn.Linear(36, 7))", (1, 3, 28, 20), False),
    ("c7", "nn.Sequential(cba(3, 32, 3, 2), cba(32, 32, 3, 1, 32), cba(32, 64, 1), "
     "cba(64, 64, 3, 2, 64), cba(64, 48, 1), cba(48, 48, 3, 1), nn.AdaptiveAvgPool2d(1), "
     "nn.Flatten(), nn.Linear(48, 100), nn.ReLU(), nn.Linear(100, 10))", (1, 3, 40, 40), False),
    ("c8", "nn.Sequential(cba(3, 8, 3, 1), cba(8, 24, 3, 2), cba(24, 24, 5, 1, 24), "
     "cba(24, 17, 1), cba(17, 33, 3, 1), nn.MaxPool2d(2, 2), cba(33, 33, 3, 1, 33), "
     "nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(33, 5))", (1, 3, 36, 36), False),
    ("c9", "nn.Sequential(cba(3, 16, 3, 2), Block(16, 16, 1, 4), Block(16, 24, 2, 3), "
     "Block(24, 24, 1, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 4))",
     (1, 3, 64, 64), False),
    ("s5", 'stack(["conv3", "dw3", "conv1", "conv3s2", "block", "avgpool", "conv1"])',
     (1, 3, 32, 32), True),
    ("l1", "nn.Sequential(cba(3, 16, 3, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), "
     "nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 130), nn.ReLU(), nn.Linear(130, 9))",
     (1, 3, 16, 16), False),
    ("p1", "nn.Sequential(cba(3, 8, 3, 1), nn.ZeroPad2d((1, 2, 0, 1)), nn.Conv2d(8, 16, 3, 2, 0), "
     "nn.ReLU(), nn.ZeroPad2d(1), cba(16, 16, 3, 1, 16), nn.AdaptiveAvgPool2d(1), "
     "nn.Flatten(), nn.Linear(16, 300))", (1, 3, 20, 24), False),
    ("a1", "nn.Sequential(cba(3, 24, 3, 1), nn.AvgPool2d(3, 2), cba(24, 40, 1), "
     "nn.AvgPool2d(2, 2), cba(40, 20, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), "
     "nn.Linear(20, 3))", (1, 3, 30, 30), False),
    ("h1", 'stack(["conv3", "hardswish", "conv1", "dw3", "hardswish"])', (1, 3, 24, 24), False),
    ("w1", "nn.Sequential(cba(3, 64, 3, 2), cba(64, 64, 3, 1, 64), cba(64, 128, 1), "
     "cba(128, 128, 3, 2, 128), cba(128, 256, 1), cba(256, 256, 3, 1, 256), "
     "nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 12))", (1, 3, 32, 32), False),
    ("d1", "nn.Sequential(cba(3, 8, 3, 1), nn.Dropout(0.2), cba(8, 24, 3, 2), nn.Dropout(0.2), "
     "cba(24, 24, 1), nn.Dropout(0.2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), "
     "nn.Linear(24, 5))", (1, 3, 20, 20), False),
    ("m1", "nn.Sequential(cba(1, 32, 3, 1, 1), cba(32, 32, 3, 2, 32), "
     "cba(32, 48, 1, act=nn.Hardswish), cba(48, 48, 3, 1, 48, act=nn.Hardswish), "
     "nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(48, 6))", (1, 1, 28, 28), False),
    ("v3s", "ecm.mobilenet_v3_small()", (1, 3, 64, 64), False),  # SE blocks, hard-swish
]
# The committed coefficients were also fitted on MLPerf Tiny's DS-CNN default program (its
# chain cut per prefix the same way; its first layer, a depthwise convolution of 1 input
# channel, is priced as the convolution CMSIS-NN runs: `instructions.ALIASES`).


def _module(expr: str):
    import torch
    from torch import nn  # noqa: F401 - used by the expressions

    import executorch_cortex_m as ecm  # noqa: F401
    from cortex_m_models import Block, cba, stack  # noqa: F401

    torch.manual_seed(0)
    return eval(expr)  # noqa: S307 - the fixed expressions above


def programs(model, shape, planned: bool, search: dict | None = None) -> tuple[dict, object]:
    """({"default": bytes, "memsched": bytes}, input) of ``model`` (the M55's MVE export).
    ``search``: filled with what the patch search predicted for each (its time model on the
    edge graph, `patch.time.ExecutorchTime`; None where it had none)."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    import memsched.executorch as mx
    from cortex_m_models import int8_edge

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge, x = int8_edge(model, tuple(shape), 0, isa="mve", calibration=2)
        base = copy.deepcopy(edge).to_executorch(ExecutorchBackendConfig(
            memory_planning_pass=MemoryPlanningPass(alloc_graph_input=planned)))
        cfg = mx.backend_config(tile_patches=True, alloc_graph_input=planned, share_values=True)
        ours = copy.deepcopy(edge).to_executorch(cfg)
    if search is not None:
        tile = next(iter(mx.report(cfg).values())).patches
        search["default"] = getattr(tile, "cpu_instructions_before", None)
        search["memsched"] = getattr(tile, "cpu_instructions", None) if tile.grid \
            else search["default"]
    return {"default": base.buffer, "memsched": mx.share_values(ours.buffer)[0]}, x


def _zoo(name: str):
    if name == "stack":
        return _module('stack(["conv3", "conv1", "dw3", "conv3s2", "block"])'), (1, 3, 32, 32)
    import executorch_cortex_m as ecm

    return ecm.build(name)


# ---------------------------------------------------------------------------- calibration
def per_instruction(program: bytes, x, work: Path) -> tuple[list, list]:
    """(one row per instruction: name, arguments, instructions; the prefix counts)."""
    from executorch_instructions import prefix_counts
    from memsched.executorch.memory.instructions import _instr_name, decode_args

    plan, instrs, counts = prefix_counts(program, x, work)
    rows = [{"name": _instr_name(plan, ins), "args": decode_args(plan, ins, jsonable=True),
             "n": counts[k + 1] - counts[k]} for k, ins in enumerate(instrs)]
    return rows, counts


def calibrate(out: str) -> None:
    with open(out, "a") as f:
        for tag, expr, shape, planned in CALIBRATION:
            progs, x = programs(_module(expr), shape, planned)
            for label, buf in progs.items():
                with tempfile.TemporaryDirectory() as d:
                    rows, counts = per_instruction(buf, x, Path(d))
                f.write(json.dumps({"tag": tag, "label": label, "planned": planned,
                                    "total": counts[-1], "empty": counts[0], "rows": rows,
                                    "pte": buf.hex()}) + "\n")
                f.flush()
                print(tag, label, counts[-1], len(rows), flush=True)


def _t(a):
    from memsched.executorch.memory.instructions import T

    if isinstance(a, dict) and "sizes" in a:
        return T(tuple(a["sizes"]), a["dtype"], tuple(a["dim_order"]))
    return [_t(x) for x in a] if isinstance(a, list) else a


def fit(files: list[str]) -> dict:
    """Each kernel's coefficients (NNLS over its features), written into instructions.py."""
    import numpy as np
    from scipy.optimize import nnls

    from memsched.executorch.memory import instructions as ins

    data: dict = {}
    for path in files:
        for line in open(path):
            d = json.loads(line)
            for r in d["rows"]:
                fn = ins.FEATURES.get(ins.op_key(r["name"]))
                if fn is not None:
                    try:
                        model, ft = fn([_t(a) for a in r["args"]])
                    except ValueError:  # a variant the kernel's model leaves unknown
                        continue
                    if model not in ins.ALIASES:
                        data.setdefault(model, []).append((ft, r["n"], d["tag"]))
    coef = {}
    for model, rows in sorted(data.items()):
        keys = sorted({k for ft, _, _ in rows for k in ft})
        a = np.array([[ft.get(k, 0) for k in keys] for ft, _, _ in rows], float)
        y = np.array([n for _, n, _ in rows], float)
        w = 1 / np.sqrt(np.maximum(y, 1))
        x, _ = nnls(a * w[:, None], y * w)
        err = np.abs(a @ x - y) / y
        coef[model] = {k: round(float(v), 4) for k, v in zip(keys, x) if v}
        print(f"{model:16s} calls {len(y):4d} max error {err.max():6.1%}  {coef[model]}")
    lines = ["COEFFICIENTS = " + pprint.pformat(coef, width=96, sort_dicts=True)]
    p = Path(ins.__file__)
    s = p.read_text()
    a0 = s.index("\n", s.index("# BEGIN COEFFICIENTS")) + 1
    s = s[:a0] + "\n".join(lines) + "\n" + s[s.index("# END COEFFICIENTS"):]
    p.write_text(s)
    return coef


# ---------------------------------------------------------------------------- the table
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="stack,mobilenet_v1_025,resnet8")
    ap.add_argument("--planned", default="both", choices=("both", "yes", "no"))
    ap.add_argument("--calibrate", metavar="OUT.jsonl")
    ap.add_argument("--fit", metavar="FILES", help="comma-separated calibration files")
    a = ap.parse_args(argv)
    from memsched import board
    from memsched.executorch.memory.instructions import program_instructions

    if a.fit:
        fit(a.fit.split(","))
        return 0
    try:
        board.firmware("executorch")
    except board.BoardUnavailable as e:
        print(f"the board: {e}")
        return 2
    if a.calibrate:
        calibrate(a.calibrate)
        return 0
    planned = {"both": (False, True), "yes": (True,), "no": (False,)}[a.planned]
    print("| model | input | program | predicted (.pte) | the search's figure | measured | error "
          "| not modelled |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    worst = 0.0
    for name in a.models.split(","):
        model, shape = _zoo(name)
        for p in planned:
            searched: dict = {}
            progs, x = programs(model, shape, p, searched)
            for label, buf in progs.items():
                with tempfile.TemporaryDirectory() as d:
                    res, _ = board.run_pte(buf, [x], Path(d), timeout=600)
                got = int(res["execute_instructions"])
                m = next(iter(program_instructions(buf).values()))
                err = m.total / got - 1
                worst = max(worst, abs(err))
                sf = searched.get(label)
                print(f"| {name} | {'planned' if p else 'caller'} | {label} | {m.total:,} | "
                      f"{'-' if sf is None else format(sf, ',')} | {got:,} | {err:+.2%} | "
                      f"{', '.join(m.unknown) or '-'} |", flush=True)
    print(f"\nworst error {worst:.2%}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())

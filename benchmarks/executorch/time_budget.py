"""RAM and time together on the emulated Cortex-M55 (issue 58): what each instruction budget
(``max_slowdown``) buys, predicted and measured.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/executorch/time_budget.py
        [--runtime tflm,executorch] [--models a,b] [--slowdowns 1.0,1.05,1.1,none] [--planned]
        [--json out.json]

For every model and every bound, the patched program memsched writes at its defaults with that
``max_slowdown`` (``none``: no bound, the RAM-only choice of before), against the unpatched
program, both run on the board (`memsched.board`):

* TFLite Micro with the CMSIS-NN kernels: ``tile_tflite(..., offline_plan=True)`` of
  ``resnet8`` / ``resnet20`` (`patches_resnet.resnet`: the MLPerf Tiny layout) and the
  MobileNet files of `patches.py`; the board's minimal arena (bisection) and instructions per
  ``Invoke()``;
* ExecuTorch's Cortex-M flow (the M55's MVE export, `executorch_cortex_m.edge_int8`):
  ``backend_config(tile_patches=True, share_values=True, max_slowdown=...)`` of
  ``mobilenet_v1_025`` / ``resnet8`` / ``mobilenet_v2`` / ``mbv2bn-0.35-144`` (and, named in
  ``--models``, ``mobilenet_v3_small`` / ``ds_cnn`` / ``deep_autoencoder``), the caller's
  input (``--planned``: the input in the arena too); the board's RAM (planned + method +
  temp allocators) and instructions per ``Method::execute``.

Columns: the RAM ratio (default / patched) and the instruction ratio measured on the board, the
search's predicted ratio, the file's predicted instructions against the board's (error %), and
whether the outputs are bit-equal to the unpatched program's on the board. Instructions, not
cycles: QEMU has no timing model.

The summary (one line per model) adds the instructions of the unpatched program and of the
program at the default bound (1.10), measured on the board and predicted from the written
file (`memsched analyze X --json`'s ``cpu_instructions``), and the largest prediction error
over every program of the model. ``--tables out.json`` prints the tables of a saved run
again (no search, no board).
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
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tflite"))  # the TFLM models
sys.path.insert(0, os.path.dirname(__file__))

TFLM_MODELS = ("resnet8", "resnet20", "mbv2-0.35-144", "mbv1-0.25-128")
ET_MODELS = ("mobilenet_v1_025", "resnet8", "mbv2bn-0.35-144", "mobilenet_v2")
# the other models of the Cortex-M tables (`executorch_cortex_m.MODELS`), on request
ET_MORE = ("mobilenet_v3_small", "ds_cnn", "deep_autoencoder")


def _slowdown(text: str) -> float | None:
    return None if text.lower() == "none" else float(text)


def _label(s: float | None) -> str:
    return "none" if s is None else f"{s:.2f}x"


# ---------------------------------------------------------------------------- TFLite Micro
def tflm_file(name: str) -> bytes:
    if name.startswith("resnet"):
        from patches_resnet import resnet

        return resnet(1 if name == "resnet8" else 3, name=name)
    from patches import MODELS

    return MODELS[name]()


def tflm_rows(name: str, slowdowns) -> list[dict]:
    from memsched.tflite.memory.instructions import model_instructions
    from memsched.tflite.format.read import read_tflite
    from memsched.tflite.patch.tile import tile_tflite
    from board_columns import board_measure

    rows = []
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "m.tflite")
        Path(src).write_bytes(tflm_file(name))
        base_pred = model_instructions(read_tflite(src)).total
        for s in slowdowns:
            dst = os.path.join(d, f"p{_label(s)}.tflite")
            _, res = tile_tflite(src, dst, offline_plan=True, max_slowdown=s)
            m = board_measure(src, dst)
            c = res.choice
            pred = model_instructions(read_tflite(dst)).total
            row = {"runtime": "tflm", "model": name, "max_slowdown": s,
                   "plan": _plan(c), "predicted_search": c.slowdown if c else 1.0,
                   "predicted_default": base_pred, "predicted": pred, **m}
            if "m55_arena_original" in m:
                io, ip = m["m55_instructions_original"], m["m55_instructions_patched"]
                row.update(ram_default=m["m55_arena_original"], ram=m["m55_arena_patched"],
                           ins_default=io, ins=ip, equal=m["m55_equal"])
            rows.append(row)
            _progress(row)
    return rows


def _plan(c) -> str:
    if c is None:
        return "unpatched"
    return " + ".join(f"{r['region_start']}-{r['region_ops'] - 1} {r['grid']}"
                      f"{' margins' if r.get('padding') == 'margins' else ''}"
                      for r in c.as_dict()["regions"])


# ---------------------------------------------------------------------------- ExecuTorch
def et_default(name: str, planned: bool):
    """(edge program, input, ExecuTorch's default program) of model ``name`` int8 through the
    Cortex-M flow (``planned``: the input in the arena too)."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    from executorch_cortex_m import edge_int8

    model, shape = _et_build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge, x = edge_int8(copy.deepcopy(model), shape, 4, None)
        base = copy.deepcopy(edge).to_executorch(ExecutorchBackendConfig(
            memory_planning_pass=MemoryPlanningPass(alloc_graph_input=planned))).buffer
    return edge, x, base


def et_patched(edge, s: float | None, planned: bool):
    """(the program memsched writes of ``edge`` with patches at ``max_slowdown`` ``s``, values
    shared; its patch report)."""
    import memsched.executorch as mx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = mx.backend_config(tile_patches=True, share_values=True, max_slowdown=s,
                                alloc_graph_input=planned)
        ours = mx.share_values(copy.deepcopy(edge).to_executorch(cfg).buffer)[0]
    return ours, list(mx.report(cfg).values())[0].patches


def et_rows(name: str, slowdowns, planned: bool) -> list[dict]:
    from executorch_cortex_m import _on_board
    from memsched.executorch.memory.instructions import program_instructions

    edge, x, base = et_default(name, planned)
    base_pred = _et_total(program_instructions(base))
    rows = []
    for s in slowdowns:
        ours, p = et_patched(edge, s, planned)
        m = _on_board(base, ours, x, None, f"{name}-{_label(s)}")
        row = {"runtime": "executorch", "model": name, "planned": planned, "max_slowdown": s,
               "plan": p.summary().split(", MACs")[0] if p.patched else "unpatched",
               "predicted_search": p.slowdown if p.slowdown is not None else 1.0,
               "predicted_default": base_pred,
               "predicted": _et_total(program_instructions(ours))}
        if "board_default" in m:
            row.update(ram_default=m["board_default"], ram=m["board_memsched"],
                       ins_default=m["instructions"][0], ins=m["instructions"][1],
                       equal=m["run"].startswith("bit-equal"))
        else:
            row["board"] = m.get("run")
        rows.append(row)
        _progress(row)
    return rows


def _et_build(name: str):
    if name.startswith("mbv2bn"):  # (module, input) there: the shape is what edge_int8 takes
        from executorch_patches import build

        m, x = build(name)
        return m, tuple(x.shape)
    from executorch_cortex_m import build

    return build(name)


def _et_total(pred) -> int | None:
    """The first method's predicted instructions per execute."""
    if isinstance(pred, dict):
        pred = next(iter(pred.values()))
    return getattr(pred, "total", pred)


# ---------------------------------------------------------------------------- tables
def _progress(r: dict) -> None:
    if "ram" in r:
        print(f"{r['runtime']} {r['model']} max_slowdown {_label(r['max_slowdown'])}: RAM "
              f"{r['ram_default']:,} -> {r['ram']:,} B ({r['ram_default'] / r['ram']:.2f}x), "
              f"instructions {r['ins'] / r['ins_default']:.3f}x (predicted "
              f"{r['predicted_search']:.3f}x), {r['plan']}", file=sys.stderr, flush=True)
    else:
        print(f"{r['runtime']} {r['model']}: not on the board: {r.get('m55') or r.get('board')}",
              file=sys.stderr, flush=True)


def _err(pred, real) -> str:
    return "-" if not pred or not real else f"{100 * (pred - real) / real:+.1f} %"


def table(rows) -> str:
    out = ["| runtime | model | max_slowdown | plan | RAM default -> patched (B) | RAM ratio | "
           "instructions, board (patched / default) | predicted by the search | "
           "file prediction error (default / patched) | bit-equal on the M55 |",
           "|---|---|---|---|---:|---:|---:|---:|---:|:---:|"]
    for r in rows:
        if "ram" not in r:
            continue
        model = r["model"] + (" (input planned)" if r.get("planned") else "")
        out.append(
            f"| {r['runtime']} | {model} | {_label(r['max_slowdown'])} | {r['plan']} | "
            f"{r['ram_default']:,} -> {r['ram']:,} | {r['ram_default'] / r['ram']:.2f}x | "
            f"{r['ins']:,} / {r['ins_default']:,} ({r['ins'] / r['ins_default']:.3f}x) | "
            f"{r['predicted_search']:.3f}x | {_err(r['predicted_default'], r['ins_default'])} / "
            f"{_err(r['predicted'], r['ins'])} | {'yes' if r['equal'] else 'NO'} |")
    return "\n".join(out)


def summary(rows) -> str:
    """One line per model: the board's RAM ratio (and instructions) reached at each bound; the
    unpatched program's and the default bound's program's instructions, board / predicted
    (error); the largest |error| over the model's programs."""
    bounds = list(dict.fromkeys(r["max_slowdown"] for r in rows))
    at = 1.1 if 1.1 in bounds else bounds[-1]
    out = ["| runtime | model | default RAM (B) | " + " | ".join(
        f"RAM ratio at <= {_label(b)} (instructions)" for b in bounds) +
        " | instructions unpatched, board / predicted (error) | "
        f"instructions at <= {_label(at)}, board / predicted (error) | "
        "largest prediction error |",
        "|---|---|---:|" + "---:|" * (len(bounds) + 3)]
    seen: dict = {}
    for r in rows:
        if "ram" in r:
            key = (r["runtime"], r["model"] + (" (input planned)" if r.get("planned") else ""))
            cells = seen.setdefault(key, {"default": r["ram_default"], "errors": [],
                                          "base": _ins(r["ins_default"], r["predicted_default"])})
            cells[r["max_slowdown"]] = \
                f"{r['ram_default'] / r['ram']:.2f}x ({r['ins'] / r['ins_default']:.3f}x)"
            cells["ins", r["max_slowdown"]] = _ins(r["ins"], r["predicted"])
            cells["errors"] += [_pct(p, m) for p, m in ((r["predicted_default"], r["ins_default"]),
                                                        (r["predicted"], r["ins"]))]
    for (rt, model), cells in seen.items():
        errs = [e for e in cells["errors"] if e is not None]
        worst = f"{max(errs, key=abs):+.2f} %" if errs else "-"
        out.append(f"| {rt} | {model} | {cells['default']:,} | " +
                   " | ".join(cells.get(b, "-") for b in bounds) +
                   f" | {cells['base']} | {cells.get(('ins', at), '-')} | {worst} |")
    return "\n".join(out)


def _pct(pred, real) -> float | None:
    return None if not pred or not real else 100 * (pred - real) / real


def _ins(real, pred) -> str:
    """``4,925,340 / 4,927,350 (+0.04 %)``: board / predicted (error)."""
    e = _pct(pred, real)
    return f"{real:,} / {pred or 0:,} (" + ("-" if e is None else f"{e:+.2f} %") + ")"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runtime", default="tflm,executorch")
    ap.add_argument("--models", help="comma-separated (default: every model of each runtime)")
    ap.add_argument("--slowdowns", default="1.0,1.05,1.1,none")
    ap.add_argument("--planned", action="store_true",
                    help="ExecuTorch: the input in the arena (alloc_graph_input=True)")
    ap.add_argument("--json")
    ap.add_argument("--tables", metavar="JSON",
                    help="print the tables of a saved --json run again (nothing is run)")
    args = ap.parse_args(argv)
    if args.tables:
        with open(args.tables) as f:
            rows = json.load(f)
        print(table(rows))
        print()
        print(summary(rows))
        return 0
    slowdowns = [_slowdown(s) for s in args.slowdowns.split(",")]
    rows = []
    for rt in args.runtime.split(","):
        names = args.models.split(",") if args.models else \
            (TFLM_MODELS if rt == "tflm" else ET_MODELS)
        for name in names:
            if rt == "tflm" and (name in TFLM_MODELS or
                                 name.startswith(("mbv", "fq-", "mobilenet_like"))):
                rows += tflm_rows(name, slowdowns)
            elif rt == "executorch" and (name in ET_MODELS or name in ET_MORE):
                rows += et_rows(name, slowdowns, args.planned)
    print(table(rows))
    print()
    print(summary(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())

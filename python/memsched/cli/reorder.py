"""``memsched reorder`` (`memsched.cli`).

    memsched reorder model.tflite -o model.memsched.tflite [--offline-plan] [--measure]
        [--time-limit S] [--json]
    memsched reorder model.pte -o model.memsched.pte [--measure] [--no-share-values]
        [--time-limit S] [--json] [--memory-map NAME:SIZE:MEM_ID[,...]]

A ``.pte`` program (ExecuTorch) is handled by `memsched.cli.pte`.

Rewrites subgraph 0's operator list into memsched's order (certified minimum peak under TFLite
Micro's memory model) and, with ``--offline-plan``, writes memsched's arena offsets into the
``OfflineMemoryAllocation`` metadata so TFLM uses them instead of its own planner.
``--measure`` runs the real interpreters: TFLM's minimal arena (bisection, one subprocess per
probe) for the original and the written file, and bit-equality of every tensor in LiteRT and of
the outputs in TFLM, and checks the written file's offline plan against the head TFLM reports;
all of it before the output file is written. Errors are one line on stderr, exit status 2; a
measured difference is one line naming the first differing output or tensor and the size of
the difference, exit status 1, and no file. The output is written atomically with the umask's
permissions.
"""
from __future__ import annotations

import os

from .common import (bad_input, not_written, positive_seconds, print_written,
                     tflite_output)


class OutputsDiffer(RuntimeError):
    """``--measure`` found the written model computing something else (exit status 1)."""


def cmd_reorder(args) -> int:
    if str(args.model).lower().endswith(".pte"):  # an ExecuTorch program
        from .pte import reorder_pte

        return reorder_pte(args)
    from ..tflite.plan.reorder import reorder_tflite
    from ..tflite.format.write import write_model

    report = None
    try:
        if getattr(args, "memory_map", None) is not None:
            raise ValueError("--memory-map is for ExecuTorch programs (.pte): TFLite Micro "
                             "plans one arena")
        limit = positive_seconds(args.time_limit)
        out = tflite_output(args.model, args.output, "reorder", ".memsched.tflite")
        data, res = reorder_tflite(args.model, None, offline_plan=args.offline_plan,
                                   time_limit=limit, target=args.target)
        report = {"model": args.model, "output": out, "offline_plan": args.offline_plan,
                  **res.as_dict()}
        if args.measure:  # measured before the file exists: a differing model is not written
            report["measured"] = measure_bytes(args.model, data)
            if not report["measured"]["equal"]:
                raise OutputsDiffer(report["measured"]["difference"])
        write_model(out, data)
    except OutputsDiffer as e:
        return not_written(args, report, f"the reordered model computes something else ({e})",
                           report["output"])
    except (ValueError, OSError, RuntimeError) as e:
        return bad_input(e)
    if print_written(args, report):
        return 0
    for note in res.notes:
        print(f"note: {note}")
    status = "optimal" if res.optimal else f"lower bound {res.lower_bound:,} B"
    print(f"{out}: {res.ops} operators; peak {res.input_peak:,} B in file order -> "
          f"{res.peak:,} B ({status}); {res.seconds:.2f} s")
    if res.offline_arena is not None:
        print(f"offline plan ({res.offline_plan_action}): arena head {res.offline_arena:,} B"
              f"{' (= liveness bound)' if res.offline_optimal else ''}")
    if res.arena_bytes is not None:  # computed from the files (`memory.arena`)
        print(f"TFLite Micro arena on {res.target}: {res.original_arena_bytes:,} B -> "
              f"{res.arena_bytes:,} B (the minimal total arena, computed from the files)")
    elif res.arena_unpriced:
        print(f"TFLite Micro arena on {res.target}: not computed ({res.arena_unpriced})")
    m = report.get("measured")
    if m:
        print(f"TFLM minimal arena: {m['arena_before']:,} B -> {m['arena_after']:,} B "
              f"(planned head {m['head_before']:,} -> {m['head_after']:,} B); outputs equal: "
              f"LiteRT {m['litert_equal']} ({m['tensors_compared']} tensors), "
              f"TFLM {m['tflm_equal']}" + (f" ({m['tflm_note']})" if m.get("tflm_note") else ""))
    return 0


def measure(original: str, written: str) -> dict:
    """TFLM's minimal arena and planned head of both files, their output equality, and the
    independent check of the written file's offline plan against the head TFLM reports.

    ``equal`` is False if LiteRT or TFLM found any difference or the check failed;
    ``difference`` is then one line naming the first difference (outputs are compared first:
    a file that computes something else gets no arena measurement)."""
    from ..tflite.format.check import check_tflite
    from ..tflite import tflm

    if not tflm.available():
        raise RuntimeError("--measure needs the 'tflite-micro' package "
                           "(pip install 'tvm-memsched[tflite]')")
    out = tflm.compare_models(original, written)
    out["difference"] = None
    if out["first_difference"] is not None:  # no arena worth measuring: stop here
        out["difference"] = tflm.describe_difference(out["first_difference"])
        out["equal"] = False
        return out
    for key, path in (("before", original), ("after", written)):
        size = tflm.min_arena_bytes(path)
        out[f"arena_{key}"] = size
        out[f"head_{key}"] = tflm.arena_sections(path, size).get("head")
    check = check_tflite(written, arena=out["head_after"])
    out["check"] = check.as_dict()
    if not check.ok:
        out["difference"] = f"check: {check.problems[0]}"
    out["equal"] = out["equal"] and check.ok
    return out


def measure_bytes(original: str, data: bytes) -> dict:
    """`measure` for model bytes not yet written (a private temporary file)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="memsched-measure-") as d:
        path = os.path.join(d, os.path.basename(original))
        with open(path, "wb") as f:
            f.write(data)
        return measure(original, path)


def register(sub) -> None:
    p = sub.add_parser("reorder", help="reorder a .tflite file (TFLite/TFLM) or a .pte "
                                       "program (ExecuTorch) for a smaller arena")
    p.add_argument("model", help="a .tflite file or an ExecuTorch .pte program")
    p.add_argument("-o", "--output", help="output file (default MODEL.memsched.tflite)")
    p.add_argument("--offline-plan", action="store_true",
                   help="also write memsched's arena offsets (OfflineMemoryAllocation metadata)")
    p.add_argument("--measure", action="store_true",
                   help="measure TFLM's minimal arena before/after and compare outputs")
    p.add_argument("--time-limit", default="60",
                   help="scheduling time limit in seconds (default 60)")
    p.add_argument("--target", choices=("cortex-m", "host"), default="cortex-m",
                   help=".tflite: the device the file is planned for, cortex-m (default: "
                        "CMSIS-NN's scratch buffers priced and given room in the offline plan) "
                        "or host (the tflite-micro package's reference kernels)")
    p.add_argument("--no-share-values", action="store_true",
                   help=".pte: keep the emitter's values (default: equal values are shared, "
                        "fewer method-allocator records)")
    p.add_argument("--memory-map", metavar="NAME:SIZE:MEM_ID[,...]",
                   help=".pte: place the planned tensors across these memory banks, fastest "
                        "first (SIZE in bytes or with K/M), the fast bank's traffic first")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=cmd_reorder)

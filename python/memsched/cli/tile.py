"""``memsched tile`` (`memsched.cli`): patch-based execution written as a plain .tflite file.

    memsched tile model.tflite -o out.tflite [--grid RxC] [--split TENSOR] [--max-overhead X]
        [--max-slowdown F|none]
        [--padding auto|explicit|margins] [--offline-plan] [--measure] [--max-regions N]
        [--time-limit S] [--plot curves.png] [--json]

Searches the regions and patch grids (`memsched.patches.search_model`: TFLite Micro's
total arena = certified activation peak + persistent bytes, within ``--max-overhead`` extra
MACs, default 0.3 = +30 %, and ``--max-slowdown`` times the original's instructions per
``Invoke()`` on a Cortex-M55 with the CMSIS-NN kernels, predicted from the files, default
1.10), rewrites the spatial prefix patch by patch with builtin operators
only (`memsched.tflite.patch.tile.tile_tflite`), then writes the certified operator
order and, with ``--offline-plan``, the arena offsets. Prints the frontier (per candidate: split
tensor, grid, peak, persistent bytes, total, MAC overhead, predicted instructions) and the
choice, the (RAM, instructions) frontier the search found, and what bounds the
total from below (the original operators' persistent bytes plus the largest of: the model
input, the operators run whole before the region, the largest operator after it; also in
``--json`` as ``bound``); ``--plot`` draws the
memory curve of the patched schedule next to the unpatched one, and the (RAM, instructions)
frontier with the chosen point.

``--measure`` runs the real interpreters before anything is written: TFLite Micro's minimal
total arena (bisection) of the original and the patched file, and every output compared in
LiteRT and TFLite Micro. A difference exits 1 with one line and writes nothing; bad input is
one line, exit 2. The file is written atomically with the umask's permissions.
"""
from __future__ import annotations

import json
import os
import sys

from .common import bad_input, seconds, slowdown, tflite_output


def _errors():
    from ..errors import ModelLoadError
    from ..report import ReportError

    return (ModelLoadError, ReportError, ValueError, OSError, RuntimeError)


def cmd_tile(args) -> int:
    try:
        return _tile(args)
    except BrokenPipeError:
        raise  # a closed stdout: the CLI's runner ends quietly
    except _errors() as e:
        return bad_input(e)


def _tile(args) -> int:
    import tempfile

    from ..tflite.patch.tile import measure_tile, tile_tflite
    from ..tflite.format.write import write_model

    out = tflite_output(args.model, args.output, "tile", ".tiled.tflite")
    if args.max_overhead < 0:
        raise ValueError(f"bad --max-overhead {args.max_overhead}: must be >= 0")
    if args.plot:
        from ..report import _check_path

        _check_path(args.plot, "--plot", (".png", ".svg"))
    data, res = tile_tflite(args.model, None, grid=args.grid, split=args.split,
                            max_overhead=args.max_overhead, offline_plan=args.offline_plan,
                            time_limit=args.time_limit, max_regions=args.max_regions,
                            padding=None if args.padding == "auto" else args.padding,
                            target=args.target, max_slowdown=slowdown(args.max_slowdown))
    report = {"model": args.model, "output": out, **res.as_dict(curves=bool(args.plot))}
    if args.measure:  # before the file exists: a model that computes something else is not
        with tempfile.TemporaryDirectory(prefix="memsched-tile-") as d:
            tmp = os.path.join(d, os.path.basename(out))
            with open(tmp, "wb") as f:
                f.write(data)
            m = measure_tile(args.model, tmp)
        report["measured"] = m
        if m.get("litert_equal") is False or m.get("tflm_equal") is False:
            report["written"] = False
            if args.json:
                print(json.dumps(report))
            what = ("LiteRT" if m.get("litert_equal") is False else "TFLM")
            print(f"memsched: error: the patched model computes something else ({what} outputs "
                  f"differ, max |diff| {m.get('max_abs_diff', 0):g}"
                  f"{'; ' + m['tflm_note'] if m.get('tflm_note') else ''}); {out!r} not written",
                  file=sys.stderr)
            return 1
    write_model(out, data)
    report["written"] = True
    if args.plot:
        _plot(report, args.plot)
    if args.json:
        report.pop("curves", None)
        print(json.dumps(report))
        return 0
    _print(report, args)
    return 0


def _print(r: dict, args) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    s = r["search"]
    t = Table(title=f"{os.path.basename(args.model)}: patch candidates (TFLite Micro total = "
                    "peak + persistent)")
    timed = s["original"].get("cpu_instructions") is not None
    for col in ("split tensor", "grid", "peak B", "persistent B", "total B", "MACs +%") + \
            (("instructions",) if timed else ()) + ("",):
        t.add_column(col, justify="left" if col == "split tensor" else "right")
    rows = [("original", s["original"])] + [("", c) for c in s["frontier"]]
    choice = r.get("choice") or {}
    for label, c in rows:
        mark = "chosen" if choice and c["split"] == choice.get("split") and \
            c["grid"] == choice.get("grid") and \
            c.get("padding") == choice.get("padding") else label
        grid = c["grid"] + (" margins" if c.get("padding") == "margins" else "")
        where = c["split"] if label != "original" else "(unpatched)"
        if label != "original" and c.get("region_start"):
            where = f"{where} (from op {c['region_start']})"
        t.add_row(str(where), grid,
                  f"{c['peak_bytes']:,}", f"{c['persistent_bytes']:,}", f"{c['total_bytes']:,}",
                  f"{100 * c['mac_overhead']:+.1f}",
                  *((f"{c['slowdown']:.3f}x",) if timed else ()), mark)
    console.print(t)
    if timed:
        front = s.get("time_frontier") or []
        console.print("RAM / time frontier (predicted TFLite Micro instructions per Invoke() "
                      "on a Cortex-M55 with CMSIS-NN): " + ", ".join(
                          f"{f['total_bytes']:,} B at {f['slowdown']:.3f}x" for f in front))
        if choice and choice.get("cpu_instructions") is not None:
            console.print(f"chosen: {choice['cpu_instructions']:,} instructions per Invoke() "
                          f"({choice['slowdown']:.3f}x the original's "
                          f"{s['original']['cpu_instructions']:,}), within --max-slowdown "
                          f"{args.max_slowdown}")
    regions = choice.get("regions") or []
    if len(regions) > 1:  # the frontier lists one-region candidates: say what was chosen
        console.print(f"chosen: {len(regions)} regions, estimated total "
                      f"{choice['total_bytes']:,} B, MACs {100 * choice['mac_overhead']:+.1f} %")
        for i, c in enumerate(regions, 1):
            console.print(f"  region {i}: operators {c['region_start']}-{c['region_ops'] - 1},"
                          f" grid {c['grid']}"
                          f"{' with margins' if c.get('padding') == 'margins' else ''}, split "
                          f"{','.join(c['split'])}, its part's peak "
                          f"{c['part_peak_bytes']:,} B")
    for note in r.get("notes", []):
        console.print(f"note: {note}")
    for why in s.get("refused", [])[:3]:
        console.print(f"refused: {why}")
    status = "optimal" if r.get("optimal") else f"lower bound {r.get('lower_bound') or 0:,} B"
    console.print(f"{r['output']}: {r['ops_before']} -> {r['ops_after']} operators; certified "
                  f"order peak {r['peak_bytes']:,} B ({status}); {r['seconds']:.2f} s")
    b = r.get("bound") or {}
    if b:
        terms = {"model_input": "the model input", "before_region":
                 "the operators run whole before the region",
                 "after_region": "the largest operator after the region",
                 "largest_operator": "the largest operator"}
        console.print(f"floor of this split: {b['floor']:,} B = persistent bytes of the original "
                      f"operators {b['persistent_original']:,} B + {terms[b['bound_by']]} "
                      f"{b[b['bound_by']]:,} B; the estimated total is {b['above_floor']:,} B "
                      f"above it (added persistent bytes {b['persistent_added']:,} B)")
    if r.get("offline_arena_bytes") is not None:
        console.print(f"offline plan: arena head {r['offline_arena_bytes']:,} B")
    if r.get("arena_bytes") is not None:  # computed from the files (`memory.arena`)
        console.print(f"TFLite Micro arena on {r['target']}: {r['original_arena_bytes']:,} B -> "
                      f"{r['arena_bytes']:,} B (the minimal total arena, computed from the "
                      "files)")
    elif r.get("arena_unpriced"):
        console.print(f"TFLite Micro arena on {r['target']}: not computed "
                      f"({r['arena_unpriced']})", markup=False)
    m = r.get("measured")
    if m:
        if m.get("tflm_arena_original"):
            console.print(f"TFLM minimal total arena: {m['tflm_arena_original']:,} B -> "
                          f"{m['tflm_arena_patched']:,} B ({m['tflm_arena_ratio']}x)")
        console.print(f"outputs equal: LiteRT {m['litert_equal']}, TFLM {m['tflm_equal']}"
                      + (f" ({m['tflm_note']})" if m.get("tflm_note") else ""))


def _plot(r: dict, path: str) -> None:
    """The memory curve (bytes live per operator, TFLM's model) of the unpatched file order and
    of the written patched order, each against its own operator count."""
    from ..report import _matplotlib, human_bytes, save_plot

    _matplotlib()
    from matplotlib.figure import Figure

    curves = r.get("curves") or {}
    fig = Figure(figsize=(8, 3.6))
    ax = fig.add_subplot(1, 1, 1)
    for key, style, label in (("original", "--", "unpatched (file order)"),
                              ("patched", "-", "patched (certified order)")):
        ys = curves.get(key) or []
        if ys:
            xs = [i / max(len(ys) - 1, 1) for i in range(len(ys))]
            ax.step(xs, ys, style, where="post",
                    label=f"{label}: peak {human_bytes(max(ys))}")
    ax.set_xlabel("progress through the schedule (operators, normalised)")
    ax.set_ylabel("live activation bytes")
    ax.legend(loc="upper right", fontsize=8)
    front = (r.get("search") or {}).get("time_frontier") or []
    if front:  # the trade the search found, and where the choice sits on it
        ax.set_position([0.11, 0.15, 0.47, 0.75])
        bx = fig.add_axes([0.68, 0.15, 0.3, 0.75])
        bx.step([f["slowdown"] for f in front], [f["total_bytes"] for f in front], "o-",
                where="post", label="frontier")
        ch = r.get("choice") or {}
        if ch.get("slowdown") is not None:
            bx.plot([ch["slowdown"]], [ch["total_bytes"]], "r*", markersize=12,
                    label="chosen")
        bx.set_xlabel("predicted instructions (x original)")
        bx.set_ylabel("total arena (B)")
        bx.legend(fontsize=8)
    else:
        fig.tight_layout()
    save_plot(fig, path)


def register(sub) -> None:
    """Register ``tile`` on the CLI's subparsers."""
    p = sub.add_parser("tile", help="patch-based execution of a .tflite model (stock TFLM/LiteRT)")
    p.add_argument("model", help="a .tflite file")
    p.add_argument("-o", "--output", help="output file (default MODEL.tiled.tflite)")
    p.add_argument("--grid", help="force the patch grid, ROWSxCOLS (e.g. 2x3)")
    p.add_argument("--split", help="force the split tensor (its name in the file)")
    p.add_argument("--padding", choices=("auto", "explicit", "margins"), default="auto",
                   help="patch borders: explicit PADs on exact windows, or operators keeping "
                        "their SAME padding on wider windows (fewer nodes, more MACs); "
                        "default auto: priced both ways")
    p.add_argument("--max-overhead", type=float, default=0.3,
                   help="extra MACs allowed for the default choice (default 0.3 = +30 %%)")
    p.add_argument("--max-slowdown", default="1.10",
                   help="the most instructions per Invoke() the choice may run on a "
                        "Cortex-M55 with CMSIS-NN, predicted from the files, as a factor of "
                        "the original's (default 1.10; none: no bound)")
    p.add_argument("--offline-plan", action="store_true",
                   help="also write the arena offsets (OfflineMemoryAllocation metadata)")
    p.add_argument("--measure", action="store_true",
                   help="TFLM minimal arena before/after and outputs compared, before writing")
    p.add_argument("--target", choices=("cortex-m", "host"), default="cortex-m",
                   help="the device the file is planned for: cortex-m (default: a 32-bit "
                        "Cortex-M with the CMSIS-NN kernels, whose scratch buffers the search "
                        "prices and the offline plan makes room for) or host (the tflite-micro "
                        "package's reference kernels); the report's arena_bytes is TFLite "
                        "Micro's minimal arena there")
    p.add_argument("--max-regions", type=int, default=None,
                   help="regions in sequence, each with its own grid (default 4; 1: one)")
    p.add_argument("--time-limit", type=seconds, default=None,
                   help="the patch search's wall-clock safety net in seconds (default 60): "
                        "its work budgets decide, so the same file is written on any machine "
                        "unless this stops it (then a note says so)")
    p.add_argument("--plot", help="memory curves of the unpatched and patched schedules "
                                  "(.png or .svg)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=cmd_tile)

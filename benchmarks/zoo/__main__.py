"""Command line of the benchmark zoo.

    python -m benchmarks.zoo list [--tag hmcos|ilp|baseline]
    python -m benchmarks.zoo measure NAME... | --all [--fold-bn] [--write]
    python -m benchmarks.zoo export NAME... | --all --onnx DIR [--fold-bn] [--relax DIR]

``list`` prints the registry with the counts recorded in ``stats.json`` (written by
``measure --write``; measuring imports the network through torch.export and Relax, which takes
from seconds to minutes per network). ``export --onnx`` writes ``DIR/NAME.onnx``; ``--relax``
also writes the Relax module as TVMScript text (``DIR/NAME.py``).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

from . import NETWORKS, build_relax, export_onnx, measure, names

STATS = pathlib.Path(__file__).with_name("stats.json")


def load_stats() -> dict:
    if STATS.exists():
        return json.loads(STATS.read_text())
    return {}


def _key(name, fold_bn):
    return f"{name}{'+fold' if fold_bn else ''}"


def cmd_list(args) -> int:
    stats = load_stats()
    rows = [("name", "input", "cells / stages", "channels", "params", "bindings",
             "bindings (folded BN)", "import s", "import s (folded)", "peak MiB (folded)")]
    for n in names(args.tag):
        s = NETWORKS[n]
        a, b = stats.get(_key(n, False), {}), stats.get(_key(n, True), {})
        peak = b.get("peak_input_order_bytes")
        rows.append((n, f"{s.input_size}x{s.input_size}", s.cells, s.channels,
                     f"{a['params'] / 1e6:.2f}M" if "params" in a else "-",
                     str(a.get("bindings", "-")), str(b.get("bindings", "-")),
                     str(a.get("import_s", "-")), str(b.get("import_s", "-")),
                     f"{peak / 2**20:.2f}" if peak else "-"))
    if args.markdown:
        for k, r in enumerate(rows):
            print("| " + " | ".join(r) + " |")
            if k == 0:
                print("|" + "---|" * len(r))
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))
    if not stats:
        print("\n(no stats.json: run `python -m benchmarks.zoo measure --all --write`)")
    return 0


def _targets(args) -> list[str]:
    if args.all:
        return names()
    unknown = [n for n in args.names if n not in NETWORKS]
    if unknown:
        sys.exit(f"unknown network(s): {', '.join(unknown)}; see `python -m benchmarks.zoo list`")
    if not args.names:
        sys.exit("name one or more networks, or --all")
    return args.names


def cmd_measure(args) -> int:
    stats = load_stats()
    for n in _targets(args):
        for fold in ([False, True] if args.both else [args.fold_bn]):
            r = measure(n, fold_bn=fold)
            print(json.dumps(r), flush=True)
            stats[_key(n, fold)] = r
            if args.write:
                STATS.write_text(json.dumps(stats, indent=1, sort_keys=True) + "\n")
    return 0


def cmd_export(args) -> int:
    if not args.onnx and not args.relax:
        sys.exit("give --onnx DIR and/or --relax DIR")
    for n in _targets(args):
        t0 = time.perf_counter()
        if args.onnx:
            p = export_onnx(n, pathlib.Path(args.onnx) / f"{n}.onnx", fold_bn=args.fold_bn)
            print(f"{n}: {p} ({time.perf_counter() - t0:.1f} s)", flush=True)
        if args.relax:
            t0 = time.perf_counter()
            mod = build_relax(n, fold_bn=args.fold_bn)
            p = pathlib.Path(args.relax) / f"{n}.py"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(mod.script(show_meta=False))
            print(f"{n}: {p} ({time.perf_counter() - t0:.1f} s)", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.zoo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("list", help="registry table")
    p.add_argument("--tag", help="only networks with this tag (hmcos, ilp, baseline, heavy)")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.set_defaults(fn=cmd_list)
    for name, fn in (("measure", cmd_measure), ("export", cmd_export)):
        p = sub.add_parser(name)
        p.add_argument("names", nargs="*")
        p.add_argument("--all", action="store_true")
        p.add_argument("--fold-bn", action="store_true", help="fold batch norm into convs")
        p.set_defaults(fn=fn)
        if name == "measure":
            p.add_argument("--both", action="store_true", help="with and without --fold-bn")
            p.add_argument("--write", action="store_true", help=f"record into {STATS.name}")
        else:
            p.add_argument("--onnx", metavar="DIR")
            p.add_argument("--relax", metavar="DIR", help="also write TVMScript (no weights)")
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())

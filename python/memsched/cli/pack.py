"""``memsched pack`` (`memsched.cli`): arena offsets for buffers with known lifetimes.

    memsched pack FILE.csv [--capacity BYTES] [--time-limit S] [--alignment A] [-o OUT.csv]
        [--json]

Reads MiniMalloc's CSV (``id,lower,upper,size``: ``size`` bytes live during the half-open
``[lower, upper)``) and packs the buffers with the exact packer (`memsched.packing`).
Without ``--capacity``: the smallest arena it can prove (down to the liveness peak); with it:
a packing within it, or the proof that none exists. Anytime: at the time limit it reports its
best packing and the gap to the proven lower bound. Prints the arena, the lower bound, whether
it is proven optimal / fits, the seconds and the offsets in input order; ``-o`` writes the
input rows with an ``offset`` column. Bad input is one line, exit status 2; a capacity that no
packing meets exits 1.
"""
from __future__ import annotations

import json

from .common import bad_input, parse_bytes, seconds


def cmd_pack(args) -> int:
    from ..packing import PackingInputError, read_minimalloc_csv, run_pack

    try:
        capacity = parse_bytes(args.capacity) if args.capacity is not None else None
        if args.alignment < 1:
            raise ValueError(f"bad --alignment {args.alignment}: must be >= 1")
        rep = run_pack(args.file, capacity=capacity, time_limit=args.time_limit or None,
                       alignment=args.alignment)
        if args.output:
            _write_offsets(args.output, read_minimalloc_csv(args.file), rep["offsets"])
    except BrokenPipeError:
        raise
    except (PackingInputError, ValueError, OSError) as e:
        return bad_input(e)
    code = 1 if rep["fits"] is False else 0
    if args.json:
        print(json.dumps(rep))
        return code
    arena = "none found" if rep["arena"] is None else f"{rep['arena']:,} B"
    state = ("proven optimal" if rep["optimal"] else
             f"gap {100 * rep['gap']:.2f} % to the bound" if rep["gap"] is not None else "")
    fits = "" if rep["fits"] is None else (f"; fits {rep['capacity']:,} B" if rep["fits"]
                                            else f"; does NOT fit {rep['capacity']:,} B")
    print(f"{args.file}: {rep['buffers']} buffers, liveness peak {rep['live_peak']:,} B; arena "
          f"{arena}, lower bound {rep['lower_bound']:,} B ({state}){fits}; "
          f"{rep['seconds']:.2f} s")
    print("offsets: " + json.dumps(rep["offsets"]))
    return code


def _write_offsets(path: str, buffers, offsets) -> None:
    """The input rows with their offsets, as CSV, written atomically."""
    from ..fileio import write_atomic

    lines = ["id,lower,upper,size,offset"]
    lines += [f"{b.id},{b.lower},{b.upper},{b.size},{o}" for b, o in zip(buffers, offsets)]
    write_atomic(path, ("\n".join(lines) + "\n").encode())


def register(sub) -> None:
    """Register ``pack`` on the CLI's subparsers."""
    p = sub.add_parser("pack", help="arena offsets for buffers with lifetimes (MiniMalloc CSV)")
    p.add_argument("file", help="CSV with columns id,lower,upper,size ([lower, upper) half-open)")
    p.add_argument("--capacity", help="arena capacity to fit (bytes, or e.g. 1MiB); default: "
                                      "minimise the arena")
    p.add_argument("--time-limit", type=seconds, default=10.0,
                   help="time limit in seconds (default 10; 0 = none)")
    p.add_argument("--alignment", type=int, default=1,
                   help="every offset a multiple of this (default 1)")
    p.add_argument("-o", "--output", help="write the rows with an offset column (CSV)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=cmd_pack)

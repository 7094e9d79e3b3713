"""ExecuTorch programs (``.pte``) on the command line: what ``analyze`` and ``reorder`` do for
them (`memsched.executorch.pte`). Not a command of its own: `analyze` and `reorder` hand a
``.pte`` file here.

    memsched analyze model.pte [--json] [--plot OUT.svg] [--time-limit S]
    memsched reorder model.pte -o out.pte [--measure] [--no-share-values] [--json]
        [--time-limit S] [--memory-map NAME:SIZE:MEM_ID[,...]]

``reorder`` rewrites each method's instruction order into the certified one and its planned
tensors' offsets into the exact packer's, then shares equal values
(`memsched.executorch.plan.share`, unless ``--no-share-values``: one value where the emitter wrote
several equal scalars, lists or identically placed tensors, fewer method-allocator records); every
new plan passes the independent check and the shared program `share.check_shared`; a
method whose plan would not shrink, or that memsched cannot model (a note names why), is left
as written. ``--measure`` runs both programs in ExecuTorch's runtime on the same random inputs
before anything is written: any output that differs is one line on stderr, exit status 1, and
no file. Bad input (a truncated or foreign file, nothing memsched can re-plan) is one line,
exit status 2, nothing written.

``--memory-map NAME:SIZE:MEM_ID[,...]`` (banks fastest first; SIZE in bytes or with K/M):
``reorder`` places the planned tensors across the banks, the fast bank's traffic first
(`memsched.executorch.plan.pte_banks`), writing each tensor's mem_id and one planned buffer per
bank; a map that is malformed or cannot hold a method is one line naming the bank and the
bytes missing, exit status 2, nothing written. ``analyze`` then names the banks in its
per-bank lines (``banks`` in the JSON) and takes the map's first bank as the fastest.
"""
from __future__ import annotations

import json
import sys

from .common import (CLIError, _quiet_native_stderr, _status, bad_input, device_target,
                     not_written, positive_seconds, print_written, rewrite_output)


def _needs_executorch(what: str = "this") -> None:
    """`export` and ``reorder --measure`` need ExecuTorch (its exporter, its runtime); reading
    and writing ``.pte`` files need nothing."""
    import importlib.util

    if importlib.util.find_spec("executorch") is None:
        raise CLIError(f"{what} needs the 'executorch' package "
                       "(pip install 'tvm-memsched[executorch]')")


def analyze_pte(args) -> int:
    """``memsched analyze model.pte``: per method, planned bytes as written, the liveness peak
    of the file's order, the certified optimum and its lower bound, the written plan's check,
    and the RAM the method needs on ``--target`` (`memsched.executorch.memory.ram`: planned buffers,
    method and temp allocator bytes, their sum)."""
    target = device_target(args)
    if args.passes or args.pass_config or (args.view not in (None, "file")):
        raise CLIError("--pass/--pass-config/--view relax apply to models TVM builds, not to "
                       "an ExecuTorch program")
    if args.plot or args.report:
        from ..report import check_outputs

        check_outputs(args.plot, args.report)
    from .. import native
    from ..executorch import pte

    memory_map = getattr(args, "memory_map", None)
    if memory_map is not None:
        from ..banks import parse_memory_map

        try:
            memory_map = parse_memory_map(memory_map)
        except ValueError as e:
            raise CLIError(str(e)) from None
    native.hide_torch_on_load()  # the C++ search without tvm_ffi's torch import (~1 s)
    keep: dict = {}
    # importing ExecuTorch prints its optional kernels' load failures on fd 2: held back
    with _status(not args.json, f"analyzing {args.model} ...") as show, \
            _quiet_native_stderr(getattr(args, "verbose", False)):
        methods = pte.analyze(args.model, time_limit=args.time_limit, keep=keep,
                              progress=lambda t: show(f"{args.model}: {t}"),
                              memory_map=memory_map)
    from ..executorch.memory.ram import program_ram

    for name, row in program_ram(args.model, target).items():
        methods[name].update(row)
    if target == "cortex-m":  # the time figure is for the Cortex-M55 the kernels are modelled on
        from ..executorch.memory.instructions import TARGET, program_instructions

        for name, mi in program_instructions(args.model).items():
            if name in methods:
                methods[name].update({"cpu_instructions": mi.total,
                                      "cpu_instructions_unknown": mi.unknown,
                                      "cpu_instructions_target": TARGET})
    result = {"model": args.model, "format": "pte", "methods": methods}
    if args.plot or args.report:
        from ..executorch.memory.model import EXECUTORCH_MODEL
        from ..report import write_outputs

        if not keep:
            raise CLIError(f"cannot plot {args.model!r}: no method could be modelled")
        name, (graph, order) = next(iter(keep.items()))
        row = methods[name]
        plot_result = {"model": f"{args.model} ({name})", "view": "file",
                       "lower_bound": row.get("lower_bound"), "methods": {}}
        for line in write_outputs(graph, EXECUTORCH_MODEL, order, plot_result, args.plot,
                                  args.report):
            print(line, file=sys.stderr)
    if args.json:
        print(json.dumps(result))
        return 0
    for name, row in methods.items():
        print(f"{args.model} method {name!r}: {row['instructions']} instructions, "
              f"{sum(row['operators'].values())} kernel calls, {row['delegates']} delegates, "
              f"{row['planned_tensors']} planned tensors")
        sizes = row["non_const_buffer_sizes"][1:]
        print(f"  planned bytes as written: {row['planned_bytes']:,} B"
              + (f" in {len(sizes)} arenas {', '.join(f'{s:,}' for s in sizes)}"
                 if len(sizes) > 1 else ""))
        for line in ram_lines(row):
            print(line)
        for line in bank_lines(row):
            print(line)
        if "cpu_instructions" in row:
            print(instructions_line(row))
        if "error" in row:
            print(f"  not modelled: {row['error']}")
            continue
        status = "optimal" if row["optimal"] else f"lower bound {row['lower_bound']:,} B"
        print(f"  liveness peak: {row['file_order_peak']:,} B in the file's order -> "
              f"{row['optimum_peak']:,} B in memsched's order ({status}); "
              f"{row['schedule_seconds']} s")
        print(f"  written plan check: {row['plan_check']}")
    return 0


def bank_lines(row: dict, rows_key: str = "banks") -> list[str]:
    """One line per planned buffer (a memory bank): its bytes, its traffic (bytes x (1 +
    reads), `memsched.executorch.plan.pte_banks`) and the share of it; the fastest bank marked."""
    rows = row.get(rows_key) or []
    known = all(r["traffic_bytes"] is not None for r in rows)
    total = sum(r["traffic_bytes"] for r in rows) if known else 0
    lines = []
    for r in rows:
        label = f"mem_id {r['mem_id']}" + (f" ({r['name']})" if r.get("name") else "")
        text = f"  bank {label}: {r['bytes']:,} B"
        if known:
            share = r["traffic_bytes"] / total if total else 1.0
            text += f", traffic {r['traffic_bytes']:,} B ({100 * share:.1f} %)"
        if r["mem_id"] == row.get("fast_bank_mem_id"):
            text += " <- fastest"
        lines.append(text)
    return lines


def _pct(x) -> str:
    return "?" if x is None else f"{100 * x:.1f} %"


def instructions_line(row: dict) -> str:
    """The predicted instructions of one ``Method::execute`` (`memsched.executorch.
    instructions`), with the kernels no model covers named."""
    unknown = row.get("cpu_instructions_unknown") or {}
    return (f"  instructions per execute on {row['cpu_instructions_target']}: "
            f"{row['cpu_instructions']:,} (predicted)"
            + (" + not modelled: " + ", ".join(f"{k} x{v}" for k, v in unknown.items())
               if unknown else ""))


def ram_lines(row: dict) -> list[str]:
    """The RAM of one method as text (a `memsched.executorch.memory.ram` row): one line with the sum
    and its parts, a second when the temp allocator's pool must be larger than its peak, a
    third for a delegate's own memory."""
    planned = sum(row["planned_buffers"])
    lines = [f"  RAM on {row['target']}: {row['ram_bytes']:,} B = planned {planned:,} + "
             f"method allocator {row['method_allocator_bytes']:,} + temp allocator "
             f"{row['temp_allocator_bytes']:,}"
             + (f" (+ {row['unplanned_io_bytes']:,} B of inputs/outputs the caller provides)"
                if row["unplanned_io_bytes"] else "")]
    if row["temp_pool_bytes"] > row["temp_allocator_bytes"]:
        lines.append(f"    a temp allocator pool under {row['temp_pool_bytes']:,} B moves "
                     "operator lookups into the method allocator (at "
                     f"{row['temp_allocator_bytes']:,} B: method allocator "
                     f"{row['method_allocator_bytes_at_temp_peak']:,} B)")
    if row.get("note"):
        lines.append(f"    not counted: {row['note']}")
    return lines


def reorder_pte(args) -> int:
    """``memsched reorder model.pte -o out.pte``: see the module docstring. Returns the exit
    status (0 written, 1 outputs differ, 2 bad input)."""
    from ..executorch.errors import OutputsDifferError

    report = None
    try:
        if args.measure:
            _needs_executorch("--measure")
        if args.offline_plan:
            raise CLIError("--offline-plan is for .tflite files: a .pte program always gets "
                           "memsched's offsets")
        limit = positive_seconds(args.time_limit)
        memory_map = getattr(args, "memory_map", None)
        if memory_map is not None:  # a malformed map: one line, before any work
            from ..banks import parse_memory_map

            memory_map = parse_memory_map(memory_map)
        out = rewrite_output(args.model, args.output, "reorder", ".memsched.pte", ".pte")
        from .. import native
        from ..executorch import pte

        native.hide_torch_on_load()  # the C++ search without tvm_ffi's torch import (~1 s)
        with _status(not args.json, f"reordering {args.model} ...") as show, \
                _quiet_native_stderr(getattr(args, "verbose", False)):
            data, methods = pte.reorder(args.model, time_limit=limit, measure=args.measure,
                                        progress=lambda t: show(f"{args.model}: {t}"),
                                        memory_map=memory_map)
            if not getattr(args, "no_share_values", False):
                from ..executorch.plan.share import share_reordered

                show(f"{args.model}: sharing equal values")
                with open(args.model, "rb") as f:
                    original = f.read()
                data = share_reordered(original, data, methods, measure=args.measure)
        report = {"model": args.model, "output": out, "format": "pte", "measured":
                  bool(args.measure), "methods": methods}
        modelled = [m for m in methods.values() if "error" not in m]
        if not modelled:
            first = next(iter(methods.values()))
            raise CLIError(f"cannot reorder {args.model!r}: {first['error']}")
        from ..fileio import write_atomic

        write_atomic(out, data)
    except OutputsDifferError as e:
        return not_written(args, report, str(e), args.output or "the output")
    except (ValueError, OSError, RuntimeError) as e:
        return bad_input(e)
    if print_written(args, report):
        return 0
    for name, row in methods.items():
        if "error" in row:
            print(f"note: method {name!r} left as written: {row['error']}")
            continue
        status = "optimal" if row.get("order_optimal") else \
            f"lower bound {row['lower_bound']:,} B"
        print(f"{out} method {name!r}: planned {row['planned_before']:,} B -> "
              f"{row['planned_after']:,} B; liveness peak {row['file_order_peak']:,} B in the "
              f"file's order -> {row['peak']:,} B ({status})"
              + ("" if row.get("changed") else f"; unchanged: {row.get('reason')}")
              + ("; outputs bit-equal in ExecuTorch's runtime" if row.get("bit_equal") else ""))
        if "banks" in row:
            bound = row.get("traffic_bound")
            proof = "optimal" if row.get("fast_bank_optimal") else "not proven"
            print(f"  fast bank's traffic share: {_pct(row.get('fast_bank_traffic_share_before'))}"
                  f" as written{'' if row.get('fits_before') else ' (breaks the map)'} -> "
                  f"{_pct(row.get('fast_bank_traffic_share'))}"
                  + ("" if bound is None else f" (bound {bound:,} B: {proof})")
                  + (f"; ExecuTorch's greedy rule {_pct(row['fast_bank_traffic_share_greedy'])}"
                     if row.get("fast_bank_traffic_share_greedy") is not None else ""))
            for line in bank_lines(row):
                print(line)
        if "values_before" in row:
            print(f"  values shared: {row['values_before']:,} -> {row['values_after']:,} "
                  f"values; method allocator on cortex-m {row['method_bytes_before']:,} B -> "
                  f"{row['method_bytes_after']:,} B")
    return 0

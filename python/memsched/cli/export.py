"""``memsched export`` (`memsched.cli`): a saved ``torch.export`` program (``.pt2``) to an
ExecuTorch program (``.pte``) whose memory memsched plans.

    memsched export model.pt2 [-o model.pte] [--tile-patches] [--max-overhead F] [--grid RxC]
        [--float-reductions] [--time-limit S] [--measure] [--json]

The ``.pt2`` is read without unpickling anything (`memsched.importers.pt2`), lowered with
``to_edge`` and ``to_executorch(memsched.executorch.backend_config(...))``: the certified order
and the exact packer (never above ExecuTorch's greedy), with ``--tile-patches`` the spatial
prefix patch by patch. ``--measure`` also lowers the program with ExecuTorch's default config
and runs both in ExecuTorch's runtime on the same random inputs before anything is written:
outputs must be bit-equal (``--tile-patches``: float outputs within 1e-5, the partial sums of
patches change the summation order), else one line, exit status 1, no file. Bad input is one
line and exit status 2.
"""
from __future__ import annotations

import os

from .common import (slowdown, CLIError, _quiet_native_stderr, _status, bad_input, not_written,
                     positive_seconds, print_written)

PATCH_TOLERANCE = 1e-5  # max abs difference of float outputs accepted with --tile-patches


class OutputsDiffer(RuntimeError):
    """``--measure`` found the program computing something else (exit status 1)."""


def _output(model: str, output: str | None) -> str:
    from ..errors import ModelLoadError

    if not model.lower().endswith(".pt2"):
        raise ModelLoadError(f"cannot export {model!r}: expected a .pt2 file (torch.export.save)")
    out = output or os.path.splitext(model)[0] + ".pte"
    if not out.lower().endswith(".pte"):
        raise CLIError(f"-o {out!r}: an ExecuTorch program is written as a .pte file")
    out_dir = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        raise ValueError(f"cannot write {out!r}: directory {out_dir!r} is missing or not "
                         "writable")
    return out


def _compare(reference: bytes, ours: bytes, tolerance: float) -> float:
    """Largest output difference of the two programs on the same random inputs (every method);
    raises `OutputsDiffer` above ``tolerance`` (0: bit-equal)."""
    import torch

    from ..executorch import pte

    worst = 0.0
    for plan in pte.read_program(reference).program.execution_plan:
        xs = pte.random_inputs(plan, 0)
        a = pte.run_method(reference, plan.name, [x.clone() for x in xs])
        b = pte.run_method(ours, plan.name, [x.clone() for x in xs])
        if len(a) != len(b):
            raise OutputsDiffer(f"method {plan.name!r}: {len(b)} outputs instead of {len(a)}")
        for k, (u, v) in enumerate(zip(a, b)):
            if not isinstance(u, torch.Tensor):
                same, diff = u == v, 0.0 if u == v else float("inf")
            else:
                same = torch.equal(u, v)
                diff = 0.0 if same else float((u.double() - v.double()).abs().max())
            worst = max(worst, diff)
            exact = not (isinstance(u, torch.Tensor) and u.is_floating_point())
            if not same and (exact or diff > tolerance):
                raise OutputsDiffer(f"method {plan.name!r} output {k} differs (max abs "
                                    f"difference {diff:g})")
    return worst


def cmd_export(args) -> int:
    from .pte import _needs_executorch

    report = None
    try:
        _needs_executorch("memsched export")
        out = _output(args.model, args.output)
        limit = positive_seconds(args.time_limit)
        from ..executorch import backend_config, pte
        from ..executorch import report as plan_report
        from ..importers.pt2 import load_exported_program

        with _status(not args.json, f"exporting {args.model} ..."), \
                _quiet_native_stderr(getattr(args, "verbose", False)):
            from executorch.exir import to_edge

            memory_map = _memory_map(args.memory_map)
            program = load_exported_program(args.model)
            config = backend_config(time_limit=limit, tile_patches=args.tile_patches,
                                    max_overhead=args.max_overhead, grid=args.grid,
                                    max_slowdown=slowdown(args.max_slowdown),
                                    exact_reductions=not args.float_reductions,
                                    memory_map=memory_map)
            data = bytes(to_edge(program).to_executorch(config).buffer)
            default = None
            if args.measure:  # ExecuTorch's own plan of the same program, and both run
                default = bytes(to_edge(load_exported_program(args.model))
                                .to_executorch().buffer)
        methods = {}
        for name, rep in plan_report(config).items():
            d = {"planned_bytes": rep.planned_bytes, "bufsizes": rep.bufsizes,
                 "greedy_bytes_same_order": rep.greedy_bytes,
                 "optimal_arenas": all(a.optimal for a in rep.arenas)}
            if rep.order is not None:
                d.update(order_peak_before=rep.order.input_peak, order_peak=rep.order.peak,
                         lower_bound=rep.order.lower_bound, order_optimal=rep.order.optimal)
            if rep.banks:
                d["banks"] = [{"name": b.name, "mem_id": b.mem_id, "size": b.size,
                               "bytes": b.used, "traffic_bytes": b.traffic,
                               "traffic_bound": b.traffic_bound} for b in rep.banks]
                d["fast_bank_traffic_share"] = round(rep.fast_share(), 6)
            if rep.patches is not None:
                d["patches"] = rep.patches.summary()
                # why the regions stop (e.g. a float mean: not bit-exact through patches)
                d["patches_prefix_end"] = rep.patches.prefix_end
            methods[name] = d
        report = {"model": args.model, "output": out, "format": "pte",
                  "planned_bytes": {k: sum(v[1:]) for k, v in pte.planned_sizes(data).items()},
                  "methods": methods, "measured": bool(args.measure)}
        if default is not None:
            report["executorch_default_bytes"] = {
                k: sum(v[1:]) for k, v in pte.planned_sizes(default).items()}
            with _quiet_native_stderr(getattr(args, "verbose", False)):
                report["max_abs_diff"] = _compare(
                    default, data, PATCH_TOLERANCE if args.tile_patches else 0.0)
        from ..fileio import write_atomic

        write_atomic(out, data)
    except OutputsDiffer as e:
        return not_written(args, report, f"the exported program computes something else ({e})",
                           args.output or "the output")
    except (ValueError, OSError, RuntimeError) as e:
        return bad_input(e)
    if print_written(args, report):
        return 0
    for name, planned in report["planned_bytes"].items():
        base = report.get("executorch_default_bytes", {}).get(name)
        vs = f" (ExecuTorch's default plan: {base:,} B, {base / planned:.2f}x)" \
            if base and planned else ""
        print(f"{out} method {name!r}: planned {planned:,} B{vs}")
    for name, d in methods.items():
        if "order_peak" in d:
            status = "optimal" if d["order_optimal"] else f"lower bound {d['lower_bound']:,} B"
            print(f"  {name}: liveness peak {d['order_peak_before']:,} B in export order -> "
                  f"{d['order_peak']:,} B ({status})")
        for b in d.get("banks", []):
            print(f"  {name}: bank {b['name']} (mem_id {b['mem_id']}): {b['bytes']:,} of "
                  f"{b['size']:,} B, traffic {b['traffic_bytes']:,} B (bound "
                  f"{b['traffic_bound']:,} B)")
        if "banks" in d:
            print(f"  {name}: fast bank's share of the traffic "
                  f"{d['fast_bank_traffic_share']:.1%}")
        if "patches" in d:
            print(f"  {name}: {d['patches']}")
    if "max_abs_diff" in report:
        print("outputs " + ("bit-equal to" if report["max_abs_diff"] == 0 else
                            f"within {report['max_abs_diff']:g} of")
              + " ExecuTorch's default program's, in its runtime")
    return 0


def _memory_map(text):
    """``--memory-map NAME:SIZE:MEM_ID[,...]`` as ExecuTorch's ``TargetMemoryMap`` (None
    without one); a malformed map is a ``ValueError`` (exit 2)."""
    if not text:
        return None
    from executorch.exir.banked_memory_planning import Bank, TargetMemoryMap

    from ..banks import parse_memory_map

    return TargetMemoryMap([Bank(n, s, m) for n, s, m in parse_memory_map(text)])


def register(sub) -> None:
    p = sub.add_parser("export", help="a torch.export .pt2 to an ExecuTorch .pte planned by "
                                      "memsched")
    p.add_argument("model", help="a .pt2 file (torch.export.save)")
    p.add_argument("-o", "--output", help="output .pte (default MODEL.pte)")
    p.add_argument("--tile-patches", action="store_true",
                   help="run the spatial prefix patch by patch (patch-based execution)")
    p.add_argument("--max-overhead", type=float, default=0.3,
                   help="--tile-patches: extra MACs allowed (default 0.3 = +30 %%)")
    p.add_argument("--max-slowdown", default="1.10",
                   help="--tile-patches: the most instructions per execute the choice may "
                        "run on a Cortex-M55, predicted from the program, as a factor of the "
                        "unpatched program's (default 1.10; none: no bound)")
    p.add_argument("--grid", help="--tile-patches: force the grid, e.g. 3x3")
    p.add_argument("--float-reductions", action="store_true",
                   help="--tile-patches: let regions run through float means / sums (partial "
                        "sums then equal the whole up to rounding, not bit-equal)")
    p.add_argument("--time-limit", default="10",
                   help="seconds for the scheduler, each arena's packer and the patch search "
                        "(default 10)")
    p.add_argument("--memory-map", metavar="NAME:SIZE:MEM_ID[,...]",
                   help="plan across these memory banks, fastest first (SIZE in bytes or with "
                        "K/M; e.g. dtcm:64K:1,sram:8M:2): the fast bank's traffic first")
    p.add_argument("--measure", action="store_true",
                   help="also lower with ExecuTorch's default config and run both programs "
                        "in its runtime before writing (outputs must match)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(func=cmd_export)

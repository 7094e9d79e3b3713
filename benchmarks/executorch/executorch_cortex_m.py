"""ExecuTorch's Cortex-M int8 flow: the default plan vs `memsched.executorch.backend_config()`.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/executorch/executorch_cortex_m.py
        [--models a,b] [--no-fp32] [--no-run] [--time-limit S] [--calibration N] [--json out.json]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/executorch/executorch_cortex_m.py --patches
        [--models mobilenet_v2,mobilenet_v1_025]   # int8: default vs tile_patches=True

Needs the Arm backend's ``tosa-tools`` (the Cortex-M quantizer imports it): in the ``test``
extra (it pins numpy<2.2, which pip resolves with the other pins); in a venv that already has a
newer numpy, ``pip install --no-deps tosa-tools`` works as well (the quantizer only imports it).

``--patches``: the int8 programs of MobileNetV2 and MobileNetV1-0.25 (or ``--models``), ExecuTorch's
default plan against ``backend_config(tile_patches=True)``, with the input planned and not
(``alloc_graph_input``), exported for the scalar C path; both programs run in
``executorch.runtime`` with the backend's own kernels (built from ../shared by
`memsched.executorch.host_kernels`), bit for bit; arena and method-allocator bytes read from the
written programs; ``--mve`` adds the M55's default (MVE) export, run on the emulated
Cortex-M55 (`memsched.board`: ExecuTorch's runtime with CMSIS-NN's MVE kernels in QEMU): the
board's RAM (planned + method allocator + temp allocator), instructions per inference, the
patched outputs bit-equal to the default's there and the board's default equal to the host
oracle (docs/executorch_patches.md, "The Cortex-M int8 flow"), and beside the board's
instructions memsched's prediction from each written program
(`memsched.executorch.memory.instructions`, ``memsched analyze X.pte --json``'s
``cpu_instructions``) with its error. ``--max-slowdown 1.1|none``: the patch search's bound on
predicted instructions (default `backend_config`'s; ``none``: the RAM-only choice).

Models: the Cortex-M backend's test models (``executorch/backends/cortex_m/test/models``):
MobileNetV2 (224x224) and MobileNetV3-small (232x232) rebuilt here in plain ``torch.nn`` with
torchvision's layer lists (torchvision does not load with this CPU torch; random weights,
which do not change the planned bytes), and the MLPerf-Tiny models the tests import from
``executorch.examples.models.mlperf_tiny`` (MobileNetV1-0.25, DS-CNN, ResNet-8,
DeepAutoEncoder), with the tests' example-input shapes (channels_last images).

int8 rows follow the backend's harness (``backends/cortex_m/test/tester.py``): strict
``torch.export``, ``prepare_pt2e``/``convert_pt2e`` with ``CortexMQuantizer`` and a few random
calibration samples, strict export of the converted module, ``to_edge`` with
``cortex_m_edge_compile_config()``, the ``CortexMPassManager`` passes with
``CortexMTargetConfig(cpu=CortexM.M55)``. fp32 rows: the same modules, no quantizer, default
``to_edge`` (portable kernels), contiguous input. Each edge program is lowered twice:
``to_executorch()``
(ExecuTorch's greedy) and ``to_executorch(memsched.executorch.backend_config(...))``; bytes
are read back from both buffers (``memsched.executorch.pte.planned_sizes``). Both programs
are then run in ``executorch.runtime`` on the same input and compared bit for bit; a program
whose kernels the Python runtime does not have is reported "not runnable here".
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", ".."))

MODELS = ["mobilenet_v2", "mobilenet_v1_025", "mobilenet_v3_small", "ds_cnn", "resnet8",
          "deep_autoencoder"]


# --- torchvision's MobileNetV2 / MobileNetV3-small, layer for layer, in plain torch.nn ------

def _make_divisible(v, divisor=8, min_value=None):
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def _conv_bn_act(cin, cout, k=3, s=1, g=1, act=None):
    from torch import nn

    layers = [nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=g, bias=False),
              nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def mobilenet_v2():
    """torchvision.models.mobilenet_v2 (width 1.0, 1000 classes)."""
    import torch
    from torch import nn

    class InvertedResidual(nn.Module):
        def __init__(self, inp, oup, stride, expand_ratio):
            super().__init__()
            hidden = int(round(inp * expand_ratio))
            self.use_res_connect = stride == 1 and inp == oup
            layers = []
            if expand_ratio != 1:
                layers.append(_conv_bn_act(inp, hidden, 1, act=nn.ReLU6))
            layers += [_conv_bn_act(hidden, hidden, 3, stride, hidden, act=nn.ReLU6),
                       nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self, num_classes=1000):
            super().__init__()
            cfg = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1],
                   [6, 160, 3, 2], [6, 320, 1, 1]]
            c, last = 32, 1280
            features = [_conv_bn_act(3, c, 3, 2, act=nn.ReLU6)]
            for t, ch, n, s in cfg:
                for i in range(n):
                    features.append(InvertedResidual(c, ch, s if i == 0 else 1, t))
                    c = ch
            features.append(_conv_bn_act(c, last, 1, act=nn.ReLU6))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

        def forward(self, x):
            x = self.features(x)
            x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV2()


def mobilenet_v3_small():
    """torchvision.models.mobilenet_v3_small (1000 classes)."""
    import torch
    from torch import nn

    class SqueezeExcitation(nn.Module):
        def __init__(self, cin, csq):
            super().__init__()
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(cin, csq, 1)
            self.fc2 = nn.Conv2d(csq, cin, 1)
            self.activation = nn.ReLU()
            self.scale_activation = nn.Hardsigmoid()

        def forward(self, x):
            s = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
            return s * x

    class InvertedResidual(nn.Module):
        def __init__(self, cin, k, exp, cout, se, act, stride):
            super().__init__()
            self.use_res_connect = stride == 1 and cin == cout
            layers = []
            if exp != cin:
                layers.append(_conv_bn_act(cin, exp, 1, act=act))
            layers.append(_conv_bn_act(exp, exp, k, stride, exp, act=act))
            if se:
                layers.append(SqueezeExcitation(exp, _make_divisible(exp // 4, 8)))
            layers.append(_conv_bn_act(exp, cout, 1))
            self.block = nn.Sequential(*layers)

        def forward(self, x):
            y = self.block(x)
            return x + y if self.use_res_connect else y

    RE, HS = nn.ReLU, nn.Hardswish
    cfg = [(16, 3, 16, 16, True, RE, 2), (16, 3, 72, 24, False, RE, 2),
           (24, 3, 88, 24, False, RE, 1), (24, 5, 96, 40, True, HS, 2),
           (40, 5, 240, 40, True, HS, 1), (40, 5, 240, 40, True, HS, 1),
           (40, 5, 120, 48, True, HS, 1), (48, 5, 144, 48, True, HS, 1),
           (48, 5, 288, 96, True, HS, 2), (96, 5, 576, 96, True, HS, 1),
           (96, 5, 576, 96, True, HS, 1)]

    class MobileNetV3Small(nn.Module):
        def __init__(self, num_classes=1000):
            super().__init__()
            layers = [_conv_bn_act(3, 16, 3, 2, act=HS)]
            layers += [InvertedResidual(*c) for c in cfg]
            layers.append(_conv_bn_act(96, 576, 1, act=HS))
            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(),
                                            nn.Dropout(0.2), nn.Linear(1024, num_classes))

        def forward(self, x):
            x = self.avgpool(self.features(x))
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV3Small()


def build(name: str):
    """(module in eval mode, example-input shape) as the Cortex-M test files build them."""
    import torch

    torch.manual_seed(0)
    if name == "mobilenet_v2":
        m, shape = mobilenet_v2(), (1, 3, 224, 224)
    elif name == "mobilenet_v3_small":
        m, shape = mobilenet_v3_small(), (1, 3, 232, 232)
    elif name == "mobilenet_v1_025":
        from executorch.examples.models.mlperf_tiny.mobilenet_v1_025 import MobileNetV1025

        m, shape = MobileNetV1025(), (1, 3, 96, 96)
    elif name == "ds_cnn":
        from executorch.examples.models.mlperf_tiny.ds_cnn import DSCNNKWS

        m, shape = DSCNNKWS(), (1, 1, 49, 10)
    elif name == "resnet8":
        from executorch.examples.models.mlperf_tiny.resnet8 import ResNet8

        m, shape = ResNet8(), (1, 3, 32, 32)
    elif name == "deep_autoencoder":
        from executorch.examples.models.mlperf_tiny.deep_autoencoder import DeepAutoEncoder

        m, shape = DeepAutoEncoder(), (1, 640)
    else:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    m = m.eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m, shape


def sample(shape, seed: int, channels_last: bool = True):
    """An input like the tests' (uniform in [-1, 1), channels_last for images)."""
    import torch

    x = torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    return x.to(memory_format=torch.channels_last) if channels_last and len(shape) == 4 else x


# --- the two flows -----------------------------------------------------------------------

def edge_int8(model, shape, calibration: int, target=None):
    """The Cortex-M harness: quantize, export, to_edge, CortexMPassManager (``target``: a
    ``CortexMTargetConfig``; default the M55 with MVE)."""
    import torch
    from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
    from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
    from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer
    from executorch.backends.cortex_m.target_config import CortexM, CortexMTargetConfig
    from executorch.backends.transforms.duplicate_dynamic_quant_chain import (
        DuplicateDynamicQuantChainPass,
    )
    from executorch.exir import to_edge
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    x = sample(shape, 1)
    captured = torch.export.export(model, (x,), strict=True).module()
    prepared = prepare_pt2e(captured, CortexMQuantizer())
    for i in range(calibration):
        prepared(sample(shape, 100 + i))
    converted = convert_pt2e(prepared, fold_quantize=True)
    DuplicateDynamicQuantChainPass()(converted)
    ep = torch.export.export(converted, (x,), strict=True)
    edge = to_edge(ep, compile_config=cortex_m_edge_compile_config())
    pm = CortexMPassManager(edge.exported_program(), CortexMPassManager.pass_list,
                            target_config=target or CortexMTargetConfig(cpu=CortexM.M55))
    edge._edge_programs["forward"] = pm.transform()  # as the harness's RunPasses stage does
    return edge, x


def edge_fp32(model, shape):
    import torch
    from executorch.exir import to_edge

    # Portable kernels, default dim order (as executorch_plans.py). Fresh contiguous strides:
    # a 1-channel channels_last tensor is also "contiguous" but the runtime reads its strides
    # as another dim order and the portable convolution rejects it (DS-CNN).
    x = sample(shape, 1, channels_last=False)
    return to_edge(torch.export.export(model, (x,), strict=True)), x


def op_counts(edge) -> tuple[int, dict]:
    """Kernel calls in the edge graph, and how many are cortex_m:: ops."""
    gm = edge.exported_program().graph_module
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    cm = sum("cortex_m" in str(n.target) for n in calls)
    return len(calls), {"cortex_m_ops": cm}


def run_program(buffer, x):
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(buffer).load_method("forward")
    return [o.clone() for o in method.execute([x])]


def _short(e: BaseException, n: int = 160) -> str:
    s = " ".join(str(e).split())
    return f"{type(e).__name__}: {s[:n]}"


def measure(name: str, flow: str, time_limit: float, calibration: int, run: bool) -> dict:
    import torch

    import memsched.executorch as mx
    from memsched.executorch import pte

    row = {"model": name, "flow": flow}
    t_all = time.perf_counter()
    model, shape = build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        edge, x = (edge_int8(model, shape, calibration) if flow == "int8"
                   else edge_fp32(model, shape))
        row["seconds_flow"] = round(time.perf_counter() - t0, 2)
        row["edge_ops"], extra = op_counts(edge)
        row.update(extra)
        t0 = time.perf_counter()
        base = copy.deepcopy(edge).to_executorch()
        row["seconds_default"] = round(time.perf_counter() - t0, 2)
        row["greedy"] = sum(pte.planned_sizes(base.buffer)["forward"][1:])
        config = mx.backend_config(time_limit=time_limit)
        t0 = time.perf_counter()
        try:
            ours = edge.to_executorch(config)
        except Exception as e:  # memsched failed on this program: record where
            row["error"] = _short(e, 400)
            row["traceback"] = traceback.format_exc()
            row["seconds_total"] = round(time.perf_counter() - t_all, 2)
            return row
        row["seconds_memsched"] = round(time.perf_counter() - t0, 2)
    (rep,) = mx.report(config).values()
    planned = sum(pte.planned_sizes(ours.buffer)["forward"][1:])
    o = rep.order
    row.update({
        "ops": o.ops if o else None, "memsched": planned, "report_planned": rep.planned_bytes,
        "greedy_on_memsched_order": rep.greedy_bytes,
        "input_order_peak": o.input_peak if o else None, "order_peak": o.peak if o else None,
        "lower_bound": o.lower_bound if o else None,
        "optimal": bool(o is not None and planned == o.lower_bound),
        "order_optimal": bool(o and o.optimal), "reordered": bool(o and o.reordered),
        "arenas": [(a.mem_id, a.graph, a.greedy, a.memsched, a.chosen) for a in rep.arenas],
        "ratio": row["greedy"] / max(planned, 1), "memsched_work_seconds": round(rep.seconds, 2),
        "note": rep.note, "summary": rep.summary()})
    if planned > row["greedy"]:
        row["error"] = f"memsched plan {planned} B above greedy {row['greedy']} B"
    if run:
        try:
            a = run_program(base.buffer, x)
        except Exception as e:
            row["run"] = "not runnable here"
            row["run_error"] = _short(e, 300)
        else:
            b = run_program(ours.buffer, x)
            eq = len(a) == len(b) and all(torch.equal(u, v) for u, v in zip(a, b))
            row["run"] = "bit-equal" if eq else "DIFFER"
    row["seconds_total"] = round(time.perf_counter() - t_all, 2)
    return row


def _args_of(ep, x) -> list:
    """The placeholders' values of ``ep`` in graph order, ``x`` for the user input."""
    out = []
    for spec in ep.graph_signature.input_specs:
        kind = spec.kind.name
        if kind == "USER_INPUT":
            out.append(x)
        elif kind in ("PARAMETER", "BUFFER"):
            out.append(ep.state_dict[spec.target])
        else:
            out.append(ep.constants[spec.target])
    return out


def _latency(buffer, x, repeat: int) -> float:
    """Median seconds of ``repeat`` runs of the loaded method (host kernels)."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(buffer)
    method = program.load_method("forward")
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        method.execute([x])
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def measure_patches(name: str, time_limit: float, calibration: int, mve: bool,
                    repeat: int, max_overhead: float | None = None,
                    scalar: bool = True, share: bool = False,
                    max_slowdown=...) -> list[dict]:
    """The int8 Cortex-M program of ``name`` for the scalar C path, ExecuTorch's default
    plan vs ``backend_config(tile_patches=True)``, with the input planned and not
    (``alloc_graph_input``). Both programs run in ``executorch.runtime`` with the backend's
    own kernels (`memsched.executorch.host_kernels`, built from ../shared): outputs compared
    bit for bit, latency the median of ``repeat`` runs. Bytes read from the written programs:
    the planned arena, and arena plus the method allocator's bytes measured by loading it
    (`executorch_method_bytes`). ``mve``: the same for the default M55 (MVE) export, planned
    bytes only (its kernels do not run here). ``share``: memsched's program is priced and
    written with its equal values shared (`memsched.executorch.plan.share`), ExecuTorch's default
    as the emitter writes it."""
    import torch
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    import memsched.executorch as mx
    from executorch_method_bytes import method_allocator_bytes
    from memsched.executorch import host_kernels, pte

    host_kernels.load()
    model, shape = build(name)
    rows, host_out = [], {}
    targets = ([("scalar", host_kernels.target_config())] if scalar or not mve else []) + \
        ([("mve", None)] if mve else [])
    for isa, target in targets:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            edge, x = edge_int8(copy.deepcopy(model), shape, calibration, target)
        for planned in (True, False):
            row = {"model": name, "isa": isa, "alloc_graph_input": planned}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                base = copy.deepcopy(edge).to_executorch(ExecutorchBackendConfig(
                    memory_planning_pass=MemoryPlanningPass(alloc_graph_input=planned)))
                config = mx.backend_config(time_limit=time_limit, tile_patches=True,
                                           alloc_graph_input=planned,
                                           max_overhead=max_overhead, share_values=share,
                                           max_slowdown=max_slowdown)
                t0 = time.perf_counter()
                ours = copy.deepcopy(edge).to_executorch(config)
                ours_buffer = mx.share_values(ours.buffer)[0] if share else ours.buffer
                row["seconds"] = round(time.perf_counter() - t0, 1)
            rep = list(mx.report(config).values())[0]
            for key, buf in (("default", base.buffer), ("memsched", ours_buffer)):
                row[key] = sum(pte.planned_sizes(buf)["forward"][1:])
                row[key + "_method"] = method_allocator_bytes(buf)["bytes"]
            p = rep.patches
            row.update({"reported": rep.planned_bytes, "modelled_peak": p.peak_after,
                        "summary": p.summary(), "macs_before": p.macs_before,
                        "macs": p.macs or p.macs_before,
                        "ratio": row["default"] / max(row["memsched"], 1),
                        "ratio_total": (row["default"] + row["default_method"]) /
                        max(row["memsched"] + row["memsched_method"], 1)})
            if isa == "scalar":
                a = host_kernels.run(base.buffer, [x])
                b = host_kernels.run(ours_buffer, [x])
                host_out[planned] = a
                row["run"] = "bit-equal" if len(a) == len(b) and all(
                    torch.equal(u, v) for u, v in zip(a, b)) else "DIFFER"
                row["latency"] = _latency(ours_buffer, x, repeat) / \
                    _latency(base.buffer, x, repeat)
            else:
                row["latency"] = None
                row.update(_on_board(base.buffer, ours_buffer, x, host_out.get(planned),
                                     f"{name}-{isa}-{int(planned)}"))
                row["predicted"] = (predicted_instructions(base.buffer),
                                    predicted_instructions(ours_buffer))
            rows.append(row)
            print(f"{name} {isa} alloc_graph_input={planned}: {row['default']:,} -> "
                  f"{row['memsched']:,} B ({row['ratio']:.2f}x; with method allocator "
                  f"{row['ratio_total']:.2f}x), {row['run']}, {p.summary()}",
                  file=sys.stderr, flush=True)
    return rows


def predicted_instructions(buffer: bytes) -> int | None:
    """memsched's predicted instructions of one execute of the program's first method on the
    M55 (None: a kernel without a cost model, named by ``memsched analyze``)."""
    from memsched.executorch.memory.instructions import program_instructions

    pred = next(iter(program_instructions(buffer).values()))
    return getattr(pred, "total", pred)


def _err(pred, real) -> str:
    return "-" if not pred or not real else f"{100 * (pred - real) / real:+.2f} %"


def _on_board(base: bytes, ours: bytes, x, host_default, tag: str) -> dict:
    """The MVE programs on the emulated Cortex-M55 (`memsched.board`): the board's RAM (planned
    + method allocator + temp allocator) of each, the instructions inside one execute, the
    patched outputs against the default's on the board and the board's default against the
    host oracle's (the scalar program of the same model)."""
    import tempfile

    from memsched import board

    try:
        board.firmware("executorch")
    except board.BoardUnavailable as e:
        return {"run": f"not run (the board: {e})"}
    work = Path(tempfile.mkdtemp(prefix=f"m55-{tag}-"))
    (ra, a), (rb, b) = (board.run_pte(buf, [x], work / k)
                        for k, buf in (("default", base), ("memsched", ours)))
    if ra["status"] or rb["status"]:
        bad = ra if ra["status"] else rb
        return {"run": f"FAILS on the M55: {bad.get('error')} {bad.get('et_log', '')}"}
    ram = lambda r: sum(r["planned_buffers"]) + r["method_allocator_bytes"] + \
        r["temp_allocator_bytes"]  # noqa: E731
    run = "bit-equal on the M55" if a == b else "DIFFER on the M55"
    if host_default is not None:
        want = [o.permute(*d["dim_order"]).contiguous().numpy().tobytes()
                for o, d in zip(host_default, ra["outputs"])]
        run += ", default = host oracle" if want == a else ", default != host oracle"
    return {"run": run, "board_default": ram(ra), "board_memsched": ram(rb),
            "board_default_method": ra["method_allocator_bytes"],
            "board_memsched_method": rb["method_allocator_bytes"],
            "board_temp": (ra["temp_allocator_bytes"], rb["temp_allocator_bytes"]),
            "instructions": (ra["execute_instructions"], rb["execute_instructions"])}


def board_table(rows) -> str:
    """The MVE rows as the emulated Cortex-M55 runs them."""
    out = ["| model (int8, M55 MVE export) | input planned | ExecuTorch default arena (B) | "
           "memsched arena (B) | arena ratio | board RAM default (B) | board RAM memsched (B) | "
           "RAM ratio | MACs | instructions / inference (memsched / default) | "
           "predicted (memsched / default) | prediction error (memsched / default) | "
           "on the board |",
           "|---|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if r["isa"] != "mve" or "board_default" not in r:
            continue
        over = _mac_ratio(r)
        ia, ib = r["instructions"]
        pa, pb = r.get("predicted") or (None, None)
        out.append(f"| {r['model']} | {'yes' if r['alloc_graph_input'] else 'no'} | "
                   f"{r['default']:,} | {r['memsched']:,} | {r['ratio']:.2f}x | "
                   f"{r['board_default']:,} | {r['board_memsched']:,} | "
                   f"{r['board_default'] / max(r['board_memsched'], 1):.2f}x | {over} | "
                   f"{ib:,} / {ia:,} ({ib / max(ia, 1):.3f}x) | {pb or 0:,} / {pa or 0:,} | "
                   f"{_err(pb, ib)} / {_err(pa, ia)} | {r['run']} |")
    return "\n".join(out)


def _mac_ratio(r) -> str:
    """MACs of memsched's program over the default's; "-" for a model with none counted
    (no convolution, pooling or linear layer the patch search sees)."""
    return f"{r['macs'] / r['macs_before']:.2f}x" if r["macs_before"] else "-"


def patch_table(rows) -> str:
    out = ["| model (int8 Cortex-M) | kernels | input planned | ExecuTorch default arena (B) | "
           "memsched arena (B) | arena ratio | default arena + method allocator (B) | "
           "memsched arena + method allocator (B) | ratio | MACs | latency (host kernels) | "
           "runs in ExecuTorch's runtime with the backend's kernels |",
           "|---|---|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        over = _mac_ratio(r)
        lat = "-" if r["latency"] is None else f"{r['latency']:.2f}x"
        out.append(f"| {r['model']} | {r['isa']} | {'yes' if r['alloc_graph_input'] else 'no'}"
                   f" | {r['default']:,} | {r['memsched']:,} | {r['ratio']:.2f}x | "
                   f"{r['default'] + r['default_method']:,} | "
                   f"{r['memsched'] + r['memsched_method']:,} | {r['ratio_total']:.2f}x | "
                   f"{over} | {lat} | {r['run']} |")
    return "\n".join(out)


def _b(v) -> str:
    return "-" if v is None else f"{v:,}"


def table(rows) -> str:
    out = ["| model | flow | ops (cortex_m::) | ExecuTorch greedy (B) | memsched (B) | "
           "lower bound (B) | optimal | greedy / memsched | reordered | runnable / bit-equal | "
           "s default | s memsched |",
           "|---|---|---:|---:|---:|---:|:---:|---:|:---:|---|---:|---:|"]
    for r in rows:
        if "memsched" not in r:
            greedy = _b(r.get("greedy"))
            out.append(f"| {r['model']} | {r['flow']} | {r.get('edge_ops', '-')} | {greedy} | "
                       f"error: {r.get('error', '?')} | | | | | | "
                       f"{r.get('seconds_default', '-')} | |")
            continue
        run = r.get("run", "-")
        cm = f" ({r['cortex_m_ops']})" if r.get("cortex_m_ops") else ""
        out.append(
            f"| {r['model']} | {r['flow']} | {r['ops']}{cm} | {_b(r['greedy'])} | "
            f"{_b(r['memsched'])} | {_b(r['lower_bound'])} | "
            f"{'yes' if r['optimal'] else 'no'} | {r['ratio']:.2f}x"
            f"{' (=)' if r['greedy'] == r['memsched'] else ''} | "
            f"{'yes' if r['reordered'] else 'no'} | {run} | "
            f"{r['seconds_default']:.1f} | {r['seconds_memsched']:.1f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help=f"comma-separated (default: {','.join(MODELS)})")
    ap.add_argument("--no-fp32", action="store_true", help="only the int8 Cortex-M flow")
    ap.add_argument("--no-run", action="store_true", help="do not run the programs")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--calibration", type=int, default=4, help="random calibration samples")
    ap.add_argument("--patches", action="store_true",
                    help="int8 only: ExecuTorch's default plan vs backend_config(tile_patches="
                         "True), input planned and not, both run with the backend's kernels "
                         "(default models: mobilenet_v2,mobilenet_v1_025)")
    ap.add_argument("--mve", action="store_true",
                    help="--patches: also the default M55 (MVE) export, run on the emulated "
                         "Cortex-M55 (board RAM, instructions, bit-equal)")
    ap.add_argument("--repeat", type=int, default=5, help="--patches: latency runs")
    ap.add_argument("--max-overhead", type=float, default=None,
                    help="--patches: the patch search's MAC budget (default 0.3)")
    ap.add_argument("--mve-only", action="store_true",
                    help="--patches --mve: the MVE programs only (no scalar rows)")
    ap.add_argument("--share-values", action="store_true",
                    help="--patches: memsched's program priced and written with equal values "
                         "shared (memsched.executorch.share_values)")
    ap.add_argument("--max-slowdown", default=None,
                    help="--patches: the search's bound on predicted instructions against the "
                         "unpatched program's (default backend_config's; 'none': no bound)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    slow = ... if args.max_slowdown is None else \
        (None if args.max_slowdown.lower() == "none" else float(args.max_slowdown))
    if args.patches:
        names = args.models.split(",") if args.models else ["mobilenet_v2", "mobilenet_v1_025"]
        rows = [r for name in names
                for r in measure_patches(name, args.time_limit, args.calibration, args.mve,
                                         args.repeat, args.max_overhead, not args.mve_only,
                                         args.share_values, slow)]
        print(patch_table(rows))
        if args.mve:
            print()
            print(board_table(rows))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1, default=str)
        return 0
    names = args.models.split(",") if args.models else MODELS
    flows = ["int8"] + ([] if args.no_fp32 else ["fp32"])
    rows = []
    for name in names:
        for flow in flows:
            t0 = time.perf_counter()
            try:
                rows.append(measure(name, flow, args.time_limit, args.calibration,
                                    not args.no_run))
            except Exception as e:  # one bad model must not hide the others' numbers
                rows.append({"model": name, "flow": flow, "error": _short(e),
                             "traceback": traceback.format_exc()})
            r = rows[-1]
            print(f"{name} {flow}: {time.perf_counter() - t0:.1f} s"
                  + (f"  ERROR {r['error']}" if "error" in r else "")
                  + (f"  run: {r.get('run')} {r.get('run_error', '')}" if "run" in r else ""),
                  file=sys.stderr, flush=True)
    print(table(rows))
    for r in rows:
        if "traceback" in r:
            print(f"\n{r['model']} {r['flow']}:\n{r['traceback']}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""ExecuTorch's target memory map under memsched's planner (issue 59):
``backend_config(memory_map=TargetMemoryMap(...))``, the fast bank's traffic first, against
ExecuTorch's own ``banked_memory_planning_pass``, bit-equal in ExecuTorch's runtime and on the
emulated Cortex-M55."""
from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("executorch")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from executorch.exir import ExecutorchBackendConfig, to_edge  # noqa: E402
from executorch.exir.banked_memory_planning import (Bank, TargetMemoryMap,  # noqa: E402
                                                    banked_memory_planning_pass)
from executorch.exir.passes import MemoryPlanningPass  # noqa: E402
from torch import nn  # noqa: E402

import memsched.executorch as mx  # noqa: E402
from cortex_m_models import Block, cba, int8_edge  # noqa: E402
from memsched import board  # noqa: E402
from memsched.executorch.plan.banks import MemoryMapError, read_counts  # noqa: E402
from memsched.executorch.format.read import read_program  # noqa: E402
from memsched.executorch.pte import run_method  # noqa: E402


def _float_edge():
    torch.manual_seed(0)
    m = nn.Sequential(cba(3, 8, 3, 1), Block(8, 8, 1, 2), cba(8, 16, 3, 2), Block(16, 16, 1, 2),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4)).eval()
    x = torch.randn(1, 3, 24, 24)
    return to_edge(torch.export.export(m, (x,))), x


def _lower(edge, config) -> tuple[bytes, list]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        et = copy.deepcopy(edge).to_executorch(config)
    return et.buffer, list(et.executorch_program.execution_plan[0].non_const_buffer_sizes)


def _map(fast: int) -> TargetMemoryMap:
    return TargetMemoryMap([Bank("dtcm", fast, 1), Bank("sram", 8 << 20, 2)])


@pytest.fixture(scope="module")
def float_program():
    edge, x = _float_edge()
    default, sizes = _lower(edge, ExecutorchBackendConfig())
    return edge, x, default, sizes[1]


def test_banks_hold_the_capacities_and_beat_executorchs_greedy(float_program):
    edge, x, default, arena = float_program
    want = run_method(default, "forward", [x])
    for frac in (0.5, 0.25):
        mm = _map(int(arena * frac) // 16 * 16)
        cfg = mx.backend_config(memory_map=mm)
        ours, sizes = _lower(edge, cfg)
        (rep,) = mx.report(cfg).values()
        assert len(sizes) == 3 and sizes[1] <= mm.banks[0].size
        assert [b.name for b in rep.banks] == ["dtcm", "sram"]
        assert [b.used for b in rep.banks] == sizes[1:]
        fast = rep.banks[0]
        assert fast.traffic <= fast.traffic_bound
        assert fast.greedy_traffic is not None and fast.traffic >= fast.greedy_traffic
        assert 0 < rep.fast_share() < 1  # the fast bank is too small for everything
        # ExecuTorch's own banked planner on the same map, for the record: never ahead
        theirs, _ = _lower(edge, ExecutorchBackendConfig(
            memory_planning_pass=banked_memory_planning_pass(mm)))
        assert read_program(ours).program.execution_plan[0].non_const_buffer_sizes == sizes
        got = run_method(ours, "forward", [x])
        assert all(torch.equal(a, b) for a, b in zip(want, got))
        assert all(torch.equal(a, b) for a, b in zip(want, run_method(theirs, "forward", [x])))


def test_everything_in_the_fast_bank_when_the_plan_fits(float_program):
    edge, x, _, arena = float_program
    cfg = mx.backend_config(memory_map=_map(arena))
    _, sizes = _lower(edge, cfg)
    (rep,) = mx.report(cfg).values()
    assert sizes[2] == 0 and rep.fast_share() == 1.0 and rep.banks[0].tensors > 0


def test_a_map_too_small_names_the_bank_and_the_bytes_missing(float_program):
    edge, _, _, arena = float_program
    mm = TargetMemoryMap([Bank("dtcm", 256, 1), Bank("sram", 512, 2)])
    with pytest.raises(MemoryMapError, match=r"'sram' needs [\d,]+ B, [\d,]+ B more"):
        _lower(edge, mx.backend_config(memory_map=mm))
    assert isinstance(MemoryMapError("x"), ValueError)


def test_pins_and_per_bank_alignment_are_kept(float_program):
    """A buffer a pass pinned to the slow bank stays there; the fast bank's 64-byte
    alignment holds for every offset in it."""
    edge, x, default, arena = float_program
    mm = TargetMemoryMap([Bank("dtcm", arena // 2 // 64 * 64, 1, alignment=64),
                          Bank("sram", 8 << 20, 2)])
    cfg = mx.backend_config(memory_map=mm)
    mp = cfg.memory_planning_pass
    run, pinned = mp.run, []

    def pin_then_run(gm, sig=None):  # what a custom pool pass does: set mem_id beforehand
        counts = read_counts(gm)
        for n in gm.graph.nodes:
            s = n.meta.get("spec")
            if n.op == "call_function" and hasattr(s, "mem_id") and counts.get(id(s)):
                s.mem_id = 2
                pinned.append(s)
                break
        return run(gm, sig)

    mp.run = pin_then_run
    ours, _ = _lower(edge, cfg)
    assert pinned and pinned[0].mem_id == 2
    plan = read_program(ours).program.execution_plan[0]
    for v in plan.values:
        t = v.val
        if type(t).__name__ == "Tensor" and t.allocation_info is not None and \
                t.allocation_info.memory_id == 1:
            assert t.allocation_info.memory_offset_low % 64 == 0
    got = run_method(ours, "forward", [x])
    assert all(torch.equal(a, b) for a, b in zip(run_method(default, "forward", [x]), got))


def _small_cortex_m(stem_stride: int):
    """(edge program, input, ExecuTorch's default program, its arena sizes) of a small CNN
    int8 through the Cortex-M flow (the M55's MVE export, the caller's input)."""
    torch.manual_seed(2)
    model = nn.Sequential(cba(3, 8, 3, stem_stride), Block(8, 8, 1, 2), cba(8, 16, 3, 2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))
    edge, x = int8_edge(model, (1, 3, 48, 48), isa="mve", calibration=2)
    default, dsizes = _lower(edge, ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False)))
    return edge, x, default, dsizes


def test_patches_prefer_a_plan_that_fits_the_fast_bank_and_run_bit_equal_on_the_m55(tmp_path):
    """The Cortex-M flow (int8, the M55's MVE export, the caller's input) with patches: a fast
    bank smaller than the unpatched arena but larger than a patched one gets the whole
    arena (100 % of the traffic); the program runs bit-equal to ExecuTorch's default program
    on the board, whose runner gives each planned buffer a span of its own."""
    edge, x, default, dsizes = _small_cortex_m(stem_stride=2)
    mm = _map(dsizes[1] * 3 // 4 // 16 * 16)
    cfg = mx.backend_config(tile_patches=True, share_values=True, alloc_graph_input=False,
                            memory_map=mm, max_slowdown=None)
    ours, sizes = _lower(edge, cfg)
    (rep,) = mx.report(cfg).values()
    assert rep.patches.patched and sizes[1] <= mm.banks[0].size
    assert rep.fast_share() == 1.0 and sizes[2] == 0
    ours = mx.share_values(ours)[0]
    try:
        board.firmware("executorch")
    except board.BoardUnavailable as e:
        pytest.skip(f"host checks passed; the board: {e}")
    ra, a = board.run_pte(default, [x], tmp_path / "default")
    rb, b = board.run_pte(ours, [x], tmp_path / "banked")
    assert ra["status"] == 0 and rb["status"] == 0, (rb.get("error"), rb.get("et_log"))
    assert rb["planned_buffers"] == sizes[1:]
    assert a == b


def test_cli_export_with_a_memory_map(tmp_path, capsys):
    """``memsched export model.pt2 --memory-map dtcm:SIZE:1,sram:8M:2 --measure``: the banks
    in the report and in the file, bit-equal to ExecuTorch's default program; a malformed or
    too small map: one line, exit 2, nothing written."""
    import json

    from memsched.cli import main

    torch.manual_seed(0)
    m = nn.Sequential(cba(3, 8, 3, 1), Block(8, 8, 1, 2), cba(8, 16, 3, 2),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4)).eval()
    x = torch.randn(1, 3, 16, 16)
    src = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(m, (x,)), str(src))
    out = tmp_path / "m.pte"
    assert main(["export", str(src), "-o", str(out), "--memory-map", "dtcm:4K:1,sram:8M:2",
                 "--measure", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    banks = rep["methods"]["method0"]["banks"]
    assert [b["name"] for b in banks] == ["dtcm", "sram"] and banks[0]["bytes"] <= 4096
    assert rep["max_abs_diff"] == 0.0
    sizes = read_program(out.read_bytes()).program.execution_plan[0].non_const_buffer_sizes
    assert list(sizes[1:]) == [b["bytes"] for b in banks]
    for bad in ("dtcm:4K", "dtcm:1K:1,sram:2K:2"):
        bad_out = tmp_path / "bad.pte"
        assert main(["export", str(src), "-o", str(bad_out), "--memory-map", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("memsched: error:"), err
        assert not bad_out.exists()


def test_when_no_plan_fits_the_fast_bank_the_placed_share_decides(monkeypatch, tmp_path):
    """A fast bank smaller than any patched arena: the search places its best plans across
    the banks (`memsched.patches.fast_bank`) and keeps the one whose fast bank serves the
    largest share, never less than the lowest arena's (what it chose before); the program
    runs bit-equal to ExecuTorch's default program on the M55."""
    from memsched.patches import fast_bank

    edge, x, default, dsizes = _small_cortex_m(stem_stride=1)
    mm = _map(dsizes[1] // 6 // 16 * 16)

    def lowered():
        cfg = mx.backend_config(tile_patches=True, share_values=True,
                                alloc_graph_input=False, memory_map=mm)
        prog, sizes = _lower(edge, cfg)
        (rep,) = mx.report(cfg).values()
        return prog, sizes, rep

    ours, sizes, rep = lowered()
    assert rep.patches.patched and rep.patches.peak_after > mm.banks[0].size
    assert sizes[1] <= mm.banks[0].size
    monkeypatch.setattr(fast_bank, "FAST_CANDIDATES", 0)  # the lowest arena, as before
    _, _, before = lowered()
    assert rep.fast_share() >= before.fast_share()
    try:
        board.firmware("executorch")
    except board.BoardUnavailable as e:
        pytest.skip(f"host checks passed; the board: {e}")
    ra, a = board.run_pte(default, [x], tmp_path / "default")
    rb, b = board.run_pte(mx.share_values(ours)[0], [x], tmp_path / "banked")
    assert ra["status"] == 0 and rb["status"] == 0, (rb.get("error"), rb.get("et_log"))
    assert rb["planned_buffers"] == sizes[1:]
    assert a == b

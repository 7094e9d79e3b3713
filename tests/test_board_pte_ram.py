"""`memsched.executorch.memory.ram`: the RAM a ``.pte`` needs, computed from the file, equal to the
byte to what the runtime takes:

* ``cortex-m``: the emulated Cortex-M55's firmware (`memsched.board`, ExecuTorch's runtime with
  the ``cortex_m`` kernels on CMSIS-NN for MVE) runs the program and reports its planned
  buffers and the bytes its method and temp allocators used;
* ``host``: ``benchmarks/executorch/executorch_method_bytes.py``'s harness loads the program with
  the executorch wheel's x86-64 ``libexecutorch`` and allocators that count (operators
  registered as no-op kernels: loading only), the temp allocator's capacity as given.

Programs: a small int8 network lowered by ExecuTorch's default and with memsched's patches,
the input in the arena and not; an MLPerf Tiny model; random int8 stacks; fp32 programs of
portable operators. Where the board cannot run here, the host checks still run and the
board's part is skipped with the reason.
"""
from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("executorch")
pytest.importorskip("tosa_serializer", reason="the Cortex-M quantizer imports tosa-tools")

import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch import nn  # noqa: E402

import memsched.executorch as mx  # noqa: E402
from cortex_m_models import LAYERS, Block, cba, int8_edge, stack  # noqa: E402
from memsched import board  # noqa: E402
from memsched.cli import main  # noqa: E402
from memsched.executorch.errors import PteFileError  # noqa: E402
from memsched.executorch.format.read import read_program  # noqa: E402
from memsched.executorch.memory.ram import program_ram  # noqa: E402

# the host harness: benchmarks/native/method_allocator.cpp (libexecutorch of the wheel, a
# method allocator and a temp allocator that remember how far they went)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "executorch"))
import executorch_method_bytes as host_bytes  # noqa: E402

BOARD_TEMP_POOL = 16 << 20  # the firmware's temp pool: every operator lookup fits


@pytest.fixture(scope="module")
def m55():
    """The emulated Cortex-M55's ExecuTorch firmware, or why it cannot run here (a str)."""
    try:
        return board.firmware("executorch")
    except board.BoardUnavailable as e:
        return str(e)


@pytest.fixture(scope="module")
def harness():
    """The host harness, compiled once per source and wheel (skipped without g++)."""
    if shutil.which("g++") is None:
        pytest.skip("no g++ for the host harness")
    try:
        return host_bytes._tool()
    except subprocess.CalledProcessError as e:
        pytest.skip(f"the host harness does not build: {e.stderr.strip()[-200:]}")


def host_measure(exe, program: bytes, tmp: Path, temp_pool: int = BOARD_TEMP_POOL,
                 method: str = "forward") -> tuple[int, int]:
    """(method allocator bytes, temp allocator peak) of loading ``method`` on the host."""
    r = host_bytes.method_allocator_bytes(program, method, temp_pool)
    return r["bytes"], r["temp_peak"]


def check(m55, harness, program: bytes, inputs, tmp: Path) -> dict:
    """`program_ram` equal to the host harness (x86-64) and to the board (Cortex-M55), byte
    for byte; returns the cortex-m row. The board's part is skipped where it cannot run."""
    host = program_ram(program, "host")["forward"]
    assert host_measure(harness, program, tmp / "host") == \
        (host["method_allocator_bytes"], host["temp_allocator_bytes"])
    row = program_ram(program, "cortex-m")["forward"]
    for r in (host, row):
        assert r["ram_bytes"] == sum(r["planned_buffers"]) + r["method_allocator_bytes"] + \
            r["temp_allocator_bytes"]
    assert host["planned_buffers"] == row["planned_buffers"]
    assert row["method_allocator_bytes"] < host["method_allocator_bytes"]  # 4-byte pointers
    if isinstance(m55, str):
        pytest.skip(f"host checks passed; the board: {m55}")
    res, _ = board.run_pte(program, inputs, tmp / "board")
    assert res["status"] == 0, (res.get("error"), res.get("et_log"))
    assert (res["planned_buffers"], res["method_allocator_bytes"],
            res["temp_allocator_bytes"]) == (row["planned_buffers"],
                                             row["method_allocator_bytes"],
                                             row["temp_allocator_bytes"])
    return row


def _int8_edge(model, shape, seed=0):
    """The Cortex-M flow for the M55's default (MVE) export: (edge program manager after
    ``CortexMPassManager``, channels-last input)."""
    return int8_edge(model, shape, seed, isa="mve", calibration=2)


def _lower(edge, planned_input=True, patched=False) -> bytes:
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if patched:
            config = mx.backend_config(tile_patches=True, grid=(2, 2), time_limit=2.0,
                                       max_overhead=10.0, alloc_graph_input=planned_input)
        else:
            config = ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(
                alloc_graph_input=planned_input))
        buffer = copy.deepcopy(edge).to_executorch(config).buffer
    if patched:
        (rep,) = mx.report(config).values()
        assert rep.patches.grid == "2x2", rep.patches.skipped
    return buffer


def test_small_int8_default_and_patched(m55, harness, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(cba(3, 8, 3, 2), Block(8, 8, 1, 2), cba(8, 16, 3, 2),
                          Block(16, 16, 1, 2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))
    edge, x = _int8_edge(model, (1, 3, 48, 48))
    rows = {}
    for patched in (False, True):
        for planned_input in (True, False):
            program = _lower(edge, planned_input, patched)
            key = (patched, planned_input)
            rows[key] = check(m55, harness, program, [x], tmp_path / str(key))
    # patches add values and instructions: more method-allocator records, smaller arenas
    for planned_input in (True, False):
        default, ours = rows[False, planned_input], rows[True, planned_input]
        assert ours["method_allocator_bytes"] > default["method_allocator_bytes"]
        assert sum(ours["planned_buffers"]) < sum(default["planned_buffers"])
    assert rows[False, False]["unplanned_io_bytes"] == x.numel() * 4  # the caller's input


def test_shared_values_on_the_board(m55, harness, tmp_path):
    """Programs with equal values shared (`memsched.executorch.plan.share`): ExecuTorch's default
    and the patched one priced for sharing (``share_values=True``), the input planned and
    not. Each shared program's RAM is computed exactly (host harness and board), its method
    allocator is smaller than the emitter's, and on the board it computes the emitter's
    default program's outputs bit for bit."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    torch.manual_seed(1)
    model = nn.Sequential(cba(3, 8, 3, 2), Block(8, 8, 1, 2), cba(8, 16, 3, 2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))
    edge, x = _int8_edge(model, (1, 3, 48, 48))
    for planned_input in (True, False):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            default = copy.deepcopy(edge).to_executorch(ExecutorchBackendConfig(
                memory_planning_pass=MemoryPlanningPass(alloc_graph_input=planned_input))).buffer
            config = mx.backend_config(tile_patches=True, grid=(2, 2), max_overhead=10.0,
                                       share_values=True, alloc_graph_input=planned_input)
            patched = copy.deepcopy(edge).to_executorch(config).buffer
        want = None
        for name, program in (("default", default), ("patched", patched)):
            shared, _ = mx.share_values(program)
            tmp = tmp_path / f"{name}-{planned_input}"
            row = check(m55, harness, shared, [x], tmp)
            assert row["method_allocator_bytes"] < \
                program_ram(program)["forward"]["method_allocator_bytes"]
            if want is None:
                res, want = board.run_pte(default, [x], tmp / "emitted")
                assert res["status"] == 0
            res, got = board.run_pte(shared, [x], tmp / "outputs")
            assert res["status"] == 0 and got == want, name


def test_mlperf_tiny_resnet8(m55, harness, tmp_path):
    from executorch.examples.models.mlperf_tiny import ResNet8

    torch.manual_seed(0)
    edge, x = _int8_edge(ResNet8(), (1, 3, 32, 32))
    row = check(m55, harness, _lower(edge), [x], tmp_path)
    assert row["temp_pool_bytes"] >= row["temp_allocator_bytes"] > 0


@settings(max_examples=2, derandomize=True, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(LAYERS), min_size=1, max_size=4), st.booleans())
def test_random_int8_stacks(m55, harness, tmp_path_factory, layers, planned_input):
    torch.manual_seed(len(layers))
    edge, x = _int8_edge(stack(layers), (1, 3, 16, 16))
    check(m55, harness, _lower(edge, planned_input), [x], tmp_path_factory.mktemp("stack"))


class Portable(nn.Module):
    """fp32 operators the firmware registers (portable kernels): cat (a tensor list), pad and
    mean (int lists), slices, permute, scalars, two inputs and two outputs."""

    def forward(self, a, b):
        c = torch.cat([a, b], 1)
        d = torch.nn.functional.pad(c, (1, 1, 1, 1))
        e = d[:, :, 1:-1, :].permute(0, 2, 3, 1)
        return torch.relu(e * 2.0 - 1.0).mean(dim=(1, 2)), (a + b[:, :2]).clamp(-1, 1)


def _portable(planned_input=True):
    from executorch.exir import ExecutorchBackendConfig, to_edge
    from executorch.exir.passes import MemoryPlanningPass

    a, b = torch.randn(1, 2, 5, 6), torch.randn(1, 3, 5, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = to_edge(torch.export.export(Portable(), (a, b))).to_executorch(
            ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(
                alloc_graph_input=planned_input)))
    return p.buffer, [a, b]


def test_fp32_portable_programs(m55, harness, tmp_path):
    torch.manual_seed(0)
    for planned_input in (True, False):
        program, inputs = _portable(planned_input)
        check(m55, harness, program, inputs, tmp_path / str(planned_input))


class Lists(nn.Module):
    """An optional-tensor list (``index.Tensor``), ``topk`` (the one portable kernel that
    takes temp memory while it runs), tensor and int lists."""

    def forward(self, x, idx):
        v, i = torch.topk(x, 2, dim=-1)
        return x[idx] * 2.0, v, i, torch.cat([x, x], 0).sum(dim=[0])


def test_lists_and_dynamic_shapes_on_host(harness, tmp_path):
    """Values the int8 programs do not have (optional-tensor lists, tensors of bounded
    dynamic shape, whose sizes and dim order the runtime copies): host only (the firmware
    does not register these portable kernels)."""
    from executorch.exir import to_edge

    x, idx = torch.randn(6, 5), torch.tensor([0, 2, 4])
    dynamic = {"x": {0: torch.export.Dim("n", min=2, max=8)}, "idx": None}
    kinds = set()
    for shapes in (None, dynamic):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = to_edge(torch.export.export(Lists(), (x, idx), dynamic_shapes=shapes)) \
                .to_executorch().buffer
        plan = read_program(program).program.execution_plan[0]
        kinds |= {(type(v.val).__name__, getattr(v.val, "shape_dynamism", 0))
                  for v in plan.values}
        row = program_ram(program, "host")["forward"]
        assert host_measure(harness, program, tmp_path) == (row["method_allocator_bytes"],
                                                            row["temp_allocator_bytes"])
    assert {("OptionalTensorList", 0), ("TensorList", 0), ("Tensor", 1)} <= kinds


def test_small_temp_pool_moves_lookups_into_the_method_allocator(harness, tmp_path):
    """A temp pool under ``temp_pool_bytes`` (here: the temp peak itself, and none at all):
    the runtime looks operators up in the method allocator instead, where the bytes stay."""
    torch.manual_seed(0)
    program, _ = _portable()
    row = program_ram(program, "host")["forward"]
    assert row["temp_pool_bytes"] > row["temp_allocator_bytes"]
    for pool in (row["temp_allocator_bytes"], 0):
        small = program_ram(program, "host", temp_pool=pool)["forward"]
        assert small["method_allocator_bytes"] > row["method_allocator_bytes"]
        assert host_measure(harness, program, tmp_path, temp_pool=pool) == \
            (small["method_allocator_bytes"], small["temp_allocator_bytes"])
    assert row["method_allocator_bytes_at_temp_peak"] == program_ram(
        program, "host", temp_pool=row["temp_allocator_bytes"])["forward"][
        "method_allocator_bytes"]
    # a pool of temp_pool_bytes keeps every lookup in the temp allocator
    exact = program_ram(program, "host", temp_pool=row["temp_pool_bytes"])["forward"]
    assert exact["method_allocator_bytes"] == row["method_allocator_bytes"]


@settings(max_examples=40, derandomize=True, deadline=None)
@given(st.data())
def test_malformed_files_are_one_error(data):
    """Untrusted bytes: a result or `PteFileError` (a ValueError), nothing else."""
    program = _portable_bytes()
    cut = data.draw(st.integers(0, len(program)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(program) - 1),
                                         st.integers(1, 255)), max_size=4))
    bad = bytearray(program[:cut] if data.draw(st.booleans()) else program)
    for pos, x in flips:
        if pos < len(bad):
            bad[pos] ^= x
    try:
        rows = program_ram(bytes(bad), "cortex-m")
    except PteFileError:
        return
    for row in rows.values():
        assert row["ram_bytes"] >= 0


_CACHE: dict = {}


def _portable_bytes() -> bytes:
    if "portable" not in _CACHE:
        torch.manual_seed(0)
        _CACHE["portable"] = _portable()[0]
    return _CACHE["portable"]


def test_not_a_program_and_bad_target():
    with pytest.raises(PteFileError):
        program_ram(b"\0" * 64)
    with pytest.raises(PteFileError):
        program_ram(_portable_bytes()[:200])
    with pytest.raises(ValueError):
        program_ram(_portable_bytes(), "riscv")


def test_cli_analyze_reports_ram(tmp_path, capsys):
    path = tmp_path / "portable.pte"
    path.write_bytes(_portable_bytes())
    assert main(["analyze", str(path), "--json", "--time-limit", "1"]) == 0
    (method,) = json.loads(capsys.readouterr().out)["methods"].values()
    want = program_ram(str(path))["forward"]
    for key in ("planned_buffers", "method_allocator_bytes", "temp_allocator_bytes",
                "ram_bytes", "target"):
        assert method[key] == want[key], key
    assert method["target"] == "cortex-m" and "planned_bytes" in method  # old fields kept
    assert main(["analyze", str(path), "--json", "--time-limit", "1", "--target",
                 "host"]) == 0
    (method,) = json.loads(capsys.readouterr().out)["methods"].values()
    assert method["target"] == "host"
    assert method["ram_bytes"] == program_ram(str(path), "host")["forward"]["ram_bytes"]
    assert main(["analyze", str(path), "--time-limit", "1"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "RAM on cortex-m" in x]
    assert lines == [f"  RAM on cortex-m: {want['ram_bytes']:,} B = planned "
                     f"{sum(want['planned_buffers']):,} + method allocator "
                     f"{want['method_allocator_bytes']:,} + temp allocator "
                     f"{want['temp_allocator_bytes']:,}"]


def test_cli_bad_target_is_one_line(tmp_path, capsys):
    path = tmp_path / "portable.pte"
    path.write_bytes(_portable_bytes())
    assert main(["analyze", str(path), "--target", "bogus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bogus" in err[0]

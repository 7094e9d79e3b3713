"""`memsched.executorch.memory.instructions`: the instructions of one ``Method::execute`` on the
Cortex-M55 predicted from a ``.pte`` (and from the edge graph, for the patch search), held
within 5 % of the emulated board (`memsched.board`) on one small default and one small
patched Cortex-M program; the board part skips with the reason where it cannot run."""
from __future__ import annotations

import copy
import json
import warnings

import pytest

pytest.importorskip("executorch")
pytest.importorskip("tosa_serializer", reason="the Cortex-M quantizer imports tosa-tools")

import memsched.executorch as mx  # noqa: E402
from cortex_m_models import int8_edge, stack  # noqa: E402
from memsched import board  # noqa: E402
from memsched.cli import main  # noqa: E402
from memsched.executorch.memory import instructions as ins  # noqa: E402
from memsched.executorch.format.pte import read_pte, write_pte  # noqa: E402

LAYERS = ["conv3", "dw3", "conv3s2"]


@pytest.fixture(scope="module")
def programs():
    """(default program, memsched-patched program (a 2x2 grid), input, the patch pass's
    report) of a small int8 stack, the caller's input (the M55's MVE export)."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge, x = int8_edge(stack(LAYERS), (1, 3, 16, 16), 0, isa="mve", calibration=1)
        base = copy.deepcopy(edge).to_executorch(ExecutorchBackendConfig(
            memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))).buffer
        cfg = mx.backend_config(tile_patches=True, alloc_graph_input=False,
                                share_values=True, max_slowdown=None, grid=(2, 2))
        ours = mx.share_values(copy.deepcopy(edge).to_executorch(cfg).buffer)[0]
    tile = next(iter(mx.report(cfg).values())).patches
    return base, ours, x, tile


def test_op_instructions_api():
    T = ins.T
    x, out = T((1, 16, 12, 12), "int8", (0, 2, 3, 1)), T((1, 32, 12, 12), "int8", (0, 2, 3, 1))
    w = T((32, 1, 1, 16), "int8")
    conv = ["cortex_m::quantized_conv2d", [x, w, None, [1, 1], [0, 0], [1, 1], 0, 0, None,
                                           None, -128, 127, T((0,), "uint8"), out]]
    n = ins.op_instructions(*conv)
    assert n and n > 0
    # more output channels, more instructions; the operator's spellings agree
    wide = ins.op_instructions(conv[0], conv[1][:1] + [T((64, 1, 1, 16), "int8")]
                               + conv[1][2:-1] + [T((1, 64, 12, 12), "int8", (0, 2, 3, 1))])
    assert wide > n
    assert ins.op_instructions("cortex_m::quantized_conv2d.out", conv[1]) == n
    assert ins.op_instructions("cortex_m.quantized_conv2d.default", conv[1]) == n
    # a kernel without a model is None (named by program_instructions), never guessed
    assert ins.op_instructions("aten::tanh", [x, x]) is None
    assert ins.op_instructions("cortex_m::quantized_conv2d", [x]) is None


def test_unknown_kernels_are_named(programs):
    base = programs[0]
    pte = read_pte(base)
    plan = pte.program.execution_plan[0]
    plan.operators[0].name = "aten::made_up"  # the first call's operator: no model
    (method,) = ins.program_instructions(write_pte(pte)).values()
    (before,) = ins.program_instructions(base).values()
    assert method.unknown == {"aten::made_up.out": 1}
    assert method.total < before.total
    assert before.unknown == {}
    first = [r for r in method.per_instruction if r["instructions"] is None]
    assert [r["index"] for r in first] == [0]
    assert before.total == ins.EXECUTE_INSTRUCTIONS + sum(
        r["instructions"] for r in before.per_instruction)


def test_search_prices_what_the_program_predicts(programs):
    """The patch search's time model (`ExecutorchTime` on the edge graph) gives the default
    and the patched program the figures `program_instructions` gives their .pte files."""
    base, ours, _, tile = programs
    assert tile.cpu_instructions_before == ins.program_instructions(base)["forward"].total
    assert tile.cpu_instructions == ins.program_instructions(ours)["forward"].total
    assert tile.grid  # the stack is patched


def test_analyze_reports_instructions(programs, tmp_path, capsys):
    path = tmp_path / "m.pte"
    path.write_bytes(programs[1])
    assert main(["analyze", str(path), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["methods"]["forward"]
    assert row["cpu_instructions"] == ins.program_instructions(programs[1])["forward"].total
    assert row["cpu_instructions_unknown"] == {}
    assert main(["analyze", str(path)]) == 0
    assert "instructions per execute on Cortex-M55" in capsys.readouterr().out
    assert main(["analyze", str(path), "--target", "host", "--json"]) == 0
    assert "cpu_instructions" not in json.loads(capsys.readouterr().out)["methods"]["forward"]


def test_board_within_5_percent(programs, tmp_path):
    try:
        board.firmware("executorch")
    except board.BoardUnavailable as e:
        pytest.skip(f"the board: {e}")
    base, ours, x, _ = programs
    for label, buf in (("default", base), ("patched", ours)):
        res, _ = board.run_pte(buf, [x], tmp_path / label)
        assert res["status"] == 0, res
        got = int(res["execute_instructions"])
        want = ins.program_instructions(buf)["forward"].total
        assert abs(want / got - 1) < 0.05, (label, want, got)

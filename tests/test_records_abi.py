"""The patch search prices ExecuTorch's method-allocator records at the target's ABI
(`memsched.executorch.patch.records`, issue 51): a Cortex-M graph at the 32-bit one, a portable
graph at the host's, each what `memsched.executorch.memory.ram.program_ram` computes for the written
programs (itself equal to the emulated Cortex-M55 and the x86-64 runtime to the byte,
tests/test_board_pte_ram.py).

The bound: on the host ABI the search's "records added" equals program_ram's delta between
the patched program and the same lowering without patches exactly; on the 32-bit ABI an int
list's ``int64`` items are 8-aligned after 4-byte pointers, and the padding before a call's
first list depends on the values before it: at most 4 B per call of the patched program.
"""
from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("executorch")
torch = pytest.importorskip("torch")
nn = torch.nn

import memsched.executorch as mx  # noqa: E402
from memsched.executorch.patch.tile import TilePatchesError  # noqa: E402
from memsched.executorch.format.read import read_program  # noqa: E402
from memsched.executorch.memory.ram import ABIS, program_ram  # noqa: E402
from memsched.executorch.patch.records import (ExecutorchRecords, Prices, default_target,  # noqa: E402
                                               node_call, node_call_bytes)

PAD_PER_CALL = {"host": 0, "cortex-m": 4}  # the bound per call of the patched program


def _fp32_edge():
    from executorch.exir import to_edge

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.ReLU6(),
                          nn.Conv2d(8, 8, 3, 1, 1, groups=8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(8, 16, 1)).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        return to_edge(torch.export.export(model, (x,))), x


def _method_bytes(buf: bytes, target: str) -> int:
    return program_ram(buf, target)["forward"]["method_allocator_bytes"]


def _calls(buf: bytes) -> int:
    return sum(len(c.instructions) for c in read_program(buf).program.execution_plan[0].chains)


def test_prices_at_the_32_bit_abi_are_below_the_hosts():
    """Every call of a portable graph (convolution, batch norm's tuple, max pool with indices,
    relu, ...) and every node a patch rewrite writes costs less at cortex-m (TensorImpl 32 B,
    4-byte pointers) than on the host; the sizes come from `ram.ABIS`, nowhere else."""
    edge, _ = _fp32_edge()
    gm = edge.exported_program().graph_module
    assert default_target(gm.graph.nodes) == "host"
    calls = [n for n in gm.graph.nodes if node_call(n) is not None]
    assert len(calls) >= 6
    for n in calls:
        cm, host = node_call_bytes(n, "cortex-m"), node_call_bytes(n, "host")
        assert 0 < cm < host, (n.name, cm, host)
    relu = next(n for n in calls if "relu" in n.name)
    assert (node_call_bytes(relu, "host"), node_call_bytes(relu, "cortex-m")) == (144, 88)
    host, cm = Prices("host"), Prices("cortex-m")
    for name in ("slice", "window", "view"):
        assert getattr(cm, name)() < getattr(host, name)()
    assert cm.concat(3) < host.concat(3) and cm.pad(6) < host.pad(6)
    # the instruction's records follow the ABI table: OpFunction + InstructionArgs
    for p in (host, cm):
        assert p.call([]) - p.values([("Tensor", 4)]) == \
            p.abi.pointer[0] * 3 + p.abi.array_ref[0]
    assert ABIS["cortex-m"].tensor_impl[0] == 32 and ABIS["cortex-m"].pointer[0] == 4
    assert ExecutorchRecords(None, {}, target="cortex-m").target == "cortex-m"


def test_target_option_checked_once_and_chosen_per_graph():
    """``backend_config(target=...)``: "cortex-m", "host" or None (per graph); anything else
    raises the patch options' error (a ValueError), with or without patches."""
    for bad in ("arm", "Cortex-M", 32):
        with pytest.raises(TilePatchesError):
            mx.backend_config(target=bad)
        with pytest.raises(ValueError):
            mx.backend_config(tile_patches=True, target=bad)
    edge, _ = _fp32_edge()
    for target, want in ((None, "host"), ("cortex-m", "cortex-m")):
        config = mx.backend_config(tile_patches=True, grid="2x2", time_limit=3.0,
                                   target=target)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            copy.deepcopy(edge).to_executorch(config)
        rep = list(mx.report(config).values())[0].patches
        assert rep.records_target == want and f"records at {want}" in rep.summary()


# ------------------------------------------------------- the Cortex-M program, both ABIs
@pytest.fixture(scope="module")
def cortex_m_edge():
    pytest.importorskip("tosa_serializer", reason="the Cortex-M quantizer imports tosa-tools")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import test_executorch_cortex_m as cm

    edge, x = cm._edge(cm._small(), (1, 3, 48, 48), isa="mve")  # the M55's default export
    gm = edge.exported_program().graph_module
    assert default_target(gm.graph.nodes) == "cortex-m"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = copy.deepcopy(edge).to_executorch(
            mx.backend_config(time_limit=3.0, alloc_graph_input=False)).buffer
    return edge, base


@pytest.mark.parametrize("target", ["cortex-m", "host"])
@pytest.mark.parametrize("split", [None, "cortex_m_quantize_per_tensor_default"])
def test_estimated_records_match_program_ram(cortex_m_edge, target, split):
    """The search's "+N B of method-allocator records" for a forced 2x2 grid equals
    program_ram's delta (patched minus the same lowering unpatched, the caller's input) at the
    same ABI: exactly on the host, within 4 B per call at cortex-m. ``split`` at the quantize:
    the region starts at the user input outside the plan, whose NHWC view is an ``et_view``
    call, not a static view."""
    edge, base = cortex_m_edge
    config = mx.backend_config(tile_patches=True, grid="2x2", split=split, max_overhead=10.0,
                               time_limit=3.0, alloc_graph_input=False,
                               target=None if target == "cortex-m" else target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = copy.deepcopy(edge).to_executorch(config).buffer
    rep = list(mx.report(config).values())[0].patches
    assert rep.patched and rep.records_target == target, rep.skipped
    exact = _method_bytes(ours, target) - _method_bytes(base, target)
    assert exact > 0
    assert abs(rep.records_added - exact) <= PAD_PER_CALL[target] * _calls(ours), \
        (target, rep.records_added, exact)
    if target == "cortex-m":  # and the 32-bit records are what the board takes, not the host's
        assert rep.records_added < _method_bytes(ours, "host") - _method_bytes(base, "host")

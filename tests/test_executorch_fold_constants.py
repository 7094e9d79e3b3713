"""What the report says is what the program plans (issue 45, item 4, fp32 flow).

A small fp32 network in plain torch.nn (conv-BN-ReLU6 stack, adaptive average pool, flatten,
``nn.Linear`` classifier), exported the standard way (no ``do_quant_fusion_and_const_prop``):
its classifier weight is transposed by a ``permute_copy`` of a parameter, which ExecuTorch's
default lowering computes at run time into the planned arena. ``backend_config`` folds it
into a constant (`memsched.executorch.fold_constants`), so the patch search's modelled peak
and the plan report equal the arena read back from the written program, and the program
still computes bit for bit what ExecuTorch's default program computes.
"""
from __future__ import annotations

import copy

import pytest

pytest.importorskip("executorch")
torch = pytest.importorskip("torch")
nn = torch.nn

from executorch.exir import to_edge  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402

import memsched.executorch as mx  # noqa: E402
from memsched.executorch import pte  # noqa: E402


def _cbr(cin, cout, stride=1, groups=1):
    return [nn.Conv2d(cin, cout, 3, stride, 1, groups=groups, bias=False),
            nn.BatchNorm2d(cout), nn.ReLU6()]


def _model():
    torch.manual_seed(45)
    model = nn.Sequential(*_cbr(3, 16, 2), *_cbr(16, 16, 1, 16), *_cbr(16, 24, 2),
                          *_cbr(24, 32, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(32, 2000))
    for m in model.modules():  # non-trivial batch-norm statistics
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model.eval(), torch.randn(1, 3, 80, 80)


def _run(buffer, x):
    method = Runtime.get().load_program(buffer).load_method("forward")
    return [o.clone() for o in method.execute([x])]


def _operators(buffer) -> list[str]:
    plan = pte.read_program(buffer).program.execution_plan[0]
    return [op.name for op in plan.operators]


@pytest.fixture(scope="module")
def lowered():
    model, x = _model()
    with torch.no_grad():
        edge = to_edge(torch.export.export(model, (x,)))  # the standard way: no const prop
    default = copy.deepcopy(edge).to_executorch()
    return edge, x, default


@pytest.mark.parametrize("tile", [True, False], ids=["tile_patches", "plain"])
def test_report_equals_written_plan(lowered, tile):
    edge, x, default = lowered
    assert "aten::permute_copy" in _operators(default.buffer)  # the weight transpose
    cfg = mx.backend_config(time_limit=3, tile_patches=tile)
    et = copy.deepcopy(edge).to_executorch(cfg)
    planned = sum(pte.planned_sizes(et.buffer)["forward"][1:])
    (rep,) = mx.report(cfg).values()
    got, want = _run(et.buffer, x), _run(default.buffer, x)
    print(f"\n{'tile_patches' if tile else 'plain'}: planned {planned:,} B (default "
          f"{sum(pte.planned_sizes(default.buffer)['forward'][1:]):,} B), report "
          f"{rep.planned_bytes:,} B, order peak {rep.order.peak:,} B"
          + (f", {rep.patches.summary()}" if tile else ""))
    if tile:  # the search's modelled peak is the written arena
        assert rep.patches.patched, rep.patches.skipped
        assert rep.patches.peak_after == planned
    assert rep.planned_bytes == planned
    assert rep.order is not None and rep.order.peak == planned
    assert "aten::permute_copy" not in _operators(et.buffer)  # folded into a constant
    assert len(got) == len(want) and all(torch.equal(u, v) for u, v in zip(got, want))


def test_caller_keeps_the_choice(lowered):
    """``do_quant_fusion_and_const_prop=False`` given explicitly: ExecuTorch's order of
    things, the transpose computed at run time."""
    edge, x, _ = lowered
    cfg = mx.backend_config(time_limit=3, do_quant_fusion_and_const_prop=False)
    assert cfg.do_quant_fusion_and_const_prop is False
    et = copy.deepcopy(edge).to_executorch(cfg)
    assert "aten::permute_copy" in _operators(et.buffer)

"""Folding that keeps outputs (issue 60, item 6).

``backend_config()`` folds only value-exact operators on constants (copies and
rearrangements: `memsched.executorch.fold_constants.LAYOUT_OPS`), so its program computes bit
for bit what ExecuTorch's default program (``to_executorch()``) computes, on models in plain
torch.nn: attention (``nn.MultiheadAttention`` and hand-written q/k/v scaled by a constant's
square root), LayerNorm, conv + BatchNorm2d, and constant arithmetic that ExecuTorch's own
folding (``fold_constants="arithmetic"``) computes on the host with other bits (a swin v2-style
position-bias MLP on a constant table, ``exp`` of a parameter). Layout-only chains on
constants still fold: fewer instructions than the default program.
"""
from __future__ import annotations

import copy
import math

import pytest

pytest.importorskip("executorch")
torch = pytest.importorskip("torch")
nn = torch.nn

from executorch.exir import to_edge  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402

import memsched.executorch as mx  # noqa: E402
from memsched.executorch import fold_constants as fc  # noqa: E402
from memsched.executorch import pte  # noqa: E402


class MHA(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.att = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.att(x, x, x, need_weights=False)[0])


class HandAttention(nn.Module):
    """q/k/v from one projection, softmax, scaled by 1 / sqrt of a constant buffer."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.qkv, self.proj, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads
        self.register_buffer("head_dim", torch.tensor(float(d // heads)))

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-2, -1)) / self.head_dim.sqrt()
        return self.proj((a.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))


class LayerNormMLP(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 64), nn.Linear(64, d)
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))


class ConstantArithmetic(nn.Module):
    """swin v2's sources of folded bits: a position-bias MLP on a constant coordinate table,
    ``exp`` of a clamped logit scale; plus ``x * (c1 / c2)`` and an ``rsqrt`` of a buffer."""

    def __init__(self, window=7, heads=4, n=64):
        super().__init__()
        r = torch.arange(-window + 1, window, dtype=torch.float32)
        coords = torch.stack(torch.meshgrid(r, r, indexing="ij"), -1).reshape(-1, 2)
        self.register_buffer("table", torch.sign(coords) * torch.log2(coords.abs() + 1) / 3)
        self.mlp = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, heads, bias=False))
        self.logit_scale = nn.Parameter(torch.log(10 * torch.rand(heads) + 1))
        g = torch.Generator().manual_seed(3)
        self.register_buffer("c1", torch.rand(n, generator=g) * 10 + 0.1)
        self.register_buffer("c2", torch.rand(n, generator=g) * 3 + 0.1)

    def forward(self, x):  # x: (n, heads)
        bias = 16 * torch.sigmoid(self.mlp(self.table)).mean(0)
        scale = torch.clamp(self.logit_scale, max=math.log(100.0)).exp()
        y = x * scale + bias
        return y * (self.c1 / self.c2).unsqueeze(1) + self.c2.rsqrt().unsqueeze(1)


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU6())
        self.head = nn.Linear(16, 10)
        for m in self.modules():  # non-trivial batch-norm statistics
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


class LayoutChain(nn.Module):
    """Only layout operators on constants: transpose, reshape, slice, expand, cat."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4))
        self.register_buffer("b", torch.randn(4, 1))

    def forward(self, x):  # x: (2, 4, 6)
        w = self.w.t().reshape(4, 6)[:, 1:]  # (4, 5)
        c = torch.cat([w, self.b], 1).unsqueeze(0).expand(2, 4, 6)
        return x * c


MODELS = {
    "multihead-attention": (MHA, (2, 5, 32)),
    "hand-attention": (HandAttention, (2, 5, 32)),
    "layernorm": (LayerNormMLP, (2, 5, 32)),
    "constant-arithmetic": (ConstantArithmetic, (64, 4)),
    "conv-batchnorm": (ConvBN, (1, 3, 16, 16)),
    "layout-chain": (LayoutChain, (2, 4, 6)),
}


def _run(buffer, x):
    method = Runtime.get().load_program(buffer).load_method("forward")
    return [o.clone() for o in method.execute([x])]


def _folds(cfg) -> list:
    return [p for p in cfg.passes or [] if type(p).__name__ == "_FoldLayoutConstantsPass"]


def _plan(buffer):
    return pte.read_program(buffer).program.execution_plan[0]


def _instructions(buffer) -> int:
    return sum(len(c.instructions) for c in _plan(buffer).chains)


def _operators(buffer) -> set[str]:
    return {op.name for op in _plan(buffer).operators}


def _lower(name):
    model_cls, shape = MODELS[name]
    torch.manual_seed(60)
    model, x = model_cls().eval(), torch.randn(*shape)
    with torch.no_grad():
        edge = to_edge(torch.export.export(model, (x,), strict=True))
    return edge, x


@pytest.mark.parametrize("name", list(MODELS))
def test_default_folding_is_bit_equal(name):
    edge, x = _lower(name)
    default = copy.deepcopy(edge).to_executorch()
    cfg = mx.backend_config(time_limit=3)
    assert cfg.do_quant_fusion_and_const_prop is False
    et = copy.deepcopy(edge).to_executorch(cfg)
    (fold,) = _folds(cfg)
    got, want = _run(et.buffer, x), _run(default.buffer, x)
    print(f"\n{name}: {fold.folded} folded, instructions {_instructions(default.buffer)} -> "
          f"{_instructions(et.buffer)}")
    assert len(got) == len(want) and all(torch.equal(u, v) for u, v in zip(got, want))
    # every model here has a layout operator on constants (a weight transpose at least)
    assert fold.folded[0] > 0
    assert _instructions(et.buffer) < _instructions(default.buffer)
    # what was folded is layout only: every computing operator is still run
    computing = _operators(default.buffer) - fc.LAYOUT_OPS
    assert computing <= _operators(et.buffer)


def test_layout_chain_folds_into_one_constant():
    edge, x = _lower("layout-chain")
    default = copy.deepcopy(edge).to_executorch()
    et = copy.deepcopy(edge).to_executorch(mx.backend_config(time_limit=3))
    assert {"aten::permute_copy", "aten::cat", "aten::expand_copy"} <= _operators(default.buffer)
    assert _operators(et.buffer) == {"aten::mul"}
    assert torch.equal(_run(et.buffer, x)[0], _run(default.buffer, x)[0])


def test_arithmetic_folding_is_an_option():
    """``fold_constants="arithmetic"`` (ExecuTorch's constant propagation): fewer operators,
    the host's bits: here not those of the portable kernels."""
    edge, x = _lower("constant-arithmetic")
    default = copy.deepcopy(edge).to_executorch()
    cfg = mx.backend_config(time_limit=3, fold_constants="arithmetic")
    assert cfg.do_quant_fusion_and_const_prop is True
    assert not _folds(cfg)
    et = copy.deepcopy(edge).to_executorch(cfg)
    got, want = _run(et.buffer, x)[0], _run(default.buffer, x)[0]
    diff = (got - want).abs().max().item()
    print(f"\narithmetic folding: instructions {_instructions(default.buffer)} -> "
          f"{_instructions(et.buffer)}, max abs diff {diff:.3g}")
    assert _operators(et.buffer) <= {"aten::mul", "aten::add"}
    assert not torch.equal(got, want)  # the reason it is not the default
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4)  # equal up to rounding


@pytest.mark.parametrize("kwargs, mode", [
    ({}, "layout"), ({"fold_constants": True}, "layout"),
    ({"fold_constants": "layout"}, "layout"), ({"fold_constants": "arithmetic"}, "arithmetic"),
    ({"fold_constants": False}, "none"), ({"fold_constants": "none"}, "none"),
    ({"do_quant_fusion_and_const_prop": True}, "arithmetic"),  # the earlier spelling
    ({"do_quant_fusion_and_const_prop": False}, "none"),
    ({"fold_constants": "arithmetic", "do_quant_fusion_and_const_prop": True}, "arithmetic"),
])
def test_modes(kwargs, mode):
    cfg = mx.backend_config(time_limit=3, **kwargs)
    assert cfg.do_quant_fusion_and_const_prop is (mode == "arithmetic")
    assert len(_folds(cfg)) == (mode == "layout")


def test_bad_modes():
    with pytest.raises(ValueError):
        mx.backend_config(fold_constants="all")
    with pytest.raises(TypeError):
        mx.backend_config(fold_constants="layout", do_quant_fusion_and_const_prop=True)
    with pytest.raises(TypeError):
        mx.backend_config(fold_constants="arithmetic", do_quant_fusion_and_const_prop=False)


def test_conversions_are_not_layout():
    """A ``_to_copy`` that changes the dtype rounds: not folded by default; one that keeps
    it is."""

    class Cast(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("c", torch.randn(8) * 1000)

        def forward(self, x):
            return x + self.c.to(torch.float16).to(torch.float32) + self.c.clone()

    x = torch.randn(8)
    with torch.no_grad():
        edge = to_edge(torch.export.export(Cast().eval(), (x,), strict=True))
    nodes = {n.name: fc.value_exact(n) for n in edge.exported_program().graph.nodes
             if n.op == "call_function"}
    assert any(not v for k, v in nodes.items() if "copy" in k), nodes  # the conversions
    default = copy.deepcopy(edge).to_executorch()
    cfg = mx.backend_config(time_limit=3)
    et = copy.deepcopy(edge).to_executorch(cfg)
    assert cfg.passes[0].folded == [1]  # the clone
    assert torch.equal(_run(et.buffer, x)[0], _run(default.buffer, x)[0])


def test_split_of_a_constant_returned():
    """A chunk of a split constant that the method returns stays computed at run time; the
    chunk the graph reads folds."""

    class Split(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(6, 4))

        def forward(self, x):
            a, b = self.w.split([2, 4])
            return x * a.t().sum(0).sum(), b

    x = torch.randn(3)
    with torch.no_grad():
        edge = to_edge(torch.export.export(Split().eval(), (x,), strict=True))
    default = copy.deepcopy(edge).to_executorch()
    cfg = mx.backend_config(time_limit=3)
    et = copy.deepcopy(edge).to_executorch(cfg)
    got, want = _run(et.buffer, x), _run(default.buffer, x)
    assert cfg.passes[0].folded == [2]  # a, a.t()
    assert len(got) == 2 and all(torch.equal(u, v) for u, v in zip(got, want))



def test_unused_constants_are_dropped():
    """The float weights the Cortex-M quantizer replaced stay constants no operator reads;
    they leave the program (a value, a tensor record and data each), as under ExecuTorch's own
    folding, even where nothing else folds: as few values as fold_constants="arithmetic"."""
    pytest.importorskip("tosa_serializer", reason="the Cortex-M quantizer imports tosa-tools")
    from cortex_m_models import cba, int8_edge, stack

    edge, x = int8_edge(stack([cba(3, 8, 3, 2), cba(8, 8, 3, 1, 8), cba(8, 16, 1)]),
                        (1, 3, 16, 16))
    values = {}
    for mode in ("layout", "arithmetic"):
        buf = copy.deepcopy(edge).to_executorch(
            mx.backend_config(time_limit=3, fold_constants=mode)).buffer
        plan = _plan(buf)
        read = set()
        for ins in plan.chains[0].instructions:
            read |= set(getattr(ins.instr_args, "args", None) or [])
        values[mode] = [k for k, v in enumerate(plan.values)
                        if type(v.val).__name__ == "Tensor" and k not in read and
                        k not in set(plan.inputs) | set(plan.outputs)]
    assert values["layout"] == values["arithmetic"] == []

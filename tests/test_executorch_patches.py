"""Patch-based execution in ExecuTorch (`memsched.executorch.patch.tile`, issue 33).

Small plain torch.nn stacks (MobileNetV2-like inverted residuals with ReLU6, stride-2
depthwise convolutions, max and average pooling, channel concatenation) are exported, lowered
with ``backend_config(tile_patches=True, grid=...)`` and with ExecuTorch's default config; both
programs run in ``executorch.runtime`` on the same input: fp32 outputs within 1e-5 (the max abs
difference is printed, with whether they are bit-equal), planned bytes read back from the
written program smaller. Seeded random stacks check the rewrite against the unpatched program
for forced grids. A graph the pass cannot patch is returned unchanged, with the reason.
"""
from __future__ import annotations

import random

import pytest

pytest.importorskip("executorch")
torch = pytest.importorskip("torch")
nn = torch.nn

from executorch.exir import ExecutorchBackendConfig, to_edge  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402

import memsched.executorch as mx  # noqa: E402
from memsched.patches import PatchOptions  # noqa: E402
from memsched.executorch import pte  # noqa: E402
from memsched.executorch.patch.tile import TilePatchesPass, describe_graph  # noqa: E402

TOL = 1e-5


# ------------------------------------------------------------------ models
class IR(nn.Module):
    """MobileNetV2 inverted residual: 1x1 expand, ReLU6, depthwise kxk (stride s), ReLU6,
    1x1 project, residual add when shapes allow."""

    def __init__(self, cin, cout, stride=1, expand=4, k=3):
        super().__init__()
        h = cin * expand
        self.body = nn.Sequential(nn.Conv2d(cin, h, 1), nn.ReLU6(),
                                  nn.Conv2d(h, h, k, stride, k // 2, groups=h), nn.ReLU6(),
                                  nn.Conv2d(h, cout, 1))
        self.res = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.res else y


class MobileLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU6())
        self.b1 = IR(8, 8, 1)
        self.b2 = IR(8, 12, 2)
        self.b3 = IR(12, 12, 1)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.b4 = IR(12, 16, 1)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        y = self.b3(self.b2(self.b1(self.stem(x))))
        y = self.b4(self.pool(y))
        return self.head(y.mean((2, 3)))


def _edge(model, x):
    with torch.no_grad():
        return to_edge(torch.export.export(model.eval(), (x,)))


def _run(buffer, x):
    method = Runtime.get().load_program(buffer).load_method("forward")
    return [o.clone() for o in method.execute([x])]


def _planned(buffer) -> int:
    return sum(pte.planned_sizes(buffer)["forward"])


def _compare(model, x, config):
    """(patched outputs, default outputs, patched planned bytes, default planned bytes)."""
    et = _edge(model, x).to_executorch(config)
    base = _edge(model, x).to_executorch(ExecutorchBackendConfig())
    return _run(et.buffer, x), _run(base.buffer, x), _planned(et.buffer), \
        _planned(base.buffer)


def _max_diff(a, b) -> float:
    return max(float((u - v).abs().max()) for u, v in zip(a, b))


# ------------------------------------------------------------------ end to end
def test_mobilenet_like_patched_in_runtime():
    torch.manual_seed(0)
    model, x = MobileLike(), torch.randn(1, 3, 64, 64)
    cfg = mx.backend_config(time_limit=3, tile_patches=True, grid=(3, 3))
    got, want, planned, default = _compare(model, x, cfg)
    diff = _max_diff(got, want)
    equal = all(torch.equal(u, v) for u, v in zip(got, want))
    print(f"\nmobilenet-like 64 px, grid 3x3: max abs diff {diff:.3g} "
          f"({'bit-equal' if equal else 'not bit-equal'}), planned {planned:,} B vs "
          f"default {default:,} B")
    assert diff <= TOL
    assert planned < default
    rep = list(mx.report(cfg).values())[0]
    tr = rep.patches
    assert tr is not None and tr.patched, tr.skipped
    assert tr.grid == "3x3" and tr.split and tr.region_ops > 0
    assert tr.macs > tr.macs_before > 0 and tr.mac_overhead > 0
    assert tr.values_added > 0 and tr.instructions_added > 0
    assert rep.planned_bytes == planned
    assert "patches: grid 3x3" in rep.summary()
    assert rep.to_dict()["patches"]["grid"] == "3x3"


def test_default_choice_lowers_planned_bytes():
    """No grid given: the search's own choice (within +30 % MACs) plans fewer bytes."""
    torch.manual_seed(1)
    model, x = MobileLike(), torch.randn(1, 3, 96, 96)
    cfg = mx.backend_config(time_limit=4, tile_patches=True)
    got, want, planned, default = _compare(model, x, cfg)
    tr = list(mx.report(cfg).values())[0].patches
    assert tr.patched, tr.skipped
    assert tr.mac_overhead <= 0.3 + 1e-9
    assert _max_diff(got, want) <= TOL
    assert planned < default


def test_input_module_never_changed_and_refusal_reported():
    torch.manual_seed(2)
    model, x = MobileLike(), torch.randn(1, 3, 32, 32)
    edge = _edge(model, x)
    gm = edge.exported_program().graph_module
    code = gm.code
    new, rep = mx.tile_graph_module(gm, grid=(2, 2), time_limit=2, padding="explicit",
                                    options=PatchOptions(region_start=0))
    assert new is not None and new is not gm and rep.patched
    assert gm.code == code  # the rewrite worked on a copy
    assert "as_strided_copy" in new.code and "constant_pad_nd" in new.code

    class NoConv(nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2

    edge = _edge(NoConv(), torch.randn(1, 3, 8, 8))
    gm = edge.exported_program().graph_module
    code = gm.code
    tp = TilePatchesPass()
    res = tp(gm)
    assert res.graph_module is gm and not res.modified and gm.code == code
    assert "no 2-D convolution" in tp.report[0].skipped
    with pytest.raises(ValueError):
        mx.backend_config(tile_patches=True, grid="0x3")
    with pytest.raises(mx.TilePatchesError):
        TilePatchesPass(max_overhead=-1)
    with pytest.raises(mx.TilePatchesError, match="se_patches"):
        mx.backend_config(tile_patches=True, se_patches="both")


def test_description_of_edge_ops():
    torch.manual_seed(3)
    edge = _edge(MobileLike(), torch.randn(1, 3, 32, 32))
    em = describe_graph(edge.exported_program().graph_module)
    kinds = [op.kind for op in em.sm.ops]
    assert "convolution.default" in kinds and "hardtanh.default" in kinds
    assert "max_pool2d_with_indices.default" in kinds and "add.Tensor" in kinds
    classes = {op.kind: op.cls for op in em.sm.ops}
    assert classes["convolution.default"] == "window"
    assert classes["hardtanh.default"] == "eltwise" and classes["mean.dim"] == "other"
    stem = em.sm.ops[0]
    assert stem.stride == (2, 2) and stem.pad == (1, 1) and stem.kernel == (3, 3)
    assert em.sm.tensors[stem.output].shape == (1, 16, 16, 8)  # NCHW seen as 1xHxWxC


# ------------------------------------------------------------------ random stacks
class RandomStack(nn.Module):
    """A seeded random conv/pool/element-wise/residual/concat stack."""

    def __init__(self, rng: random.Random):
        super().__init__()
        c = rng.choice([3, 4])
        self.cin = c
        self.steps = nn.ModuleList()
        self.kinds = []
        for _ in range(rng.randint(3, 6)):
            kind = rng.choice(["conv", "conv", "dw", "ir", "max", "avg", "cat", "pad"])
            if kind == "conv":
                k = rng.choice([1, 3, 5])
                s = rng.choice([1, 1, 2])
                co = rng.choice([4, 6, 8])
                m = nn.Sequential(nn.Conv2d(c, co, k, s, rng.randint(0, k // 2),
                                            dilation=rng.choice([1, 1, 2]) if k == 3 else 1),
                                  rng.choice([nn.ReLU6(), nn.ReLU(), nn.Identity()]))
                c = co
            elif kind == "dw":
                m = nn.Sequential(nn.Conv2d(c, c, 3, rng.choice([1, 2]), 1, groups=c),
                                  nn.ReLU6())
            elif kind == "ir":
                m = IR(c, c, 1, rng.choice([2, 3]), rng.choice([3, 5]))
            elif kind == "max":
                k = rng.choice([2, 3])
                m = nn.MaxPool2d(k, rng.choice([1, 2]), rng.randint(0, k // 2))
            elif kind == "avg":
                k = rng.choice([2, 3])
                m = nn.AvgPool2d(k, rng.choice([1, 2]), rng.randint(0, k // 2),
                                 count_include_pad=rng.random() < 0.7)
            elif kind == "pad":
                m = nn.ZeroPad2d(tuple(rng.randint(0, 2) for _ in range(4)))
            else:  # two branches concatenated along channels
                m = nn.ModuleList([nn.Conv2d(c, 4, 1), nn.Conv2d(c, 4, 3, 1, 1)])
                c = 8
            self.steps.append(m)
            self.kinds.append(kind)
        self.head = nn.Linear(c, 3)

    def forward(self, x):
        for kind, m in zip(self.kinds, self.steps):
            if kind == "cat":
                x = torch.cat([torch.relu(b(x)) for b in m], dim=1)
            else:
                x = m(x)
        return self.head(x.mean((2, 3))), x


@pytest.mark.parametrize("seed", range(12))
def test_random_stacks_equal_unpatched(seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model = RandomStack(rng)
    size = rng.choice([24, 31, 40])
    x = torch.randn(1, model.cin, size, size)
    with torch.no_grad():
        h, w = model(x)[1].shape[2:]
    grid = (rng.randint(1, min(3, h)), rng.randint(2, min(4, w))) if w >= 2 else None
    tp = TilePatchesPass(grid=grid, time_limit=2)
    got, want, _, _ = _compare(model, x, ExecutorchBackendConfig(passes=[tp]))
    rep = tp.report[0]
    assert _max_diff(got, want) <= TOL, (model.kinds, grid, rep)
    if rep.patched and grid is not None:
        assert rep.grid == f"{grid[0]}x{grid[1]}"
    else:  # only a reason the geometry states, never a failed rewrite
        assert "rewrite failed" not in rep.skipped and "cannot model" not in rep.skipped, \
            rep.skipped


# ------------------------------------------------------------------ squeeze-and-excitation
class SE(nn.Module):
    """Squeeze-and-excitation (MobileNetV3): mean over H, W -> 1x1 conv -> ReLU -> 1x1 conv
    -> hardsigmoid, times the feature map; ``linear``: the same with nn.Linear on [N, C]."""

    def __init__(self, c, r=4, linear=False):
        super().__init__()
        self.linear = linear
        lay = nn.Linear if linear else (lambda a, b: nn.Conv2d(a, b, 1))
        self.fc1, self.fc2 = lay(c, c // r), lay(c // r, c)

    def forward(self, x):
        s = x.mean((2, 3)) if self.linear else nn.functional.adaptive_avg_pool2d(x, 1)
        s = nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))
        return x * (s.view(s.shape[0], -1, 1, 1) if self.linear else s)


class MobileV3Like(nn.Module):
    """MobileNetV3-Small-like: hardswish stem, a stride-2 depthwise block with SE, then an
    inverted residual whose expansion is the largest tensor (after the SE block)."""

    def __init__(self, linear=False):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, 2, 1, groups=16), nn.ReLU())
        self.se = SE(16, linear=linear)
        self.pw = nn.Conv2d(16, 16, 1)
        self.ir = nn.Sequential(nn.Conv2d(16, 72, 1), nn.ReLU(),
                                nn.Conv2d(72, 72, 3, 2, 1, groups=72), nn.ReLU(),
                                nn.Conv2d(72, 24, 1))
        self.head = nn.Linear(24, 10)

    def forward(self, x):
        y = self.ir(self.pw(self.se(self.dw(self.stem(x)))))
        return self.head(y.mean((2, 3)))


def _mean_index(model, x) -> int:
    em = describe_graph(_edge(model, x).exported_program().graph_module)
    classes = [op.cls for op in em.sm.ops]
    assert "vector" in classes and "scale" in classes
    assert classes.count("reduce") == 1  # the SE mean; the head's mean stays "other"
    return classes.index("reduce")


@pytest.mark.parametrize("linear", [False, True], ids=["conv-se", "linear-se"])
def test_squeeze_excitation_patched_in_runtime(linear):
    """Regions through an SE block (its float mean accepted: ``exact_reductions=False``):
    partial sums per patch, one division, the SE vector once, the patches recomputed and
    scaled; the region reaches past the block (the expansion after it is the largest
    tensor)."""
    torch.manual_seed(4)
    model, x = MobileV3Like(linear=linear), torch.randn(1, 3, 64, 64)
    grid = (2, 2) if linear else (3, 3)
    # linear-se also with constant propagation: its ``_prop_tensor_constant`` placeholders
    # (hardswish's 3.0 / 6.0) are constants, not model inputs
    opts = {"do_quant_fusion_and_const_prop": True} if linear else {}
    cfg = mx.backend_config(time_limit=3, tile_patches=True, grid=grid, max_overhead=1.0,
                            exact_reductions=False, **opts)
    got, want, planned, default = _compare(model, x, cfg)
    diff = _max_diff(got, want)
    equal = all(torch.equal(u, v) for u, v in zip(got, want))
    tr = list(mx.report(cfg).values())[0].patches
    print(f"\nmobilenetv3-like ({'linear' if linear else 'conv'} SE) 64 px, grid "
          f"{grid[0]}x{grid[1]}: max abs diff {diff:.3g} "
          f"({'bit-equal' if equal else 'not bit-equal'}), planned {planned:,} B vs default "
          f"{default:,} B, {tr.summary()}")
    assert tr.patched, tr.skipped
    assert tr.grid == f"{grid[0]}x{grid[1]}"
    assert tr.region_ops > _mean_index(model, x) + 8  # past the SE block's scale
    assert diff <= TOL
    assert planned < default


def test_float_se_mean_refused_by_default():
    """Exact or refused: the SE block's mean is a float sum, so by default no region runs
    through it (the reason in the report's ``prefix_end``); ``exact_reductions=False`` lets
    the same forced region through."""
    from memsched.executorch.patch.tile import tile_graph_module

    torch.manual_seed(4)
    model, x = MobileV3Like(), torch.randn(1, 3, 64, 64)
    gm = _edge(model, x).exported_program().graph_module
    mean = _mean_index(model, x)
    em = describe_graph(gm)
    assert em.sm.ops[mean].acc_dtype == "float32"
    _, rep = tile_graph_module(gm, time_limit=2, max_overhead=1.0)
    assert "float32 sum" in rep.prefix_end and f"operator {mean} " in rep.prefix_end
    assert rep.region_ops <= mean and all(r["region_ops"] <= mean for r in rep.regions)
    _, rep = tile_graph_module(gm, time_limit=2, max_overhead=1.0, exact_reductions=False)
    assert rep.patched and "float32 sum" not in rep.prefix_end
    assert max(r["region_ops"] for r in rep.regions) > mean, rep.summary()


class RandomSEStack(nn.Module):
    """A random conv / depthwise stack with one or two SE blocks (conv or Linear squeeze) at
    random places, then a head: the SE path of the adapter on shapes nobody picked."""

    def __init__(self, rng: random.Random):
        super().__init__()
        c = rng.choice([4, 8])
        self.cin = rng.choice([1, 3])
        steps = [nn.Sequential(nn.Conv2d(self.cin, c, 3, rng.choice([1, 2]), 1), nn.Hardswish())]
        for _ in range(rng.randint(2, 5)):
            kind = rng.choice(["conv", "dw", "se", "se"])
            if kind == "conv":
                co = rng.choice([8, 12, 16])
                steps.append(nn.Sequential(nn.Conv2d(c, co, rng.choice([1, 3]), 1,
                                                     "same"), nn.ReLU()))
                c = co
            elif kind == "dw":
                steps.append(nn.Sequential(nn.Conv2d(c, c, 3, rng.choice([1, 2]), 1, groups=c),
                                           nn.ReLU6()))
            else:
                steps.append(SE(c, r=rng.choice([2, 4]), linear=rng.random() < 0.5))
        self.steps = nn.Sequential(*steps)
        self.head = nn.Linear(c, 3)

    def forward(self, x):
        return self.head(self.steps(x).mean((2, 3)))


@pytest.mark.parametrize("seed", range(6))
def test_random_se_stacks_equal_unpatched(seed):
    """Random stacks with SE blocks, grid forced, recomputing or keeping the feature maps after
    the means (alternately): outputs within TOL of the unpatched program in ExecuTorch's
    runtime; a refusal names a geometric reason, never a failed rewrite."""
    rng = random.Random(100 + seed)
    torch.manual_seed(seed)
    model = RandomSEStack(rng)
    x = torch.randn(1, model.cin, rng.choice([24, 32]), rng.choice([24, 32]))
    grid = (rng.randint(1, 3), rng.randint(2, 3))
    mode = ("recompute", "keep")[seed % 2]  # both ways through the SE blocks
    cfg = mx.backend_config(time_limit=2, tile_patches=True, grid=grid, max_overhead=3.0,
                            se_patches=mode, exact_reductions=False)
    got, want, _, _ = _compare(model, x, cfg)
    tr = list(mx.report(cfg).values())[0].patches
    assert _max_diff(got, want) <= TOL, (seed, grid, tr.summary())
    assert tr.se_patches in ("", mode)
    if not tr.patched:
        assert "rewrite failed" not in tr.skipped and "cannot model" not in tr.skipped, \
            tr.skipped


class MBV2Small(nn.Module):
    """MobileNetV2 0.35's layer list at low resolution (stem 3x3/2 to 16, inverted residuals
    8, 8 x2 /2, 16 x3 /2, 24 x2 /2, expansion 6), then mean + linear."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU6(), IR(16, 8, 1, 1),
            IR(8, 8, 2, 6), IR(8, 8, 1, 6), IR(8, 16, 2, 6), IR(16, 16, 1, 6),
            IR(16, 16, 1, 6), IR(16, 24, 2, 6), IR(24, 24, 1, 6))
        self.head = nn.Linear(24, 10)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def test_regions_in_sequence_rewritten_equal():
    """Two regions applied in turn by the pass's rewrite (the last one first; the second
    slices the first's reassembled split tensor): the program runs in ExecuTorch's runtime
    within TOL of the default one."""
    from torch.fx.passes.infra.pass_base import PassResult

    from memsched.executorch.patch.describe import describe_graph
    from memsched.executorch.patch.tile import _rewritten
    from memsched.patches.plans import plan_patches
    from memsched.patches.regions import regions

    seen = []

    def two_regions(gm):
        em = describe_graph(gm)
        first = min((r for r in regions(em.sm)[0] if r.length >= 3), key=lambda r: r.length)
        second = max(regions(em.sm, [first.length])[0], key=lambda r: r.length)
        plans = [plan_patches(em.sm, first, (3, 3)), plan_patches(em.sm, second, (2, 1))]
        new, added = _rewritten(gm, em, plans)
        seen.append(added)
        return PassResult(new, True)

    torch.manual_seed(5)
    model, x = MBV2Small(), torch.randn(1, 3, 64, 64)
    got, want, _, _ = _compare(model, x, ExecutorchBackendConfig(passes=[two_regions]))
    assert seen and seen[0][1] > 0
    assert _max_diff(got, want) <= TOL


@pytest.mark.heavy  # the same path: test_regions_in_sequence_rewritten_equal (3 s)
def test_second_region_after_the_first():
    """Where the operators after the first region bound the peak, a second region (its own
    grid, starting right after the first one's reassembly) lowers it within the same MAC
    budget; the twice-patched program runs in ExecuTorch's runtime within TOL of the default
    one and plans fewer bytes."""
    from memsched.executorch.patch.tile import tile_graph_module

    torch.manual_seed(5)
    model, x = MBV2Small(), torch.randn(1, 3, 64, 64)
    gm = _edge(model, x).exported_program().graph_module
    _, one = tile_graph_module(gm, time_limit=6, second_region=False)
    _, two = tile_graph_module(gm, time_limit=6)
    assert one.patched and two.patched
    assert two.second_grid and len(two.regions) >= 2
    assert two.regions[1]["region_start"] == two.regions[0]["region_ops"]
    assert two.peak_after < one.peak_after
    assert two.mac_overhead <= 0.3 + 1e-9
    assert "then grid" in two.summary()
    cfg = mx.backend_config(time_limit=6, tile_patches=True)
    got, want, planned, default = _compare(model, x, cfg)
    tr = list(mx.report(cfg).values())[0].patches
    assert tr.second_grid and tr.mac_overhead <= 0.3 + 1e-9
    assert _max_diff(got, want) <= TOL
    assert planned < default


# ------------------------------------------------------------------ models as users write them
ACTS = [nn.ReLU, nn.ReLU6, nn.Hardswish, nn.Hardsigmoid, nn.SiLU, nn.Sigmoid,
        lambda: nn.Hardtanh(-0.5, 2.0)]


class UserStack(nn.Module):
    """A seeded random stack of what torch.nn users write: ``Conv2d(bias=False)`` +
    ``BatchNorm2d`` + an activation (ReLU, ReLU6, hardswish, hardsigmoid, SiLU, sigmoid,
    clamp), depthwise blocks, dropout, zero padding, max / average pooling, spatial attention
    (a feature map times a one-channel map, broadcast over channels), residual adds and
    channel concatenation."""

    def __init__(self, rng: random.Random):
        super().__init__()
        c = self.cin = rng.choice([3, 4])
        self.steps, self.kinds = nn.ModuleList(), []
        for _ in range(rng.randint(3, 6)):
            kind = rng.choice(["cbr", "cbr", "dw", "res", "attn", "drop", "max", "avg",
                               "pad", "cat"])
            if kind == "cbr":
                k, co = rng.choice([1, 3, 5]), rng.choice([4, 6, 8])
                m = nn.Sequential(nn.Conv2d(c, co, k, rng.choice([1, 1, 2]), k // 2,
                                            bias=False),
                                  nn.BatchNorm2d(co), rng.choice(ACTS)())
                c = co
            elif kind == "dw":
                m = nn.Sequential(nn.Conv2d(c, c, 3, rng.choice([1, 2]), 1, groups=c,
                                            bias=False), nn.BatchNorm2d(c), nn.ReLU6())
            elif kind == "res":
                m = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c),
                                  rng.choice(ACTS)())
            elif kind == "attn":
                m = nn.Sequential(nn.Conv2d(c, 1, 3, 1, 1), nn.Sigmoid())
            elif kind == "drop":
                m = nn.Dropout(0.3)
            elif kind == "max":
                m = nn.MaxPool2d(rng.choice([2, 3]), 2, 0)
            elif kind == "avg":
                m = nn.AvgPool2d(3, rng.choice([1, 2]), 1)
            elif kind == "pad":
                m = nn.ZeroPad2d(tuple(rng.randint(0, 2) for _ in range(4)))
            else:
                m = nn.ModuleList([nn.Sequential(nn.Conv2d(c, 4, 1, bias=False),
                                                 nn.BatchNorm2d(4), nn.ReLU()),
                                   nn.Conv2d(c, 4, 3, 1, 1)])
                c = 8
            self.steps.append(m)
            self.kinds.append(kind)
        for b in self.modules():
            if isinstance(b, nn.BatchNorm2d):  # trained-looking statistics
                nn.init.uniform_(b.weight, 0.5, 1.5)
                nn.init.normal_(b.bias, 0.0, 0.1)
                b.running_mean.normal_(0.0, 0.1)
                b.running_var.uniform_(0.5, 1.5)
        self.head = nn.Linear(c, 3)

    def forward(self, x):
        for kind, m in zip(self.kinds, self.steps):
            if kind == "cat":
                x = torch.cat([b(x) for b in m], dim=1)
            elif kind == "res":
                x = x + m(x)
            elif kind == "attn":
                x = x * m(x)
            else:
                x = m(x)
        return self.head(x.mean((2, 3))), x


@pytest.mark.parametrize("seed", range(8))
def test_user_written_stacks_equal_unpatched(seed):
    """Conv-BN-activation stacks as users write them: every operator in the region is
    described (the region is the whole spatial part), and the patched program's outputs
    equal the unpatched one's in ExecuTorch's runtime."""
    rng = random.Random(1000 + seed)
    torch.manual_seed(seed)
    model = UserStack(rng).eval()
    x = torch.randn(1, model.cin, 32, 32)
    em = describe_graph(_edge(model, x).exported_program().graph_module)
    others = [op for op in em.sm.ops if op.cls == "other"]
    # only the head (mean, linear) is not spatially local
    assert all(op.kind in ("mean.dim", "permute_copy.default", "addmm.default",
                           "view_copy.default") for op in others), \
        (model.kinds, [(op.kind, op.reason) for op in others])
    with torch.no_grad():
        h, w = model(x)[1].shape[2:]
    grid = (rng.randint(1, min(3, h)), rng.randint(2, min(3, w))) if w >= 2 else None
    tp = TilePatchesPass(grid=grid, time_limit=2)
    got, want, _, _ = _compare(model, x, ExecutorchBackendConfig(passes=[tp]))
    rep = tp.report[0]
    assert _max_diff(got, want) <= TOL, (model.kinds, grid, rep)
    if grid is not None:
        assert rep.patched, (model.kinds, grid, rep.skipped)


@pytest.mark.parametrize("seed", range(4))
def test_user_written_stacks_with_margins(seed):
    """Plans with margins (convolutions and pools keep their own padding on wider windows,
    no constant_pad_nd at patch borders): the patched program equals the unpatched one in
    ExecuTorch's runtime."""
    rng = random.Random(2000 + seed)
    torch.manual_seed(seed)
    model = UserStack(rng).eval()
    x = torch.randn(1, model.cin, 32, 32)
    with torch.no_grad():
        h, w = model(x)[1].shape[2:]
    if w < 2:
        pytest.skip("no spatial map left")
    tp = TilePatchesPass(grid=(min(2, h), 2), time_limit=2, padding="margins")
    got, want, _, _ = _compare(model, x, ExecutorchBackendConfig(passes=[tp]))
    rep = tp.report[0]
    assert _max_diff(got, want) <= TOL, (model.kinds, rep)
    if rep.patched:
        assert all(r["padding"] == "margins" for r in rep.regions), rep.regions
    else:  # a geometry reason only, never a failed rewrite
        assert "margin" in rep.skipped or "padding" in rep.skipped, rep.skipped


def test_batch_norm_model_patched_and_records_measured():
    """A Conv-BN-ReLU6 MobileNetV2-like model: batch norm is no region boundary, and the
    method-allocator bytes the pass models (`memsched.executorch.patch.records`) are what
    ExecuTorch's runtime takes when it loads the two programs (the benchmark's harness)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "executorch"))
    from executorch_method_bytes import method_allocator_bytes

    def cbr(ci, co, k=1, s=1, g=1):
        return [nn.Conv2d(ci, co, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(co),
                nn.ReLU6()]

    torch.manual_seed(5)
    model = nn.Sequential(*cbr(3, 8, 3, 2), *cbr(8, 32), *cbr(32, 32, 3, 1, 32),
                          *cbr(32, 8), *cbr(8, 48), *cbr(48, 48, 3, 2, 48), *cbr(48, 16))
    x = torch.randn(1, 3, 48, 48)
    tp = TilePatchesPass(grid=(2, 2), time_limit=3)
    et = _edge(model, x).to_executorch(ExecutorchBackendConfig(passes=[tp]))
    base = _edge(model, x).to_executorch(ExecutorchBackendConfig())
    rep = tp.report[0]
    assert rep.patched and rep.region_ops >= 12, rep  # through the batch norms
    assert _max_diff(_run(et.buffer, x), _run(base.buffer, x)) <= TOL
    assert _planned(et.buffer) < _planned(base.buffer)
    measured = method_allocator_bytes(et.buffer)["bytes"] - \
        method_allocator_bytes(base.buffer)["bytes"]
    assert rep.records_added > 0 and rep.records_target == "host"  # a portable graph
    # the records priced at the host's ABI (`memsched.executorch.memory.ram.ABIS`): to the byte
    assert rep.records_added == measured, (rep.records_added, measured)

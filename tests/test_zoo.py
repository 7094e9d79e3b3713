"""Benchmark zoo: builders are deterministic, Relax imports run on TVM's VM and match PyTorch.

Fast tests use reduced-size variants (same code paths, fewer/narrower cells); whole networks
are `heavy` (minutes: torch.export + from_exported_program + tvm.compile).
"""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

torch = pytest.importorskip("torch")
tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402

from benchmarks import zoo  # noqa: E402

SMALL = {
    # name: builder overrides giving a small network with the same structure
    "darts-v2-cifar": dict(c=8, layers=3),  # one normal and two reduction cells
    "randwire-ws-1": dict(n=6, c=16, image_size=64),
    "mobilenet-v2": dict(image_size=64),
    "nasnet-a-cifar": dict(num_cells=3, filters=8),
    "hrnet-w18-small-v1": dict(image_size=64),
}
FAST = [("darts-v2-cifar", False), ("randwire-ws-1", True), ("mobilenet-v2", True)]
SLOW = [(n, f) for n in sorted(SMALL) for f in (False, True) if (n, f) not in FAST]


def run_relax(mod, x):
    ex = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x.numpy()))
    return out.numpy()


def check_close(got, want):
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)


def test_registry():
    assert len(zoo.NETWORKS) >= 20
    for name, spec in zoo.NETWORKS.items():
        assert spec.name == name
        assert callable(spec.builder_fn())
    assert {"randwire-ws-1", "randwire-ws-2", "randwire-ws-3"} <= set(zoo.NETWORKS)
    assert set(zoo.names("ilp")) >= {"hrnet-w18-small-v1", "hrnet-w18-small-v2", "hrnet-w32"}


@pytest.mark.parametrize("name,fold_bn",
                         FAST + [pytest.param(*a, marks=pytest.mark.heavy) for a in SLOW])
def test_relax_matches_torch(name, fold_bn):
    kw = SMALL[name]
    model, x = zoo.build_torch(name, fold_bn=fold_bn, **kw)
    with torch.no_grad():
        want = model(x).numpy()
    mod = zoo.relax_from_torch(model, x)
    assert relax.analysis.check_well_formed(mod)
    check_close(run_relax(mod, x), want)


def test_fold_bn_preserves_function():
    a, x = zoo.build_torch("darts-v2-cifar", **SMALL["darts-v2-cifar"])
    b, _ = zoo.build_torch("darts-v2-cifar", fold_bn=True, **SMALL["darts-v2-cifar"])
    with torch.no_grad():
        check_close(b(x).numpy(), a(x).numpy())
    n_bn = lambda m: sum(isinstance(k, torch.nn.BatchNorm2d) for k in m.modules())  # noqa: E731
    assert n_bn(a) > 0 and n_bn(b) == 0  # every DARTS BN follows a conv


def test_build_is_deterministic():
    import tvm_ffi

    kw = SMALL["randwire-ws-1"]
    m1 = zoo.build_relax("randwire-ws-1", **kw)
    m2 = zoo.build_relax("randwire-ws-1", **kw)
    assert tvm_ffi.structural_equal(m1, m2, map_free_vars=True)
    # a different RandWire seed is a different graph
    e1 = zoo.build_torch("randwire-ws-1", **kw)[0].conv4.edges
    e2 = zoo.build_torch("randwire-ws-2", **kw)[0].conv4.edges
    assert e1 != e2


def test_watts_strogatz_generator():
    from benchmarks.zoo.randwire import connected_ws, watts_strogatz

    e = watts_strogatz(32, 4, 0.75, 7)
    assert e == watts_strogatz(32, 4, 0.75, 7)
    assert len(e) == 64 and all(u < v for u, v in e) and len(set(e)) == len(e)
    assert watts_strogatz(32, 4, 0.0, 7) == sorted(
        (min(i, (i + j) % 32), max(i, (i + j) % 32)) for i in range(32) for j in (1, 2))
    assert len(connected_ws(32, 4, 0.75, 3)) == 64


def test_onnx_export_matches_torch(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    import onnx

    kw = SMALL["darts-v2-cifar"]
    model, x = zoo.build_torch("darts-v2-cifar", **kw)
    with torch.no_grad():
        want = model(x).numpy()
    for fold in (False, True):
        p = zoo.export_onnx("darts-v2-cifar", tmp_path / f"d{fold}.onnx", fold_bn=fold, **kw)
        m = onnx.load(str(p))
        n_bn = sum(n.op_type == "BatchNormalization" for n in m.graph.node)
        assert (n_bn == 0) == fold
        sess = ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
        check_close(sess.run(None, {"input": x.numpy()})[0], want)


def test_cli_list(capsys):
    from benchmarks.zoo.__main__ import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "hrnet-w18-small-v1" in out and "randwire-ws-3" in out


PAPER_PARAMS = {  # published parameter counts (millions) the builders must reproduce
    "nasnet-a-mobile": 5.3, "nasnet-a-cifar": 3.3, "amoebanet-a-mobile": 5.1,
    "amoebanet-a-cifar": 3.2, "darts-v2-cifar": 3.3, "darts-v2-imagenet": 4.7,
    "pnasnet-5-mobile": 5.1, "hrnet-w18-small-v1": 13.2, "hrnet-w18-small-v2": 15.6,
    "resnet-50": 25.6, "densenet-121": 8.0, "mobilenet-v2": 3.5, "xception": 22.9,
    "randwire-ws-1": 5.6, "randwire-ws-2": 5.6, "randwire-ws-3": 5.6,  # paper: 5.6 +- 0.1
}


@pytest.mark.parametrize("name", sorted(PAPER_PARAMS))
def test_param_counts_match_papers(name):
    model, _ = zoo.build_torch(name)
    n = sum(p.numel() for p in model.parameters()) / 1e6
    tol = 0.1 if name.startswith("randwire") else 0.06
    assert abs(n - PAPER_PARAMS[name]) < tol, n


@pytest.mark.heavy
@pytest.mark.parametrize("name", sorted(zoo.NETWORKS))
def test_full_network_relax_matches_torch(name):
    """Every network at full size, folded BN: Relax on TVM's VM == PyTorch (~0.5-2 min each)."""
    model, x = zoo.build_torch(name, fold_bn=True)
    with torch.no_grad():
        want = model(x).numpy()
    check_close(run_relax(zoo.relax_from_torch(model, x), x), want)

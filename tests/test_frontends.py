"""Other model formats through the CLI: torch.export programs (.pt2)."""
import json

import pytest

from memsched.cli import main


@pytest.fixture(scope="module")
def pt2_path(tmp_path_factory):
    torch = pytest.importorskip("torch")

    class Cell(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a = torch.nn.Conv2d(4, 32, 3, padding=1)
            self.a2 = torch.nn.Conv2d(32, 4, 1)
            self.b = torch.nn.Conv2d(4, 4, 3, padding=1)
            self.b2 = torch.nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            return torch.cat([self.a2(torch.relu(self.a(x))), self.b2(self.b(x))], 1)

    ep = torch.export.export(Cell().eval(), (torch.randn(1, 4, 16, 16),))
    path = tmp_path_factory.mktemp("pt2") / "cell.pt2"
    torch.export.save(ep, str(path))
    return str(path)


def test_pt2_analyze_and_compile(pt2_path, capsys, tmp_path):
    assert main(["analyze", pt2_path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["optimal"] and out["ops"] > 4
    assert main(["compile", pt2_path, "--pass", "MemoryAwareSchedule", "-o",
                 str(tmp_path / "cell.so")]) == 0
    assert (tmp_path / "cell.so").exists()


def test_tflite_analyze_compile_and_match_litert(tmp_path, capsys):
    pytest.importorskip("tflite")
    import numpy as np
    import tvm
    from tvm import relax

    from memsched.importers.load import load_relax
    from test_rewrite_concat_conv import _tflite_concat_conv

    buf, sa, sb = _tflite_concat_conv("conv")
    path = tmp_path / "cell.tflite"
    path.write_bytes(buf)
    assert main(["analyze", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["optimal"] and out["ops"] >= 2
    assert main(["compile", str(path), "--pass", "MemoryAwareSchedule", "-o",
                 str(tmp_path / "cell.so")]) == 0
    mod = load_relax(str(path))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa).astype("float32"), rng.standard_normal(sb).astype("float32")
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / "cell.so")), tvm.cpu())
    names = [p.name for p in mod["main"].params]
    feed = {"a": a, "b": b}
    got = vm["main"](*[tvm.runtime.tensor(feed[n]) for n in names]).numpy()
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=buf)
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], feed[d["name"]])
    it.invoke()
    ref = it.get_tensor(it.get_output_details()[0]["index"])
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_float_reductions_is_an_option_of_tile_patches(pt2_path, capsys, tmp_path):
    """``--float-reductions`` without ``--pass TilePatches``: one line, exit 2, nothing
    written; with it, TilePatches is built with ``exact_reductions=False``."""
    from memsched.cli.compile import _resolve_pass

    out = tmp_path / "x.so"
    assert main(["compile", pt2_path, "--float-reductions", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--float-reductions" in err[0] and not out.exists()
    made = _resolve_pass("TilePatches", {"TilePatches": {"exact_reductions": False}})
    assert made.options.exact_reductions is False
    assert _resolve_pass("TilePatches").options.exact_reductions is True

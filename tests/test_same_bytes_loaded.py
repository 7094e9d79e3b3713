"""The same model and options give byte-identical output on an idle and a loaded machine, in
every runtime we write for (issue 53, item 4): the patch search and everything after it that
decides an output (orders, offline plans, ExecuTorch's planning pass) are bounded by work,
not seconds. A loaded machine is simulated by a clock that jumps 30 s after its first reads:
past every time-limited stage's share (ExecuTorch's planning pass: 10 s), inside the search's
60-s safety net."""
import time

import pytest

JUMP = 30.0


def _loaded(monkeypatch):
    """From now on `time.perf_counter` reads 30 s later after its first three calls."""
    real = time.perf_counter
    reads = [0]

    def busy() -> float:
        reads[0] += 1
        return real() + (JUMP if reads[0] > 3 else 0.0)

    monkeypatch.setattr(time, "perf_counter", busy)
    return reads


def test_tile_writes_the_same_file_loaded(monkeypatch):
    from memsched.generators.tflite_synth import mobilenet_like
    from memsched.tflite.patch.tile import tile_tflite

    data = mobilenet_like(blocks=6)
    idle, res = tile_tflite(data, None, offline_plan=True)
    assert res.choice is not None
    reads = _loaded(monkeypatch)
    loaded, res2 = tile_tflite(data, None, offline_plan=True)
    monkeypatch.undo()
    assert reads[0] > 3 and loaded == idle and res2.arena_bytes == res.arena_bytes


def test_tile_patches_writes_the_same_module_loaded(monkeypatch):
    pytest.importorskip("tvm")
    from memsched.generators.relax_cnn import small_mobilenet
    from memsched.transform.tile_patches import TilePatches

    mod = small_mobilenet(32, layout="NHWC", integer=True)
    idle = TilePatches()(mod)
    assert "memsched.patches_grid" in idle["main"].attrs
    reads = _loaded(monkeypatch)
    loaded = TilePatches()(mod)
    monkeypatch.undo()
    assert reads[0] > 3 and loaded.script() == idle.script()


def test_executorch_writes_the_same_program_loaded(monkeypatch):
    pytest.importorskip("executorch")
    import copy
    import warnings

    import torch
    from executorch.exir import to_edge

    import memsched.executorch as mx

    from test_executorch_patches import MobileLike

    torch.manual_seed(1)
    model = MobileLike().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        edge = to_edge(torch.export.export(model, (torch.randn(1, 3, 96, 96),)))
        config = mx.backend_config(tile_patches=True)
        idle = copy.deepcopy(edge).to_executorch(config).buffer
        assert list(mx.report(config).values())[0].patches.grid
        reads = _loaded(monkeypatch)
        loaded = copy.deepcopy(edge).to_executorch(mx.backend_config(tile_patches=True)).buffer
        monkeypatch.undo()
    assert reads[0] > 3 and loaded == idle

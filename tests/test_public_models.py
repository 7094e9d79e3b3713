"""benchmarks/tvm/public_models.py: the public-model suite (definitions, export, analyze, compile,
run, comparison with ONNX Runtime)."""
import json
import os
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks", "tvm"))

import public_models as pm  # noqa: E402

# Parameter counts of the reference implementations users deploy (torchvision's model docs;
# ConvNeXt-atto: 3.7M in timm's). They pin down every layer's channels and kernel sizes.
PUBLISHED_PARAMS = {
    "mobilenet_v2": 3_504_872, "mobilenet_v3_small": 2_542_856, "shufflenet_v2": 2_278_604,
    "squeezenet1_1": 1_235_496, "resnet18": 11_689_512, "densenet121": 7_978_856,
    "googlenet": 6_624_904, "mnasnet1_0": 4_383_312, "efficientnet_b0": 5_288_548,
    "regnet_x_400mf": 5_495_976,
}


@pytest.mark.parametrize("name", sorted(pm.MODELS))
def test_definitions_match_published_sizes(name):
    import torch

    torch.manual_seed(0)
    model = pm.MODELS[name].build()
    n = sum(p.numel() for p in model.parameters())
    if name in PUBLISHED_PARAMS:
        assert n == PUBLISHED_PARAMS[name]
    elif name == "convnext_atto":
        assert 3.65e6 < n < 3.75e6
    else:
        assert n > 0


def test_tiny_model_through_the_suite(tmp_path, capsys):
    out = tmp_path / "rows.json"
    rc = pm.main(["--models", "tiny_fire", "--formats", "onnx", "--time-limit", "5",
                  "--json", str(out)])
    printed = capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert [r["format"] for r in rows] == ["onnx"]
    for r in rows:
        assert r["errors"] == [], r["errors"]
        assert r["equal"] is True and r["max_diff"] < 1e-4
        assert r["ops"] > 10 and r["optimal"] is True
        assert r["peak"] <= r["input_peak"]
        assert 0 < r["ours_planned"] <= r["tvm_planned"]
    assert rc == 0
    assert "| model | format | ops |" in printed
    assert printed.count("| tiny_fire |") == 1


def test_failures_become_rows_not_crashes(tmp_path, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("exporter exploded\nsecond line")

    monkeypatch.setattr(pm, "export", broken)
    rows = pm.run_model("tiny_fire", 32, ["onnx"], 1.0, str(tmp_path))
    assert len(rows) == 1 and rows[0].equal is None
    assert rows[0].errors and rows[0].errors[0].startswith("export: RuntimeError: exporter")
    assert "exporter exploded" in pm.markdown(rows)


@pytest.mark.heavy
def test_tiny_model_all_formats(tmp_path):
    out = tmp_path / "rows.json"
    formats = ["onnx", "pt2"] + (["dynamo"] if pm.dynamo_available() else [])
    assert pm.main(["--models", "tiny_fire", "--formats", *formats, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert sorted(r["format"] for r in rows) == sorted(formats)
    assert all(r["equal"] and not r["errors"] for r in rows)


@pytest.mark.heavy
def test_quick_suite_outputs_equal(tmp_path):
    out = tmp_path / "rows.json"
    rc = pm.main(["--quick", "--formats", "onnx", "pt2", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert len(rows) == 2 * len(pm.QUICK)
    assert all(r["equal"] for r in rows), [(r["model"], r["format"], r["errors"]) for r in rows]
    assert all(r["ours_planned"] <= r["tvm_planned"] for r in rows)
    assert rc == 0

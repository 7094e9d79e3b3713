"""memsched split / profile-devices command line: JSON shape, memory limits, one-line errors."""
import json

import pytest

pytest.importorskip("tvm")
from memsched.cli import main  # noqa: E402


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_split_json(capsys, tmp_path):
    code, out, err = run(capsys, "split", "example:nas_cell", "--devices", "2",
                         "--generations", "3", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["devices"] == 2 and set(d["latency_s"]) == {"single", "uniform", "greedy", "ga"}
    assert d["memory_ok"] and d["device_memory_bytes"] == [None, None]
    assert d["latency_s"]["ga"] <= min(d["latency_s"][m] for m in ("single", "uniform",
                                                                   "greedy")) + 1e-12
    assert "rpc" not in d
    # a limit below the single-device peak (123,392 B): single is null, the GA's split fits
    code, out, err = run(capsys, "split", "example:nas_cell", "--devices", "3",
                         "--device-memory", "70000", "--generations", "10", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["latency_s"]["single"] is None
    assert d["memory_ok"] and max(d["per_device_peak_bytes"]) <= 70000
    # a profile file (as profile-devices writes it) sets link and speeds
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"version": 1, "devices": [{"speed": 2.0}, {"speed": 1.0}],
                                "link": {"bandwidth": 1e8, "latency": 1e-4,
                                         "topology": "host"}, "reference_gflops": 3.0}))
    code, out, err = run(capsys, "split", "example:nas_cell", "--devices", "2", "--profile",
                         str(prof), "--generations", "2", "--json")
    assert code == 0, err
    assert json.loads(out)["cost_model"] == "profile + FLOPs"


@pytest.mark.parametrize("argv,msg", [
    (["--devices", "0"], "--devices must be >= 1"),
    (["--devices", "2", "--device-memory", "1", "2", "3"], "one size for all devices or 2"),
    (["--devices", "2", "--device-memory", "lots"], "bad --device-memory"),
    (["--devices", "2", "--profile", "/nonexistent/p.json"], "cannot read device profile"),
])
def test_split_bad_input_is_one_line(capsys, argv, msg):
    code, out, err = run(capsys, "split", "example:nas_cell", *argv)
    assert code == 2 and msg in err and len(err.strip().splitlines()) == 1


def test_profile_devices_needs_servers(capsys):
    code, out, err = run(capsys, "profile-devices")
    assert code == 2 and "--local N" in err

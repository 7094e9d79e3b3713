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


def test_infeasible_memory_limit_is_one_line_exit_2(capsys):
    """Limits no split can meet: one line naming the device, what the best split needs and the
    bound that proves it; nothing runs (not even with --run-rpc: the check comes first)."""
    code, out, err = run(capsys, "split", "example:nas_cell", "--devices", "2",
                         "--device-memory", "20000", "--generations", "3", "--json")
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert "no split fits the memory limits" in lines[0] and "over its 20,000 B" in lines[0]
    assert "none exists" in lines[0]  # 40,000 B in all is below the model's footprint


def test_split_is_never_worse_than_its_baselines():
    from memsched.importers.load import load_relax
    from memsched.split import CostModel, Device, Link, OpTimes, SplitError, compare
    from memsched.transform.split_relax import from_relax
    from memsched.split.solve import _worst_overflow, require_feasible

    prob = from_relax(load_relax("example:nas_cell", None))
    link = Link(topology="host", bandwidth=50e6, latency=1e-4, call_overhead=1e-4)
    for mem in (None, 70000, 30000):
        cost = CostModel([Device(mem, 1.0), Device(mem, 1.0)], link, OpTimes.from_flops(prob))
        res = compare(prob, cost, seed=1, n_gen=4)
        key = {m: (float(_worst_overflow(r.evaluation)[0]), float(r.evaluation.violation[0]),
                   r.latency) for m, r in res.items()}
        assert all(key["ga"] <= key[m] for m in ("single", "uniform", "greedy")), key
        if not res["ga"].feasible:
            with pytest.raises(SplitError, match="no split fits"):
                require_feasible(res["ga"], cost)

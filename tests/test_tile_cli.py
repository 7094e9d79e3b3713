"""``memsched tile``: JSON report with the frontier, measured arena and outputs before writing,
one-line errors, the plot."""
import json
import os
import stat

import pytest

from memsched.cli import main
from memsched.generators.tflite_synth import mobilenet_like
from memsched.tflite.format.check import check_tflite
from memsched.tflite import tflm

from board_checks import assert_tflite_equal_on_board


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    p = tmp_path_factory.mktemp("t") / "mbl.tflite"
    p.write_bytes(mobilenet_like(blocks=6))
    return str(p)


@pytest.mark.skipif(not tflm.available(), reason="tflite-micro not installed")
def test_tile_json_measured_and_written(model, tmp_path, capsys):
    out = str(tmp_path / "t.tflite")
    assert main(["tile", model, "-o", out, "--offline-plan", "--measure", "--json",
                 "--plot", str(tmp_path / "c.svg")]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["written"] and r["patched"] and r["choice"]["mac_overhead"] <= 0.3
    orig = r["search"]["original"]
    assert r["choice"]["total_bytes"] < orig["total_bytes"]
    m = r["measured"]
    assert m["litert_equal"] and m["tflm_equal"] is True
    assert m["tflm_arena_patched"] < m["tflm_arena_original"]
    assert check_tflite(out).ok and os.path.getsize(tmp_path / "c.svg") > 0
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o666 & ~_umask()
    assert_tflite_equal_on_board(model, out, tmp_path)  # `memsched tile`'s file on the M55


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_tile_bad_input_is_one_line(model, tmp_path, capsys):
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\0" * 32)
    for argv in (["tile", str(bad)], ["tile", model, "--grid", "axb"],
                 ["tile", model, "--grid", "0x2"], ["tile", model, "--max-overhead", "-1"],
                 ["tile", model, "--max-slowdown", "0.9"],
                 ["tile", model, "--max-slowdown", "fast"],
                 ["tile", model, "-o", model], ["tile", model, "--plot", "x.pdf"],
                 ["tile", model, "--split", "no-such-tensor"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("memsched: error:"), (argv, err)
    assert not os.path.exists(os.path.splitext(model)[0] + ".tiled.tflite")


def test_tile_max_slowdown_bounds_predicted_instructions(model, tmp_path, capsys):
    """The choice's predicted instructions per Invoke() are within --max-slowdown of the
    original's, the report's time frontier is a frontier with the unpatched file on it, the
    bound changes the choice, and the written file's own prediction is the search's."""
    from memsched.tflite.memory.instructions import model_instructions

    got = {}
    for bound in ("1.0", "none"):
        out = str(tmp_path / f"t{bound}.tflite")
        assert main(["tile", model, "-o", out, "--offline-plan", "--json",
                     "--max-slowdown", bound]) == 0
        r = json.loads(capsys.readouterr().out)
        orig = r["search"]["original"]["cpu_instructions"]
        front = r["search"]["time_frontier"]
        assert front[0]["cpu_instructions"] == orig and front[0]["slowdown"] == 1.0
        assert all(a["cpu_instructions"] < b["cpu_instructions"] and
                   a["total_bytes"] > b["total_bytes"] for a, b in zip(front, front[1:]))
        written = model_instructions(out).total
        if r["choice"]:
            assert r["choice"]["cpu_instructions"] == written
        got[bound] = (r["choice"] or {}).get("slowdown", 1.0), written, orig
    assert got["1.0"][0] <= 1.0 and got["1.0"][1] <= got["1.0"][2]
    assert got["none"][0] > 1.0  # the RAM-only choice costs time on this model

"""Every command that takes ``--servers`` works with the servers users really run: a stock
``python -m tvm.exec.rpc_tracker`` with stock ``python -m tvm.exec.rpc_server``s registered
under a key (``KEY@tracker:port`` entries), and stock servers given as ``host:port``. The
processes are started and stopped here (tests/stock_rpc.py); outputs are compared."""
import json

import pytest

pytest.importorskip("tvm")
pytest.importorskip("tornado")
from memsched.cli import main  # noqa: E402
from memsched.runtime.rpc_servers import group_alive  # noqa: E402
from stock_rpc import stock_servers  # noqa: E402


@pytest.fixture(scope="module")
def tracker():
    with stock_servers(2, key="board") as (entries, pids):
        yield ",".join(entries)
    assert not group_alive(pids)  # tracker, servers and their forked workers are gone


def _json(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_run_pipeline_through_a_tracker(tracker, capsys):
    d = _json(capsys, ["run-pipeline", "example:randwire", "--stages", "2", "--servers",
                       tracker, "-n", "3", "--json"])
    assert d["outputs_equal"]


def test_split_run_rpc_through_a_tracker(tracker, capsys):
    # a limit that forces work onto both devices (a split that leaves a device idle, which
    # once crashed the runner: the README's `split --run-rpc` command, test_docs.py)
    d = _json(capsys, ["split", "example:nas_cell", "--devices", "2", "--run-rpc",
                       "--servers", tracker, "--device-memory", "90000",
                       "--generations", "5", "--json"])
    assert d["rpc"]["outputs_equal"] and all(p > 0 for p in d["per_device_peak_bytes"])


@pytest.mark.heavy  # host:port servers: test_split_rpc.py (local servers, 4 s); the split
# through stock servers: test_split_run_rpc_through_a_tracker
def test_profile_and_split_on_stock_host_port_servers(capsys, tmp_path):
    with stock_servers(2, key=None) as (entries, pids):
        servers = ",".join(entries)
        prof = tmp_path / "devices.json"
        assert main(["profile-devices", *entries, "-o", str(prof)]) == 0, \
            capsys.readouterr().err
        capsys.readouterr()
        d = _json(capsys, ["split", "example:nas_cell", "--devices", "2", "--run-rpc",
                           "--servers", servers, "--generations", "5", "--json"])
        assert d["rpc"]["outputs_equal"]
    assert not group_alive(pids)

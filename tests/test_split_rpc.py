"""The split model runs for real on two local TVM RPC servers, started and torn down here."""
import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
pytest.importorskip("tornado")  # tvm.rpc's server side
from tvm import relax  # noqa: E402

from memsched.runtime.rpc_servers import ServerPool, group_alive  # noqa: E402
from memsched.runtime.rpc_split import SplitRunError, SplitRunner, run_split  # noqa: E402
from memsched.split import Device, Link  # noqa: E402
from memsched.transform.split_across_devices import split_module, split_program  # noqa: E402
from split_models import tiny_cnn  # noqa: E402


def test_split_runs_on_two_local_rpc_servers_and_they_stop():
    mod = tiny_cnn(channels=8, size=16)
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype("float32")
    ref = relax.VirtualMachine(tvm.compile(mod, target="llvm"),
                               tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    # equal shares: halos (cut out by the owners) and stages with several results occur
    new, result = split_module(mod, [Device(), Device()], Link(topology="host"),
                               method="uniform")
    prog = split_program(new)
    assert len(prog["stages"]) > 1
    assert any(tr["cut_fn"] for st in prog["stages"] for tr in st["transfers"])
    with ServerPool(local=2) as pool:
        pids = pool.local_pids
        assert len(pids) == 2 and len(group_alive(pids)) >= 2
        report = run_split(new, [x], pool, repeat=2, warmup=0)
        with pytest.raises(SplitRunError, match="2 devices"):
            SplitRunner(prog, [None, None], [])
    assert not group_alive(pids)  # every server process is gone
    np.testing.assert_allclose(report["outputs"][0], ref, rtol=1e-5, atol=1e-6)
    assert report["measured_s"] > 0 and report["calls"] >= len(prog["stages"])
    moved = report["bytes_up"] + report["bytes_down"]
    assert moved >= x.nbytes + ref.nbytes  # at least the input up and the output down


def test_split_leaving_a_device_idle_runs():
    """The all-on-one-device answer (the search's most common one for small models) runs:
    the idle device gets no library and no VM (it has nothing to run)."""
    from memsched.runtime.rpc_split import used_devices

    mod = tiny_cnn(channels=8, size=16)
    x = np.random.default_rng(6).standard_normal((1, 3, 16, 16)).astype("float32")
    ref = relax.VirtualMachine(tvm.compile(mod, target="llvm"),
                               tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    new, _ = split_module(mod, [Device(), Device()], Link(topology="host"), method="single")
    prog = split_program(new)
    assert int(prog["devices"]) == 2 and len(used_devices(prog)) == 1
    with ServerPool(local=2) as pool:
        pids = pool.local_pids
        report = run_split(new, [x], pool, repeat=1, warmup=0)
    assert not group_alive(pids)
    np.testing.assert_allclose(report["outputs"][0], ref, rtol=1e-5, atol=1e-6)

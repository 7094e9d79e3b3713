"""The RPC layer: local servers started and always stopped (also on errors and when the parent
dies), and the pipelined executor on two local servers equal to the unsplit build."""
import json
import subprocess
import sys
import time

import numpy as np
import pytest

from memsched.runtime.rpc_servers import (Endpoint, RPCServerError, ServerPool, group_alive,
                                          parse_servers)


def _gone(pids, wait=10.0):
    deadline = time.monotonic() + wait
    while group_alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return group_alive(pids) == []


def test_parse_servers():
    assert parse_servers("10.0.0.5:9090, edgetpu@tracker.local:9190") == [
        Endpoint("10.0.0.5", 9090), Endpoint("tracker.local", 9190, "edgetpu")]
    assert str(parse_servers("k@h:1")[0]) == "k@h:1" and parse_servers(None) == []
    for bad in ("nohost", "h:port", "h:0", "@h:1", ":80"):
        with pytest.raises(RPCServerError):
            parse_servers(bad)
    with pytest.raises(RPCServerError):
        ServerPool(local=-1)


def test_executor_on_two_local_servers_equals_unsplit(tmp_path):
    tvm = pytest.importorskip("tvm")
    from tvm import relax

    from memsched.cli.pipeline import build_stages, random_inputs
    from memsched.generators.examples import example_model
    from memsched.runtime.rpc_pipeline import PipelineError, Stage, run_pipeline
    from memsched.transform.partition_pipeline import PartitionPipeline

    with ServerPool(local=2) as pool:  # the servers start while the model is cut and built
        mod = relax.transform.FoldConstant()(example_model("nas_cell"))
        new = PartitionPipeline(2, method="param-balanced")(mod)
        stages = build_stages(new)
        full = tvm.compile(mod, target="llvm")
        lib = str(tmp_path / "full.so")
        full.export_library(lib)  # a library path works as well as a built module
        inputs = random_inputs(mod["main"], 4, seed=3)
        pids = pool.local_pids
        assert len(pids) == 2 and len(group_alive(pids)) >= 2
        rep = run_pipeline(stages, pool, inputs, reference=Stage(lib, "main"))
        assert rep.outputs_equal is True and rep.max_abs_diff == 0.0
        # and against a local run of the unsplit build
        vm = relax.VirtualMachine(full, tvm.cpu())
        for x, out in zip(inputs, rep.outputs):
            assert np.array_equal(vm["main"](*[tvm.runtime.tensor(a) for a in x]).numpy(),
                                  out[0])
        assert rep.n == 4 and len(rep.stage_latency_s) == 2
        assert all(t > 0 for t in rep.stage_latency_s)
        js = rep.to_json()
        for key in ("stages", "outputs_equal", "throughput_per_s", "single_vm_per_s",
                    "stage_latency_s", "servers"):
            assert key in js
        assert js["servers"] == [str(e) for e in pool.endpoints]
        json.dumps(js)
        # a stage that fails names itself; the pool still stops below
        bad = [stages[0], Stage(stages[1].lib, "no_such_function")]
        with pytest.raises(PipelineError, match="stage 1"):
            run_pipeline(bad, pool, inputs[:2])
    assert _gone(pids)


def test_servers_stopped_on_error_and_when_parent_dies():
    with pytest.raises(ZeroDivisionError):
        with ServerPool(local=1) as pool:
            pids = pool.local_pids
            assert group_alive(pids)
            1 / 0
    assert _gone(pids)
    # a parent killed with SIGKILL cannot clean up: the servers' watchdog does
    code = ("import sys, time; from memsched.runtime.rpc_servers import ServerPool; "
            "p = ServerPool(local=1).start(); print(p.local_pids[0], flush=True); "
            "time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        pid = int(parent.stdout.readline())
        assert group_alive([pid])
    finally:
        parent.kill()
        parent.wait()
    assert _gone([pid])


def test_local_server_never_shares_a_port_being_bound():
    """The cause of the old flake: under SO_REUSEADDR two servers starting together could
    both bind one free port, and the second listen() killed that server. A port another
    socket has bound (not yet listening, as a starting server's) is skipped now."""
    import socket

    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    try:
        with ServerPool(local=1, port=port, port_end=port + 20) as pool:
            (ep,) = pool.endpoints
            assert ep.port != port
            s.listen(1)  # the other "server" can still listen: nobody took its port
    finally:
        s.close()

"""Stock TVM RPC processes for tests, started the way a user of several boards starts them:
``python -m tvm.exec.rpc_tracker`` and ``python -m tvm.exec.rpc_server [--tracker H:P --key K]``.
Loopback only, bounded waits, and always stopped: each process leads its own process group,
which is killed whole, so the per-session workers the servers fork go with them."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Proc:
    def __init__(self, cmd, env):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def text(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=3)
        self.log.close()


def _wait(pred, what: str, procs, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        dead = [p for p in procs if p.proc.poll() is not None]
        if dead:
            raise RuntimeError(f"{what}: a process exited: {dead[0].text()[-500:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not ready after {timeout} s")
        time.sleep(0.2)


@contextlib.contextmanager
def stock_servers(n: int = 2, key: str | None = "board", timeout: float = 90.0):
    """Start a stock tracker (when ``key``) and ``n`` stock servers; yield the ``--servers``
    entries (``KEY@host:port`` of the tracker, one per server, or ``host:port`` of each server)
    and the process-group ids; stop everything on exit."""
    from tvm import rpc

    env = dict(os.environ, TVM_NUM_THREADS="1")
    procs: list[_Proc] = []
    try:
        tport = None
        if key:
            tport = _free_port()
            procs.append(_Proc([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host",
                                "127.0.0.1", "--port", str(tport), "--port-end",
                                str(tport + 1)], env))
            _wait(lambda: "bind to" in procs[0].text(), "rpc_tracker", procs, timeout)
        ports = []
        servers = []
        for _ in range(n):
            for attempt in range(3):  # another process may take the free port first
                port = _free_port()
                cmd = [sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                       "--port", str(port), "--port-end", str(port + 1)]
                if key:
                    cmd += ["--tracker", f"127.0.0.1:{tport}", "--key", key]
                proc = _Proc(cmd, env)
                procs.append(proc)
                try:
                    _wait(lambda: "bind to" in proc.text(), "rpc_server", [proc], timeout)
                    break
                except RuntimeError:
                    if attempt == 2:
                        raise
            servers.append(proc)
            ports.append(port)
        if key:
            def registered():
                q = rpc.connect_tracker("127.0.0.1", tport).summary()["queue_info"]
                return q.get(key, {}).get("free", 0) >= n

            _wait(registered, "tracker registration", procs, timeout)
            entries = [f"{key}@127.0.0.1:{tport}"] * n
        else:
            entries = [f"127.0.0.1:{p}" for p in ports]
        yield entries, [p.proc.pid for p in procs]
    finally:
        for p in reversed(procs):
            p.stop()

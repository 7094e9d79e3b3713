"""A pool of TVM RPC servers: local server processes that are always stopped, or given
``host:port`` / tracker keys of real devices. Shared by every runner that puts one model part on
one device (the pipelined executor `rpc_pipeline`, multi-device splits).

    with ServerPool(local=2) as pool:          # 2 local servers, TVM_NUM_THREADS=1 each
        sessions = pool.sessions()             # one tvm.rpc session per server, kept open
    # here every server process (and its per-session children) is gone

    ServerPool(servers=["10.0.0.5:9090", "edgetpu@10.0.0.1:9190"])   # device, tracker key

Local servers run ``python -m memsched.runtime.rpc_servers`` (TVM's own
``tvm.rpc.server.PopenRPCServerState``: bind the first free port of a range without
``SO_REUSEADDR``, so servers started together never take the same port; fork a child per
session), each in its own process group with ``TVM_NUM_THREADS`` set, so N servers behave like
N small single-core devices. Stopping is guaranteed three ways: `ServerPool.close` (context
manager exit, also on errors and Ctrl-C) kills each server's whole process group; an ``atexit``
hook does the same; and each server watches a pipe from its parent and kills its own group
when the parent dies, even by SIGKILL. The servers import TVM with torch hidden (``tvm_ffi``
imports torch when present, 5 s per process; serving needs none of it).

Entries of ``servers``: ``host:port`` (a running ``python -m tvm.exec.rpc_server``), or
``KEY@host:port`` (request a device with that key from the RPC tracker at ``host:port``).
"""
from __future__ import annotations

import atexit
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Sequence


class RPCServerError(ValueError):
    """A server that cannot be started or reached, or a malformed server address."""


@dataclass(frozen=True)
class Endpoint:
    """Where one device is served: ``host:port`` of a server, or a tracker ``key``."""

    host: str
    port: int
    key: str | None = None  # when set, host:port is an RPC tracker
    pid: int | None = None  # local server started by the pool

    def __str__(self) -> str:
        return f"{self.key}@{self.host}:{self.port}" if self.key else f"{self.host}:{self.port}"


def parse_endpoint(spec: str) -> Endpoint:
    """``host:port`` or ``KEY@host:port`` -> `Endpoint`; `RPCServerError` naming the entry."""
    s = spec.strip()
    key = None
    if "@" in s:
        key, s = s.split("@", 1)
        if not key:
            raise RPCServerError(f"bad server {spec!r}: empty tracker key before '@'")
    host, sep, port = s.rpartition(":")
    if not sep or not host:
        raise RPCServerError(f"bad server {spec!r}: expected host:port or KEY@host:port")
    try:
        p = int(port)
    except ValueError:
        raise RPCServerError(f"bad server {spec!r}: port {port!r} is not a number") from None
    if not 0 < p < 65536:
        raise RPCServerError(f"bad server {spec!r}: port {p} out of range")
    return Endpoint(host.strip("[]"), p, key)


def parse_servers(spec: str | Sequence | None) -> list[Endpoint]:
    """A comma-separated list (or a list) of server entries (strings or `Endpoint`)."""
    if not spec:
        return []
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    return [x if isinstance(x, Endpoint) else parse_endpoint(x) for x in items
            if isinstance(x, Endpoint) or x.strip()]


def connect(endpoint: Endpoint, session_timeout: float = 0):
    """A ``tvm.rpc`` session to the endpoint (through the tracker when it has a key)."""
    from tvm import rpc

    try:
        if endpoint.key:
            tracker = rpc.connect_tracker(endpoint.host, endpoint.port)
            return tracker.request(endpoint.key, session_timeout=session_timeout)
        return rpc.connect(endpoint.host, endpoint.port, session_timeout=session_timeout)
    except Exception as e:  # noqa: BLE001 - TVM raises InternalError/RuntimeError/OSError
        msg = str(e).strip().splitlines()
        raise RPCServerError(f"cannot connect to RPC server {endpoint}: "
                             f"{msg[-1] if msg else type(e).__name__}") from None


class _LocalServer:
    """One server process in its own process group (pgid == pid)."""

    def __init__(self, proc: subprocess.Popen, log):
        self.proc = proc
        self.log = log
        self.port: int | None = None

    def stop(self) -> None:
        p = self.proc
        if p.poll() is None:
            try:
                p.stdin.close()  # the server's watchdog kills its own group
            except OSError:
                pass
            try:
                p.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
        # the group may still hold per-session children even when the leader is gone
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # pragma: no cover - a zombie we cannot reap
            pass
        for f in (p.stdout, self.log):
            try:
                f.close()
            except (OSError, AttributeError):
                pass

    def log_tail(self) -> str:
        try:
            self.log.seek(0)
            lines = [ln for ln in self.log.read().decode(errors="replace").splitlines()
                     if ln.strip()]
            return lines[-1] if lines else ""
        except (OSError, ValueError):
            return ""


_LIVE: set = set()


@atexit.register
def _stop_all() -> None:  # last resort when a pool was never closed
    for s in list(_LIVE):
        s.stop()
        _LIVE.discard(s)


def spawn_local_servers(n: int, *, host: str = "127.0.0.1", port: int = 9090,
                        port_end: int = 9299, threads: int | None = 1,
                        hide_torch: bool = True) -> list[_LocalServer]:
    """Spawn ``n`` server processes without waiting for them (`wait_for_ports`)."""
    env = dict(os.environ)
    if threads is not None:
        env["TVM_NUM_THREADS"] = str(int(threads))
    cmd = [sys.executable, "-m", "memsched.runtime.rpc_servers", "--host", host,
           "--port", str(port), "--port-end", str(port_end)]
    if hide_torch:
        cmd.append("--hide-torch")
    servers: list[_LocalServer] = []
    try:
        for _ in range(n):
            log = tempfile.TemporaryFile()
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=log, env=env, start_new_session=True)
            s = _LocalServer(proc, log)
            servers.append(s)
            _LIVE.add(s)
        return servers
    except BaseException:
        _stop(servers)
        raise


def wait_for_ports(servers: list[_LocalServer], timeout: float = 120.0) -> None:
    """Read each server's port; on failure stop them all and raise `RPCServerError`."""
    try:
        deadline = time.monotonic() + timeout
        for s in servers:
            if s.port is not None:
                continue
            line = _read_line(s.proc, deadline)
            if not line.strip().isdigit():
                why = s.log_tail() or (f"exited with status {s.proc.poll()}"
                                       if s.proc.poll() is not None else "no port reported")
                raise RPCServerError(f"local RPC server did not start: {why}")
            s.port = int(line)
    except BaseException:
        _stop(servers)
        raise


def _stop(servers) -> None:
    for s in servers:
        s.stop()
        _LIVE.discard(s)


def start_local_servers(n: int, *, timeout: float = 120.0, **options) -> list[_LocalServer]:
    """Start ``n`` server processes in parallel and wait for their ports; on any failure, stop
    the ones already started and raise `RPCServerError`."""
    servers = spawn_local_servers(n, **options)
    wait_for_ports(servers, timeout)
    return servers


def _read_line(proc: subprocess.Popen, deadline: float) -> str:
    fd = proc.stdout.fileno()
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise RPCServerError("local RPC server did not report its port in time")
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 64)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace")


class ServerPool:
    """A list of RPC endpoints: given servers, and local servers spawned on entry (waited for
    on first use) and always stopped on exit.

    Parameters
    ----------
    local : int
        Number of local server processes to start (``TVM_NUM_THREADS=threads`` each).
    servers : str or list of str
        Existing servers: ``host:port`` or ``KEY@tracker_host:port`` entries (comma-separated
        string or list). Local servers come after them.
    threads : int or None
        ``TVM_NUM_THREADS`` of local servers (None: inherit the environment).
    """

    def __init__(self, local: int = 0, servers: str | Sequence[str] | None = None, *,
                 threads: int | None = 1, host: str = "127.0.0.1", port: int = 9090,
                 port_end: int = 9299, start_timeout: float = 120.0):
        if isinstance(local, bool) or not isinstance(local, int) or local < 0:
            raise RPCServerError(f"local must be a non-negative number of servers, got {local!r}")
        self.remote = parse_servers(servers)
        self.n_local = local
        self._opts = dict(host=host, port=port, port_end=port_end, threads=threads,
                          timeout=start_timeout)
        self._local: list[_LocalServer] = []
        self._sessions: dict = {}
        self._endpoints: list[Endpoint] | None = None if local else list(self.remote)
        self._failed: RPCServerError | None = None

    def launch(self) -> "ServerPool":
        """Spawn the local servers and return at once: they start (a few seconds each, in
        parallel) while the caller builds; `endpoints` waits for them."""
        if self.n_local and not self._local:
            o = self._opts
            self._local = spawn_local_servers(self.n_local, host=o["host"], port=o["port"],
                                              port_end=o["port_end"], threads=o["threads"])
        return self

    def start(self) -> "ServerPool":
        """Spawn the local servers (if not yet) and wait until every one serves."""
        if self._failed is not None:
            raise self._failed
        self.launch()
        if self._local and self._endpoints is None:
            try:
                wait_for_ports(self._local, self._opts["timeout"])
            except RPCServerError as e:
                self._local = []
                self._failed = e  # do not respawn on the next use
                raise
            except BaseException:
                self._local = []
                raise
        return self

    @property
    def endpoints(self) -> list[Endpoint]:
        """Given servers first, then the local ones (waiting for them to be up)."""
        if self._endpoints is None:
            self.start()
            self._endpoints = list(self.remote) + [
                Endpoint(self._opts["host"], s.port, pid=s.proc.pid) for s in self._local]
        return self._endpoints

    def close(self) -> None:
        """Drop the pool's sessions and stop every local server (whole process groups).
        Idempotent."""
        import gc

        self._sessions.clear()
        gc.collect()  # a session closes when its last remote object is freed
        _stop(self._local)
        self._local = []
        self._endpoints = None if self.n_local else list(self.remote)

    def __enter__(self) -> "ServerPool":
        """Spawns the local servers; the first use of `endpoints` / `session` waits for them,
        so work done inside the block overlaps their start-up."""
        try:
            return self.launch()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.endpoints)

    @property
    def local_pids(self) -> list[int]:
        """Process (and process-group) ids of the local servers."""
        return [s.proc.pid for s in self._local]

    def session(self, i: int):
        """The pool's session to endpoint ``i``, opened on first use and kept until `close`.
        A TVM RPC server serves one session at a time and a session ends only when the last
        object referring to it is freed, so runners share these instead of reconnecting."""
        if i not in self._sessions:
            if not 0 <= i < len(self.endpoints):
                raise RPCServerError(f"no server {i}: the pool has {len(self.endpoints)}")
            self._sessions[i] = connect(self.endpoints[i])
        return self._sessions[i]

    def sessions(self, n: int | None = None) -> list:
        """Sessions to the first ``n`` endpoints (default all)."""
        n = len(self.endpoints) if n is None else n
        if n > len(self.endpoints):
            raise RPCServerError(f"{n} devices needed, the pool has {len(self.endpoints)} "
                                 "server(s)")
        return [self.session(i) for i in range(n)]


def group_alive(pgids: Sequence[int]) -> list[int]:
    """Pids of live processes in the given process groups (to check that a pool cleaned up)."""
    import psutil

    out = []
    want = set(pgids)
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if os.getpgid(p.info["pid"]) in want:
                out.append(p.info["pid"])
        except (ProcessLookupError, psutil.Error, OSError):
            continue
    return out


# ------------------------------------------------------------------ the server process itself
def _serve(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m memsched.runtime.rpc_servers",
                                 description="one TVM RPC server that dies with its parent")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9090)
    ap.add_argument("--port-end", type=int, default=9299)
    ap.add_argument("--hide-torch", action="store_true")
    args = ap.parse_args(argv)
    if args.hide_torch:
        sys.modules["torch"] = None  # tvm_ffi's optional torch import becomes ImportError
    # The parent holds our stdin pipe: EOF means it is gone. Read it through a raw fd: the
    # per-session child is forked by multiprocessing, which closes sys.stdin in the child and
    # would deadlock on the buffer lock a blocked sys.stdin.read() holds at fork time.
    watch = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    from tvm.rpc.server import PopenRPCServerState

    # Without SO_REUSEADDR: with it, Linux lets two servers started together bind the same
    # free port (neither listens yet), and the later listen() kills that server with
    # EADDRINUSE -- the "one of two local servers gone" flake. Without it the second bind
    # fails and TVM moves on to the next port of the range.
    state = PopenRPCServerState(args.host, args.port, args.port_end, silent=True,
                                reuse_addr=False)
    sys.stdout.write(f"{state.port}\n")
    sys.stdout.flush()
    try:
        while os.read(watch, 4096):
            pass
    except (KeyboardInterrupt, OSError):
        pass
    if os.getpgid(0) == os.getpid():  # started by a pool: our own group
        os.killpg(0, signal.SIGKILL)  # ourselves and every session child
    import psutil

    for child in psutil.Process().children(recursive=True):
        child.kill()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(_serve())

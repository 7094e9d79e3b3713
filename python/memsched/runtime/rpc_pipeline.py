"""A pipelined executor over TVM RPC: one model part per device, inputs streamed through them.

Relax has no pipeline executor (Relay's is gone), and TVM RPC servers cannot send tensors to
each other, so the host relays: stage ``j`` runs on server ``j``, one host thread per stage
uploads the stage's inputs, runs it (``set_input`` / ``invoke_stateful`` / ``get_outputs``,
the VM calls that work over RPC, tuple results included) and downloads its outputs into the
queue of stage ``j + 1``. Threads release the GIL inside RPC calls, so while stage 1 computes
input ``i``, stage 0 computes input ``i + 1``: throughput is bounded by the slowest stage plus
its transfers, not by the sum.

Works with any list of built stages (not only `PartitionPipeline`'s): a `Stage` is a library
(a path to an exported library, or a ``tvm.compile`` result), the function to call, and the
weights it takes after its activation inputs (uploaded once and kept on the device). Stage
``j + 1`` is called with stage ``j``'s outputs (a tuple is flattened), in order; stage 0 with
the model inputs; the last stage's outputs are the model's.

    with ServerPool(local=2) as pool:
        report = run_pipeline(stages, pool, inputs, reference=Stage(full_lib))
    report.outputs_equal, report.throughput_per_s, report.single_vm_per_s
"""
from __future__ import annotations

import os
import queue
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .rpc_servers import ServerPool


class PipelineError(ValueError):
    """A stage list or inputs that cannot be run as a pipeline; the message says why."""


@dataclass
class Stage:
    """One model part for one device.

    ``lib``: path of an exported library (``.so``/``.tar``) or an object with
    ``export_library`` (what ``tvm.compile`` returns); ``func``: the Relax function to call;
    ``params``: arrays passed after the activation inputs on every call, uploaded once.
    """

    lib: Any
    func: str = "main"
    params: Sequence[np.ndarray] = ()
    name: str | None = None


@dataclass
class StageTimes:
    """Seconds per input of one stage: upload, compute, download."""

    upload: list = field(default_factory=list)
    compute: list = field(default_factory=list)
    download: list = field(default_factory=list)

    def add(self, up, comp, down):
        self.upload.append(up)
        self.compute.append(comp)
        self.download.append(down)

    @property
    def latency(self) -> float:
        n = len(self.compute)
        return (sum(self.upload) + sum(self.compute) + sum(self.download)) / n if n else 0.0

    def mean(self, what: str) -> float:
        xs = getattr(self, what)
        return sum(xs) / len(xs) if xs else 0.0


def _flatten(value) -> list:
    if isinstance(value, (list, tuple)) or (hasattr(value, "__len__")
                                            and not hasattr(value, "numpy")):
        return [t for v in value for t in _flatten(v)]
    return [value]


class RemoteStage:
    """A stage loaded on one RPC session: call it with host arrays, get host arrays back."""

    def __init__(self, session, stage: Stage, upload_name: str, tmpdir: str,
                 label: str = "stage"):
        from tvm import relax

        self.label = label
        self.session = session
        self.stage = stage
        self.func = stage.func
        lib = stage.lib
        if isinstance(lib, (str, os.PathLike)):
            path = os.fspath(lib)
            if not os.path.isfile(path):
                raise PipelineError(f"stage library {path!r}: no such file")
        elif hasattr(lib, "export_library"):
            path = os.path.join(tmpdir, upload_name)
            lib.export_library(path)
        else:
            raise PipelineError(f"stage {upload_name}: lib must be a library path or a built "
                                f"module with export_library, got {type(lib).__name__}")
        ext = os.path.splitext(path)[1] or ".so"
        remote_name = os.path.splitext(upload_name)[0] + ext
        session.upload(path, target=remote_name)
        self.module = session.load_module(remote_name)
        self.dev = session.cpu()
        self.vm = relax.VirtualMachine(self.module, self.dev)
        self.params = [self._tensor(p) for p in stage.params]
        self._bufs = None

    def _tensor(self, a):
        import tvm

        return tvm.runtime.tensor(np.ascontiguousarray(a), device=self.dev)

    def _upload(self, arrays) -> list:
        """Remote copies of ``arrays``: the device buffers of the previous call are reused
        when shapes and dtypes match (one RPC copy per tensor instead of alloc + copy)."""
        bufs = self._bufs
        if bufs is None or len(bufs) != len(arrays) or any(
                tuple(b.shape) != a.shape or str(b.dtype) != str(a.dtype)
                for b, a in zip(bufs, arrays)):
            self._bufs = [self._tensor(a) for a in arrays]
        else:
            for b, a in zip(bufs, arrays):
                b.copyfrom(np.ascontiguousarray(a))
        return self._bufs

    def __call__(self, arrays: Sequence[np.ndarray]) -> tuple[list[np.ndarray], tuple]:
        """(outputs, (upload s, compute s, download s)); `PipelineError` naming the stage."""
        try:
            t0 = time.perf_counter()
            args = self._upload(arrays) + self.params
            t1 = time.perf_counter()
            self.vm.set_input(self.func, *args)
            self.vm.invoke_stateful(self.func)
            outs = _flatten(self.vm.get_outputs(self.func))
            t2 = time.perf_counter()
            host = [o.numpy() for o in outs]
            t3 = time.perf_counter()
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as e:  # noqa: BLE001 - TVM raises RPCError/TVMError/...
            lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
            why = next((ln for ln in lines if not ln.startswith(("RPCError", "/"))),
                       lines[-1] if lines else "")
            raise PipelineError(f"{self.label} ({self.func}) failed: {type(e).__name__}: "
                                f"{why}") from e
        return host, (t1 - t0, t2 - t1, t3 - t2)


@dataclass
class PipelineReport:
    """What one pipelined run measured (times in seconds)."""

    stages: int
    n: int
    outputs: list  # per input: list of output arrays
    throughput_per_s: float
    seconds: float
    stage_times: list  # StageTimes per stage
    servers: list
    single_vm_per_s: float | None = None
    sequential_s: list = field(default_factory=list)  # per stage, one input, no overlap
    # outputs per second once the pipeline is full: (n - 1) / (last output - first output);
    # throughput_per_s = n / total also pays for filling and draining the k stages
    steady_per_s: float | None = None
    outputs_equal: bool | None = None
    max_abs_diff: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def stage_latency_s(self) -> list[float]:
        return [t.latency for t in self.stage_times]

    @property
    def speedup(self) -> float | None:
        if not self.single_vm_per_s:
            return None
        return self.throughput_per_s / self.single_vm_per_s

    def to_json(self) -> dict:
        out = {
            "stages": self.stages,
            "n": self.n,
            "outputs_equal": self.outputs_equal,
            "max_abs_diff": self.max_abs_diff,
            "throughput_per_s": round(self.throughput_per_s, 4),
            "steady_per_s": None if self.steady_per_s is None else round(self.steady_per_s, 4),
            "single_vm_per_s": None if self.single_vm_per_s is None
            else round(self.single_vm_per_s, 4),
            "speedup": None if self.speedup is None else round(self.speedup, 4),
            "stage_latency_s": [round(x, 6) for x in self.stage_latency_s],
            "stage_compute_s": [round(t.mean("compute"), 6) for t in self.stage_times],
            "stage_transfer_s": [round(t.mean("upload") + t.mean("download"), 6)
                                 for t in self.stage_times],
            "stage_sequential_s": [round(x, 6) for x in self.sequential_s],
            "servers": list(self.servers),
        }
        out.update(self.extra)
        return out


class RPCPipeline:
    """Stages loaded on sessions (stage ``j`` on ``sessions[j]``), ready to stream inputs."""

    def __init__(self, stages: Sequence[Stage], sessions: Sequence, queue_size: int = 2):
        if not stages:
            raise PipelineError("a pipeline needs at least one stage")
        if len(sessions) < len(stages):
            raise PipelineError(f"{len(stages)} stages need {len(stages)} servers, got "
                                f"{len(sessions)}")
        self._tmp = tempfile.TemporaryDirectory(prefix="memsched-rpc-")
        # unique names: a server's dlopen would return an earlier library of the same path
        self.tag = uuid.uuid4().hex[:12]
        self.remote = [RemoteStage(sessions[j], s, f"{self.tag}_stage{j}.so", self._tmp.name,
                                   f"stage {j}") for j, s in enumerate(stages)]
        self.queue_size = queue_size

    def __len__(self) -> int:
        return len(self.remote)

    def run_one(self, inputs: Sequence[np.ndarray], times: list | None = None) -> list:
        """One input through every stage in turn (no overlap); with ``times``, append each
        stage's (upload, compute, download) seconds."""
        arrays = list(inputs)
        for st in self.remote:
            arrays, t = st(arrays)
            if times is not None:
                times.append(t)
        return arrays

    def stream(self, inputs: Sequence[Sequence[np.ndarray]]):
        """Run every input through the pipeline, stages overlapping.

        Returns ``(outputs per input, seconds, [StageTimes per stage])``. A failing stage stops
        the run and its error is raised here, naming the stage.
        """
        k = len(self.remote)
        qs = [queue.Queue() for _ in range(k)] + [queue.Queue()]
        for j in range(1, k):
            qs[j] = queue.Queue(maxsize=self.queue_size)
        times = [StageTimes() for _ in range(k)]
        errors: list = []
        stop = threading.Event()
        done = object()

        def get(q):
            """The next item, or None once the run is stopped (never blocks for good)."""
            while not stop.is_set():
                try:
                    return q.get(timeout=0.05)
                except queue.Empty:
                    continue
            return None

        def put(q, item) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def worker(j):
            st, qin, qout = self.remote[j], qs[j], qs[j + 1]
            try:
                while True:
                    item = get(qin)
                    if item is None or item is done:
                        break
                    i, arrays = item
                    out, (up, comp, down) = st(arrays)
                    times[j].add(up, comp, down)
                    if not put(qout, (i, out)):
                        break
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                errors.append((j, e))
                stop.set()
            finally:
                put(qout, done)

        threads = [threading.Thread(target=worker, args=(j,), daemon=True,
                                    name=f"rpc-stage{j}") for j in range(k)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        for i, x in enumerate(inputs):
            qs[0].put((i, list(x)))
        qs[0].put(done)
        results: dict = {}
        self.arrivals = []  # seconds from the start to each output
        try:
            while True:
                item = get(qs[k])
                if item is None or item is done:
                    break
                results[item[0]] = item[1]
                self.arrivals.append(time.perf_counter() - t0)
        except BaseException:  # Ctrl-C: let the stage threads end at their next step
            stop.set()
            raise
        seconds = time.perf_counter() - t0
        for th in threads:
            th.join(timeout=5.0)
        if errors or len(results) != len(inputs):
            if not errors:
                raise PipelineError(f"pipeline stopped after {len(results)} of "
                                    f"{len(inputs)} inputs")
            j, e = errors[0]
            if isinstance(e, PipelineError):
                raise e
            msg = str(e).strip().splitlines()
            raise PipelineError(f"stage {j} failed: {type(e).__name__}: "
                                f"{msg[-1] if msg else ''}") from e
        return [results[i] for i in range(len(results))], seconds, times

    def close(self) -> None:
        self.remote = []
        self._tmp.cleanup()


def compare_outputs(a_outs, b_outs) -> tuple[bool, float]:
    """(bit-equal?, max |difference|) of two runs (per input: list of arrays)."""
    equal, diff = True, 0.0
    for a, b in zip(a_outs, b_outs):
        if len(a) != len(b):
            return False, float("inf")
        for x, y in zip(a, b):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False, float("inf")
            if not np.array_equal(x, y):
                equal = False
                if np.issubdtype(x.dtype, np.number):
                    diff = max(diff, float(np.max(np.abs(x.astype(np.float64)
                                                         - y.astype(np.float64)))))
                else:
                    diff = float("inf")
    return equal, diff


def run_pipeline(stages: Sequence[Stage], pool: ServerPool | Sequence,
                 inputs: Sequence[Sequence[np.ndarray]], reference: Stage | None = None,
                 warmup: int = 1) -> PipelineReport:
    """Stream ``inputs`` through ``stages`` (stage ``j`` on the pool's endpoint ``j``).

    ``pool``: a started `ServerPool` or a list of ``tvm.rpc`` sessions. ``reference``: the
    unsplit model; when given, it runs on stage 0's server (same device kind, one VM, inputs
    one after the other) for ``single_vm_per_s`` and every output is compared with it
    (``outputs_equal``: bit-equal; ``max_abs_diff``). ``warmup`` inputs run first, untimed.
    """
    if not inputs:
        raise PipelineError("no inputs to stream")
    if isinstance(pool, ServerPool):
        sessions = pool.sessions(len(stages))
        servers = [str(e) for e in pool.endpoints[:len(stages)]]
    else:
        sessions = list(pool)
        servers = [f"session{j}" for j in range(len(sessions))]
    pipe = RPCPipeline(stages, sessions)
    try:
        for x in list(inputs)[:warmup]:
            pipe.run_one(x)
        alone: list = []  # one input through the stages in turn: latency without overlap
        pipe.run_one(inputs[0], alone)
        outs, seconds, times = pipe.stream(inputs)
        report = PipelineReport(len(stages), len(inputs), outs, len(inputs) / seconds, seconds,
                                times, servers)
        report.sequential_s = [sum(t) for t in alone]
        arr = pipe.arrivals
        if len(arr) >= 2 and arr[-1] > arr[0]:
            report.steady_per_s = (len(arr) - 1) / (arr[-1] - arr[0])
        if reference is not None:
            ref_outs, report.single_vm_per_s = run_single(reference, sessions[0], inputs,
                                                          warmup)
            report.outputs_equal, report.max_abs_diff = compare_outputs(outs, ref_outs)
        return report
    finally:
        pipe.close()


def run_single(model: Stage, session, inputs: Sequence[Sequence[np.ndarray]],
               warmup: int = 1) -> tuple[list, float]:
    """The whole model on one device, inputs one after the other (the baseline a pipeline is
    compared with): ``(outputs per input, inputs per second)``."""
    with tempfile.TemporaryDirectory(prefix="memsched-rpc-") as tmp:
        ref = RemoteStage(session, model, f"{uuid.uuid4().hex[:12]}_single.so", tmp, "model")
        for x in list(inputs)[:warmup]:
            ref(x)
        t0 = time.perf_counter()
        outs = [ref(x)[0] for x in inputs]
        per_s = len(inputs) / (time.perf_counter() - t0)
        del ref
    return outs, per_s

"""Run a model split across devices over TVM RPC (the multi-device executor).

`SplitAcrossDevices` records a *program* on the rewritten module (`split_program`): per stage,
the transfers (the host fetches a hull from its owner, cutting it out first when it is a
sub-region, and sends each receiver its piece) and one call per device of its stage function,
which keeps its results on the device; at the end the host gathers the output slices. This
module runs such a program on RPC sessions, one per device (`ServerPool` from
`memsched.runtime.rpc_servers`):

* each device's functions (`device_module`) are built, uploaded and loaded once;
* transfers go through the host (servers cannot talk to each other): ``tensor.numpy()`` from
  the owner, numpy slicing, ``tvm.runtime.tensor(piece, device)`` to the receiver;
* the calls of one stage run in parallel, one host thread per device (RPC calls release the
  GIL), and a stage's results stay on the device until the last stage that reads them;
* tuple results are taken apart on the device (``vm.builtin.tuple_getitem``, one round trip
  each): a tuple cannot be returned to the host over RPC.

Works without any solver: give it any program and the per-device libraries.

    with ServerPool(local=2) as pool:
        runner = SplitRunner(program, libs, pool.sessions())
        outs, stats = runner.run([x])
"""
from __future__ import annotations

import os
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np


class SplitRunError(ValueError):
    """A program, library list or input the split executor cannot run; the message says why."""


def _np_slice(arr: np.ndarray, region, base) -> np.ndarray:
    """``region`` (c0, c1, h0, h1) of a tensor of which ``arr`` holds ``base``."""
    idx = [slice(None)] * arr.ndim
    if arr.ndim >= 2:
        idx[1] = slice(region[0] - base[0], region[1] - base[0])
    if arr.ndim >= 3:
        idx[2] = slice(region[2] - base[2], region[3] - base[2])
    return np.ascontiguousarray(arr[tuple(idx)])


def _full_region(info) -> tuple:
    shape = info["shape"]
    c = shape[1] if len(shape) >= 2 else 1
    h = shape[2] if len(shape) >= 3 else 1
    return (0, c, 0, h)


@dataclass
class RunStats:
    seconds: float = 0.0
    bytes_up: int = 0
    bytes_down: int = 0
    messages: int = 0
    calls: int = 0
    stage_seconds: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"seconds": round(self.seconds, 6), "bytes_up": self.bytes_up,
                "bytes_down": self.bytes_down, "messages": self.messages, "calls": self.calls}


def used_devices(program: dict) -> list[int]:
    """The devices a program calls, sends to, or takes outputs from (in order). A split may
    leave devices idle (e.g. everything on one device): those get no library and no VM."""
    used = set()
    for st in program["stages"]:
        used.update(int(c["device"]) for c in st["calls"])
        for tr in st["transfers"]:
            if tr["owner"] >= 0:
                used.add(int(tr["owner"]))
            used.update(int(pc["dest"]) for pc in tr["pieces"])
    for o in program["outputs"]:
        used.update(int(p["owner"]) for p in o["parts"])
    return sorted(used)


class SplitRunner:
    """A split program loaded on RPC sessions (one per device, in device order). ``libs[k]``
    may be None for a device the program leaves idle (`used_devices`)."""

    def __init__(self, program: dict, libs: Sequence, sessions: Sequence,
                 tmpdir: str | None = None):
        from tvm import relax

        n = int(program["devices"])
        if len(sessions) < n:
            raise SplitRunError(f"the split needs {n} devices, got {len(sessions)} RPC sessions")
        if len(libs) < n:
            raise SplitRunError(f"the split needs {n} device libraries, got {len(libs)}")
        self.program = program
        self.n = n
        self.sessions = list(sessions)[:n]
        self.devs = [s.cpu() for s in self.sessions]
        self.used = used_devices(program)
        self.vms, self.getitem = [None] * n, [None] * n
        own_tmp = None
        if tmpdir is None:
            own_tmp = tempfile.TemporaryDirectory(prefix="memsched_split_")
            tmpdir = own_tmp.name
        try:
            for k in self.used:
                sess, lib = self.sessions[k], libs[k]
                if lib is None:
                    raise SplitRunError(f"device {k} runs part of the split but has no library")
                if isinstance(lib, (str, os.PathLike)):
                    path = os.fspath(lib)
                else:
                    path = os.path.join(tmpdir, f"split_dev{k}.so")
                    lib.export_library(path)
                # unique: a server's dlopen returns an earlier library of the same path, and
                # overwriting a loaded library's file crashes the server
                name = f"{uuid.uuid4().hex[:12]}_split_dev{k}{os.path.splitext(path)[1] or '.so'}"
                sess.upload(path, target=name)
                self.vms[k] = relax.VirtualMachine(sess.load_module(name), self.devs[k])
                self.getitem[k] = sess.get_function("vm.builtin.tuple_getitem")
        finally:
            if own_tmp is not None:
                own_tmp.cleanup()
        self._pool = ThreadPoolExecutor(max_workers=max(1, n))
        self._last_use = self._lifetimes()
        # remote functions looked up once: ``vm[name]`` is a GetFunction round trip over RPC,
        # which the cost model (one call = one round trip) does not price per call
        self._fns: dict = {}

    def _fn(self, k: int, name: str):
        f = self._fns.get((k, name))
        if f is None:
            f = self._fns[(k, name)] = self.vms[k][name]
        return f

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._fns.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _lifetimes(self) -> dict:
        """(tensor, device) -> last stage that reads the slice (outputs: never dropped)."""
        last = {}
        for m, st in enumerate(self.program["stages"]):
            for tr in st["transfers"]:
                if tr["owner"] >= 0:
                    last[(tr["tensor"], tr["owner"])] = m
            for c in st["calls"]:
                for a in c["args"]:
                    if "held" in a:
                        last[(a["held"], c["device"])] = m
        for o in self.program["outputs"]:
            for p in o["parts"]:
                last[(o["tensor"], p["owner"])] = len(self.program["stages"])
        return last

    def _call(self, k: int, fn: str, args: list, n_results: int):
        r = self._fn(k, fn)(*args)
        if n_results == 1:
            return [r]
        return [self.getitem[k](r, q) for q in range(n_results)]

    def run(self, inputs: Sequence[np.ndarray]):
        """Run once: (list of outputs as numpy arrays in the model's return structure, stats)."""
        import tvm

        prog = self.program
        tensors = prog["tensors"]
        if len(inputs) != len(prog["inputs"]):
            raise SplitRunError(f"the model takes {len(prog['inputs'])} inputs "
                                f"({', '.join(prog['inputs'])}), got {len(inputs)}")
        inputs = [np.ascontiguousarray(a) for a in inputs]
        for k, a in enumerate(inputs):
            want = tuple(tensors[str(k)]["shape"])
            if tuple(a.shape) != want:
                raise SplitRunError(f"input {prog['inputs'][k]!r}: shape {a.shape}, expected "
                                    f"{want}")
        stats = RunStats()
        held: dict = {}
        t0 = time.perf_counter()
        for m, st in enumerate(prog["stages"]):
            ts = time.perf_counter()
            pieces = {}
            for tr in st["transfers"]:
                t = tr["tensor"]
                if tr["owner"] < 0:
                    src, base = inputs[t], _full_region(tensors[str(t)])
                else:
                    o = tr["owner"]
                    rt = held[(t, o)]
                    base = _slice_base(prog, t, o, held)
                    if tr["cut_fn"]:
                        rt = self._fn(o, tr["cut_fn"])(rt)
                        base = tuple(tr["hull"])
                        stats.calls += 1
                    src = rt.numpy()
                    stats.bytes_down += src.nbytes
                    stats.messages += 1
                for pc in tr["pieces"]:
                    arr = _np_slice(src, pc["region"], base)
                    pieces[pc["key"]] = tvm.runtime.tensor(arr, device=self.devs[pc["dest"]])
                    stats.bytes_up += arr.nbytes
                    stats.messages += 1
            futures = []
            for c in st["calls"]:
                k = c["device"]
                args = [pieces[a["piece"]] if "piece" in a else held[(a["held"], k)]
                        for a in c["args"]]
                futures.append((c, self._pool.submit(self._call, k, c["fn"], args,
                                                     len(c["results"]))))
            for c, f in futures:
                for t, r in zip(c["results"], f.result()):
                    held[(t, c["device"])] = r
                stats.calls += 1 + (len(c["results"]) if len(c["results"]) > 1 else 0)
            del pieces
            for key in [key for key in held if self._last_use.get(key, -1) <= m]:
                del held[key]  # frees the device's copy
            stats.stage_seconds.append(time.perf_counter() - ts)
        outs = {}
        for o in prog["outputs"]:
            parts = []
            for p in o["parts"]:
                a = held[(o["tensor"], p["owner"])].numpy()
                stats.bytes_down += a.nbytes
                stats.messages += 1
                parts.append(a)
            outs[o["tensor"]] = parts[0] if len(parts) == 1 else \
                np.concatenate(parts, axis=1 if o["axis"] == "c" else 2)
        stats.seconds = time.perf_counter() - t0
        return _struct(prog["return"], outs, inputs), stats


def _slice_base(prog, t, owner, held) -> tuple:
    """The region of tensor ``t`` device ``owner`` holds (recorded in the program)."""
    return tuple(prog["held"][f"{t}:{owner}"])


def _struct(s, outs, inputs):
    if isinstance(s, list):
        return [_struct(x, outs, inputs) for x in s]
    return outs[s] if s in outs else inputs[s]


def flatten(s) -> list:
    if isinstance(s, list):
        return [x for v in s for x in flatten(v)]
    return [s]


def build_device_libs(mod, n: int, target: str = "llvm", used=None) -> list:
    """``tvm.compile`` of each device's functions (`device_module`); None for devices not in
    ``used`` (default: the devices the module's program uses), which have nothing to run."""
    import tvm

    from ..transform.split_across_devices import device_module, split_program

    used = set(used_devices(split_program(mod)) if used is None else used)
    return [tvm.compile(device_module(mod, k), target=target) if k in used else None
            for k in range(n)]


def run_split(mod, inputs: Sequence[np.ndarray], pool, *, repeat: int = 5, warmup: int = 1,
              target: str = "llvm", libs=None) -> dict:
    """Build, upload and run a module rewritten by `SplitAcrossDevices` on ``pool`` (a started
    `ServerPool` or a list of sessions). Returns a report: measured seconds (median of
    ``repeat`` runs after ``warmup``), bytes moved and messages of one run, and the outputs of
    the last run (flattened), for the caller to compare with the unsplit model."""
    from ..transform.split_across_devices import split_program

    program = split_program(mod)
    n = int(program["devices"])
    sessions = pool.sessions(n) if hasattr(pool, "sessions") else list(pool)
    libs = libs or build_device_libs(mod, n, target)
    times, stats, outs = [], None, None
    with SplitRunner(program, libs, sessions) as runner:
        for r in range(warmup + repeat):
            outs, stats = runner.run(inputs)
            if r >= warmup:
                times.append(stats.seconds)
    report = {"measured_s": float(np.median(times)), "runs_s": [round(t, 6) for t in times],
              "devices": n, "outputs": flatten(outs)}
    report.update({k: v for k, v in stats.to_json().items() if k != "seconds"})
    return report

"""The cost model of a split: devices, the link between them, and operator compute times.

**Compute** (paper §3.3.2: "the execution time is linearly related to the size"): operator
``i`` computing a slice of ``s`` rows or channels on device ``k`` takes
``(fixed_i + slope_i * s) / speed_k`` seconds, where ``fixed``/``slope`` are times on the
*reference* device. They come either from measuring the operator's built kernels on this
machine at several slice sizes (`memsched.split.calibrate`, which also reports how linear they
are) or, without measurements, from FLOPs: ``slope_i = flops_i / length_i / 1e9`` on a
reference device of 1 GFLOP/s, and ``speed_k`` = the device's ``gflops``.

**Link.** Two topologies:

* ``router`` (the paper's): devices share one medium; a transfer of ``b`` bytes takes
  ``latency + b / bandwidth``; with ``broadcast`` a piece several devices need is sent once,
  else once per receiver. Transfers of one operator happen one after another (shared medium),
  then the devices compute in parallel.
* ``host`` (TVM RPC, what `memsched.runtime.rpc_split` runs): servers cannot talk to each
  other, so every piece is downloaded by the host from its owner (``latency +
  b / bandwidth_down``, plus one remote call when the piece is a sub-region the owner must cut
  out first) and uploaded to each receiver (``latency + b / bandwidth``); the host does these
  one after another. Every remote function call costs ``call_overhead``.

Consecutive operators that need no transfer run as one remote call per device (a *stage*): the
stage takes ``max_k (call_overhead + sum of device k's compute)``; a stage function with ``r > 1``
results costs ``r`` more round trips (``item_overhead``) on its device (RPC cannot return a
tuple: each result is taken out on the device), and assembling an input region from parts costs
its bytes over the device's ``copy_bandwidth``. Graph inputs start on the
host and graph outputs end there (uploaded / downloaded like any piece).

A *profile* (JSON, `load_profile` / `save_profile`, written by ``memsched profile-devices``)
stores the devices (address, measured speed, memory) and the measured link, so the model is
calibrated once per setup and reused.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from .problem import SplitError, SplitProblem


@dataclass
class Device:
    """One device: memory limit (bytes; None = unlimited) and speed relative to the reference
    device on which operator times were measured (or GFLOP/s for the FLOP model)."""

    memory_bytes: int | None = None
    speed: float = 1.0
    name: str = ""
    address: str = ""  # host:port of its RPC server, when known


@dataclass
class Link:
    bandwidth: float = 50e6  # bytes/s (upload to a device for "host")
    latency: float = 1e-4  # seconds per message
    broadcast: bool = True
    topology: str = "router"  # or "host"
    bandwidth_down: float | None = None  # host topology: device -> host bytes/s
    call_overhead: float = 0.0  # seconds per remote function call
    item_overhead: float | None = None  # seconds to take one result out of a remote tuple

    def __post_init__(self):
        if self.topology not in ("router", "host"):
            raise SplitError(f"link topology must be 'router' or 'host', not {self.topology!r}")
        for k in ("bandwidth", "latency", "call_overhead"):
            v = float(getattr(self, k))
            if not math.isfinite(v) or v < 0 or (k == "bandwidth" and v == 0):
                raise SplitError(f"link {k} must be a finite number > 0, not {v!r}")
        if self.bandwidth_down is None:
            self.bandwidth_down = self.bandwidth
        if self.item_overhead is None:
            self.item_overhead = self.call_overhead

    @classmethod
    def from_dict(cls, d: dict) -> "Link":
        known = {k: d[k] for k in ("bandwidth", "latency", "broadcast", "topology",
                                   "bandwidth_down", "call_overhead", "item_overhead") if k in d}
        return cls(**known)


@dataclass
class OpTimes:
    """Reference-device time of every operator along each dimension it may be split:
    ``fixed[dim][i] + slope[dim][i] * s`` seconds (``whole``: ``s`` is 1)."""

    fixed: dict = field(default_factory=dict)  # dim -> array (N,)
    slope: dict = field(default_factory=dict)
    source: str = "flops"
    linearity: dict = field(default_factory=dict)  # calibration report (R^2 etc.)
    # repeatability of the measured kernels (`runtime.split_profile.calibration_summary`)
    calibration: dict = field(default_factory=dict)

    @classmethod
    def from_flops(cls, problem: SplitProblem, per_op_overhead: float = 0.0) -> "OpTimes":
        """1 GFLOP/s reference: slope = flops / length / 1e9 (devices' ``speed`` = GFLOP/s)."""
        fixed, slope = {}, {}
        for dim in ("cout", "fmh", "whole"):
            f = np.zeros(problem.n)
            s = np.zeros(problem.n)
            for i, op in enumerate(problem.ops):
                L = 1 if dim == "whole" else op.dims.get(dim)
                if not L:
                    continue
                f[i] = per_op_overhead
                s[i] = op.flops / 1e9 / L
            fixed[dim], slope[dim] = f, s
        return cls(fixed, slope, "flops")

    def time(self, dim: str, i: int, size) -> np.ndarray:
        size = np.asarray(size)
        return np.where(size > 0, self.fixed[dim][i] + self.slope[dim][i] * size, 0.0)

    def to_json(self) -> dict:
        return {"source": self.source,
                "fixed": {d: [float(v) for v in a] for d, a in self.fixed.items()},
                "slope": {d: [float(v) for v in a] for d, a in self.slope.items()},
                "linearity": self.linearity}

    @classmethod
    def from_json(cls, d: dict) -> "OpTimes":
        return cls({k: np.asarray(v, float) for k, v in d["fixed"].items()},
                   {k: np.asarray(v, float) for k, v in d["slope"].items()},
                   d.get("source", "measured"), d.get("linearity", {}))


@dataclass
class CostModel:
    devices: list
    link: Link
    times: OpTimes
    count_weights: bool = True  # device memory holds the weights of the slices it runs
    copy_bandwidth: float | None = None  # bytes/s a (reference) device assembles regions at

    def __post_init__(self):
        if not self.devices:
            raise SplitError("need at least one device")
        for d in self.devices:
            if not (math.isfinite(d.speed) and d.speed > 0):
                raise SplitError(f"device speed must be > 0, not {d.speed!r}")
            if d.memory_bytes is not None and int(d.memory_bytes) < 0:
                raise SplitError(f"device memory must be >= 0 bytes, not {d.memory_bytes!r}")

    @property
    def n(self) -> int:
        return len(self.devices)

    @property
    def speeds(self) -> np.ndarray:
        return np.array([d.speed for d in self.devices], dtype=float)

    @property
    def limits(self) -> np.ndarray:
        return np.array([np.inf if d.memory_bytes is None else float(d.memory_bytes)
                         for d in self.devices])


def devices_from_specs(specs) -> list[Device]:
    """``[{"memory_bytes": .., "gflops" | "speed": ..}, ...]`` -> `Device` list."""
    out = []
    for k, s in enumerate(specs):
        if isinstance(s, Device):
            out.append(s)
            continue
        if not isinstance(s, dict):
            raise SplitError(f"device {k}: expected a dict, not {type(s).__name__}")
        unknown = set(s) - {"memory_bytes", "gflops", "speed", "name", "address"}
        if unknown:
            raise SplitError(f"device {k}: unknown keys {sorted(unknown)}")
        speed = s.get("speed", s.get("gflops", 1.0))
        try:
            speed = float(speed)
        except (TypeError, ValueError):
            raise SplitError(f"device {k}: speed/gflops must be a number") from None
        mem = s.get("memory_bytes")
        if mem is not None:
            try:
                mem = int(mem)
            except (TypeError, ValueError):
                raise SplitError(f"device {k}: memory_bytes must be an integer") from None
        out.append(Device(mem, speed, str(s.get("name", f"dev{k}")), str(s.get("address", ""))))
    return out


# ---------------------------------------------------------------------------- profiles
PROFILE_VERSION = 1


def save_profile(path: str, devices: list, link: Link, extra: dict | None = None) -> None:
    data = {"version": PROFILE_VERSION, "devices": [asdict(d) for d in devices],
            "link": asdict(link)}
    if extra:
        data.update(extra)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


def load_profile(path: str) -> tuple[list, Link, dict]:
    """(devices, link, the whole JSON) of a profile file; `SplitError` on a malformed one."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise SplitError(f"cannot read device profile {path!r}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list) \
            or not isinstance(data.get("link"), dict):
        raise SplitError(f"{path!r} is not a memsched device profile (devices, link)")
    try:
        link = Link.from_dict(data["link"])
        devices = devices_from_specs(data["devices"])
    except TypeError as e:
        raise SplitError(f"{path!r}: {e}") from None
    return devices, link, data

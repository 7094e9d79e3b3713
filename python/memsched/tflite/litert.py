"""Run .tflite pipeline segments as a pipeline, and check them against the unsplit model.

`SegmentPipeline` does what libcoral's ``PipelinedModelRunner`` does for Edge TPUs, on CPU: one
interpreter per segment, each on its own thread, queues between them; segment ``i+1`` receives
the tensors segment ``i`` returns, matched by name. Inputs stream through, so with ``k`` segments
up to ``k`` inputs are in flight (the interpreter releases the GIL while it runs).

Interpreters are LiteRT's (``ai-edge-litert``; ``tflite-runtime`` as a fallback), created
without the default delegates (XNNPACK would fuse and drop intermediates, and rounds
differently from the reference kernels), one thread each.

`check_segments` runs the unsplit model and the chained segments with every tensor kept and
compares every tensor each segment computes with the same tensor of the unsplit model (not only
the final outputs: an int8 softmax over random weights saturates to one value for every input
and would hide a broken segment).
"""
from __future__ import annotations

import glob
import os
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np


class SegmentError(ValueError):
    """Segments that cannot be loaded or do not fit together; the message names the problem."""


def _interpreter_cls():
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:  # pragma: no cover - depends on what is installed
        try:
            from tflite_runtime.interpreter import Interpreter, OpResolverType  # type: ignore
        except ImportError:
            raise SegmentError("running .tflite segments needs 'ai-edge-litert' (or "
                               "'tflite-runtime')") from None
    return Interpreter, OpResolverType


def make_interpreter(path_or_bytes, preserve_all_tensors: bool = False, num_threads: int = 1):
    """A LiteRT interpreter without default delegates, tensors allocated."""
    Interpreter, OpResolverType = _interpreter_cls()
    kw = dict(experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
              num_threads=num_threads, experimental_preserve_all_tensors=preserve_all_tensors)
    label = path_or_bytes if isinstance(path_or_bytes, str) else "model"
    try:
        if isinstance(path_or_bytes, (bytes, bytearray)):
            it = Interpreter(model_content=bytes(path_or_bytes), **kw)
        else:
            it = Interpreter(model_path=str(path_or_bytes), **kw)
        it.allocate_tensors()
    except (ValueError, RuntimeError) as e:
        msg = str(e).strip().splitlines()
        raise SegmentError(f"cannot load {label!r}: {msg[-1] if msg else type(e).__name__}") \
            from None
    return it


def find_segments(directory: str) -> list[str]:
    """``<model>_segment_<i>_of_<K>.tflite`` files of one model in ``directory``, in order."""
    if not os.path.isdir(directory):
        raise SegmentError(f"{directory!r} is not a directory")
    pat = re.compile(r"^(.*)_segment_(\d+)_of_(\d+)(?:_edgetpu)?\.tflite$")
    groups: dict[tuple[str, int], dict[int, str]] = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.tflite"))):
        m = pat.match(os.path.basename(path))
        if m:
            groups.setdefault((m.group(1), int(m.group(3))), {})[int(m.group(2))] = path
    if not groups:
        raise SegmentError(f"no <model>_segment_<i>_of_<K>.tflite files in {directory!r}")
    if len(groups) > 1:
        raise SegmentError(f"{directory!r} holds segments of several cuts: "
                           f"{', '.join(f'{n} ({k} stages)' for n, k in sorted(groups))}")
    (name, k), files = next(iter(groups.items()))
    missing = [i for i in range(k) if i not in files]
    if missing:
        raise SegmentError(f"{name}: segment(s) {missing} of {k} missing in {directory!r}")
    return [files[i] for i in range(k)]


def random_inputs(details: Sequence[dict], count: int, seed: int = 0) -> list[dict]:
    """``count`` input dicts (name -> array) for the given input details."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        feed = {}
        for d in details:
            dt = np.dtype(d["dtype"])
            shape = tuple(int(x) for x in d["shape"])
            if dt.kind in "iu":
                info = np.iinfo(dt)
                feed[d["name"]] = rng.integers(info.min, info.max, size=shape, endpoint=True,
                                               dtype=dt)
            elif dt.kind == "b":
                feed[d["name"]] = rng.random(shape) < 0.5
            else:
                feed[d["name"]] = rng.normal(0.0, 1.0, size=shape).astype(dt)
        out.append(feed)
    return out


@dataclass
class PipelineStats:
    """Wall time of a streamed run and per-stage invoke latencies (seconds)."""

    count: int
    seconds: float
    stage_latency: list[float]
    stage_latency_all: list[list[float]] = field(default_factory=list, repr=False)

    @property
    def throughput(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("inf")


class _Stage:
    def __init__(self, path: str, num_threads: int, preserve: bool):
        self.path = path
        self.it = make_interpreter(path, preserve, num_threads)
        self.inputs = self.it.get_input_details()
        self.outputs = self.it.get_output_details()
        self.lat: list[float] = []

    def run(self, feed: dict) -> dict:
        for d in self.inputs:
            if d["name"] not in feed:
                raise SegmentError(f"{os.path.basename(self.path)}: input {d['name']!r} is not "
                                   f"among the previous stage's outputs {sorted(feed)}")
            self.it.set_tensor(d["index"], np.asarray(feed[d["name"]], dtype=d["dtype"])
                               .reshape(d["shape"]))
        t0 = time.perf_counter()
        self.it.invoke()
        self.lat.append(time.perf_counter() - t0)
        return {d["name"]: self.it.get_tensor(d["index"]) for d in self.outputs}


class SegmentPipeline:
    """Segments run as a pipeline: one interpreter and one thread per segment, queues between.

    ``run(inputs)`` streams the input dicts (name -> array) through and returns the output
    dicts of the last segment, in input order, with `PipelineStats`.
    """

    def __init__(self, paths: Sequence[str], num_threads: int = 1, queue_size: int = 2,
                 preserve_all_tensors: bool = False):
        if not paths:
            raise SegmentError("no segments given")
        self.paths = list(paths)
        self.stages = [_Stage(p, num_threads, preserve_all_tensors) for p in self.paths]
        self.queue_size = queue_size
        for a, b in zip(self.stages, self.stages[1:]):
            have = {d["name"] for d in a.outputs}
            need = [d["name"] for d in b.inputs if d["name"] not in have]
            if need:
                raise SegmentError(f"{os.path.basename(b.path)} needs {need}, which "
                                   f"{os.path.basename(a.path)} does not return")

    @property
    def input_details(self) -> list[dict]:
        return self.stages[0].inputs

    def run(self, inputs: Iterable[dict]) -> tuple[list[dict], PipelineStats]:
        k = len(self.stages)
        qs = [queue.Queue(self.queue_size) for _ in range(k + 1)]
        stop = object()
        errors: list[BaseException] = []
        for st in self.stages:
            st.lat = []

        def worker(i):
            st = self.stages[i]
            while True:
                item = qs[i].get()
                if item is stop:
                    qs[i + 1].put(stop)
                    return
                idx, feed = item
                if errors:
                    continue  # drain after a failure
                try:
                    qs[i + 1].put((idx, st.run(feed)))
                except BaseException as e:  # noqa: BLE001 - reported by run()
                    errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(k)]
        results: dict[int, dict] = {}

        def collector():
            while True:
                item = qs[k].get()
                if item is stop:
                    return
                results[item[0]] = item[1]

        col = threading.Thread(target=collector, daemon=True)
        t0 = time.perf_counter()
        for t in threads + [col]:
            t.start()
        n = 0
        for feed in inputs:
            qs[0].put((n, feed))
            n += 1
        qs[0].put(stop)
        for t in threads + [col]:
            t.join()
        seconds = time.perf_counter() - t0
        if errors:
            e = errors[0]
            raise e if isinstance(e, SegmentError) else SegmentError(
                f"segment run failed: {type(e).__name__}: {e}")
        lat = [float(np.mean(st.lat)) if st.lat else 0.0 for st in self.stages]
        return [results[i] for i in range(n)], PipelineStats(n, seconds, lat,
                                                             [list(st.lat) for st in self.stages])


def pipeline_runner(segments, num_threads: int = 1, queue_size: int = 2) -> SegmentPipeline:
    """A `SegmentPipeline` over a directory of segments or a list of segment files."""
    paths = find_segments(segments) if isinstance(segments, str) else list(segments)
    return SegmentPipeline(paths, num_threads=num_threads, queue_size=queue_size)


def run_model(path: str, inputs: Sequence[dict], num_threads: int = 1
              ) -> tuple[list[dict], float]:
    """Outputs (name -> array) of the unsplit model on each input, and the seconds taken."""
    st = _Stage(path, num_threads, False)
    t0 = time.perf_counter()
    outs = [st.run(feed) for feed in inputs]
    return outs, time.perf_counter() - t0


@dataclass
class CheckReport:
    """Result of `check_segments`: every computed tensor compared, by name."""

    inputs: int
    tensors_compared: int
    outputs_equal: bool
    mismatches: list[str]
    skipped: list[str]

    @property
    def equal(self) -> bool:
        return self.outputs_equal and not self.mismatches


def check_segments(model_path: str, segment_paths: Sequence[str], inputs: Sequence[dict]
                   ) -> CheckReport:
    """Chain the segments on each input and compare every tensor each segment's operators
    compute, and the final outputs, with the unsplit model's (exact equality)."""
    from .format.read import read_tflite

    full = _Stage(model_path, 1, True)
    ref_index: dict[str, list[int]] = {}
    for d in full.it.get_tensor_details():
        ref_index.setdefault(d["name"], []).append(d["index"])
    stages = [_Stage(p, 1, True) for p in segment_paths]
    computed = []
    for st in stages:
        tg = read_tflite(st.path)
        names = {tg.graph.tensors[t].name for op in tg.graph.ops for t in op.outputs}
        idx = {d["name"]: d["index"] for d in st.it.get_tensor_details() if d["name"] in names}
        computed.append(idx)
    mismatches: list[str] = []
    skipped: set[str] = set()
    compared = 0
    outputs_equal = True
    for n, feed in enumerate(inputs):
        ref_out = full.run(feed)
        cur = feed
        for st, idx in zip(stages, computed):
            cur = st.run(cur)
            for name, ti in idx.items():
                refs = ref_index.get(name, [])
                if len(refs) != 1:
                    skipped.add(name)  # absent or ambiguous name in the unsplit model
                    continue
                compared += 1
                a, b = st.it.get_tensor(ti), full.it.get_tensor(refs[0])
                if a.shape != b.shape or not np.array_equal(a, b):
                    mismatches.append(f"input {n}: {os.path.basename(st.path)}: {name}")
        for name, val in ref_out.items():
            if name not in cur or not np.array_equal(cur[name], val):
                outputs_equal = False
                mismatches.append(f"input {n}: model output {name!r} differs")
    return CheckReport(len(inputs), compared, outputs_equal, mismatches, sorted(skipped))

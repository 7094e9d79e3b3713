"""Write a cut of a .tflite model as pipeline segments, one valid .tflite per stage.

Segment ``i`` holds the operators of stage ``i`` in file order, with every tensor they touch
(names, shapes, types and quantization copied; constant buffers copied, shared ones once), written
with the flatbuffer schema object API. Its interface follows the partition objective's relay
semantics (`memsched.partition.problem`):

* segment 0 takes the model's inputs; segment ``i > 0`` takes exactly what segment ``i-1``
  returns, in the same order and under the same names;
* segment ``i < k-1`` returns the tensors crossing boundary ``i``: produced at a stage ``<= i``
  (or model inputs) and read after stage ``i`` or returned by the model. A tensor that skips a
  stage passes through it (an input that is also an output), so each device only talks to the
  next one, as in libcoral's ``PipelinedModelRunner``; the last segment returns the model's
  outputs in the model's order.

Files are named ``<model>_segment_<i>_of_<K>.tflite`` (the Edge TPU compiler's naming).
"""
from __future__ import annotations

import copy
import os
from typing import Sequence

import numpy as np

from .format.read import TFLiteGraph, TFLiteModelError, schema
from .format.write import (finish_model, pack_model,  # noqa: F401 - pack_model re-exported
                           write_model)


def segment_file_name(model_name: str, i: int, k: int) -> str:
    return f"{model_name}_segment_{i}_of_{k}.tflite"


def boundary_tensors(tg: TFLiteGraph, assignment: Sequence[int]) -> list[list[int]]:
    """File tensor indices crossing each boundary ``j`` (``0..k-2``), in a fixed order: model
    inputs in input order, then by producing operator and output position."""
    s = list(assignment)
    k = max(s) + 1
    sg = tg.subgraph
    inputs = [int(t) for t in (sg.inputs if sg.inputs is not None else [])]
    outputs = {int(t) for t in (sg.outputs if sg.outputs is not None else [])}
    prod: dict[int, int] = {}
    order: dict[int, tuple] = {t: (-1, i) for i, t in enumerate(inputs)}
    for v, op in enumerate(sg.operators or []):
        for i, t in enumerate(op.outputs if op.outputs is not None else []):
            if t >= 0:
                prod[int(t)] = v
                order[int(t)] = (v, i)
    last: dict[int, int] = {}
    for v, op in enumerate(sg.operators or []):
        for t in (op.inputs if op.inputs is not None else []):
            t = int(t)
            if t in order:
                last[t] = max(last.get(t, -1), s[v])
    cross: list[list[int]] = [[] for _ in range(k - 1)]
    for t in sorted(order, key=order.get):
        first = s[prod[t]] if t in prod else -1
        end = k - 1 if t in outputs else last.get(t, first)
        for j in range(max(first, 0), end):
            cross[j].append(t)
    return cross


def segment_models(tg: TFLiteGraph, assignment: Sequence[int]) -> list:
    """One ``ModelT`` per stage (see the module docstring)."""
    s = schema()
    model = tg.model
    if len(model.subgraphs) > 1:
        raise TFLiteModelError(f"model {tg.name!r} has {len(model.subgraphs)} subgraphs "
                               "(control flow); only single-subgraph models can be segmented")
    sg = tg.subgraph
    ops = sg.operators or []
    a = [int(x) for x in assignment]
    if len(a) != len(ops):
        raise TFLiteModelError(f"assignment has {len(a)} entries for {len(ops)} operators")
    k = max(a) + 1
    cross = boundary_tensors(tg, a)
    names = _unique_boundary_names(sg, [t for c in cross for t in c])
    ins0 = [int(t) for t in (sg.inputs if sg.inputs is not None else [])]
    outs_last = [int(t) for t in (sg.outputs if sg.outputs is not None else [])]
    segments = []
    for i in range(k):
        seg_ops = [v for v in range(len(ops)) if a[v] == i]
        seg_in = ins0 if i == 0 else cross[i - 1]
        seg_out = outs_last if i == k - 1 else cross[i]
        tmap: dict[int, int] = {}
        tensors, buffers = [], [s.BufferT()]
        bmap: dict[int, int] = {}

        def tensor(t: int) -> int:
            if t < 0:
                return -1
            if t not in tmap:
                src = sg.tensors[t]
                new = copy.copy(src)
                if t in names:
                    new.name = names[t]
                data = tg.buffer_bytes(int(src.buffer)) if 0 <= src.buffer < len(
                    model.buffers) else np.zeros(0, np.uint8)
                if len(data):
                    if src.buffer not in bmap:
                        bmap[src.buffer] = len(buffers)
                        buffers.append(s.BufferT(data=data))
                    new.buffer = bmap[src.buffer]
                else:
                    new.buffer = 0
                tmap[t] = len(tensors)
                tensors.append(new)
            return tmap[t]

        codes: dict[int, int] = {}
        new_ops = []
        for t in seg_in:
            tensor(t)
        for v in seg_ops:
            op = copy.copy(ops[v])
            if op.opcodeIndex not in codes:
                codes[op.opcodeIndex] = len(codes)
            op.opcodeIndex = codes[op.opcodeIndex]
            op.inputs = [tensor(int(t)) for t in (op.inputs if op.inputs is not None else [])]
            op.outputs = [tensor(int(t)) for t in (op.outputs if op.outputs is not None else [])]
            if op.intermediates is not None:
                op.intermediates = [tensor(int(t)) for t in op.intermediates]
            new_ops.append(op)
        for t in seg_out:
            tensor(t)
        sub = s.SubGraphT(tensors=tensors, inputs=[tmap[t] for t in seg_in],
                          outputs=[tmap[t] for t in seg_out], operators=new_ops,
                          name=f"{tg.name}_segment_{i}")
        opcodes = [None] * len(codes)
        for old, new in codes.items():
            opcodes[new] = copy.copy(model.operatorCodes[old])
        segments.append(s.ModelT(
            version=model.version or 3, operatorCodes=opcodes, subgraphs=[sub],
            description=f"memsched: segment {i} of {k} of {tg.name}", buffers=buffers))
    return segments


def _unique_boundary_names(sg, indices) -> dict[int, str]:
    """Names for boundary tensors, made unique where the file repeats a name (the runner passes
    tensors between segments by name)."""
    from .format.read import _tname

    seen: dict[str, int] = {}
    for t, ten in enumerate(sg.tensors):
        seen.setdefault(_tname(ten, t), 0)
        seen[_tname(ten, t)] += 1
    out = {}
    for t in dict.fromkeys(indices):
        name = _tname(sg.tensors[t], t)
        out[t] = name if seen[name] == 1 else f"{name}@{t}"
    return out


def write_segments(tg: TFLiteGraph, assignment: Sequence[int], out_dir: str,
                   model_name: str | None = None) -> list[str]:
    """Write one .tflite per stage into ``out_dir`` (each checked by `check`, written
    atomically with the umask's permissions); returns the paths in stage order."""
    os.makedirs(out_dir, exist_ok=True)
    models = segment_models(tg, assignment)
    name = model_name or tg.name
    paths = []
    for i, m in enumerate(models):
        path = os.path.join(out_dir, segment_file_name(name, i, len(models)))
        write_model(path, finish_model(m, label=path))
        paths.append(path)
    return paths

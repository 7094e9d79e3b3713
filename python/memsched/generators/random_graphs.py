"""Random DAGs in the OpGraph model, for property tests and scheduler benchmarks.

`random_dag` draws layered, irregularly wired graphs (like RandWire/NAS cells): every op reads
1-3 earlier values, sizes vary over an order of magnitude, some ops are views (alias), some have
workspace, some have two outputs, element-wise ops allow in-place reuse.
"""
from __future__ import annotations

import random

from ..graph import GraphBuilder, OpGraph


def random_dag(n: int, seed: int = 0, *, max_fanin: int = 3, window: int = 6,
               alias_prob: float = 0.1, multi_out_prob: float = 0.1,
               workspace_prob: float = 0.2, inputs: int = 1) -> OpGraph:
    rng = random.Random(seed)
    b = GraphBuilder(f"random{n}_s{seed}")
    values: list[tuple[list[int], int | None]] = []  # (tensor ids, alias op id)
    for i in range(inputs):
        values.append(([b.input(f"in{i}", rng.choice([64, 128, 256]))], None))
    for i in range(n):
        k = rng.randint(1, min(max_fanin, len(values)))
        lo = max(0, len(values) - window)
        srcs = rng.sample(range(lo, len(values)), k) if len(values) - lo >= k else \
            rng.sample(range(len(values)), k)
        ins = [t for s in srcs for t in values[s][0]]
        extra = [values[s][1] for s in srcs if values[s][1] is not None]
        if rng.random() < alias_prob and k == 1:
            v = b.op(f"view{i}", "reshape", ins, [], alias=True, extra_preds=extra)
            values.append((ins, v))
            continue
        nout = 2 if rng.random() < multi_out_prob else 1
        outs = [(f"t{i}_{j}", rng.choice([16, 32, 64, 96, 128, 256, 384, 512]))
                for j in range(nout)]
        ws = rng.choice([0, 32, 128]) if rng.random() < workspace_prob else 0
        inplace = ins[:1] if k == 1 and nout == 1 and rng.random() < 0.5 else []
        v = b.op(f"op{i}", "conv" if k == 1 else "add", ins, outs, workspace=ws,
                 extra_preds=extra, inplace=inplace)
        for t in b.ops[v].outputs:
            values.append(([t], None))
    # values nobody reads become graph outputs
    for ten_id, ten in enumerate(b.tensors):
        if ten.producer is not None and not ten.consumers:
            b.mark_output(ten_id)
    return b.build()

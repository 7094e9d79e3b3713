"""Synthetic partition problems shaped like int8 CNN graphs, for training the learned cut.

The Inc-ILP paper trains its agent on random DAGs with ``|V| = 30`` and maximum in-degree
``2..6``, matched to real models' statistics. This generator follows what the int8 .tflite
graphs of the paper's ten Keras models look like: a backbone in which every op reads its
predecessor, with skip edges to recent ops (residual / dense connections; up to ``max_indeg``
inputs), about a third of the ops without parameters (ADD, PAD, pooling, CONCATENATION),
parameter sizes spread over two orders of magnitude and growing with depth, activation sizes
shrinking with depth, a few all-zero bias buffers shared between ops of one width.
"""
from __future__ import annotations

import random

from ..graph import GraphBuilder
from .problem import PartitionProblem


def synthetic_problem(n: int = 30, max_indeg: int = 3, seed: int = 0) -> PartitionProblem:
    rng = random.Random(seed)
    b = GraphBuilder(f"synthetic{n}_d{max_indeg}_s{seed}")
    x = b.input("x", 150_528)
    outs: list[int] = [x]
    op_params: list[tuple[int, ...]] = []
    param_bytes: list[int] = []
    shared_bias: dict[int, int] = {}
    window = rng.choice([3, 4, 6, 8])
    for i in range(n):
        depth = i / max(1, n - 1)
        k = 1
        if i >= 1 and rng.random() < 0.25:
            k = rng.randint(2, max(2, max_indeg))
        srcs = [len(outs) - 1]
        pool = list(range(max(0, len(outs) - 1 - window), len(outs) - 1))
        rng.shuffle(pool)
        srcs += pool[:k - 1]
        ins = [outs[s] for s in srcs]
        act = int(802_816 * (0.5 ** (4 * depth)) * rng.uniform(0.5, 1.5))
        if len(ins) > 1 or rng.random() < 0.25:  # ADD / CONCATENATION / PAD / pooling
            kind, params = ("add" if len(ins) > 1 else "pool"), ()
        else:
            kind = "conv"
            w = int(20_000 * (10 ** (1.0 * depth + rng.uniform(-0.35, 0.35))))
            width = rng.choice([64, 128, 256, 512, 1024, 2048])
            param_bytes.append(w)
            ids = [len(param_bytes) - 1]
            if rng.random() < 0.3:  # the converter's deduplicated all-zero bias
                if width not in shared_bias:
                    param_bytes.append(4 * width)
                    shared_bias[width] = len(param_bytes) - 1
                ids.append(shared_bias[width])
            else:
                param_bytes.append(4 * width)
                ids.append(len(param_bytes) - 1)
            params = tuple(ids)
        v = b.op(f"op{i}", kind, ins, [(f"t{i}", max(1, act))])
        outs.append(b.ops[v].outputs[0])
        op_params.append(params)
    b.mark_output(outs[-1])
    return PartitionProblem.from_graph(b.build(), op_params, param_bytes)

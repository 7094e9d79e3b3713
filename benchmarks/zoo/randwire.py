"""RandWire (Xie et al., ICCV 2019), WS(K=4, P=0.75), small computation regime.

Small regime (paper Table 2): conv1 3x3/2 C/2, conv2 3x3/2 C, then three random-wiring stages
of N nodes each (conv3: C; conv4: 2C; conv5: 4C) at 28, 14, 7, then a 1x1 conv to 1280, global
average pool and the classifier; N=32, C=78. (Only the regular regime has an N/2-node stage, at
56x56.) This gives 5.55-5.64M params and 574-579M mult-adds for seeds 1-3; paper: 5.6+-0.1M,
583+-6.2M FLOPs.

A stage's graph comes from a Watts-Strogatz generator written here (ring lattice of N nodes,
each joined to its K/2 clockwise neighbours, every such edge rewired with probability P to a
uniformly drawn new endpoint that makes no self-loop and no duplicate), seeded with
``random.Random(seed)``; a disconnected draw is redrawn with the next seed. Edges point from the
lower to the higher node index. A node sums its inputs with sigmoid-positive weights, then
applies ReLU - 3x3 separable conv - BN; nodes without predecessors read the stage input with
stride 2; the stage output is the mean of the nodes without successors.
"""
from __future__ import annotations

import random

from torch import nn

from .ops import ConvBN, WeightedSum, relu

EPS = 1e-5


def watts_strogatz(n: int, k: int, p: float, seed: int) -> list[tuple[int, int]]:
    """Undirected WS graph as a sorted list of edges (u < v). Deterministic in ``seed``."""
    rng = random.Random(seed)
    adj = {i: set() for i in range(n)}
    for i in range(n):
        for j in range(1, k // 2 + 1):
            v = (i + j) % n
            adj[i].add(v)
            adj[v].add(i)
    for j in range(1, k // 2 + 1):
        for u in range(n):
            v = (u + j) % n
            if v not in adj[u] or rng.random() >= p:
                continue
            choices = [w for w in range(n) if w != u and w not in adj[u]]
            if not choices:
                continue
            w = choices[int(rng.random() * len(choices))]
            adj[u].discard(v)
            adj[v].discard(u)
            adj[u].add(w)
            adj[w].add(u)
    return sorted((min(u, v), max(u, v)) for u in adj for v in adj[u] if u < v)


def _connected(n, edges):
    seen, todo = {0}, [0]
    nb = {i: [] for i in range(n)}
    for u, v in edges:
        nb[u].append(v)
        nb[v].append(u)
    while todo:
        for v in nb[todo.pop()]:
            if v not in seen:
                seen.add(v)
                todo.append(v)
    return len(seen) == n


def connected_ws(n, k, p, seed):
    s = seed
    while True:
        edges = watts_strogatz(n, k, p, s)
        if _connected(n, edges):
            return edges
        s += 100003


class _Node(nn.Module):
    def __init__(self, n_in, cin, cout, stride):
        super().__init__()
        self.agg = WeightedSum(n_in)
        self.op = nn.Sequential(
            relu(), nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
            ConvBN(cin, cout, 1, eps=EPS))

    def forward(self, xs):
        return self.op(self.agg(xs))


class RandomStage(nn.Module):
    def __init__(self, n, cin, cout, seed, k=4, p=0.75):
        super().__init__()
        self.edges = connected_ws(n, k, p, seed)
        self.preds = [[u for u, v in self.edges if v == i] for i in range(n)]
        succs = [[v for u, v in self.edges if u == i] for i in range(n)]
        self.outputs = [i for i in range(n) if not succs[i]]
        self.nodes = nn.ModuleList(
            _Node(max(1, len(self.preds[i])), cout if self.preds[i] else cin, cout,
                  1 if self.preds[i] else 2) for i in range(n))

    def forward(self, x):
        ys = []
        for i, node in enumerate(self.nodes):
            ys.append(node([ys[j] for j in self.preds[i]] if self.preds[i] else [x]))
        out = ys[self.outputs[0]]
        for i in self.outputs[1:]:
            out = out + ys[i]
        return out * (1.0 / len(self.outputs)) if len(self.outputs) > 1 else out


class RandWire(nn.Module):
    def __init__(self, seed: int, n=32, c=78, k=4, p=0.75, num_classes=1000,
                 stage_nodes=None):
        super().__init__()
        stage_nodes = stage_nodes or (n, n, n)
        self.conv1 = ConvBN(3, c // 2, 3, 2, eps=EPS)
        self.conv2 = nn.Sequential(relu(), ConvBN(c // 2, c, 3, 2, eps=EPS))
        self.conv3 = RandomStage(stage_nodes[0], c, c, seed * 1000 + 3, k, p)
        self.conv4 = RandomStage(stage_nodes[1], c, 2 * c, seed * 1000 + 4, k, p)
        self.conv5 = RandomStage(stage_nodes[2], 2 * c, 4 * c, seed * 1000 + 5, k, p)
        self.head = nn.Sequential(relu(), ConvBN(4 * c, 1280, 1, eps=EPS), relu())
        self.classifier = nn.Linear(1280, num_classes)
        self.final_channels = 1280

    def forward(self, x):
        x = self.conv2(self.conv1(x))
        x = self.conv5(self.conv4(self.conv3(x)))
        return self.classifier(self.head(x).mean((2, 3)))


def randwire_ws(seed: int, **kw):
    return RandWire(seed, **kw)

"""Synthetic whole networks in the shape of the papers' benchmarks, without torch or TVM.

Fast stand-ins for the zoo (`benchmarks/zoo`) in tests and benchmarks. Sizes are in bytes of
fp32 activations (``C*H*W*4``), scaled down by ``scale`` so numbers stay readable.

* `nas_network`: NASNet-A-like: cells take the two previous cell outputs, preprocess each
  (ReLU-1x1 conv-BN), combine ``blocks`` pairs of operations (separable convs = two
  ReLU-depthwise-pointwise-BN chains, pools, identities) by addition, and concatenate the
  unused states; reduction cells halve the resolution and double the channels.
* `randwire_network`: RandWire-like: Watts-Strogatz random DAG stages; each node sums its
  inputs, then ReLU-separable conv-BN (Xie et al. 2019).
* `hrnet_network`: HRNet-like: parallel resolution branches of residual blocks with exchange
  (fuse) layers between modules (Wang et al. 2020).
"""
from __future__ import annotations

import random

from ..graph import GraphBuilder, OpGraph


class _Net:
    def __init__(self, name: str, scale: int):
        self.b = GraphBuilder(name)
        self.scale = scale
        self.k = 0

    def nbytes(self, c: int, hw: int) -> int:
        return max(1, c * hw * hw * 4 // self.scale)

    def op(self, kind: str, ins, c: int, hw: int, workspace: int = 0) -> int:
        self.k += 1
        inplace = ins[:1] if kind in ("relu", "add", "bn") else []
        v = self.b.op(f"{kind}{self.k}", kind, ins, [(f"t{self.k}", self.nbytes(c, hw))],
                      workspace=workspace, inplace=inplace)
        return self.b.ops[v].outputs[0]

    def sep(self, x, cin, cout, hw, stride=1, repeats=2):
        out_hw = hw // stride
        for r in range(repeats):
            x = self.op("relu", [x], cin, hw)
            x = self.op("dwconv", [x], cin, out_hw if r == 0 else hw)
            hw = out_hw
            x = self.op("conv", [x], cout, hw)
            x = self.op("bn", [x], cout, hw)
            cin = cout
        return x

    def conv_bn(self, x, cout, hw, relu=True):
        if relu:
            x = self.op("relu", [x], cout, hw)
        x = self.op("conv", [x], cout, hw)
        return self.op("bn", [x], cout, hw)


def nas_network(cells: int = 6, blocks: int = 5, channels: int = 16, resolution: int = 32,
                reductions: tuple[int, ...] = (2, 4), seed: int = 0, scale: int = 64,
                sep_repeats: int = 2) -> OpGraph:
    """A NASNet-A-like network of ``cells`` cells (``reductions`` are reduction cells)."""
    rng = random.Random(seed)
    net = _Net(f"nas{cells}x{blocks}_s{seed}", scale)
    b = net.b
    x = b.input("image", net.nbytes(3, resolution))
    hw, c = resolution, channels
    stem = net.op("conv", [x], c, hw)
    stem = net.op("bn", [stem], c, hw)
    prev2, prev = (stem, c, hw), (stem, c, hw)
    ops = ("sep3", "sep5", "avg", "max", "id")
    for i in range(cells):
        red = i in reductions
        cout = c * 2 if red else c
        out_hw = hw // 2 if red else hw
        h1 = net.conv_bn(prev[0], cout, prev[2])
        if prev2[2] != prev[2]:  # factorized reduction of the older state
            h0 = net.op("avgpool", [prev2[0]], prev2[1], prev[2])
            h0 = net.conv_bn(h0, cout, prev[2], relu=False)
        else:
            h0 = net.conv_bn(prev2[0], cout, prev[2])
        states = [(h0, prev[2]), (h1, prev[2])]
        used = [False, False]
        for _ in range(blocks):
            pair = []
            for _ in range(2):
                j = rng.randrange(len(states))
                used[j] = True
                s, s_hw = states[j]
                kind = rng.choice(ops)
                stride = 2 if red and s_hw != out_hw else 1
                if kind.startswith("sep"):
                    y = net.sep(s, cout, cout, s_hw, stride, sep_repeats)
                elif kind in ("avg", "max"):
                    y = net.op(f"{kind}pool", [s], cout, s_hw // stride)
                elif stride > 1:
                    y = net.conv_bn(s, cout, out_hw)
                else:
                    y = s
                pair.append(y)
            states.append((net.op("add", pair, cout, out_hw), out_hw))
            used.append(False)
        outs = [s for (s, _), u in zip(states, used) if not u and s not in (h0, h1)]
        if len(outs) == 1:
            out = outs[0]
        else:
            out = net.op("concat", outs, cout * len(outs), out_hw)
        prev2, prev = prev, (out, cout * len(outs), out_hw)
        c, hw = cout, out_hw
    y = net.op("relu", [prev[0]], prev[1], hw)
    y = net.op("mean", [y], prev[1], 1)
    y = net.op("dense", [y], 10, 1)
    b.mark_output(y)
    return b.build()


def randwire_network(nodes: int = 16, stages: int = 2, k: int = 4, p: float = 0.75,
                     channels: int = 16, resolution: int = 32, seed: int = 0,
                     scale: int = 64) -> OpGraph:
    """RandWire-like: ``stages`` Watts-Strogatz(``nodes``, ``k``, ``p``) random DAGs."""
    rng = random.Random(seed)
    net = _Net(f"randwire{nodes}x{stages}_s{seed}", scale)
    b = net.b
    x = b.input("image", net.nbytes(3, resolution))
    hw, c = resolution, channels
    x = net.conv_bn(x, c, hw, relu=False)
    for st in range(stages):
        # Watts-Strogatz ring lattice, rewired, oriented from lower to higher node index
        edges = set()
        for i in range(nodes):
            for j in range(1, k // 2 + 1):
                a, bb = i, (i + j) % nodes
                if rng.random() < p:
                    bb = rng.randrange(nodes)
                    while bb == a or (min(a, bb), max(a, bb)) in edges:
                        bb = rng.randrange(nodes)
                edges.add((min(a, bb), max(a, bb)))
        preds = {i: sorted(a for a, bb in edges if bb == i) for i in range(nodes)}
        succs = {i: [bb for a, bb in edges if a == i] for i in range(nodes)}
        cout, out_hw = c * 2, hw // 2
        out = {}
        for i in range(nodes):
            if preds[i]:
                ins = [out[a] for a in preds[i]]
                agg = ins[0] if len(ins) == 1 else net.op("add", ins, cout, out_hw)
                out[i] = net.sep(agg, cout, cout, out_hw, 1, 1)
            else:
                out[i] = net.sep(x, c, cout, hw, 2, 1)
        sinks = [out[i] for i in range(nodes) if not succs[i]]
        x = sinks[0] if len(sinks) == 1 else net.op("add", sinks, cout, out_hw)
        c, hw = cout, out_hw
    y = net.op("mean", [x], c, 1)
    y = net.op("dense", [y], 10, 1)
    b.mark_output(y)
    return b.build()


def hrnet_network(branches: int = 3, modules: int = 2, blocks: int = 2, channels: int = 16,
                  resolution: int = 32, scale: int = 64) -> OpGraph:
    """HRNet-like: stages adding one lower-resolution branch each; every module runs
    ``blocks`` residual blocks per branch and then exchanges all branches."""
    net = _Net(f"hrnet{branches}x{modules}x{blocks}", scale)
    b = net.b
    x = b.input("image", net.nbytes(3, resolution))
    x = net.conv_bn(x, channels, resolution, relu=False)
    xs = [(x, channels, resolution)]
    for stage in range(branches):
        if stage:
            last, c, hw = xs[-1]
            y = net.op("conv", [last], c * 2, hw // 2)
            xs.append((net.op("bn", [y], c * 2, hw // 2), c * 2, hw // 2))
        for _ in range(modules):
            new = []
            for (t, c, hw) in xs:
                for _ in range(blocks):
                    y = net.conv_bn(t, c, hw, relu=False)
                    y = net.conv_bn(y, c, hw)
                    t = net.op("add", [y, t], c, hw)
                    t = net.op("relu", [t], c, hw)
                new.append((t, c, hw))
            fused = []
            for i, (_, ci, hwi) in enumerate(new):
                terms = []
                for j, (tj, cj, hwj) in enumerate(new):
                    if i == j:
                        terms.append(tj)
                    elif j > i:  # upsample lower resolution: 1x1 conv then resize
                        y = net.op("conv", [tj], ci, hwj)
                        terms.append(net.op("resize", [y], ci, hwi))
                    else:  # strided 3x3 convs down
                        y = net.op("conv", [tj], ci, hwi)
                        terms.append(net.op("bn", [y], ci, hwi))
                s = terms[0] if len(terms) == 1 else net.op("add", terms, ci, hwi)
                fused.append((net.op("relu", [s], ci, hwi), ci, hwi))
            xs = fused
    head = [net.op("mean", [t], c, 1) for t, c, _ in xs]
    y = net.op("concat", head, sum(c for _, c, _ in xs), 1)
    y = net.op("dense", [y], 10, 1)
    b.mark_output(y)
    return b.build()


def cell_suite(size: str = "small") -> dict[str, OpGraph]:
    """Named synthetic networks for benchmarks: ``small`` (tens to ~200 ops) or ``large``
    (several hundred ops, like the papers' networks)."""
    if size == "small":
        return {
            "nas-4cell": nas_network(cells=4, blocks=4, reductions=(2,), seed=1),
            "nas-6cell": nas_network(cells=6, blocks=5, seed=2),
            "randwire-16": randwire_network(nodes=16, stages=1, seed=1),
            "randwire-2x12": randwire_network(nodes=12, stages=2, seed=2),
            "hrnet-3br": hrnet_network(branches=3, modules=1, blocks=1),
        }
    return {
        "nas-12cell": nas_network(cells=12, blocks=5, reductions=(4, 8), seed=3),
        "randwire-3x32": randwire_network(nodes=32, stages=3, seed=3),
        "hrnet-4br": hrnet_network(branches=4, modules=2, blocks=2),
    }

"""CIFAR-scale int8 ResNets (issue 40 item 3): `memsched tile` against its own floor.

ResNet-8 is the MLPerf Tiny image-classification layout (32x32x3 input, a 3x3 stem of 16
channels, three stages of basic residual blocks with 16 / 32 / 64 channels, the later two
starting with stride 2 and a 1x1 stride-2 shortcut, then the classifier; here flattened into a
FULLY_CONNECTED, random int8 weights); ResNet-20 has three blocks per stage. Prints TFLite
Micro's minimal total arena before and after (`measure_tile`, outputs compared in LiteRT and
TFLM), the regions chosen, the search's estimate and its `bound`.

``--what-binds`` (no files written, the search's estimates only): the persistent bytes the
chosen regions add, by node kind (copied operators, PADs at patch borders, STRIDED_SLICEs --
input windows and the crops a residual ADD needs --, CONCATENATIONs), and the choice the same
search makes when copies cost no persistent bytes: how far TFLite Micro's per-node persistent
bytes keep the total from the floor.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/tflite/patches_resnet.py [--what-binds]
"""
from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))
from board_columns import board_measure, board_text  # noqa: E402


def resnet(blocks: int = 1, size: int = 32, name: str = "resnet8") -> bytes:
    from memsched.generators.tflite_synth import _Net

    net = _Net(name, True, 0)
    x = net.act("x", [1, size, size, 3], 0.05, 0)
    net.b.inputs = [x]
    t, sh = net.conv(x, [1, size, size, 3], 16)
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for b in range(blocks):
            st = stride if b == 0 else 1
            y, ysh = net.conv(t, sh, cout, stride=st)
            y, ysh = net.conv(y, ysh, cout, relu=False)
            # the shortcut: a 1x1 convolution where the block changes shape
            sc = net.conv(t, sh, cout, k=1, stride=st, relu=False)[0] \
                if st != 1 or sh[3] != cout else t
            t, sh = net.add(y, sc, ysh), ysh
    n = sh[1] * sh[2] * sh[3]
    r, _ = net.reshape(t, [1, n])
    net.b.outputs = [net.fc(r, n, 10)]
    return net.b.finish()


def what_binds() -> int:
    """Where the persistent bytes go, and the search with copies free of them."""
    from collections import Counter

    from memsched.tflite.memory import model as tm
    from memsched.tflite.memory.abi import persistent_price
    from memsched.tflite.patch.tile import tile_tflite

    for name, blocks in (("resnet8", 1), ("resnet20", 3)):
        data = resnet(blocks, name=name)
        _, res = tile_tflite(data, None, offline_plan=True)
        c, s = res.choice, res.search
        sm = s_model(data)

        def nodes(choice, search) -> str:
            """The regions' nodes (each copy of an operator included) by kind, priced."""
            # at the prices the search used (`tile_tflite`'s default target, the Cortex-M)
            mem = tm.TFLMMemory(price=persistent_price("cortex-m"))
            by: Counter = Counter()
            count: Counter = Counter()
            for r in choice.sequence:
                for nd in search.plans[r.key].nodes:
                    by[nd.kind] += mem.node_persistent(sm, nd)
                    count[nd.kind] += 1
            return ", ".join(f"{k} {count[k]} nodes {by[k]:,} B" for k in sorted(by))

        parts = nodes(c, s)
        print(f"{name}: total {c.total:,} B = peak {c.peak:,} + persistent {c.persistent:,} "
              f"(model {s.floors.base_persistent:,}; the regions' nodes: {parts})")
        price = (tm.TFLMMemory.plan_persistent_delta, tm.TFLMMemory.copy_price)
        tm.TFLMMemory.plan_persistent_delta = lambda self, sm, plan: 0
        tm.TFLMMemory.copy_price = lambda self, op: 0
        try:
            _, free = tile_tflite(data, None, offline_plan=True)
        finally:
            tm.TFLMMemory.plan_persistent_delta, tm.TFLMMemory.copy_price = price
        f = free.choice
        regions = " + ".join(f"{r.region_start}-{r.region_ops - 1} {r.grid[0]}x{r.grid[1]}"
                             for r in f.sequence)
        print(f"{name}, copies free of persistent bytes: peak {f.peak:,} + persistent "
              f"{f.persistent:,} = {f.total:,} B, regions {regions}, MACs "
              f"+{100 * f.overhead:.1f} % (floor {res.bound['floor']:,} B); its nodes at "
              f"TFLM's prices: {nodes(f, free.search)}", flush=True)
    return 0


def s_model(data: bytes):
    from memsched.tflite.format.read import read_tflite
    from memsched.tflite.patch.describe import spatial_model

    return spatial_model(read_tflite(data))


def main() -> int:
    from memsched.tflite.patch.tile import measure_tile, tile_tflite

    if "--what-binds" in sys.argv[1:]:
        return what_binds()

    for name, blocks in (("resnet8", 1), ("resnet20", 3)):
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "m.tflite"), os.path.join(d, "p.tflite")
            with open(src, "wb") as f:
                f.write(resnet(blocks, name=name))
            _, res = tile_tflite(src, dst, offline_plan=True)
            m = measure_tile(src, dst, count=1)
            m.update(board_measure(src, dst))
            c = res.choice
            regions = [f"{r['region_start']}-{r['region_ops'] - 1} {r['grid']}"
                       f"{' margins' if r.get('padding') == 'margins' else ''}"
                       for r in c.as_dict()["regions"]] if c else []
            b = res.bound
            print(f"{name}: TFLM {m.get('tflm_arena_original'):,} -> "
                  f"{m.get('tflm_arena_patched'):,} B ({m.get('tflm_arena_ratio')}x), "
                  f"regions {' + '.join(regions) or 'none'}, estimate "
                  f"{c.total if c else 0:,} B (peak {c.peak if c else 0:,} + persistent "
                  f"{c.persistent if c else 0:,}), floor {b['floor']:,} B by {b['bound_by']}, "
                  f"equal LiteRT {m['litert_equal']} TFLM {m['tflm_equal']}; {board_text(m)}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Patch-based execution on int8 MCU-class models: TFLite Micro's minimal total arena before and
after `memsched.tflite.patch.tile.tile_tflite`, MAC overhead, outputs equal.

Models are built with the flatbuffer object API (no tensorflow): random weights, per-channel
int8 quantization, so they run in LiteRT and TFLite Micro as converted Keras models do:

* ``mbv2-<alpha>-<px>``: a MobileNetV2 (Keras ``MobileNetV2`` layer list: stem 3x3/2, inverted
  residuals (t, c, n, s) = (1,16,1,1) (6,24,2,2) (6,32,3,2) (6,64,4,2) (6,96,3,1) (6,160,3,2)
  (6,320,1,1) with ReLU, an explicit ``PAD`` ((0,1),(0,1)) before every stride-2 depthwise
  convolution as Keras' ``ZeroPadding2D`` writes, 1x1 conv to 1280, MEAN, FULLY_CONNECTED);
* ``mobilenet_like-<px>``: `memsched.generators.tflite_synth.mobilenet_like`.

Run: ``.venv/bin/python benchmarks/tflite/patches.py [names or .tflite files...]
[--max-overhead 0.3] [--max-slowdown 1.1|none] [--logits] [--json]`` (``--max-slowdown``:
the search's instruction bound, default `tile_tflite`'s; ``none``: the RAM-only choice).
Keras-converted models: build them with ``benchmarks/tflite/patches_keras.py`` in a
tensorflow venv, then pass the files (with ``--logits``, see there).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(__file__))
from board_columns import board_measure, board_text  # noqa: E402


def _divisible(v: float, d: int = 8) -> int:
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


def _input(net, size: int, float_input: bool):
    """The model input: int8, or (MCU style) float32 quantized to int8 by operator 0."""
    s = net.s
    shape = [1, size, size, 3]
    if not float_input:
        x = net.act("input", shape, 0.02, 0)
        net.b.inputs = [x]
        return x
    xf = net.b.tensor("input", shape, s.TensorType.FLOAT32)
    net.b.inputs = [xf]
    x = net.act("input_q", shape, 0.02, 0)
    net.b.op("QUANTIZE", [xf], [x], s.BuiltinOptions.QuantizeOptions, s.QuantizeOptionsT())
    return x


def _pad01(net, t, shape):
    """Keras' ``ZeroPadding2D(((0, 1), (0, 1)))`` as an explicit ``PAD`` (before a stride-2
    VALID convolution)."""
    s = net.s
    out_shape = [1, shape[1] + 1, shape[2] + 1, shape[3]]
    out = net.act(f"pad{net.n}", out_shape, like=t)
    pads = net.const_i32(f"pad{net.n}/p", [[0, 0], [0, 1], [0, 1], [0, 0]])
    net.b.op("PAD", [t, pads], [out], s.BuiltinOptions.PadOptions, s.PadOptionsT())
    return out, out_shape


def _head(net, t, shape, classes: int) -> bytes:
    """Keras' classifier: global MEAN over H and W, FULLY_CONNECTED; the finished file."""
    s = net.s
    mean = net.act("mean", [1, shape[3]], 0.05, -3)
    axes = net.const_i32("mean/axes", [1, 2])
    o = s.ReducerOptionsT()
    o.keepDims = False
    net.b.op("MEAN", [t, axes], [mean], s.BuiltinOptions.ReducerOptions, o)
    net.b.outputs = [net.fc(mean, shape[3], classes)]
    return net.b.finish()


def mobilenet_v2(alpha: float = 0.35, size: int = 144, classes: int = 10, seed: int = 0,
                 stages=None, float_input: bool = False) -> bytes:
    from memsched.generators.tflite_synth import _Net

    net = _Net(f"mbv2_{alpha}_{size}", True, seed)
    x = _input(net, size, float_input)
    shape = [1, size, size, 3]

    t, shape = _pad01(net, x, shape)
    t, shape = net.conv(t, shape, _divisible(32 * alpha), k=3, stride=2, padding="VALID")
    cfg = stages or [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                     (6, 160, 3, 2), (6, 320, 1, 1)]
    for tt, c, n, st in cfg:
        cout = _divisible(c * alpha)
        for i in range(n):
            stride = st if i == 0 else 1
            inp, in_shape = t, shape
            h = t
            if tt != 1:
                h, shape = net.conv(h, shape, shape[3] * tt, k=1)
            if stride == 2:
                h, shape = _pad01(net, h, shape)
                h, shape = net.conv(h, shape, shape[3], depthwise=True, stride=2,
                                    padding="VALID")
            else:
                h, shape = net.conv(h, shape, shape[3], depthwise=True)
            h, shape = net.conv(h, shape, cout, k=1, relu=False)
            if stride == 1 and in_shape == shape:
                h = net.add(h, inp, shape)
            t = h
    last = 1280 if alpha <= 1.0 else _divisible(1280 * alpha)
    t, shape = net.conv(t, shape, last, k=1)
    return _head(net, t, shape, classes)


def mobilenet_v1(alpha: float = 0.25, size: int = 128, classes: int = 10, seed: int = 0,
                 float_input: bool = False) -> bytes:
    """Keras ``MobileNet`` (v1) layer list: stem 3x3/2 (explicit ``PAD`` ((0,1),(0,1)) + VALID),
    13 depthwise + pointwise blocks (``PAD`` before every stride-2 depthwise), ReLU, MEAN, FC."""
    from memsched.generators.tflite_synth import _Net

    net = _Net(f"mbv1_{alpha}_{size}", True, seed)
    x = _input(net, size, float_input)
    shape = [1, size, size, 3]

    t, shape = _pad01(net, x, shape)
    t, shape = net.conv(t, shape, int(32 * alpha), k=3, stride=2, padding="VALID")
    for c, st in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1),
                  (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]:
        if st == 2:
            t, shape = _pad01(net, t, shape)
            t, shape = net.conv(t, shape, shape[3], depthwise=True, stride=2, padding="VALID")
        else:
            t, shape = net.conv(t, shape, shape[3], depthwise=True)
        t, shape = net.conv(t, shape, int(c * alpha), k=1)
    return _head(net, t, shape, classes)


MODELS = {
    "mbv2-0.35-144": lambda: mobilenet_v2(0.35, 144),
    "mbv2-0.35-96": lambda: mobilenet_v2(0.35, 96),
    "mbv2-1.0-96": lambda: mobilenet_v2(1.0, 96),
    "mobilenet_like-96": lambda: __import__(
        "memsched.generators.tflite_synth", fromlist=["x"]).mobilenet_like(size=96),
    # MCU style: float32 input quantized by operator 0 (QUANTIZE), int8 body
    "fq-mbv2-0.35-80": lambda: mobilenet_v2(0.35, 80, float_input=True),
    "fq-mbv2-0.35-160": lambda: mobilenet_v2(0.35, 160, float_input=True),
    "fq-mbv1-0.5-128": lambda: mobilenet_v1(0.5, 128, float_input=True),
    "mbv1-0.25-128": lambda: mobilenet_v1(0.25, 128),
}


def strip_softmax(data: bytes) -> bytes:
    """The model up to its logits: a final SOFTMAX removed (TFLite Micro's Python interpreter
    cannot allocate it on random-weight Keras int8 models: degenerate calibration)."""
    from memsched.tflite.format.read import op_names, read_tflite
    from memsched.tflite.format.write import finish_model

    tg = read_tflite(data)
    model, sg = tg.model, tg.subgraph
    last = sg.operators[-1]
    code = model.operatorCodes[last.opcodeIndex]
    if op_names()[max(code.builtinCode, code.deprecatedBuiltinCode)] != "SOFTMAX":
        return data
    sg.outputs = [int(last.inputs[0])]
    sg.operators = sg.operators[:-1]
    model.signatureDefs = []
    return finish_model(model)


def run(name: str, max_overhead: float, offline_plan: bool, measure: bool = True,
        logits: bool = False, target: str | None = "cortex-m", max_slowdown=...) -> dict:
    from memsched.tflite.patch.tile import measure_tile, tile_tflite
    from memsched.tflite.plan.reorder import reorder_tflite
    from memsched.tflite import tflm

    if name.endswith(".tflite"):
        with open(name, "rb") as f:
            data = f.read()
    else:
        data = MODELS[name]()
    if logits:
        data = strip_softmax(data)
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "m.tflite"), os.path.join(d, "p.tflite")
        ref = os.path.join(d, "r.tflite")
        with open(src, "wb") as f:
            f.write(data)
        t0 = time.perf_counter()
        _, res = tile_tflite(src, dst, max_overhead=max_overhead, offline_plan=offline_plan,
                             target=target, max_slowdown=max_slowdown)
        secs = time.perf_counter() - t0
        row = {"model": os.path.basename(name), "ops": res.ops_before,
               "ops_patched": res.ops_after, "seconds": round(secs, 2), "result": res.as_dict()}
        if measure:
            row["measured"] = measure_tile(src, dst, count=1)
            row["measured"].update(board_measure(src, dst))
            if tflm.available():  # the best without patches: memsched reorder --offline-plan
                reorder_tflite(src, ref, offline_plan=True)
                row["measured"]["tflm_arena_reordered"] = tflm.min_arena_bytes(ref)
    return row


def _regions(c) -> str:
    """Every region of a choice: ``ops a-b RxC @ split``, joined by ``+``."""
    if not c:
        return "none"
    return " + ".join(f"ops {r['region_start']}-{r['region_ops'] - 1} {r['grid']}"
                      f"{' margins' if r.get('padding') == 'margins' else ''} @ "
                      f"{','.join(r['split'])}" for r in c.get("regions") or [c])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["mbv2-0.35-144", "mobilenet_like-96"])
    ap.add_argument("--max-overhead", type=float, default=0.3)
    ap.add_argument("--no-offline-plan", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--target", choices=("cortex-m", "host"), default="cortex-m",
                    help="the device memsched tile plans for (default cortex-m)")
    ap.add_argument("--logits", action="store_true",
                    help="measure up to the logits (drop a final SOFTMAX)")
    ap.add_argument("--max-slowdown", default=None,
                    help="the search's bound on predicted instructions against the original's "
                         "(default tile_tflite's; 'none': no bound, the RAM-only choice)")
    a = ap.parse_args(argv)
    slow = ... if a.max_slowdown is None else \
        (None if a.max_slowdown.lower() == "none" else float(a.max_slowdown))
    rows = []
    for name in a.models:
        row = run(name, a.max_overhead, not a.no_offline_plan, logits=a.logits, target=a.target,
                  max_slowdown=slow)
        rows.append(row)
        if a.json:
            continue
        c = row["result"]["choice"]
        m = row["measured"]
        print(f"{name:20s} ops {row['ops']:4d}->{row['ops_patched']:4d}  "
              f"TFLM total {m.get('tflm_arena_original', 0):>9,} "
              f"(reordered {m.get('tflm_arena_reordered', 0):,}) -> "
              f"{m.get('tflm_arena_patched', 0):>9,} B ({m.get('tflm_arena_ratio')}x)  "
              f"regions {_regions(c)} "
              f"MACs +{100 * (c['mac_overhead'] if c else 0):.1f} %  "
              f"estimated {row['result']['search']['original']['total_bytes']:,} -> "
              f"{c and c['total_bytes']:,}  LiteRT equal {m['litert_equal']} "
              f"TFLM equal {m['tflm_equal']}  {board_text(m)} (computed "
              f"{row['result'].get('original_arena_bytes') or 0:,} -> "
              f"{row['result'].get('arena_bytes') or 0:,})  {row['seconds']} s", flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""TFLite Micro's instructions per ``Invoke()`` on the emulated Cortex-M55 (CMSIS-NN MVE):
predicted from the file (`memsched.tflite.memory.instructions`) vs measured on the board.

    .venv/bin/python benchmarks/tflite/tflm_instructions.py              # the table, held-out files
    .venv/bin/python benchmarks/tflite/tflm_instructions.py --calibrate  # re-measure and re-fit

``--calibrate`` builds int8 files of many independent operators each (random shapes, strides,
paddings, channels: `calibration_models`), runs each once on the board with ``--per-op``, fits
each kernel variant's coefficients by least squares on its features and prints them as the
``COEFFICIENTS`` literal of `memsched.tflite.memory.kernel_costs` (and the worst residuals).
QEMU runs one at a time.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from memsched.tflite.memory import instructions as ti  # noqa: E402


# ------------------------------------------------------------------------------ files
def _inputs(data: bytes, seed: int = 0):
    from memsched.tflite.format.read import NUMPY_DTYPES, read_tflite

    tg = read_tflite(data)
    sg = tg.subgraph
    rng = np.random.default_rng(seed)
    out = []
    for t in sg.inputs:
        ten = sg.tensors[int(t)]
        shape = [int(d) for d in ten.shape]
        dt = NUMPY_DTYPES[int(ten.type)]
        if np.issubdtype(dt, np.floating):
            out.append(rng.uniform(-1, 1, shape).astype(dt))
        else:
            info = np.iinfo(dt)
            out.append(rng.integers(info.min, info.max + 1, shape).astype(dt))
    return out


def measure(data: bytes, per_op: bool = True, work: str | None = None) -> dict:
    from memsched import board

    with tempfile.TemporaryDirectory() as tmp:
        res, _ = board.run_tflite(data, _inputs(data), work or tmp, per_op=per_op)
    if res.get("status") != "ok":
        raise RuntimeError(f"board run failed: {res}")
    return res


def _op(net, kind, ins, outs, otype=0, options=None):
    return net.b.op(kind, ins, outs, otype, options)


def _dw_multiplier(net, x, shape, cout, k, stride, pad):
    """A DEPTHWISE_CONV_2D of one input channel with depth multiplier ``cout``."""
    s = net.s
    net.n += 1
    _, h, w, _ = shape
    wf = net.rng.normal(0, 1.0 / k, size=(1, k, k, cout)).astype(np.float32)
    wt, ws = net.weight(f"dwm{net.n}/w", wf, 3)
    bt = net.bias(f"dwm{net.n}/b", x, ws, cout)
    oh, ow = (-(-h // stride), -(-w // stride)) if pad == "SAME" else \
        ((h - k) // stride + 1, (w - k) // stride + 1)
    y = net.act(f"dwm{net.n}", [1, oh, ow, cout], 0.05, 1)
    o = s.DepthwiseConv2DOptionsT()
    o.padding = s.Padding.SAME if pad == "SAME" else s.Padding.VALID
    o.strideW = o.strideH = stride
    o.depthMultiplier, o.fusedActivationFunction = cout, s.ActivationFunctionType.RELU
    o.dilationWFactor = o.dilationHFactor = 1
    net.b.op("DEPTHWISE_CONV_2D", [x, wt, bt], [y], s.BuiltinOptions.DepthwiseConv2DOptions, o)
    return y


def calibration_models(seed: int = 1, per_model: int = 14):
    """(name, file bytes) of int8 files (then fewer float32 ones) whose operators each read
    their own model input."""
    return _models(np.random.default_rng(seed), True, per_model, 1.0) + \
        _models(np.random.default_rng(seed + 1), False, per_model, 1.0)


def _models(rng, q: bool, per_model: int, share: float):
    from memsched.generators.tflite_synth import _Net

    models = []
    tag = "" if q else "f32_"

    def files(count):  # how many files of a group
        return max(1, int(round(count * share)))

    def new(name):
        net = _Net(tag + name, q, int(rng.integers(1 << 30)))
        net.b.inputs, net.b.outputs = [], []
        return net

    def inp(net, shape, like=None):
        x = net.act(f"in{len(net.b.inputs)}", shape, 0.05, int(rng.integers(-20, 20)),
                    like=like)
        net.b.inputs.append(x)
        return x

    def finish(net, name):
        models.append((name, net.b.finish()))

    s = None
    # convolutions: 1x1, 3x3, 5x5, strided, SAME / VALID; depthwise
    for kindname, count in (("conv1x1", 6), ("conv1x1s2", 4), ("conv3", 8), ("conv5", 2),
                            ("dw3", 8), ("dw5", 3)):
        for m in range(files(count)):
            net = new(f"{kindname}_{m}")
            s = net.s
            for _ in range(per_model):
                h = int(rng.integers(1, 25))
                w = int(rng.integers(1, 25))
                cin = int(rng.choice([1, 2, 3, 4, 8, 12, 16, 17, 24, 32, 40, 48, 64, 96, 130,
                                      200]))
                k = {"conv1x1": 1, "conv1x1s2": 1, "conv3": 3, "conv5": 5, "dw3": 3,
                     "dw5": 5}[kindname]
                stride = 2 if kindname == "conv1x1s2" else int(rng.choice([1, 1, 2]))
                pad = "VALID" if k == 1 else str(rng.choice(["SAME", "VALID"]))
                if pad == "VALID":
                    h, w = max(h, k), max(w, k)
                dw = kindname.startswith("dw")
                if dw and cin == 1 and rng.integers(3):
                    cin = 8
                cout = int(rng.choice([1, 3, 4, 8, 16, 17, 24, 32, 48, 64]))
                if dw and cin == 1:  # depthwise with a channel multiplier (CMSIS-NN: a conv)
                    cout = int(rng.choice([2, 4, 8, 16]))
                x = inp(net, [1, h, w, cin])
                if dw and cin == 1:
                    y = _dw_multiplier(net, x, [1, h, w, 1], cout, k, stride, pad)
                else:
                    y, _ = net.conv(x, [1, h, w, cin], cout, k=k, stride=stride, depthwise=dw,
                                    padding=pad, relu=bool(rng.integers(2)))
                net.b.outputs.append(y)
            finish(net, net.b.name)
    # fully connected
    for m in range(files(4)):
        net = new(f"fc_{m}")
        for _ in range(per_model):
            k = int(rng.choice([8, 16, 17, 32, 64, 100, 128, 250, 256, 640]))
            n = int(rng.choice([1, 2, 4, 8, 10, 16, 33, 64, 128]))
            x = inp(net, [1, k])
            net.b.outputs.append(net.fc(x, k, n))
        finish(net, net.b.name)
    # element-wise, pools, mean, softmax, copies
    for m in range(files(8)):
        net = new(f"misc_{m}")
        s = net.s
        for _ in range(per_model):
            h, w = int(rng.integers(1, 25)), int(rng.integers(1, 25))
            c = int(rng.choice([1, 3, 4, 8, 16, 17, 24, 32, 64, 96]))
            shape = [1, h, w, c]
            which = rng.integers(9)
            if not q and which in (7, 8):  # QUANTIZE / DEQUANTIZE: int8 files only
                which = 6
            if which == 0:
                a, b = inp(net, shape), inp(net, shape)
                net.b.outputs.append(net.add(a, b, shape))
            elif which == 1:
                a, b = inp(net, shape), inp(net, shape)
                y = net.act(f"mul{len(net.b.outputs)}", shape, 0.1, 2)
                o = s.MulOptionsT()
                _op(net, "MUL", [a, b], [y], s.BuiltinOptions.MulOptions, o)
                net.b.outputs.append(y)
            elif which in (2, 3):
                k = int(rng.choice([2, 3, 5]))
                st = int(rng.choice([1, 2]))
                pad = str(rng.choice(["SAME", "VALID"]))
                h, w = max(h, k), max(w, k)
                shape = [1, h, w, c]
                if k > 3 and rng.integers(2):  # a global pool
                    k, pad, st = h, "VALID", 1
                    kw = w
                else:
                    kw = k
                x = inp(net, shape)
                oh = -(-h // st) if pad == "SAME" else (h - k) // st + 1
                ow = -(-w // st) if pad == "SAME" else (w - kw) // st + 1
                y = net.act(f"pool{len(net.b.outputs)}", [1, oh, ow, c], like=x)
                o = s.Pool2DOptionsT()
                o.padding = s.Padding.SAME if pad == "SAME" else s.Padding.VALID
                o.strideW = o.strideH = st
                o.filterHeight, o.filterWidth = k, kw
                _op(net, "AVERAGE_POOL_2D" if which == 2 else "MAX_POOL_2D", [x], [y],
                    s.BuiltinOptions.Pool2DOptions, o)
                net.b.outputs.append(y)
            elif which == 4:
                x = inp(net, shape)
                y = net.act(f"mean{len(net.b.outputs)}", [1, c], 0.05, -3)
                o = s.ReducerOptionsT()
                o.keepDims = False
                _op(net, "MEAN", [x, net.const_i32(f"axes{len(net.b.outputs)}", [1, 2])], [y],
                    s.BuiltinOptions.ReducerOptions, o)
                net.b.outputs.append(y)
            elif which == 5:
                n = int(rng.choice([2, 10, 12, 100, 256, 1000]))
                rows = int(rng.choice([1, 1, 4]))
                x = inp(net, [rows, n])
                y = net.b.tensor(f"sm{len(net.b.outputs)}", [rows, n], s.TensorType.INT8,
                                 scale=1 / 256, zero_point=-128) if q else \
                    net.act(f"sm{len(net.b.outputs)}", [rows, n])
                o = s.SoftmaxOptionsT()
                o.beta = 1.0
                _op(net, "SOFTMAX", [x], [y], s.BuiltinOptions.SoftmaxOptions, o)
                net.b.outputs.append(y)
            elif which == 6:
                x = inp(net, shape)
                op = str(rng.choice(["RESHAPE", "RESHAPE", "SQUEEZE", "EXPAND_DIMS"]))
                if op == "RESHAPE":
                    y, _ = net.reshape(x, [1, h * w * c])
                else:  # SQUEEZE of axis 0 / EXPAND_DIMS at 0: of a [1, n] / [n] input
                    x = inp(net, [1, h * w * c] if op == "SQUEEZE" else [h * w * c])
                    y, _ = net.reshape(x, [h * w * c] if op == "SQUEEZE" else [1, h * w * c],
                                       op=op)
                net.n += 1
                net.b.outputs.append(y)
            elif which == 7:  # float -> int8
                xf = net.b.tensor(f"f{len(net.b.inputs)}", shape, s.TensorType.FLOAT32)
                net.b.inputs.append(xf)
                y = net.act(f"q{len(net.b.outputs)}", shape, 0.02, 0)
                _op(net, "QUANTIZE", [xf], [y], s.BuiltinOptions.QuantizeOptions,
                    s.QuantizeOptionsT())
                net.b.outputs.append(y)
            else:  # int8 -> float
                x = inp(net, shape)
                y = net.b.tensor(f"dq{len(net.b.outputs)}", shape, s.TensorType.FLOAT32)
                _op(net, "DEQUANTIZE", [x], [y], s.BuiltinOptions.DequantizeOptions,
                    s.DequantizeOptionsT())
                net.b.outputs.append(y)
        finish(net, net.b.name)
    # element-wise kernels of TFLite Micro's own (activations, SUB, broadcasting ADD / MUL)
    for m in range(files(10)):
        net = new(f"unary_{m}")
        s = net.s
        for _ in range(per_model):
            h, w = int(rng.integers(1, 25)), int(rng.integers(1, 25))
            c = int(rng.choice([1, 3, 4, 8, 16, 17, 24, 32, 64, 96]))
            shape = [1, h, w, c]
            kind = str(rng.choice(["RELU", "RELU6", "LEAKY_RELU", "HARD_SWISH", "LOGISTIC",
                                   "TANH", "SUB", "SUB", "ADD", "ADD", "MUL", "MUL"]))
            x = inp(net, shape)
            i = len(net.b.outputs)
            if kind in ("SUB", "ADD", "MUL"):
                other = [1, h, w, c] if kind == "SUB" and rng.integers(2) else \
                    [1, 1, 1, c] if rng.integers(2) else [1, 1, 1, 1]
                b = inp(net, other)
                y = net.act(f"bin{i}", shape, 0.1, 3)
                opts = {"SUB": (s.BuiltinOptions.SubOptions, s.SubOptionsT()),
                        "ADD": (s.BuiltinOptions.AddOptions, s.AddOptionsT()),
                        "MUL": (s.BuiltinOptions.MulOptions, s.MulOptionsT())}[kind]
                _op(net, kind, [x, b], [y], *opts)
            else:
                if not q:
                    y = net.act(f"u{i}", shape)
                elif kind == "LOGISTIC":
                    y = net.b.tensor(f"u{i}", shape, s.TensorType.INT8, scale=1 / 256,
                                     zero_point=-128)
                elif kind == "TANH":
                    y = net.b.tensor(f"u{i}", shape, s.TensorType.INT8, scale=1 / 128,
                                     zero_point=0)
                else:
                    y = net.act(f"u{i}", shape, 0.04, -5)
                if kind == "LEAKY_RELU":
                    o = s.LeakyReluOptionsT()
                    o.alpha = 0.1
                    _op(net, kind, [x], [y], s.BuiltinOptions.LeakyReluOptions, o)
                else:
                    _op(net, kind, [x], [y])
            net.b.outputs.append(y)
        finish(net, net.b.name)
    # the patch machinery: pads, window cuts, concatenations
    for m in range(files(8)):
        net = new(f"cuts_{m}")
        s = net.s
        for _ in range(per_model):
            h, w = int(rng.integers(2, 33)), int(rng.integers(2, 33))
            c = int(rng.choice([1, 3, 4, 8, 16, 24, 32, 64, 96]))
            if rng.integers(4) == 0:  # the large maps of a model's first layers
                h, w, c = int(rng.integers(32, 129)), int(rng.integers(32, 129)), \
                    int(rng.choice([3, 8, 16]))
            shape = [1, h, w, c]
            which = rng.integers(4)
            x = inp(net, shape)
            if which in (0, 1):
                p = [int(v) for v in rng.integers(0, 3, 4)]
                oshape = [1, h + p[0] + p[1], w + p[2] + p[3], c]
                y = net.act(f"pad{len(net.b.outputs)}", oshape, like=x)
                pads = net.const_i32(f"pads{len(net.b.outputs)}",
                                     [[0, 0], [p[0], p[1]], [p[2], p[3]], [0, 0]])
                if which == 0:
                    _op(net, "PAD", [x, pads], [y], s.BuiltinOptions.PadOptions,
                        s.PadOptionsT())
                else:
                    v = net.b.tensor(f"pv{len(net.b.outputs)}", [], s.TensorType.INT8,
                                     net.b.buffer(np.array(-128, np.int8)),
                                     *net.scale[x]) if q else \
                        net.b.tensor(f"pv{len(net.b.outputs)}", [], s.TensorType.FLOAT32,
                                     net.b.buffer(np.array(-3.0e38, np.float32)))
                    _op(net, "PADV2", [x, pads, v], [y], s.BuiltinOptions.PadV2Options,
                        s.PadV2OptionsT())
                net.b.outputs.append(y)
            elif which == 2:
                h0, w0 = int(rng.integers(0, h)), int(rng.integers(0, w))
                h1, w1 = int(rng.integers(h0 + 1, h + 1)), int(rng.integers(w0 + 1, w + 1))
                if rng.integers(3) == 0:
                    w0, w1 = 0, w  # a row band
                y, _ = net.strided_slice(x, shape, [0, h0, w0, 0], [1, h1, w1, c])
                net.n += 1
                net.b.outputs.append(y)
            else:
                k = int(rng.integers(2, 6))
                axis = int(rng.choice([1, 2, 3]))
                xs = [x] + [inp(net, shape, like=x) for _ in range(k - 1)]
                oshape = list(shape)
                oshape[axis] *= k
                y = net.act(f"cat{len(net.b.outputs)}", oshape, like=x)
                o = s.ConcatenationOptionsT()
                o.axis = axis
                _op(net, "CONCATENATION", xs, [y], s.BuiltinOptions.ConcatenationOptions, o)
                net.b.outputs.append(y)
        finish(net, net.b.name)
    # views that copy: RESHAPE, SQUEEZE, EXPAND_DIMS
    for m in range(files(2)):
        net = new(f"views_{m}")
        for _ in range(per_model):
            k = int(rng.integers(1, 3000))
            op = str(rng.choice(["RESHAPE", "SQUEEZE", "EXPAND_DIMS"]))
            x = inp(net, [1, k] if op != "EXPAND_DIMS" else [k])
            y, _ = net.reshape(x, [k] if op == "SQUEEZE" else [1, k], op=op)
            net.n += 1
            net.b.outputs.append(y)
        finish(net, net.b.name)
    return models


# ------------------------------------------------------------------------------ fitting
def rows_of(data: bytes, res: dict) -> list[dict]:
    """One row per operator: kind, variant, features, measured window."""
    from memsched.tflite.format.read import read_tflite

    meas = {e["index"]: e["instructions"] for e in res["op_instructions"]
            if not e.get("depth")}
    out = []
    for v, kind, a in ti.file_ops(read_tflite(data)):
        r = ti.features(kind, a["inputs"], a["output"], a["dtype"], **a["options"])
        out.append({"index": v, "kind": kind, "variant": r[0], "features": r[1],
                    "measured": meas[v]})
    return out


def fit(rows: list[dict]) -> tuple[dict, list]:
    groups: dict = {}
    for r in rows:
        if r["features"] is not None:
            groups.setdefault((r["kind"], r["variant"]), []).append(r)
    coef, resid = {}, []
    # a one-input-channel depthwise runs CMSIS-NN's convolution: the CONV_2D fit of the same
    # variant, only its constant refitted (few samples)
    later = sorted(k for k in groups if k[1].startswith("as_conv_"))
    for key, rs in sorted(groups.items(), key=lambda kv: kv[0] in later):
        names = sorted({k for r in rs for k in r["features"]})
        A = np.array([[r["features"].get(k, 0) for k in names] for r in rs], float)
        y = np.array([r["measured"] for r in rs], float)
        if key in later:
            base = coef[("CONV_2D", key[1][len("as_conv_"):])]
            sol = np.array([base.get(k, 0.0) for k in names])
            sol[names.index("one")] += float(np.mean(y - A @ sol))
        else:  # columns that never vary independently are dropped by lstsq's rank
            sol, *_ = np.linalg.lstsq(A, y, rcond=None)
        pred = A @ sol
        worst = float(np.max(np.abs(pred - y) / y))
        # kept only where the samples over-determine it (2 per feature), and, for the float
        # and wide-element kernels (TFLite's reference loops, few samples), within 10 %:
        # the rest stay unknown, named, not guessed
        if key not in later and (len(rs) < 2 * len(names) or (
                ("float32" in key[1] or key[1] in ("wide", "copy4")) and worst > 0.10)):
            print(f"not kept: {key} ({len(rs)} samples, {len(names)} features, worst "
                  f"{100 * worst:.0f} %)", file=sys.stderr)
            continue
        coef[key] = {k: round(float(v), 4) for k, v in zip(names, sol) if abs(v) > 1e-9}
        for r, p in zip(rs, pred):
            resid.append((key, r["measured"], float(p), r["features"]))
    return coef, resid


def calibrate(out_json: str | None) -> int:
    rows = []
    for name, data in calibration_models():
        res = measure(data)
        rows += rows_of(data, res)
        print(f"{name}: {len(res['op_instructions'])} ops", file=sys.stderr)
    if out_json:
        with open(out_json, "w") as f:
            json.dump(rows, f)
    return report_fit(rows)


def report_fit(rows) -> int:
    coef, resid = fit(rows)
    import pprint

    print("COEFFICIENTS = {")
    for key, c in sorted(coef.items()):
        body = pprint.pformat(c, width=92, compact=True).replace("\n", "\n" + " " * 8)
        print(f"    {key!r}:\n        {body},")
    print("}")
    worst = sorted(resid, key=lambda r: -abs(r[2] - r[1]) / max(r[1], 1))[:15]
    for key, m, p, f in worst:
        print(f"{key}: measured {m:,} predicted {p:,.0f} ({100 * (p - m) / m:+.1f} %)")
    return 0


# ------------------------------------------------------------------------------ the table
def held_out_files():
    """(name, bytes) of files the fit has not seen."""
    import importlib

    from memsched.generators.tflite_synth import mobilenet_like, pad_slice_model, se_model
    from memsched.tflite.patch.tile import tile_tflite

    patches = importlib.import_module("patches")
    resnet = importlib.import_module("patches_resnet").resnet
    files = [("resnet8 (MLPerf-like, 32x32)", resnet(1, 32)),
             ("resnet20-like (3 blocks, 32x32)", resnet(3, 32)),
             ("mbv1-0.25-128", patches.mobilenet_v1(0.25, 128)),
             ("fq-mbv2-0.35-80", patches.mobilenet_v2(0.35, 80, float_input=True)),
             ("mbv2-0.35-144", patches.mobilenet_v2(0.35, 144)),
             ("mobilenet_like-96", mobilenet_like(size=96)),
             ("mbv2-1.0-96", patches.mobilenet_v2(1.0, 96)),
             ("mobilenet_like-48", mobilenet_like(size=48, blocks=7)),
             ("pad_slice_int8", pad_slice_model()),
             ("se_model (SE: MEAN, LOGISTIC, broadcast MUL)", se_model(size=32, width=16))]
    pd = "../shared/third_party/tflite-micro/tensorflow/lite/micro/models/person_detect.tflite"
    if os.path.isfile(pd):
        files.append(("person_detect", open(pd, "rb").read()))
    import tflite_micro

    sine = os.path.join(os.path.dirname(tflite_micro.__file__), "python", "tflite_micro",
                        "sine_float.tflite")
    if os.path.isfile(sine):  # float32 FULLY_CONNECTED x 3
        files.append(("sine_float (tflite-micro package)", open(sine, "rb").read()))
    tiled = []
    for name, data in files[:6]:
        try:
            t, _ = tile_tflite(data, offline_plan=True)
            tiled.append((name + " tiled", t))
        except Exception as e:  # noqa: BLE001 - a benchmark row, not a failure
            print(f"{name}: tile failed: {e}", file=sys.stderr)
    return files + tiled


def table(files) -> int:
    print("| file | ops | predicted | measured | error |")
    print("|---|---:|---:|---:|---:|")
    per_kernel = []
    worst = 0.0
    for name, data in files:
        pred = ti.model_instructions(data)
        res = measure(data, per_op=True)
        plain = measure(data, per_op=False)["invoke_instructions"]  # the firmware users run
        if plain != res["op_instructions_sum"] + ti.PER_OP * len(res["op_instructions"]) + \
                ti.PER_INVOKE:
            print(f"{name}: invoke_instructions {plain:,} is not the per-op sum + 12 x ops "
                  "+ 74", file=sys.stderr)
        meas = {e["index"]: e["instructions"] for e in res["op_instructions"]}
        for c in pred.ops:
            if c.instructions is not None:
                per_kernel.append((name, c, c.instructions - ti.PER_OP, meas[c.index]))
        if pred.total is None:
            print(f"| {name} | {len(pred.ops)} | unknown: {', '.join(pred.unknown)} | "
                  f"{plain:,} | - |")
            continue
        err = 100.0 * (pred.total - plain) / plain
        worst = max(worst, abs(err))
        print(f"| {name} | {len(pred.ops)} | {pred.total:,} | {plain:,} | {err:+.2f} % |")
    print(f"\nworst whole-file error: {worst:.2f} %\n\nworst per-kernel residuals "
          "(instructions of the operator's window):")
    per_kernel.sort(key=lambda r: -abs(r[2] - r[3]))
    for name, c, p, m in per_kernel[:12]:
        print(f"  {name} op {c.index} {c.kind} ({c.variant}): predicted {p:,} measured {m:,} "
              f"({p - m:+,})")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibrate", action="store_true")
    ap.add_argument("--rows", help="calibration rows JSON: written by --calibrate, refit alone")
    args = ap.parse_args(argv)
    if args.calibrate:
        return calibrate(args.rows)
    if args.rows:
        with open(args.rows) as f:
            return report_fit(json.load(f))
    return table(held_out_files())


if __name__ == "__main__":
    sys.exit(main())

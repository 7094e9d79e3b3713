"""Relax CNNs built directly with `relax.BlockBuilder` (no frontend, random weights): the
MobileNetV2 family, a MobileNetV3-Small-like model (squeeze-and-excitation blocks, hardswish,
hardsigmoid) and small inverted-residual models, float32 or integer (int8 activations,
int32 accumulation, a shift-and-clip requantization: outputs are bit-exact across schedules).

Used by the TilePatches tests and `benchmarks/tvm/patches_tvm.py`.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax


def make_divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


class _Net:
    """Emit helpers over one BlockBuilder; ``integer``: int8 activations."""

    def __init__(self, bb, rng, layout: str, integer: bool):
        self.bb, self.rng, self.layout, self.integer = bb, rng, layout, integer
        self.c_axis = 1 if layout == "NCHW" else 3

    def channels(self, x) -> int:
        return int(x.ty.shape.values[self.c_axis])

    def const(self, arr):
        return relax.const(arr)

    def conv(self, x, cout, k=1, stride=1, groups=1, act=True, pad=None):
        cin = self.channels(x)
        shape_oihw = (cout, cin // groups, k, k)
        if self.integer:
            w = self.rng.integers(-3, 4, shape_oihw).astype("int8")
        else:
            fan = k * k * cin // groups
            w = (self.rng.standard_normal(shape_oihw) * np.sqrt(2.0 / fan)).astype("float32")
        if self.layout == "NCHW":
            kl, wt = "OIHW", w
        else:
            kl, wt = "HWIO", w.transpose(2, 3, 1, 0)
            if groups > 1:
                kl, wt = "HWOI", w.transpose(2, 3, 0, 1)
        p = k // 2 if pad is None else pad
        bshape = [1, cout, 1, 1] if self.layout == "NCHW" else [1, 1, 1, cout]
        if self.integer:
            y = self.bb.emit(relax.op.nn.conv2d(
                x, self.const(wt), stride, p,
                groups=groups, data_layout=self.layout, kernel_layout=kl, out_dtype="int32"))
            b = self.rng.integers(-8, 9, bshape).astype("int32")
            y = self.bb.emit(relax.op.add(y, self.const(b)))
            y = self.bb.emit(relax.op.right_shift(y, self.const(np.array(3, "int32"))))
            lo = 0 if act else -128
            y = self.bb.emit(relax.op.clip(y, lo, 127))
            return self.bb.emit(relax.op.astype(y, "int8"))
        y = self.bb.emit(relax.op.nn.conv2d(x, self.const(wt), stride, p, groups=groups,
                                            data_layout=self.layout, kernel_layout=kl))
        b = (self.rng.standard_normal(bshape) * 0.1).astype("float32")
        y = self.bb.emit(relax.op.add(y, self.const(b)))  # batch norm folded into the bias
        return self.bb.emit(relax.op.clip(y, 0.0, 6.0)) if act else y

    def add(self, a, b):
        return self.bb.emit(relax.op.add(a, b))  # int8: wraps, deterministic

    def inverted_residual(self, x, cout, stride, expand):
        cin = self.channels(x)
        hidden = int(round(cin * expand))
        y = x
        if expand != 1:
            y = self.conv(y, hidden, 1)
        y = self.conv(y, hidden, 3, stride, groups=hidden)
        y = self.conv(y, cout, 1, act=False)
        if stride == 1 and cin == cout:
            y = self.add(x, y)
        return y

    def head(self, x, classes):
        axes = [2, 3] if self.layout == "NCHW" else [1, 2]
        if self.integer:
            x = self.bb.emit(relax.op.astype(x, "int32"))
            g = self.bb.emit(relax.op.sum(x, axis=axes))
            w = self.rng.integers(-3, 4, (self.channels_of(g), classes)).astype("int32")
        else:
            g = self.bb.emit(relax.op.mean(x, axis=axes))
            w = (self.rng.standard_normal((self.channels_of(g), classes)) * 0.05
                 ).astype("float32")
        return self.bb.emit_output(relax.op.matmul(g, self.const(w)))

    @staticmethod
    def channels_of(g) -> int:
        return int(g.ty.shape.values[-1])


def _input(size: int, layout: str, integer: bool, c: int = 3):
    shape = [1, c, size, size] if layout == "NCHW" else [1, size, size, c]
    return relax.Var("x", relax.TensorType(shape, "int8" if integer else "float32"))


# MobileNetV2: (expansion t, channels c, repeats n, stride s)
MBV2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
        (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(alpha: float = 1.0, size: int = 96, layout: str = "NCHW",
                 integer: bool = False, classes: int = 1000, seed: int = 0) -> tvm.IRModule:
    """MobileNetV2 (Sandler et al. 2018) with width ``alpha`` at ``size`` x ``size`` px, batch
    norm folded into biases, ReLU6 as clip, random weights."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = _input(size, layout, integer)
    with bb.function("main", [x], attrs={"num_input": 1}):
        with bb.dataflow():
            n = _Net(bb, rng, layout, integer)
            y = n.conv(x, make_divisible(32 * alpha), 3, 2)
            for t, c, reps, s in MBV2:
                for i in range(reps):
                    y = n.inverted_residual(y, make_divisible(c * alpha), s if i == 0 else 1, t)
            y = n.conv(y, make_divisible(1280 * max(1.0, alpha)), 1)
            out = n.head(y, classes)
        bb.emit_func_output(out)
    return bb.get()


def small_mobilenet(size: int = 32, c0: int = 8, layout: str = "NCHW", integer: bool = False,
                    concat: bool = True, seed: int = 0, classes: int = 10) -> tvm.IRModule:
    """A small MobileNet-like chain: stem conv s2, an inverted residual with its residual add,
    one with a stride-2 depthwise, a max-pool/avg-pool branch pair joined by a channel concat,
    then a global pool and a classifier."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = _input(size, layout, integer)
    with bb.function("main", [x], attrs={"num_input": 1}):
        with bb.dataflow():
            n = _Net(bb, rng, layout, integer)
            y = n.conv(x, c0, 3, 2)
            y = n.inverted_residual(y, c0, 1, 4)
            y = n.inverted_residual(y, 2 * c0, 2, 4)
            if concat:
                m = bb.emit(relax.op.nn.max_pool2d(y, (3, 3), (1, 1), (1, 1), layout=layout))
                b = n.conv(y, 2 * c0, 3)
                y = bb.emit(relax.op.concat([m, b], axis=n.c_axis))
            y = n.inverted_residual(y, 2 * c0, 2, 2)
            out = n.head(y, classes)
        bb.emit_func_output(out)
    return bb.get()


# MobileNetV3-Small: (kernel, expansion channels, out channels, SE, hardswish, stride)
MBV3S = ((3, 16, 16, True, False, 2), (3, 72, 24, False, False, 2),
         (3, 88, 24, False, False, 1), (5, 96, 40, True, True, 2), (5, 240, 40, True, True, 1),
         (5, 240, 40, True, True, 1), (5, 120, 48, True, True, 1), (5, 144, 48, True, True, 1),
         (5, 288, 96, True, True, 2), (5, 576, 96, True, True, 1), (5, 576, 96, True, True, 1))


class _NetV3(_Net):
    """`_Net` with MobileNetV3's pieces: hardswish, squeeze-and-excitation (global mean,
    1x1 conv, ReLU, 1x1 conv, hardsigmoid, scale). Integer: the activations are clips (int8
    stand-ins), the SE block works on int32 (its mean divides with TVM's integer division)."""

    def act(self, y, hswish: bool):
        bb = self.bb
        if self.integer:
            return y  # conv() already clipped to [0, 127]
        if not hswish:
            return bb.emit(relax.op.nn.relu(y))
        t = bb.emit(relax.op.clip(bb.emit(relax.op.add(y, self.const(np.float32(3.0)))),
                                  0.0, 6.0))
        return bb.emit(relax.op.divide(bb.emit(relax.op.multiply(y, t)),
                                       self.const(np.float32(6.0))))

    def conv_act(self, x, cout, k=1, stride=1, groups=1, hswish=False):
        if self.integer:
            return self.conv(x, cout, k, stride, groups, act=True)
        y = self.conv(x, cout, k, stride, groups, act=False)
        return self.act(y, hswish)

    def se(self, x):
        bb, c = self.bb, self.channels(x)
        mid = make_divisible(c / 4)
        axes = [2, 3] if self.layout == "NCHW" else [1, 2]
        if self.integer:
            xi = bb.emit(relax.op.astype(x, "int32"))
            g = bb.emit(relax.op.mean(xi, axis=axes, keepdims=True))
            g = self._vconv(g, mid, "int32")
            g = bb.emit(relax.op.clip(bb.emit(relax.op.right_shift(
                g, self.const(np.array(4, "int32")))), 0, 127))
            g = self._vconv(g, c, "int32")
            g = bb.emit(relax.op.clip(bb.emit(relax.op.add(
                bb.emit(relax.op.right_shift(g, self.const(np.array(6, "int32")))),
                self.const(np.array(3, "int32")))), 0, 6))
            y = bb.emit(relax.op.multiply(xi, g))
            y = bb.emit(relax.op.clip(bb.emit(relax.op.right_shift(
                y, self.const(np.array(2, "int32")))), -128, 127))
            return bb.emit(relax.op.astype(y, "int8"))
        g = bb.emit(relax.op.mean(x, axis=axes, keepdims=True))
        g = bb.emit(relax.op.nn.relu(self._vconv(g, mid, "float32")))
        g = self._vconv(g, c, "float32")
        g = bb.emit(relax.op.divide(bb.emit(relax.op.clip(bb.emit(relax.op.add(
            g, self.const(np.float32(3.0)))), 0.0, 6.0)), self.const(np.float32(6.0))))
        return bb.emit(relax.op.multiply(x, g))

    def _vconv(self, g, cout, dtype):
        """1x1 conv + bias on the 1x1 vector."""
        cin = self.channels(g)
        if dtype == "int32":
            w = self.rng.integers(-3, 4, (cout, cin, 1, 1)).astype("int32")
            b = self.rng.integers(-8, 9, cout).astype("int32")
        else:
            w = (self.rng.standard_normal((cout, cin, 1, 1)) * np.sqrt(2.0 / cin)
                 ).astype("float32")
            b = (self.rng.standard_normal(cout) * 0.1).astype("float32")
        if self.layout == "NCHW":
            kl, wt, bshape = "OIHW", w, (1, cout, 1, 1)
        else:
            kl, wt, bshape = "HWIO", w.transpose(2, 3, 1, 0), (1, 1, 1, cout)
        y = self.bb.emit(relax.op.nn.conv2d(g, self.const(wt), 1, 0, data_layout=self.layout,
                                            kernel_layout=kl, out_dtype=dtype))
        return self.bb.emit(relax.op.add(y, self.const(b.reshape(bshape))))

    def block(self, x, k, exp, cout, se, hswish, stride):
        cin = self.channels(x)
        y = x
        if exp != cin:
            y = self.conv_act(y, exp, 1, hswish=hswish)
        y = self.conv_act(y, exp, k, stride, groups=exp, hswish=hswish)
        if se:
            y = self.se(y)
        y = self.conv(y, cout, 1, act=False)
        if stride == 1 and cin == cout:
            y = self.add(x, y)
        return y


def mobilenet_v3_small(alpha: float = 1.0, size: int = 128, layout: str = "NCHW",
                       integer: bool = False, classes: int = 1000, seed: int = 0
                       ) -> tvm.IRModule:
    """MobileNetV3-Small-like (Howard et al. 2019): its block table with width ``alpha`` at
    ``size`` x ``size`` px, squeeze-and-excitation blocks (mean -> 1x1 conv -> ReLU -> 1x1
    conv -> hardsigmoid -> scale), hardswish as ``x * clip(x + 3, 0, 6) / 6``, biases for
    folded batch norm, random weights. Integer: int8 activations, int32 accumulation and SE."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = _input(size, layout, integer)
    with bb.function("main", [x], attrs={"num_input": 1}):
        with bb.dataflow():
            n = _NetV3(bb, rng, layout, integer)
            y = n.conv_act(x, make_divisible(16 * alpha), 3, 2, hswish=True)
            for k, exp, c, se, hs, s in MBV3S:
                y = n.block(y, k, make_divisible(exp * alpha), make_divisible(c * alpha), se,
                            hs, s)
            y = n.conv_act(y, make_divisible(576 * alpha), 1, hswish=True)
            out = n.head(y, classes)
        bb.emit_func_output(out)
    return bb.get()


def random_se_stack(seed: int, layout: str = "NCHW", integer: bool = True, size: int = 0
                    ) -> tvm.IRModule:
    """A random stack for property tests: a stem conv, then 2-5 steps among 1x1 / 3x3 convs,
    depthwise 3x3 (stride 1 or 2), 3x3 max pools, squeeze-and-excitation blocks and
    MobileNetV3 blocks (expansion, depthwise, SE, projection, residual when shapes allow), at
    least one SE block, then a mean + matmul head. ``size``: the input's H = W (default:
    random in 16..32)."""
    rng = np.random.default_rng(seed)
    size = size or int(rng.integers(16, 33))
    cin = int(rng.choice([1, 3]))
    bb = relax.BlockBuilder()
    x = _input(size, layout, integer, cin)
    with bb.function("main", [x], attrs={"num_input": 1}):
        with bb.dataflow():
            n = _NetV3(bb, rng, layout, integer)
            y = n.conv_act(x, int(rng.choice([4, 8])), 3, int(rng.choice([1, 2])),
                           hswish=True)
            steps = [str(rng.choice(["conv", "dw", "pool", "se", "block"]))
                     for _ in range(int(rng.integers(2, 6)))]
            if not {"se", "block"} & set(steps):
                steps.insert(int(rng.integers(len(steps) + 1)), "se")
            axes = (2, 3) if layout == "NCHW" else (1, 2)
            for kind in steps:
                c = n.channels(y)
                h = int(y.ty.shape.values[axes[0]])
                stride = int(rng.choice([1, 2])) if h >= 6 else 1
                if kind == "conv":
                    y = n.conv_act(y, int(rng.choice([8, 12, 16])), int(rng.choice([1, 3])))
                elif kind == "dw":
                    y = n.conv_act(y, c, 3, stride, groups=c, hswish=bool(rng.random() < 0.5))
                elif kind == "pool":
                    y = bb.emit(relax.op.nn.max_pool2d(y, 3, stride, 1, layout=layout))
                elif kind == "se":
                    y = n.se(y)
                else:
                    y = n.block(y, 3, 2 * c, int(rng.choice([c, 8])), True,
                                bool(rng.random() < 0.5), stride)
            out = n.head(y, 4)
        bb.emit_func_output(out)
    return bb.get()


def random_input(mod: tvm.IRModule, seed: int = 0) -> np.ndarray:
    ty = mod["main"].params[0].ty
    shape = [int(d) for d in ty.shape.values]
    rng = np.random.default_rng(seed)
    if str(ty.dtype) == "int8":
        return rng.integers(-128, 128, shape).astype("int8")
    return rng.standard_normal(shape).astype(str(ty.dtype))

"""Tiny Relax CNNs for the split tests: every operator class the splitter knows (dense and
depthwise convolutions, bias add, ReLU, max pool, concat, add, global mean, matmul)."""
import numpy as np


def tiny_cnn(seed: int = 0, channels: int = 8, size: int = 16):
    from tvm import relax

    rng = np.random.default_rng(seed)
    C = channels

    def const(*shape):
        return relax.const((rng.standard_normal(shape) * 0.3).astype("float32"))

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, size, size), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.conv2d(x, const(C, 3, 3, 3), padding=1))
            a = bb.emit(relax.op.add(a, const(1, C, 1, 1)))
            a = bb.emit(relax.op.nn.relu(a))
            b1 = bb.emit(relax.op.nn.conv2d(a, const(C, C, 3, 3), padding=1, strides=2))
            b2 = bb.emit(relax.op.nn.max_pool2d(a, (3, 3), (2, 2), padding=(1, 1)))
            b3 = bb.emit(relax.op.nn.conv2d(b2, const(C, 1, 3, 3), padding=1, groups=C))
            cat = bb.emit(relax.op.concat([b1, b3], axis=1))
            s = bb.emit(relax.op.add(cat, cat))
            m = bb.emit(relax.op.mean(s, axis=[2, 3]))
            o = bb.emit(relax.op.matmul(m, const(2 * C, 10)))
            o = bb.emit_output(relax.op.add(o, const(1, 10)))
        bb.emit_func_output(o)
    return bb.get()

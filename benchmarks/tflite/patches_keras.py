"""Build the Keras MCU-class models of the patch benchmark as int8 .tflite files.

Runs under a SEPARATE venv with tensorflow (never a memsched dependency), e.g. the one of
``benchmarks/edgetpu/make_models.py``:

    .tfvenv/bin/python benchmarks/tflite/patches_keras.py --out /tmp/keras_models

Models are built with ``weights=None`` (no download: random weights, which do not change the
graph), frozen (calibrating resource variables fails on READ_VARIABLE) and converted with
full-integer int8 quantization (int8 input and output) from 4 random calibration images.
Then measure with the project's venv: ``.venv/bin/python benchmarks/tflite/patches.py --logits
/tmp/keras_models/*.tflite`` (``--logits``: TFLite Micro's Python interpreter cannot allocate
these random-weight models' final SOFTMAX, so the arena is measured up to the logits).
"""
from __future__ import annotations

import argparse
import os

MODELS = {  # name -> (keras.applications constructor, alpha, input size)
    "mbv2_0.35_144": ("MobileNetV2", 0.35, 144),
    "mbv2_1.0_96": ("MobileNetV2", 1.0, 96),
    "mbv1_0.25_128": ("MobileNet", 0.25, 128),
    "mbv3s_1.0_128": ("MobileNetV3Small", 1.0, 128),
    "mbv3s_1.0_224": ("MobileNetV3Small", 1.0, 224),  # issue 60 item 4's TVM timing file
}


def convert(ctor: str, alpha: float, size: int, samples: int = 4,
            float_input: bool = False) -> bytes:
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    m = getattr(tf.keras.applications, ctor)(input_shape=(size, size, 3), alpha=alpha,
                                              weights=None, classes=10)

    @tf.function(input_signature=[tf.TensorSpec([1, size, size, 3], tf.float32)])
    def f(x):
        return m(x, training=False)

    conv = tf.lite.TFLiteConverter.from_concrete_functions(
        [convert_variables_to_constants_v2(f.get_concrete_function())])
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    rng = np.random.default_rng(0)
    conv.representative_dataset = lambda: (
        [rng.uniform(-1, 1, (1, size, size, 3)).astype(np.float32)] for _ in range(samples))
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    # float_input: the float32 input quantized by the model's first operator (a QUANTIZE)
    conv.inference_input_type = tf.float32 if float_input else tf.int8
    conv.inference_output_type = tf.int8
    return conv.convert()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="keras_models")
    ap.add_argument("--only", default="")
    ap.add_argument("--float-input", action="store_true",
                    help="float32 input (a QUANTIZE as operator 0); files named *_fin.tflite")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name, (ctor, alpha, size) in MODELS.items():
        if a.only and name not in a.only.split(","):
            continue
        path = os.path.join(a.out, name + ("_fin" if a.float_input else "") + ".tflite")
        with open(path, "wb") as f:
            f.write(convert(ctor, alpha, size, float_input=a.float_input))
        print(path, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

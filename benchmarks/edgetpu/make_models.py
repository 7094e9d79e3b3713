"""Build the Inc-ILP paper's ten Keras applications as int8 .tflite files (benchmark inputs).

Runs under a SEPARATE venv with tensorflow (never a memsched dependency), created in the
repository root (`.tfvenv/` is git-ignored; the published results used tensorflow-cpu 2.21):

    python3 -m venv .tfvenv && .tfvenv/bin/pip install tensorflow
    .tfvenv/bin/python benchmarks/edgetpu/make_models.py [--out benchmarks/edgetpu/models]
        [--only ResNet50,DenseNet121] [--samples 8] [--large]

Models are built with ``weights=None`` (no download; random weights, which do not change the
graph or the parameter bytes), frozen (variables -> constants: calibrating a model with
resource variables fails on READ_VARIABLE ops), and converted with full-integer int8
quantization (int8 inputs/outputs, as the Edge TPU compiler requires) from random
calibration images. Each model also gets ``<name>.json`` with its Keras layer count (the
paper's |V|) and the .tflite operator count. The files are large and not in git.

``--large`` builds the 750+-operator irregular networks instead (`LARGE`: NASNet-A Large at
its full 331 px and EfficientNet-B7), the certification stress test of the partition solvers.
"""
from __future__ import annotations

import argparse
import json
import os
import time

MODELS = {  # name -> (keras.applications constructor, input size)
    "Xception": ("Xception", 299),
    "ResNet50": ("ResNet50", 224),
    "ResNet101": ("ResNet101", 224),
    "ResNet152": ("ResNet152", 224),
    "ResNet101V2": ("ResNet101V2", 224),
    "ResNet152V2": ("ResNet152V2", 224),
    "DenseNet121": ("DenseNet121", 224),
    "DenseNet169": ("DenseNet169", 224),
    "DenseNet201": ("DenseNet201", 224),
    "InceptionResNetV2": ("InceptionResNetV2", 299),
}
# 750+ .tflite operators, irregular (NAS cells; squeeze-excite branches): --large
LARGE = {
    "NASNetLarge": ("NASNetLarge", 331),
    "EfficientNetB7": ("EfficientNetB7", 600),
}


def frozen_keras(ctor: str, size: int):
    """(Keras application built with ``weights=None``, its inference function with variables
    frozen to constants): calibrating a model with resource variables fails."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    tf.keras.backend.clear_session()
    model = getattr(tf.keras.applications, ctor)(weights=None, input_shape=(size, size, 3))
    spec = tf.TensorSpec([1, size, size, 3], tf.float32, name="input")
    fn = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec)
    return model, convert_variables_to_constants_v2(fn)


def convert(name: str, out_dir: str, samples: int) -> dict:
    import numpy as np
    import tensorflow as tf

    ctor, size = {**MODELS, **LARGE}[name]
    model, frozen = frozen_keras(ctor, size)
    rng = np.random.default_rng(0)

    def representative():
        for _ in range(samples):
            yield [rng.uniform(-1.0, 1.0, size=(1, size, size, 3)).astype(np.float32)]

    conv = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = representative
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    data = conv.convert()
    path = os.path.join(out_dir, f"{name}.tflite")
    with open(path, "wb") as f:
        f.write(data)
    interp = tf.lite.Interpreter(model_content=data)
    info = {"model": name, "keras_layers": len(model.layers), "input_size": size,
            "tflite_ops": len(interp._get_ops_details()), "bytes": len(data)}
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(info, f)
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "models"))
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--samples", type=int, default=8, help="calibration images (default 8)")
    ap.add_argument("--force", action="store_true", help="rebuild existing files")
    ap.add_argument("--large", action="store_true",
                    help=f"build the 750+-operator networks ({', '.join(LARGE)}) instead")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    known = {**MODELS, **LARGE}
    names = args.only.split(",") if args.only else list(LARGE if args.large else MODELS)
    for name in names:
        if name not in known:
            raise SystemExit(f"unknown model {name!r}; choose from {', '.join(known)}")
        if os.path.exists(os.path.join(args.out, f"{name}.tflite")) and not args.force:
            print(f"{name}: exists, skipped")
            continue
        t0 = time.perf_counter()
        info = convert(name, args.out, args.samples)
        print(f"{name}: {info['keras_layers']} Keras layers, {info['tflite_ops']} .tflite ops, "
              f"{info['bytes'] / 2**20:.1f} MiB, {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()

"""Keras applications as .tflite files for the TFLite / TFLite Micro reorder benchmark.

Runs under the separate tensorflow venv of ``benchmarks/edgetpu/make_models.py`` (never a
memsched dependency) and reuses its converter (``weights=None``, variables frozen, full-integer
int8 from random calibration images); ``--float`` also writes float32 files:

    .tfvenv/bin/python benchmarks/tflite/make_models.py [--only NASNetMobile] [--float]

Irregular networks first (NASNet-A Mobile is the NAS cell network of the papers), then the
networks TFLM users deploy. Files go to ``benchmarks/tflite/models/`` (not in git).
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "edgetpu"))
import make_models as edgetpu  # noqa: E402  (the shared Keras -> int8 converter)

MODELS = {"NASNetMobile": ("NASNetMobile", 224), "DenseNet121": ("DenseNet121", 224),
          "InceptionV3": ("InceptionV3", 299), "MobileNetV2": ("MobileNetV2", 224),
          "EfficientNetB0": ("EfficientNetB0", 224), "ResNet50": ("ResNet50", 224)}


def convert_float(name: str, out_dir: str) -> str:
    import tensorflow as tf

    _, frozen = edgetpu.frozen_keras(*MODELS[name])
    data = tf.lite.TFLiteConverter.from_concrete_functions([frozen]).convert()
    path = os.path.join(out_dir, f"{name}_float.tflite")
    with open(path, "wb") as f:
        f.write(data)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "models"))
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--float", action="store_true", help="also write float32 files")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    names = args.only.split(",") if args.only else list(MODELS)
    for name in names:
        if not os.path.exists(os.path.join(args.out, f"{name}.tflite")):
            edgetpu.MODELS[name] = MODELS[name]
            print(edgetpu.convert(name, args.out, 8), flush=True)
        if args.float and not os.path.exists(os.path.join(args.out, f"{name}_float.tflite")):
            print(convert_float(name, args.out), flush=True)


if __name__ == "__main__":
    main()

"""Importers: build an `OpGraph` from Relax, ONNX or a model file (see `load`)."""

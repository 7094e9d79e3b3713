"""Runners for partitioned models, usable without any solver.

`segments`: a threaded pipeline over .tflite segments (one LiteRT interpreter per stage).
"""

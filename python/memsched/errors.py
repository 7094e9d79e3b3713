"""The error types raised in one layer and caught in another (see docs/architecture.md).

Every one is a ``ValueError`` except `CLIError`: the command line turns each of them into one
line on stderr and exit status 2 (`memsched.cli.common`). They are defined here, at the bottom
of the package and free of TVM, so a leaf module raises them without importing the module that
dispatches to it, and the command line catches them without importing every importer. The old
homes re-export them (`memsched.graph`, `memsched.importers.load`, `memsched.cli`).
"""
from __future__ import annotations


class GraphError(ValueError):
    """A graph that cannot be modelled: cyclic, dangling reference, negative size, ..."""


class UnsupportedModelError(ValueError):
    """A model (or one block of it) that cannot be scheduled: dynamic shapes, control flow,
    impure calls, unsupported values; the message names the problem. Free of TVM, so
    ONNX/TFLite analysis never imports TVM (re-exported by `memsched.importers.relax`)."""


class GraphTooLargeError(GraphError, UnsupportedModelError):
    """Byte counts past `memsched.graph.MAX_GRAPH_BYTES` (absurd shapes). Also an
    `UnsupportedModelError`, so the passes leave such a block unchanged (``memsched.skipped``)
    instead of failing."""


class ModelLoadError(ValueError):
    """A model file that cannot be read or converted; the message names file and problem."""


class CLIError(Exception):
    """Bad command-line input found after parsing (a value, a path, a pass name); the message
    is the one line the command line prints."""

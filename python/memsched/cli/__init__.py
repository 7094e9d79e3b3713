"""Command line: ``memsched analyze|compile`` and a ``tvmc``-style ``tvmc compile``.

    memsched analyze model.onnx [--json] [--view relax|file] [--pass NAME] [--time-limit S]
    memsched compile model.onnx --pass MemoryAwareSchedule --pass PlanArena [--json] -o out.so
    tvmc compile --pass MemoryAwareSchedule --pass PlanArena model.onnx -o out.so

``analyze`` (``--view relax``, the default except for .tflite files) and ``compile`` share
the planning code (`_plan`): for the same file and options they print the same peak and
planned bytes. ``--view file`` schedules the file's own graph without TVM.

MODEL is a .onnx, .tflite or .pt2 (saved torch.export program) file,
or ``example:NAME`` for a built-in example (randwire, nas_cell, two_branch).

What the command line guarantees (see `main`): bad input of any kind (file, arguments,
options) is one line on stderr naming the problem, exit status 2; an unexpected failure is one
line naming the model, exit status 1 (``--verbose`` or ``MEMSCHED_DEBUG=1`` prints the
traceback); Ctrl-C prints ``memsched: interrupted``, exit status 130; a closed stdout
(``| head``) ends quietly, exit status 141; ``compile`` checks ``-o`` before any work and
writes it atomically (temporary file in the same directory, then rename), so a failed or
interrupted run leaves no partial file.

One module per command (`analyze`, `compile`, `partition`, `reorder`, `tile`, `pack`,
`pipeline`, `split`), each
with a ``register(subparsers)`` that adds its subcommands; `common` holds what they share
(argument types, model loading, status lines, `run`: the error-to-exit mapping). A new command
is a module with a ``register`` function, named in `COMMANDS`.
"""
from __future__ import annotations

import argparse
import sys

from .. import __version__
from . import analyze, compile, export, pack, partition, pipeline, reorder, split, tile
from .common import CLIError, _interrupted, _Parser, run, seconds  # noqa: F401 (public names)
from .compile import _unschedulable  # noqa: F401 (tests)

# The commands in `memsched --help` order; a new one is a module of this package with a
# ``register(subparsers)`` function, named here.
COMMANDS = (analyze, compile, partition, reorder, tile, pack, export, pipeline, split)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="memsched", description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", action="version", version=f"memsched {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return ap


def main(argv=None) -> int:
    try:
        parser = build_parser()  # imports the subcommands' modules: Ctrl-C can land here
    except KeyboardInterrupt:
        return _interrupted("memsched", argv, False)
    return run("memsched", parser, argv)


def tvmc_main(argv=None) -> int:
    """``tvmc compile --pass NAME MODEL -o out.so``: TVM >= 0.20 ships no tvmc; this accepts
    its familiar compile flags and runs `memsched compile`."""
    ap = _Parser(prog="tvmc", description="tvmc-compatible compile (memsched)")
    sub = ap.add_subparsers(dest="command", required=True)
    compile.register(sub)
    return run("tvmc", ap, argv)


if __name__ == "__main__":
    sys.exit(main())

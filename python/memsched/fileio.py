"""Writing the files the project hands to users: atomically, with the permissions they expect.

Every command that writes a file (``reorder``, ``partition`` segments, ``compile``, ``tile``,
``pack``, report plots) goes through here, so that

* a reader never sees a half-written file: data goes to a temporary name in the destination's
  directory and is renamed over the destination in one step (``os.replace``);
* the file gets the mode a plain ``open(path, "w")`` would give it: ``0o666`` minus the umask
  for data files, ``0o777`` minus the umask for shared libraries (what a linker gives), or the
  mode of the file it replaces. ``tempfile.mkstemp`` alone creates ``0o600`` files, which
  another user (a flashing tool, a CI artifact reader) cannot read.

Nothing here imports anything of the project (bottom layer).
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from typing import Callable

__all__ = ["write_atomic", "write_atomic_with", "current_umask", "target_mode"]


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows."""
    try:  # Linux: no window in which another thread sees a changed umask
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def target_mode(path: str, executable: bool = False) -> int:
    """The mode a file written to ``path`` should get (see the module docstring)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)  # replacing a file keeps its mode
    except FileNotFoundError:
        return (0o777 if executable else 0o666) & ~current_umask()


def write_atomic_with(path: str, write: Callable[[str], None], *,
                      executable: bool = False) -> None:
    """Let ``write(tmp_path)`` create the file, then move it to ``path`` in one step.

    ``write`` gets a path inside a private temporary directory next to ``path`` (same file
    system, so the rename is atomic) and may create the file any way it likes (TVM's
    ``export_library`` runs a linker). On any error nothing is left behind and an existing
    ``path`` is unchanged.
    """
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    tmpdir = tempfile.mkdtemp(prefix=".memsched-", dir=d)
    try:
        tmp = os.path.join(tmpdir, os.path.basename(path) or "out")
        write(tmp)
        os.chmod(tmp, target_mode(path, executable))
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def write_atomic(path: str, data: bytes, *, executable: bool = False) -> None:
    """Write ``data`` to ``path`` atomically, mode as for a new file under the umask."""

    def put(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    write_atomic_with(path, put, executable=executable)

"""The documentation runs: every tutorial, and every command README.md shows that can run on
what the repository holds.

What is run
-----------
* every ``tutorials/*.py``, as ``python tutorials/NAME.py`` in a subprocess (exit status 0);
* every command line of README.md's fenced ```` ```bash ```` blocks (the quick start and the
  audience sections), one subprocess each, in a fresh working directory whose entries link to
  the repository's top-level files (so ``.venv/bin/...`` and ``tutorials/...`` resolve and
  outputs such as ``-o randwire.so`` land in the temporary directory). ``.venv/bin/X`` is
  replaced by ``X`` next to the interpreter running the tests. A tutorial the README runs is
  run once.

Which README lines are skipped (the rule)
-----------------------------------------
1. Setting up and testing: lines that create the venv, ``pip install`` or run ``pytest``. CI
   runs those two commands itself, literally, before this test (and pytest inside pytest
   would recurse).
2. Lines that need a file the repository does not hold: a token naming a model or data file
   (``*.onnx``, ``*.tflite``, ``*.pt2``, ``*.pte``, ``*.json``) or a directory (``name/``)
   that is read, not written, and exists neither in the repository nor among the outputs of
   an earlier run line. Written arguments are the values of ``-o``/``--output``/``--plot``/
   ``--report``. ``model.onnx``, ``model.tflite`` and ``segs/`` (written by a skipped line)
   are the user's files; the built-in ``example:NAME`` models and the tutorials cover the
   same commands.
3. Lines that need machines we do not have: ``--servers`` lists and tracker addresses.

Lines that are not commands (blank lines, ``#`` comments) are ignored; a trailing ``# ...``
comment is cut off. Every kept line must exit with status 0 within its timeout.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")
TUTORIALS = os.path.join(REPO, "tutorials")
BIN = os.path.dirname(sys.executable)
TIMEOUT = 150  # seconds per command; the slowest (an RPC split) takes ~30 s on 2 cores

_DATA = re.compile(r"\.(onnx|tflite|pt2|pte|json)$")
_WRITES = {"-o", "--output", "--plot", "--report"}


def bash_blocks(text: str) -> list[list[str]]:
    """The lines of each fenced ```bash block of a Markdown text."""
    blocks, cur = [], None
    for line in text.splitlines():
        s = line.strip()
        if cur is None and s.startswith("```bash"):
            cur = []
        elif cur is not None and s.startswith("```"):
            blocks.append(cur)
            cur = None
        elif cur is not None:
            cur.append(line)
    return blocks


def _strip_comment(line: str) -> str:
    return re.sub(r"\s+#\s.*$", "", line).strip()


def readme_commands() -> list[tuple[str, str | None]]:
    """(command, reason to skip or None) for every command line of README's bash blocks."""
    with open(README, encoding="utf-8") as f:
        blocks = bash_blocks(f.read())
    out, written = [], set()
    for block in blocks:
        for raw in block:
            line = _strip_comment(raw)
            if not line or line.startswith("#"):
                continue
            out.append((line, _skip_reason(line, written)))
    return out


def _skip_reason(line: str, written: set) -> str | None:
    if "pip install" in line or "-m venv" in line or "pytest" in line:
        return "set-up / test-suite command (CI runs it itself)"
    if "--servers" in line or re.search(r"\w@[\w.-]+:\d+", line):
        return "needs remote RPC servers"
    tokens = shlex.split(line)
    outs = {tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t in _WRITES}
    for t in tokens:
        if t in outs or t.startswith("-"):
            continue
        if _DATA.search(t) or (t.endswith("/") and not t.startswith(".venv")):
            if not os.path.exists(os.path.join(REPO, t)) and t not in written:
                return f"needs {t!r}, a user's file not in the repository"
    written.update(outs)
    return None


def _argv(line: str) -> list[str]:
    argv = shlex.split(line)
    if argv[0].startswith(".venv/bin/"):
        argv[0] = os.path.join(BIN, argv[0][len(".venv/bin/"):])
    elif argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return argv


def _tutorial(argv: list[str]) -> str | None:
    if len(argv) == 2 and argv[0] == sys.executable and argv[1].startswith("tutorials/"):
        return os.path.basename(argv[1])
    return None


def commands() -> list[tuple[str, list[str]]]:
    """(test id, argv) of everything this module runs: README's runnable lines, then the
    tutorials the README does not already run."""
    runs, seen = [], set()
    for line, why in readme_commands():
        if why is None:
            argv = _argv(line)
            name = _tutorial(argv)
            seen.add(name)
            runs.append((f"readme: {line}", argv))
    for name in sorted(os.listdir(TUTORIALS)):
        if name.endswith(".py") and name not in seen:
            runs.append((f"tutorial: {name}", [sys.executable, f"tutorials/{name}"]))
    return runs


@pytest.fixture
def workdir(tmp_path):
    """A fresh directory whose entries link to the repository's top-level files."""
    for name in os.listdir(REPO):
        if name not in (".git",):
            os.symlink(os.path.join(REPO, name), tmp_path / name)
    return tmp_path


@pytest.mark.parametrize("argv", [a for _, a in commands()], ids=[i for i, _ in commands()])
def test_documented_command_runs(argv, workdir):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("MEMSCHED_DEBUG", None)
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{shlex.join(argv)} took more than {TIMEOUT} s")
    seconds = time.perf_counter() - t0
    assert p.returncode == 0, (f"{shlex.join(argv)} exited {p.returncode} after {seconds:.1f} s"
                               f"\n--- stdout\n{p.stdout[-3000:]}\n--- stderr\n{p.stderr[-3000:]}")


def test_every_tutorial_is_run():
    ran = {os.path.basename(a[1]) for _, a in commands() if _tutorial(a)}
    tutorials = {n for n in os.listdir(TUTORIALS) if n.endswith(".py")}
    assert tutorials == ran
    assert len(tutorials) >= 5  # one per audience + schedule_relax_model.py


def test_skip_rule():
    """The rule in the module docstring, on lines of the kind README shows."""
    w: set = set()
    assert _skip_reason('python3 -m venv .venv && .venv/bin/pip install -e ".[test]"', w)
    assert _skip_reason(".venv/bin/python -m pytest -q", w)
    assert _skip_reason(".venv/bin/memsched analyze model.onnx --json", w)
    assert _skip_reason(".venv/bin/memsched split example:randwire --devices 2 --run-rpc "
                        "--servers board@host:9190,board@host:9190", w)
    assert _skip_reason(".venv/bin/memsched compile example:randwire --pass PlanArena "
                        "-o out.so", w) is None
    assert _skip_reason(".venv/bin/memsched analyze example:randwire --plot m.svg", w) is None
    assert _skip_reason(".venv/bin/python tutorials/tvm_pipeline.py", w) is None
    # what an earlier runnable line writes, a later one may read; a skipped line writes nothing
    assert _skip_reason(".venv/bin/memsched split example:randwire --devices 2 "
                        "-o profile.json", w) is None
    assert _skip_reason(".venv/bin/memsched split example:randwire --devices 2 "
                        "--profile profile.json", w) is None
    assert _skip_reason(".venv/bin/memsched partition model.tflite --stages 2 -o segs/", w)
    assert _skip_reason(".venv/bin/memsched run-segments segs/", w)


def test_readme_quick_start_is_kept():
    """CI runs the first two quick-start commands literally; the third is the main job."""
    lines = [line for line, _ in readme_commands()]
    assert lines[:3] == ['python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && '
                         '.venv/bin/pip install --no-deps tosa-tools==2026.8.0 && '
                         '.venv/bin/python -m memsched.board build',
                         ".venv/bin/python -m pytest -q",
                         ".venv/bin/memsched analyze example:randwire"]


def test_readme_runs_something_per_audience():
    runnable = [line for line, why in readme_commands() if why is None]
    for needle in ("memsched compile", "tvm_pipeline.py", "tflite_micro_reorder.py",
                   "edgetpu_partition.py", "memsched split", "multi_device_split.py"):
        assert any(needle in line for line in runnable), needle


def _markdown_files() -> list[str]:
    files = [README, os.path.join(REPO, "CHANGELOG.md")]
    docs = os.path.join(REPO, "docs")
    files += [os.path.join(docs, n) for n in sorted(os.listdir(docs)) if n.endswith(".md")]
    return [f for f in files if os.path.exists(f)]


def _anchors(path: str) -> set[str]:
    """GitHub's heading anchors of a Markdown file."""
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
    out = set()
    for h in re.findall(r"^#+\s+(.*)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_docs_links_resolve_and_no_machine_paths():
    for path in _markdown_files():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        rel = os.path.relpath(path, REPO)
        assert "/work/" not in text and "tfvenv/bin" not in text.replace(".tfvenv/bin", ""), rel
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            dest = os.path.join(os.path.dirname(path), target) if target else path
            assert os.path.exists(dest), f"{rel}: broken link {target}"
            if anchor and dest.endswith(".md"):
                assert anchor in _anchors(dest), f"{rel}: no heading #{anchor} in {target}"


def test_readme_is_short():
    with open(README, encoding="utf-8") as f:
        assert len(f.read().splitlines()) <= 250

"""The import graph of `memsched` follows docs/architecture.md: no import circles, and no module
imports one of a higher layer.

Read from the source with `ast` (nothing is imported, so no TVM): every ``import`` and
``from ... import`` of a memsched module, at module level and inside functions alike, relative
imports resolved. `LAYERS` is the table of docs/architecture.md; change both together.
"""
from __future__ import annotations

import ast
import pathlib
import pkgutil
import subprocess
import sys

import memsched

ROOT = pathlib.Path(memsched.__file__).parent

# Layers, bottom to top: a module may import its own layer and the layers below it. A key is a
# package or a module; a module belongs to its longest key.
LAYERS = {
    "core": ["memsched", "memsched._native", "memsched.errors", "memsched.limits",
             "memsched.fileio", "memsched.graph", "memsched.memory", "memsched.dominators",
             "memsched.native", "memsched.arena_problem", "memsched.arena_greedy",
             "memsched.packing", "memsched.arena", "memsched.banks", "memsched.simplify",
             "memsched.schedulers", "memsched.board"],
    "importers": ["memsched.importers"],
    "problems": ["memsched.partition", "memsched.split", "memsched.patches"],
    "runtimes": ["memsched.transform", "memsched.relax_pipeline", "memsched.tvm_memory",
                 "memsched.runtime", "memsched.tflite", "memsched.executorch"],
    "generators": ["memsched.generators"],
    "front door": ["memsched.importers.load", "memsched.report"],
    "cli": ["memsched.cli"],
}
# The runtime packages, one per runtime we read and write for: none imports another's modules.
RUNTIMES = {
    "tvm": ["memsched.transform", "memsched.relax_pipeline", "memsched.tvm_memory",
            "memsched.runtime"],
    "tflite": ["memsched.tflite"],
    "executorch": ["memsched.executorch"],
}
RANK = {key: i for i, keys in enumerate(LAYERS.values()) for key in keys}
LAYER_NAMES = list(LAYERS)


def modules() -> dict[str, pathlib.Path]:
    """Every module of the package: name -> file (a package's file is its __init__.py)."""
    found = {"memsched": ROOT / "__init__.py"}
    for info in pkgutil.walk_packages([str(ROOT)], prefix="memsched."):
        rel = info.name.split(".")[1:]
        path = ROOT.joinpath(*rel)
        path = path / "__init__.py" if info.ispkg else path.with_suffix(".py")
        if path.exists():  # not the native kernel (a shared library)
            found[info.name] = path
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """Module -> the memsched modules it imports (anywhere in its body)."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                for a in node.names:
                    # ``from pkg import mod`` imports the module pkg.mod; ``from mod import x``
                    # imports mod
                    targets.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
        graph[name] = {t for t in targets if t in mods and t != name}
        unknown = {t for t in targets if t.startswith("memsched") and t not in mods}
        assert not unknown, f"{name} imports modules that do not exist: {sorted(unknown)}"
    return graph


def unit(module: str) -> str:
    """The `LAYERS` key a module belongs to (the longest one that is it or a package of it)."""
    keys = [k for k in RANK if module == k or module.startswith(k + ".")]
    assert keys, f"{module} is in no layer: add it to LAYERS and docs/architecture.md"
    return max(keys, key=len)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path, or None (iterative depth-first search)."""
    state: dict[str, int] = {}
    for start in sorted(graph):
        if state.get(start):
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(sorted(graph.get(nxt, ())))))
                path.append(nxt)
    return None


def test_every_module_has_a_layer():
    for name in modules():
        unit(name)


def test_no_import_cycles_between_modules():
    cycle = _cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_no_import_cycles_between_packages():
    units: dict[str, set[str]] = {}
    for mod, targets in import_graph().items():
        units.setdefault(unit(mod), set()).update(unit(t) for t in targets if unit(t) != unit(mod))
    cycle = _cycle(units)
    assert cycle is None, "import circle between packages: " + " -> ".join(cycle)


def test_no_upward_imports():
    upward = []
    for mod, targets in sorted(import_graph().items()):
        for t in sorted(targets):
            if RANK[unit(t)] > RANK[unit(mod)]:
                upward.append(f"{mod} ({LAYER_NAMES[RANK[unit(mod)]]}) imports {t} "
                              f"({LAYER_NAMES[RANK[unit(t)]]})")
    assert not upward, "imports pointing up a layer:\n" + "\n".join(upward)


def _runtime(module: str) -> str | None:
    for name, keys in RUNTIMES.items():
        if any(module == k or module.startswith(k + ".") for k in keys):
            return name
    return None


def test_runtime_packages_never_import_each_other():
    assert set(k for keys in RUNTIMES.values() for k in keys) == set(LAYERS["runtimes"])
    crossing = []
    for mod, targets in sorted(import_graph().items()):
        a = _runtime(mod)
        for t in sorted(targets):
            b = _runtime(t)
            if a and b and a != b:
                crossing.append(f"{mod} ({a}) imports {t} ({b})")
    assert not crossing, "runtime packages importing each other:\n" + "\n".join(crossing)


# The rooms of a runtime package, bottom to top (issue 60): the file format (read, write,
# verify), the runtime's memory and time model (what it allocates, what its kernels cost),
# the plan (order, pack) and the patch adapter (describe, rewrite; it writes the certified
# order of the patched file, so it may use the plan, never the reverse). A room imports its
# own and lower rooms only, and the two lowest import nothing else of their package (no
# runner, not the package's face). docs/architecture.md names them; change both together.
ROOMS = ["format", "memory", "plan", "patch"]
# Modules at the top of a runtime package that sit below every room: its error types
# (`executorch/errors`), which import nothing of their package.
BASE = ["errors"]


def room(module: str) -> tuple[str, str] | None:
    """(runtime package, room) of a module in a room of a runtime package, or None."""
    parts = module.split(".")
    if len(parts) >= 3 and ".".join(parts[:2]) in LAYERS["runtimes"] and parts[2] in ROOMS:
        return parts[1], parts[2]
    return None


def test_runtime_rooms_import_downward():
    graph = import_graph()
    assert room("memsched.tflite.patch.tile") == ("tflite", "patch")
    assert room("memsched.tflite.litert") is None and room("memsched.patches.plans") is None
    assert room("memsched.executorch.patch.tile") == ("executorch", "patch")
    assert room("memsched.executorch.planning") is None
    doc = (ROOT.parents[1] / "docs" / "architecture.md").read_text()
    packages = {r[0] for r in map(room, graph) if r}
    assert {"tflite", "executorch"} <= packages
    for pkg in packages:
        for name in ROOMS:
            assert f"`{pkg}/{name}/`" in doc, f"{pkg}/{name}/ is not in docs/architecture.md"
    bad = []
    for mod, targets in sorted(graph.items()):
        r = room(mod)
        if r is None:
            continue
        pkg = f"memsched.{r[0]}"
        for t in sorted(targets):
            if t != pkg and not t.startswith(pkg + "."):
                continue
            rt = room(t)
            if rt is None and t.removeprefix(pkg + ".") in BASE:
                continue
            if rt is None and ROOMS.index(r[1]) <= ROOMS.index("memory"):
                bad.append(f"{mod} ({r[1]}) imports {t}, outside the rooms")
            elif rt is not None and ROOMS.index(rt[1]) > ROOMS.index(r[1]):
                bad.append(f"{mod} ({r[1]}) imports {t} ({rt[1]})")
    assert not bad, "runtime rooms importing upward:\n" + "\n".join(bad)
    base = {f"memsched.{pkg}.{b}" for pkg in packages for b in BASE} & set(graph)
    assert "memsched.executorch.errors" in base
    above = {m: sorted(t for t in graph[m] if t.startswith(m.rsplit(".", 1)[0] + "."))
             for m in base}
    assert not any(above.values()), f"error modules importing their package: {above}"


def test_problem_packages_know_no_file_format():
    """`partition/`, `split/`, `patches/` take an `OpGraph` / their own problem description and
    a memory model; the runtime packages build them (and the importers below are readers)."""
    readers = ("memsched.importers", "memsched.tflite", "memsched.executorch",
               "memsched.transform")
    bad = [f"{mod} imports {t}" for mod, targets in sorted(import_graph().items())
           if unit(mod) in LAYERS["problems"] for t in sorted(targets)
           if t.startswith(readers)]
    assert not bad, "problem packages reading formats:\n" + "\n".join(bad)


def test_layers_match_the_documentation():
    doc = (ROOT.parents[1] / "docs" / "architecture.md").read_text()
    for layer, keys in LAYERS.items():
        assert f"**{layer}**" in doc, f"layer {layer!r} is not in docs/architecture.md"
        for key in keys:
            path = key.removeprefix("memsched.").replace(".", "/")
            assert f"`{path}" in doc, \
                f"{key} is not in docs/architecture.md"


def test_the_checker_sees_cycles_and_function_level_imports():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) in (["a", "b", "c", "a"],)
    assert _cycle({"a": {"b"}, "b": set()}) is None
    graph = import_graph()
    assert "memsched.generators.examples" in graph["memsched.importers.load"]  # in a function
    assert _runtime("memsched.tflite.tile") == "tflite" and _runtime("memsched.graph") is None
    assert "memsched.partition.problem" in graph["memsched.partition.base"]  # relative import


def test_import_memsched_needs_no_optional_dependency():
    """``import memsched`` and the command line's parser with torch, the TFLite packages, pymoo,
    matplotlib and onnxruntime unavailable, and without importing TVM."""
    code = ("import sys\n"
            "for m in ('torch', 'tflite', 'ai_edge_litert', 'tflite_micro', 'pymoo', "
            "'matplotlib', 'onnxruntime'):\n"
            "    sys.modules[m] = None\n"
            "import memsched, memsched.cli\n"
            "memsched.cli.build_parser()\n"
            "assert 'tvm' not in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


# The patch search's building blocks: a module that imports one of these could loop over
# regions or grids itself (a second region written once per adapter, as before issue 40)
SEARCH_INTERNALS = {"search_one", "search_sequence", "Evaluator", "resolve", "plan_patches",
                    "grid_macs", "regions", "heuristic_peak", "patched_graph", "DEFAULT_GRIDS",
                    "price_sequence"}


def search_loops(name: str, source: str) -> list[str]:
    """What in module ``name`` (its ``source``) defines a search over patch regions or grids
    outside `memsched.patches`: an import of the search's building blocks, a grid table of its
    own (a module-level name ending in GRIDS bound to a literal), a loop over a name ending in
    GRIDS, a call of `search_regions` in a loop or more than once."""
    if name == "memsched.patches" or name.startswith("memsched.patches."):
        return []
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and "patches" in (node.module or "").split("."):
            found += [f"imports {a.name}" for a in node.names if a.name in SEARCH_INTERNALS]
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Tuple, ast.List)):
            found += [f"defines {t.id}" for t in node.targets
                      if isinstance(t, ast.Name) and t.id.endswith("GRIDS")]
    calls = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.comprehension)):
            it = node.iter
            names = {n.id for n in ast.walk(it) if isinstance(n, ast.Name)} | \
                {n.attr for n in ast.walk(it) if isinstance(n, ast.Attribute)}
            found += [f"loops over {n}" for n in sorted(names) if n.endswith("GRIDS")]
        if isinstance(node, (ast.For, ast.While, ast.ListComp, ast.GeneratorExp,
                             ast.SetComp, ast.DictComp)):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and _called(sub) in SEARCHES:
                    found.append(f"calls {_called(sub)} in a loop")
        if isinstance(node, ast.Call) and _called(node) in SEARCHES:
            calls += 1
    if calls > 1:
        found.append(f"calls the search {calls} times")
    return found


SEARCHES = ("search_sequence", "search_model")  # the search, internal name and entry point


def _called(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def test_no_search_over_regions_or_grids_outside_patches():
    """Issue 40: the adapters describe their graph and apply a plan; the regions and grids
    are searched in `memsched.patches` only (`search_model`, called once per adapter)."""
    bad = {name: why for name, path in modules().items()
           if (why := search_loops(name, path.read_text()))}
    assert not bad, bad


def test_the_search_loop_checker_sees_copies():
    src = ("from ..patches.search import DEFAULT_GRIDS, search_one\n"
           "FIRST_GRIDS = ((2, 1), (3, 1))\n"
           "def f(sm):\n"
           "    for g in FIRST_GRIDS:\n"
           "        search_sequence(sm, g)\n"
           "    return [x for x in DEFAULT_GRIDS]\n")
    why = search_loops("memsched.tflite.tile", src)
    assert {"imports DEFAULT_GRIDS", "imports search_one", "defines FIRST_GRIDS",
            "loops over FIRST_GRIDS", "loops over DEFAULT_GRIDS",
            "calls search_sequence in a loop"} <= set(why)
    assert search_loops("memsched.patches.sequence", src) == []
    assert search_loops("memsched.x", "search_sequence(a)\nsearch_model(b)\n") == \
        ["calls the search 2 times"]


def patch_submodule_imports(name: str, source: str, is_package: bool = False) -> list[str]:
    """The `memsched.patches` submodules module ``name`` imports (outside the package): an
    adapter uses the package's public face only (issue 46)."""
    if name == "memsched.patches" or name.startswith("memsched.patches."):
        return []
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            mod = _resolve(name, is_package, node)
            if mod.startswith("memsched.patches."):
                out.append(mod)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.startswith("memsched.patches.")]
    return out


def test_adapters_import_the_public_face_of_patches_only():
    bad = {name: got for name, path in modules().items()
           if (got := patch_submodule_imports(name, path.read_text(),
                                              path.name == "__init__.py"))}
    assert not bad, bad
    assert patch_submodule_imports("memsched.tflite.tile",
                                   "from ..patches.search import BAND_GRIDS\n") == \
        ["memsched.patches.search"]
    assert patch_submodule_imports("memsched.tflite.tile", "from ..patches import X\n") == []

"""Fuzzing the model loaders and the command line with hypothesis (issue 11, part 5).

Inputs: random bytes under every extension; truncated and byte-flipped valid .onnx, .tflite,
.pt2 and .pte files (``.pte``: `analyze` and `reorder`); structurally mutated ONNX (dtype
codes, dims, names, references, node lists),
TFLite (tensor types, shapes, operator/opcode/buffer indices) and .pt2 programs (random
values spliced into the program JSON, archive re-zipped so the damage reaches the
deserializer). The property, on every input:

* API: `memsched.load_graph` / `memsched.load_relax` return, or raise a ``ValueError`` subclass
  (`ModelLoadError`, `UnsupportedModelError`, `GraphError`) with a one-line message;
* CLI: ``memsched analyze`` exits 0, or exits 2 with exactly one line on stderr.

CI runs a few hundred cases in ~20 s (examples derandomized, so CI is reproducible);
``-m heavy`` runs a larger, randomized campaign. ``FUZZ_CASES`` counts the cases run (printed
at the end of the module with ``-s``).
"""
import copy
import io
import json
import os
import zipfile
from collections import Counter

import onnx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import memsched
from memsched.cli import main
from memsched.generators.examples import example_onnx

FUZZ_CASES: Counter = Counter()
EXTS = [".onnx", ".tflite", ".pt2", ".txt", ""]
CI = dict(deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
HEAVY = dict(deadline=None, database=None, derandomize=False,
             suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print(f"\nfuzz cases run: {dict(FUZZ_CASES)}, total {sum(FUZZ_CASES.values())}")


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """Valid files of each format, as bytes."""
    out = {".onnx": example_onnx("two_branch").SerializeToString()}
    try:
        from memsched.generators.examples import example_tflite

        out[".tflite"] = example_tflite("two_branch")
    except ImportError:  # pragma: no cover - tflite extra not installed
        pass
    torch = pytest.importorskip("torch")

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.c = torch.nn.Conv2d(2, 4, 3, padding=1)

        def forward(self, x):
            return torch.relu(self.c(x)) + x.mean()

    buf = io.BytesIO()
    torch.export.save(torch.export.export(M().eval(), (torch.randn(1, 2, 6, 6),)), buf)
    out[".pt2"] = buf.getvalue()
    return out


_dir_counter = [0]


def check(tmp_path, data: bytes, ext: str, kind: str, relax: bool = False) -> None:
    """The property above, for one input."""
    _dir_counter[0] += 1
    d = tmp_path / f"case{_dir_counter[0]}"
    d.mkdir()
    path = d / f"model{ext}"
    path.write_bytes(data)
    FUZZ_CASES[kind] += 1
    for load in ([memsched.load_graph] + ([memsched.load_relax] if relax else [])):
        try:
            load(str(path))
        except ValueError as e:
            assert "\n" not in str(e), f"{kind}: multi-line error {e!s:.300}"
        # any other exception type fails the test with its traceback
    import sys

    err = io.StringIO()
    old, sys.stderr = sys.stderr, err
    out = io.StringIO()
    old_out, sys.stdout = sys.stdout, out
    try:
        rc = main(["analyze", str(path), "--json", "--time-limit", "1"])
    finally:
        sys.stderr, sys.stdout = old, old_out
    text = err.getvalue()
    assert rc in (0, 2), f"{kind}: exit {rc}: {text}"
    if rc == 2:
        assert len(text.splitlines()) == 1 and text.startswith("memsched: error:"), text
    else:
        assert json.loads(out.getvalue())["ops"] >= 1


# ------------------------------------------------------------------ raw bytes
def _raw(tmp_path, data, ext):
    check(tmp_path, data, ext, "random bytes")


@settings(max_examples=60, **CI)
@given(data=st.binary(max_size=2048), ext=st.sampled_from(EXTS))
def test_random_bytes(tmp_path, data, ext):
    _raw(tmp_path, data, ext)


def _truncated(tmp_path, seeds, ext, frac, relax=False):
    data = seeds[ext]
    check(tmp_path, data[:int(len(data) * frac)], ext, f"truncated {ext}", relax)


@settings(max_examples=40, **CI)
@given(ext=st.sampled_from([".onnx", ".tflite", ".pt2"]), frac=st.floats(0, 0.999))
def test_truncated_files(tmp_path, seeds, ext, frac):
    _truncated(tmp_path, seeds, ext, frac, relax=ext == ".onnx")


def _flipped(tmp_path, seeds, ext, flips, relax=False):
    data = bytearray(seeds[ext])
    for pos, val in flips:
        data[pos % len(data)] = val
    check(tmp_path, bytes(data), ext, f"byte-flipped {ext}", relax)


@settings(max_examples=50, **CI)
@given(ext=st.sampled_from([".onnx", ".tflite", ".pt2"]),
       flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1,
                      max_size=8))
@example(ext=".onnx", flips=[(40, 128)])  # found by the campaign: a node name not UTF-8
def test_byte_flipped_files(tmp_path, seeds, ext, flips):
    _flipped(tmp_path, seeds, ext, flips, relax=ext == ".onnx")


@settings(max_examples=10, **CI)
@given(ext=st.sampled_from([".onnx", ".tflite", ".pt2"]), other=st.sampled_from(EXTS))
def test_wrong_extension(tmp_path, seeds, ext, other):
    if other != ext:
        check(tmp_path, seeds[ext], other, "wrong extension")


# ------------------------------------------------------------------ structured ONNX
ONNX_MUTATIONS = ["dtype", "dim", "dim_param", "dup_output", "drop_node", "ghost_input",
                  "no_nodes", "op_type", "dup_input", "initializer_dims", "external", "swap"]


def _mutate_onnx(model, what, a, b):
    g = model.graph
    vis = list(g.input) + list(g.output) + list(g.value_info)
    if what == "dtype":
        vis[a % len(vis)].type.tensor_type.elem_type = b % 45 - 3 if b % 45 - 3 >= 0 else 0
    elif what == "dim":
        vi = vis[a % len(vis)]
        dims = vi.type.tensor_type.shape.dim
        if len(dims):
            dims[a % len(dims)].dim_value = [-1, 0, 1 << 31, 1 << 62, -(1 << 40), b][b % 6]
    elif what == "dim_param":
        dims = g.input[0].type.tensor_type.shape.dim
        dims[a % len(dims)].dim_param = "n"
    elif what == "dup_output":
        nodes = list(g.node)
        nodes[a % len(nodes)].output[0] = nodes[b % len(nodes)].output[0]
    elif what == "drop_node":
        del g.node[a % len(g.node)]
    elif what == "ghost_input":
        n = g.node[a % len(g.node)]
        if len(n.input):
            n.input[b % len(n.input)] = "ghost"
    elif what == "no_nodes":
        del g.node[:]
    elif what == "op_type":
        g.node[a % len(g.node)].op_type = ["If", "Loop", "Foo", "", "Scan", "Reshape"][b % 6]
    elif what == "dup_input":
        g.input.append(copy.deepcopy(g.input[0]))
    elif what == "initializer_dims":
        if len(g.initializer):
            t = g.initializer[a % len(g.initializer)]
            t.dims[b % len(t.dims)] = [1 << 40, -3, 0, 7][b % 4]
    elif what == "external":
        if len(g.initializer):
            t = g.initializer[a % len(g.initializer)]
            t.data_location = onnx.TensorProto.EXTERNAL
            t.ClearField("raw_data")
            t.external_data.add(key="location",
                                value=["../x.bin", "/etc/passwd", "missing", "", "a/../../b"]
                                [b % 5])
            t.external_data.add(key="length", value=str(b))
    elif what == "swap":
        nodes = list(g.node)
        i, j = a % len(nodes), b % len(nodes)
        nodes[i], nodes[j] = nodes[j], nodes[i]
        del g.node[:]
        g.node.extend(nodes)
    return model


def _onnx_case(tmp_path, seeds, whats, a, b, relax=False):
    model = onnx.ModelProto.FromString(seeds[".onnx"])
    for what in whats:
        if len(model.graph.node) == 0:
            break
        model = _mutate_onnx(model, what, a, b)
    check(tmp_path, model.SerializeToString(), ".onnx", "mutated onnx", relax)


@settings(max_examples=120, **CI)
@given(whats=st.lists(st.sampled_from(ONNX_MUTATIONS), min_size=1, max_size=3),
       a=st.integers(0, 1000), b=st.integers(0, 1 << 33))
def test_mutated_onnx(tmp_path, seeds, whats, a, b):
    _onnx_case(tmp_path, seeds, whats, a, b, relax=a % 4 == 0)


# ------------------------------------------------------------------ structured TFLite
TFLITE_MUTATIONS = ["type", "shape", "op_input", "op_output", "opcode", "buffer", "no_ops",
                    "sg_input", "sg_output", "drop_op"]


def _tflite_case(tmp_path, seeds, whats, a, b):
    flatbuffers = pytest.importorskip("flatbuffers")
    s = pytest.importorskip("ai_edge_litert.schema_py_generated")
    model = s.ModelT.InitFromPackedBuf(seeds[".tflite"], 0)
    sg = model.subgraphs[0]
    for what in whats:
        if not sg.operators:
            break
        t = sg.tensors[a % len(sg.tensors)]
        op = sg.operators[a % len(sg.operators)]
        if what == "type":
            t.type = b % 30 - 2
        elif what == "shape":
            t.shape = [[-1, 0, 1 << 31, -(1 << 30), 3][(b + i) % 5] for i in range(b % 5)]
        elif what == "op_input" and op.inputs is not None and len(op.inputs):
            op.inputs = [int(i) for i in op.inputs]
            op.inputs[b % len(op.inputs)] = [len(sg.tensors), -2, 1 << 30, -1][b % 4]
        elif what == "op_output" and op.outputs is not None and len(op.outputs):
            op.outputs = [int(i) for i in op.outputs]
            op.outputs[0] = [len(sg.tensors) + 3, -7, 0][b % 3]
        elif what == "opcode":
            op.opcodeIndex = [len(model.operatorCodes), 1 << 20][b % 2]
        elif what == "buffer":
            t.buffer = [len(model.buffers), -1 & 0xFFFFFFFF, 1 << 20][b % 3]
        elif what == "no_ops":
            sg.operators = []
        elif what == "sg_input":
            sg.inputs = [[len(sg.tensors)], [], [0, 0]][b % 3]
        elif what == "sg_output":
            sg.outputs = [[len(sg.tensors) + 1], [], [0]][b % 3]
        elif what == "drop_op":
            del sg.operators[a % len(sg.operators)]
    fb = flatbuffers.Builder(1024)
    try:
        fb.Finish(model.Pack(fb), file_identifier=b"TFL3")
    except Exception:  # noqa: BLE001 - a value the schema cannot even encode (negative uint)
        return
    check(tmp_path, bytes(fb.Output()), ".tflite", "mutated tflite")


@settings(max_examples=30, **CI)
@given(whats=st.lists(st.sampled_from(TFLITE_MUTATIONS), min_size=1, max_size=2),
       a=st.integers(0, 1000), b=st.integers(0, 1000))
def test_mutated_tflite(tmp_path, seeds, whats, a, b):
    if ".tflite" not in seeds:
        pytest.skip("tflite not installed")
    _tflite_case(tmp_path, seeds, whats, a, b)


# ------------------------------------------------------------------ structured .pt2
JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70),
                        st.text(max_size=20), st.sampled_from(
                            ["torch.ops.aten.mul.Tensor", "torch.ops.load_library",
                             "builtins.eval", "Symbol('s0')", "__import__('os')"]),
                        st.lists(st.integers(-5, 5), max_size=3), st.just({}))


def _paths(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def _pt2_case(tmp_path, seeds, member, pick, value):
    with zipfile.ZipFile(io.BytesIO(seeds[".pt2"])) as z:
        files = {n: z.read(n) for n in z.namelist()}
    name = next(n for n in files if n.endswith(member))
    doc = json.loads(files[name])
    paths = list(_paths(doc))
    target = paths[pick % len(paths)]
    obj = doc
    for k in target[:-1]:
        obj = obj[k]
    obj[target[-1]] = value
    files[name] = json.dumps(doc).encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for n, data in files.items():
            z.writestr(n, data)
    check(tmp_path, out.getvalue(), ".pt2", "mutated pt2 json")


@settings(max_examples=15, **CI)
@given(member=st.sampled_from(["models/model.json", "weights_config.json"]),
       pick=st.integers(0, 1 << 16), value=JSON_VALUES)
def test_mutated_pt2_program(tmp_path, seeds, member, pick, value):
    _pt2_case(tmp_path, seeds, member, pick, value)


# ------------------------------------------------------------------ ExecuTorch .pte
@pytest.fixture(scope="module")
def pte_seed():
    """A small ExecuTorch program (constants in a segment, a mutable buffer), as bytes."""
    pytest.importorskip("executorch")
    torch = pytest.importorskip("torch")
    from executorch.exir import to_edge

    class P(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a, self.b = torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.Conv2d(4, 4, 1)
            self.register_buffer("n", torch.zeros(1))

        def forward(self, x):
            self.n.add_(1)
            y = torch.relu(self.a(x))
            return torch.cat([self.b(y), y], 1) * self.n

    ep = torch.export.export(P(), (torch.randn(1, 2, 6, 6),))
    return to_edge(ep).to_executorch().buffer


def check_pte(tmp_path, data: bytes, kind: str) -> None:
    """``analyze`` and ``reorder`` of a .pte: exit 0, or exit 2 with one line and no file;
    a written file passes the reader's load checks."""
    import sys

    from memsched.executorch import pte

    _dir_counter[0] += 1
    d = tmp_path / f"case{_dir_counter[0]}"
    d.mkdir()
    path, out = d / "model.pte", d / "out.pte"
    path.write_bytes(data)
    FUZZ_CASES[kind] += 1
    for argv in (["analyze", str(path), "--json", "--time-limit", "1"],
                 ["reorder", str(path), "-o", str(out), "--json", "--time-limit", "1"]):
        err = io.StringIO()
        old, sys.stderr = sys.stderr, err
        old_out, sys.stdout = sys.stdout, io.StringIO()
        try:
            rc = main(argv)
        finally:
            sys.stderr, sys.stdout = old, old_out
        text = err.getvalue()
        assert rc in (0, 2), f"{kind}: {argv[0]} exit {rc}: {text}"
        if rc == 2:
            assert len(text.splitlines()) == 1 and text.startswith("memsched: error:"), text
    assert not out.exists() or rc == 0
    if out.exists():
        pte.read_program(out)


@settings(max_examples=40, **CI)
@given(frac=st.floats(0, 0.999))
def test_truncated_pte(tmp_path, pte_seed, frac):
    check_pte(tmp_path, pte_seed[:int(len(pte_seed) * frac)], "truncated .pte")


@settings(max_examples=60, **CI)
@given(flips=st.lists(st.tuples(st.integers(0, 1 << 14), st.integers(0, 255)), min_size=1,
                      max_size=4))
def test_byte_flipped_pte(tmp_path, pte_seed, flips):
    """Flips land in the flatbuffer (the program's first bytes) more often than in the
    constant segment, where any byte is a valid weight."""
    data = bytearray(pte_seed)
    for pos, val in flips:
        data[pos % len(data)] = val
    check_pte(tmp_path, bytes(data), "byte-flipped .pte")


@pytest.mark.heavy
@settings(max_examples=1000, **HEAVY)
@given(flips=st.lists(st.tuples(st.integers(0, 1 << 14), st.integers(0, 255)), min_size=1,
                      max_size=8), frac=st.floats(0.5, 1.0))
def test_pte_campaign(tmp_path, pte_seed, flips, frac):
    """The two above, randomized: flipped and then possibly truncated programs."""
    data = bytearray(pte_seed)
    for pos, val in flips:
        data[pos % len(data)] = val
    check_pte(tmp_path, bytes(data[:int(len(data) * frac)]), "campaign .pte")


# ------------------------------------------------------------------ heavy campaign
@pytest.mark.heavy
@settings(max_examples=1500, **HEAVY)
@given(data=st.data())
def test_fuzz_campaign(tmp_path, seeds, data):
    """All of the above, randomized (not derandomized): a larger search for a traceback."""
    kind = data.draw(st.sampled_from(["raw", "trunc", "flip", "onnx", "tflite", "pt2"]))
    if kind == "raw":
        _raw(tmp_path, data.draw(st.binary(max_size=4096)), data.draw(st.sampled_from(EXTS)))
    elif kind == "trunc":
        _truncated(tmp_path, seeds, data.draw(st.sampled_from(sorted(seeds))),
                   data.draw(st.floats(0, 0.999)), relax=True)
    elif kind == "flip":
        _flipped(tmp_path, seeds, data.draw(st.sampled_from(sorted(seeds))),
                 data.draw(st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)),
                                    min_size=1, max_size=16)), relax=True)
    elif kind == "onnx":
        _onnx_case(tmp_path, seeds,
                   data.draw(st.lists(st.sampled_from(ONNX_MUTATIONS), min_size=1,
                                      max_size=4)),
                   data.draw(st.integers(0, 1000)), data.draw(st.integers(0, 1 << 33)),
                   relax=True)
    elif kind == "tflite" and ".tflite" in seeds:
        _tflite_case(tmp_path, seeds,
                     data.draw(st.lists(st.sampled_from(TFLITE_MUTATIONS), min_size=1,
                                        max_size=3)),
                     data.draw(st.integers(0, 1000)), data.draw(st.integers(0, 1000)))
    elif kind == "pt2":
        _pt2_case(tmp_path, seeds,
                  data.draw(st.sampled_from(["models/model.json", "weights_config.json",
                                             "constants_config.json"])),
                  data.draw(st.integers(0, 1 << 16)), data.draw(JSON_VALUES))


@pytest.mark.heavy
@settings(max_examples=80, **HEAVY)
@given(fmt=st.sampled_from([".onnx", ".tflite"]), whats=st.lists(st.integers(0, 100),
                                                                 min_size=1, max_size=2),
       a=st.integers(0, 1000), b=st.integers(0, 1 << 33))
def test_fuzz_compile(tmp_path, seeds, fmt, whats, a, b):
    """``memsched compile`` (TVM frontend, passes, build) on mutated models: exit 0 with a
    library, or exit 2 with one line and no file."""
    import sys

    if fmt == ".onnx":
        model = onnx.ModelProto.FromString(seeds[".onnx"])
        for w in whats:
            if len(model.graph.node):
                model = _mutate_onnx(model, ONNX_MUTATIONS[w % len(ONNX_MUTATIONS)], a, b)
        data = model.SerializeToString()
    else:
        data = bytearray(seeds[".tflite"])
        for w in whats:
            data[(a * 7919 + w * 104729) % len(data)] = b % 256
        data = bytes(data)
    _dir_counter[0] += 1
    d = tmp_path / f"c{_dir_counter[0]}"
    d.mkdir()
    (d / f"m{fmt}").write_bytes(data)
    FUZZ_CASES[f"compile {fmt}"] += 1
    err = io.StringIO()
    old, sys.stderr = sys.stderr, err
    try:
        rc = main(["compile", str(d / f"m{fmt}"), "--pass", "MemoryAwareSchedule",
                   "--time-limit", "2", "-o", str(d / "out.so")])
    finally:
        sys.stderr = old
    text = err.getvalue()
    assert rc in (0, 2), text
    if rc == 2:
        assert len(text.splitlines()) == 1 and sorted(os.listdir(d)) == [f"m{fmt}"], text
    else:
        assert (d / "out.so").exists()

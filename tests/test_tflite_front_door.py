"""The TFLite front door (issue 16, item 2): analysis reads the flatbuffer itself (the file's
dtypes, the interpreter's in-place ops, no TVM); compile rewrites what TVM's frontend cannot
take (float16-weight DEQUANTIZE, int8 PAD / STRIDED_SLICE / SQUEEZE / EXPAND_DIMS) exactly and
names custom ops. Checked against the LiteRT interpreter (tensor sizes, shared buffers,
outputs)."""
import json
import subprocess
import sys

import numpy as np
import pytest

from memsched.cli import main
from memsched.generators import tflite_synth as ts
from memsched.importers.load import ModelLoadError, load_graph

litert = pytest.importorskip("ai_edge_litert.interpreter")


def _interpreter(buf):
    it = litert.Interpreter(
        model_content=buf,
        experimental_op_resolver_type=litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    return it


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tfl")
    models = {"int8": ts.pad_slice_model(True), "f32": ts.pad_slice_model(False),
              "fp16w": ts.pad_slice_model(False, fp16_weights=True),
              "mnet_int8": ts.mobilenet_like(True, blocks=4, width=8, size=16),
              "custom": ts.custom_op_model()}
    out = {}
    for name, buf in models.items():
        p = d / f"{name}.tflite"
        p.write_bytes(buf)
        out[name] = (str(p), buf)
    return out


def _by_name(it):
    return {d["name"]: d for d in it.get_tensor_details()}


@pytest.mark.parametrize("name", ["int8", "f32", "fp16w", "mnet_int8"])
def test_tensor_bytes_are_the_interpreters(files, name):
    path, buf = files[name]
    g = load_graph(path)
    it = _interpreter(buf)
    det = _by_name(it)
    for t in g.tensors:
        d = det[t.name]
        assert t.nbytes == int(np.prod(d["shape"])) * np.dtype(d["dtype"]).itemsize, t.name
    if "int8" in name:  # every activation is int8: one byte per element
        assert all(t.nbytes == int(np.prod(det[t.name]["shape"])) for t in g.tensors)


@pytest.mark.parametrize("name", ["int8", "f32", "fp16w", "mnet_int8"])
def test_in_place_ops_share_as_the_interpreter_does(files, name):
    """RESHAPE/SQUEEZE/EXPAND_DIMS views and in-place ADD/MUL/SUB: shared in our graph exactly
    where the interpreter (no delegates) gives output and input the same address."""
    from memsched.tflite.format.read import INPLACE_OPS, VIEW_OPS, read_tflite

    path, buf = files[name]
    g = load_graph(path)
    tg = read_tflite(buf)
    it = _interpreter(buf)
    addr = {}
    for d in it.get_tensor_details():
        try:
            arr = it.tensor(d["index"])()
        except ValueError:
            continue
        if isinstance(arr, np.ndarray):
            addr[d["index"]] = arr.ctypes.data
    checked = 0
    for v, op in enumerate(tg.subgraph.operators):
        kind = g.ops[v].kind
        if kind not in VIEW_OPS | INPLACE_OPS:
            continue
        out = int(op.outputs[0])
        shared_tfl = any(addr.get(int(t)) == addr[out] for t in op.inputs[:2] if t >= 0)
        ours = g.ops[v].alias or bool(g.ops[v].inplace)
        assert ours == shared_tfl, (name, v, kind)
        checked += 1
    assert checked >= 3


def test_int8_peak_is_a_quarter_of_float32(files, capsys):
    peaks = {}
    for name in ("int8", "f32"):
        assert main(["analyze", files[name][0], "--view", "file", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["optimal"]
        peaks[name] = out["peak_bytes"]
    assert peaks["f32"] == 4 * peaks["int8"]


def test_analysis_does_not_import_tvm(files):
    code = ("import sys; from memsched.importers.load import load_graph; "
            f"g = load_graph({files['int8'][0]!r}); "
            "assert 'tvm' not in sys.modules and 'torch' not in sys.modules; print(len(g))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == 10


def test_analyze_defaults_to_the_interpreters_view(files, capsys):
    """A .tflite is analyzed as the interpreter runs it (int8 bytes, no TVM) unless --view relax
    asks for what a TVM build plans."""
    code = ("import sys, json, io, contextlib; from memsched.cli import main; "
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            f"    rc = main(['analyze', {files['int8'][0]!r}, '--json'])\n"
            "d = json.loads(buf.getvalue()); "
            "print(rc, d['view'], d['peak_bytes'], 'tvm' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rc, view, peak, tvm_loaded = r.stdout.split()
    assert (rc, view, tvm_loaded) == ("0", "file", "False")
    assert main(["analyze", files["int8"][0], "--view", "file", "--json"]) == 0
    assert int(peak) == json.loads(capsys.readouterr().out)["peak_bytes"]


def test_input_shapes_must_restate_the_file(files):
    path = files["int8"][0]
    assert len(load_graph(path, {"x": [1, 8, 8, 4]})) == 10
    with pytest.raises(ModelLoadError, match="fixes its shapes"):
        load_graph(path, {"x": [1, 16, 16, 4]})
    with pytest.raises(ModelLoadError, match="not an input"):
        load_graph(path, {"y": [1, 8, 8, 4]})


def test_custom_op_analyzes_and_compile_names_it(files, tmp_path, capsys):
    path = files["custom"][0]
    g = load_graph(path)
    assert [op.kind for op in g.ops] == ["CONV_2D", "MyCustomOp", "CONV_2D"]
    assert main(["compile", path, "-o", str(tmp_path / "c.so")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "MyCustomOp" in err[0] and "custom.tflite" in err[0]
    assert not (tmp_path / "c.so").exists()


def test_unchanged_model_is_handed_over_as_is():
    from memsched.tflite.tvm_prepare import prepare_for_tvm

    buf = ts.residual_concat_model(False)
    assert prepare_for_tvm("m.tflite", buf) is buf


@pytest.mark.parametrize("name", ["int8", "f32", "fp16w"])
def test_compile_runs_equal_to_litert(files, name):
    """What TVM's frontend rejected (int8 PAD, STRIDED_SLICE, SQUEEZE, EXPAND_DIMS; float
    EXPAND_DIMS; float16 DEQUANTIZE) compiles after the rewrite and computes LiteRT's output."""
    import tvm
    from tvm import relax

    import memsched

    path, buf = files[name]
    it = _interpreter(buf)
    d = it.get_input_details()[0]
    rng = np.random.default_rng(5)
    if d["dtype"] == np.int8:
        x = rng.integers(-60, 60, d["shape"]).astype(np.int8)
    else:
        x = rng.standard_normal(d["shape"]).astype(np.float32)
    it.set_tensor(d["index"], x)
    it.invoke()
    ref = it.get_tensor(it.get_output_details()[0]["index"])
    mod = memsched.load_relax(path)
    ex = tvm.compile(mod, target="llvm", relax_pipeline=memsched.pipeline(time_limit=5))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    assert got.dtype == ref.dtype and got.shape == ref.shape
    if name == "int8":  # integer kernels: TVM may round a requantization differently by 1
        assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_corrupt_files_are_one_line_errors(files, tmp_path):
    """Truncated files and flipped bytes: analysis either reads a graph or raises one
    ModelLoadError line, never anything else."""
    buf = files["int8"][1]
    rng = np.random.default_rng(0)
    p = tmp_path / "corrupt.tflite"
    errors = 0
    for k in range(120):
        b = bytearray(buf)
        if k % 3 == 0:
            b = b[:int(rng.integers(8, len(b)))]
        else:
            for _ in range(int(rng.integers(1, 20))):
                b[int(rng.integers(8, len(b)))] = int(rng.integers(0, 256))
        p.write_bytes(bytes(b))
        try:
            load_graph(str(p))
        except ModelLoadError as e:
            assert "\n" not in str(e) and "corrupt.tflite" in str(e)
            errors += 1
    assert errors > 40


def test_ops_tvm_cannot_convert_are_named(tmp_path, capsys):
    """A builtin TVM's frontend does not convert quantized (int8 LOCAL_RESPONSE_NORMALIZATION
    here is not in its list and not a data-movement op): compile names it in one line."""
    net = ts._Net("lrn_int8", True, 0)
    s = net.s
    x = net.act("x", [1, 4, 4, 8])
    net.b.inputs = [x]
    y = net.act("y", [1, 4, 4, 8], like=x)
    net.b.op("LOCAL_RESPONSE_NORMALIZATION", [x], [y],
             s.BuiltinOptions.LocalResponseNormalizationOptions,
             s.LocalResponseNormalizationOptionsT())
    a, _ = net.conv(y, [1, 4, 4, 8], 8, k=1)
    net.b.outputs = [a]
    p = tmp_path / "lrn.tflite"
    p.write_bytes(net.b.finish())
    assert [op.kind for op in load_graph(str(p)).ops] == ["LOCAL_RESPONSE_NORMALIZATION",
                                                          "CONV_2D"]
    assert main(["compile", str(p), "-o", str(tmp_path / "lrn.so")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "LOCAL_RESPONSE_NORMALIZATION" in err[0] and "lrn.tflite" in err[0]


def test_control_flow_is_refused(tmp_path):
    from memsched.graph import UnsupportedModelError

    b = ts.TFLiteBuilder("while")
    T = b.s.TensorType
    x = b.tensor("x", [1, 4], T.FLOAT32)
    y = b.tensor("y", [1, 4], T.FLOAT32)
    b.inputs, b.outputs = [x], [y]
    b.op("WHILE", [x], [y])
    p = tmp_path / "while.tflite"
    p.write_bytes(b.finish())
    with pytest.raises(UnsupportedModelError, match="control flow: operator 0 is WHILE"):
        load_graph(str(p))

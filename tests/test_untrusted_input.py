"""Untrusted model files and bad command lines (issue 11, parts 2, 3 and 5).

Malicious ``.pt2`` archives (each payload is first shown to run under ``torch.export.load``),
ONNX external data leaving the model's directory, invalid graphs (API: a ValueError subclass;
CLI: exit status 2 and one line), and the CLI's argument, output-file, Ctrl-C and broken-pipe
behaviour.
"""
import io
import json
import os
import pickle
import signal
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import memsched
from memsched.cli import main
from memsched.generators.examples import example_onnx
from memsched.graph import GraphBuilder, GraphError
from memsched.importers.load import ModelLoadError

torch = pytest.importorskip("torch")


# ------------------------------------------------------------------ .pt2
class _Cell(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.register_buffer("c", torch.rand(1, 8, 1, 1))

    def forward(self, x):
        return torch.relu(self.bn(self.a(x))) * self.c + 2.0


@pytest.fixture(scope="module")
def pt2_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("pt2")
    cell = _Cell().eval()
    torch.export.save(torch.export.export(cell, (torch.randn(1, 4, 8, 8),)), str(d / "cell.pt2"))
    dyn = torch.export.export(cell, (torch.randn(2, 4, 8, 8),),
                              dynamic_shapes={"x": {0: torch.export.Dim("b")}})
    torch.export.save(dyn, str(d / "dyn.pt2"))
    return d / "cell.pt2", d / "dyn.pt2"


class _Payload:
    """Unpickling this creates ``path`` (builtins.open(path, "w")): code run from the file."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _rewrite(src, dst, edit):
    """Copy a .pt2 zip, letting ``edit`` change its members (name under the root -> bytes)."""
    with zipfile.ZipFile(src) as zin:
        root = zin.namelist()[0].split("/")[0]
        files = {n.split("/", 1)[1]: zin.read(n) for n in zin.namelist()}
    edit(files)
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as z:
        for n, data in files.items():
            z.writestr(f"{root}/{n}", data)


def _torch_pickle(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _evil_sample_inputs(files, marker):
    files["data/sample_inputs/model.pt"] = _torch_pickle(_Payload(marker))


def _evil_weight(files, marker):
    cfg = json.loads(files["data/weights/model_weights_config.json"])
    meta = cfg["config"]["a.weight"]
    meta["use_pickle"] = True
    files["data/weights/" + meta["path_name"]] = _torch_pickle(_Payload(marker))
    files["data/weights/model_weights_config.json"] = json.dumps(cfg).encode()


def _evil_opaque_constant(files, marker):
    cfg = json.loads(files["data/constants/model_constants_config.json"])
    cfg["config"]["evil"] = {"path_name": "opaque_obj_0", "is_param": False,
                             "use_pickle": True, "tensor_meta": None}
    files["data/constants/opaque_obj_0"] = pickle.dumps(_Payload(marker))
    files["data/constants/model_constants_config.json"] = json.dumps(cfg).encode()


def _evil_shape_expr(files, marker):  # sympy.sympify is an eval
    doc = files["models/model.json"].decode()
    sym = "Symbol('s77', positive=True, integer=True)"
    assert sym in doc
    files["models/model.json"] = doc.replace(
        sym, f"__import__('builtins').open({str(marker)!r}, 'w')").encode()


def _evil_node_target(files, marker):  # resolved by getattr from torch, called on re-trace
    doc = json.loads(files["models/model.json"])
    doc["graph_module"]["graph"]["nodes"][0]["target"] = "torch.serialization.os.system"
    files["models/model.json"] = json.dumps(doc).encode()


@pytest.mark.parametrize("edit,base,torch_runs_it", [
    (_evil_sample_inputs, 0, True),
    (_evil_weight, 0, True),
    (_evil_opaque_constant, 0, True),
    (_evil_shape_expr, 1, True),
    (_evil_node_target, 0, False),
])
def test_malicious_pt2_runs_nothing(pt2_files, tmp_path, edit, base, torch_runs_it, capsys):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt2"
    _rewrite(pt2_files[base], evil, lambda f: edit(f, marker))
    if torch_runs_it:  # the payload is real: PyTorch's own loader executes it
        try:
            torch.export.load(str(evil))
        except Exception:  # noqa: BLE001 - it usually fails after running the payload
            pass
        assert marker.exists()
        marker.unlink()
    try:
        mod = memsched.load_relax(str(evil))
    except ModelLoadError as e:
        assert "\n" not in str(e) and str(evil) in str(e)
    else:  # sample inputs are never read: the program itself loads correctly
        assert edit is _evil_sample_inputs and "main" in [g.name_hint for g in
                                                           mod.get_global_vars()]
    assert not marker.exists()
    rc = main(["analyze", str(evil), "--json", "--time-limit", "5"])
    assert not marker.exists()
    err = capsys.readouterr().err
    assert rc == 0 if edit is _evil_sample_inputs else (rc == 2 and len(err.splitlines()) == 1)


def test_pt2_loads_the_same_module_as_torch(pt2_files):
    import tvm_ffi
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    for path in pt2_files:
        ours = memsched.load_relax(str(path))
        ref = relax.transform.FoldConstant()(from_exported_program(
            torch.export.load(str(path)), keep_params_as_input=False,
            unwrap_unit_return_tuple=True))
        assert tvm_ffi.structural_equal(ours, ref, map_free_vars=True)


@pytest.mark.parametrize("edit,needle", [
    (lambda f: f.pop("models/model.json"), "no program"),
    (lambda f: f.__setitem__("models/model.json", b"{not json"), "not valid JSON"),
    (lambda f: f.__setitem__("archive_version", b"7"), "archive version"),
    (lambda f: f.__setitem__("data/weights/weight_0", b"\0" * 4), "past the end"),
])
def test_broken_pt2_is_one_clear_error(pt2_files, tmp_path, edit, needle):
    bad = tmp_path / "bad.pt2"
    _rewrite(pt2_files[0], bad, edit)
    with pytest.raises(ModelLoadError, match=needle):
        memsched.load_relax(str(bad))


# ------------------------------------------------------------------ ONNX external data
def _external_model(d):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype("float32"), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
                          initializer=[w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = d / "ext.onnx"
    onnx.save(m, str(path), save_as_external_data=True, location="w.bin",
              size_threshold=0)
    return path


def _set_location(path, loc, **extra):
    m = onnx.load(str(path), load_external_data=False)
    t = m.graph.initializer[0]
    for e in t.external_data:
        if e.key == "location":
            e.value = loc
        if e.key in extra:
            e.value = str(extra.pop(e.key))
    for k, v in extra.items():
        t.external_data.add(key=k, value=str(v))
    onnx.save(m, str(path))


def test_onnx_external_data_inside_directory_loads(tmp_path):
    path = _external_model(tmp_path)
    mod = memsched.load_relax(str(path))
    assert len(memsched.load_graph(str(path))) == 1 and mod is not None


@pytest.mark.parametrize("loc,extra,needle", [
    ("../secret.bin", {}, "not a relative path inside"),
    ("/etc/hostname", {}, "not a relative path inside"),
    ("link.bin", {}, "leads outside"),
    ("missing.bin", {}, "does not exist"),
    ("w.bin", {"length": 8}, "holds 8 bytes"),
    ("w.bin", {"offset": 10 ** 9}, "outside"),
])
def test_onnx_external_data_cannot_leave_directory(tmp_path, loc, extra, needle, capsys):
    d = tmp_path / "model"
    d.mkdir()
    path = _external_model(d)
    secret = tmp_path / "secret.bin"
    secret.write_bytes((d / "w.bin").read_bytes())  # same size: only the location is wrong
    os.symlink(secret, d / "link.bin")
    _set_location(path, loc, **extra)
    with pytest.raises(ModelLoadError, match=needle):
        memsched.load_graph(str(path))
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.splitlines()) == 1


# ------------------------------------------------------------------ invalid graphs
def _small(nodes=None, inputs=None, outputs=None, inits=(), value_info=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Exp", ["a"], ["y"])] \
        if nodes is None else nodes
    g = helper.make_graph(nodes, "g", [x] if inputs is None else inputs,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])]
                          if outputs is None else outputs, initializer=list(inits),
                          value_info=list(value_info))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _declared_only(name, dims):
    t = TensorProto(name=name, data_type=TensorProto.FLOAT)
    t.dims.extend(dims)
    return t


def _vi(name, dtype, dims):
    return helper.make_tensor_value_info(name, dtype, dims)


BAD_GRAPHS = {
    "unknown dtype": (lambda: _small(inputs=[_vi("x", 99, [1, 8])]), "unknown dtype"),
    "string dtype": (lambda: _small(inputs=[_vi("x", TensorProto.STRING, [1, 8])]),
                     "unsupported dtype STRING"),
    "negative dim": (lambda: _small(inputs=[_vi("x", TensorProto.FLOAT, [1, -8])]),
                     "negative dimension"),
    "absurd dims": (lambda: _small(inputs=[_vi("x", TensorProto.FLOAT, [1 << 40, 1 << 40])]),
                    "absurd shape"),
    "overflowing total": (lambda: _small(inputs=[_vi("x", TensorProto.FLOAT, [1 << 29] * 2)],
                                         outputs=[_vi("y", TensorProto.FLOAT, [1 << 29] * 2)]),
                          "2**60"),
    "duplicate tensor": (lambda: _small(nodes=[helper.make_node("Relu", ["x"], ["y"]),
                                               helper.make_node("Exp", ["x"], ["y"])]),
                         "duplicate tensor name 'y'"),
    "duplicate input": (lambda: _small(inputs=[_vi("x", TensorProto.FLOAT, [1, 8])] * 2),
                        "duplicate tensor name 'x'"),
    "no operators": (lambda: _small(nodes=[], outputs=[]), "no operators"),
    "dangling input": (lambda: _small(nodes=[helper.make_node("Add", ["x", "ghost"], ["y"])]),
                       "'ghost', which nothing defines"),
    "output not computed": (lambda: _small(nodes=[helper.make_node("Relu", ["x"], ["a"])]),
                            "output 'y' is not computed"),
    "constant bomb": (lambda: _small(
        nodes=[helper.make_node("ConstantOfShape", ["s"], ["c"]),
               helper.make_node("Add", ["x", "c"], ["y"])],
        inits=[numpy_helper.from_array(np.array([1 << 17, 1 << 17], "int64"), "s")]),
        "computed from constants at load time"),
    "initializer without data": (lambda: _small(
        nodes=[helper.make_node("Add", ["x", "w"], ["y"])],
        inits=[_declared_only("w", [1 << 20, 8])]),
        "holds 0 bytes"),
}


@pytest.mark.parametrize("case", sorted(BAD_GRAPHS))
def test_invalid_onnx_graph_is_one_clear_error(case, tmp_path, capsys):
    build, needle = BAD_GRAPHS[case]
    path = tmp_path / "bad.onnx"
    onnx.save(build(), str(path))
    with pytest.raises(ValueError, match=needle.replace("*", r"\*")):
        memsched.load_graph(str(path))
    with pytest.raises(ValueError, match=needle.replace("*", r"\*")):
        memsched.from_onnx(build())  # a ModelProto from the API: validated the same way
    assert main(["analyze", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert needle in captured.err and len(captured.err.splitlines()) == 1
    assert captured.out == ""


def test_opgraph_bounds_byte_totals():
    b = GraphBuilder()
    x = b.input("x", 1 << 59)
    b.op("a", "relu", [x], [("y", (1 << 59) + 1)])
    with pytest.raises(GraphError, match="2\\*\\*60"):
        b.build()
    b = GraphBuilder()
    with pytest.raises(GraphError, match="more than the limit"):
        b.input("x", 1 << 61)
        b.build()


def test_absurd_relax_shapes_api_error_and_pass_leaves_module_unchanged():
    import tvm
    import tvm_ffi
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1 << 31, 1 << 31, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.exp(x))
            c = bb.emit_output(relax.op.add(a, bb.emit(relax.op.exp(a))))
        bb.emit_func_output(c)
    mod = bb.get()
    with pytest.raises(ValueError, match="2\\*\\*60"):
        memsched.from_relax(mod)
    with pytest.warns(UserWarning, match="left block 0 unchanged"):
        out = memsched.MemoryAwareSchedule()(mod)
    assert "2**60" in str(out["main"].attrs["memsched.skipped"])
    assert tvm_ffi.structural_equal(out["main"].body, mod["main"].body)
    assert isinstance(out, tvm.IRModule)


# ------------------------------------------------------------------ command line
@pytest.fixture(scope="module")
def small_onnx(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    path = d / "two_branch.onnx"
    onnx.save(example_onnx("two_branch"), str(path))
    dyn = example_onnx("two_branch")
    dyn.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(dyn, str(d / "dyn.onnx"))
    return str(path), str(d / "dyn.onnx")


@pytest.mark.parametrize("args,needle", [
    (["--time-limit", "-1"], "--time-limit"),
    (["--time-limit", "nan"], "--time-limit"),
    (["--time-limit", "inf"], "--time-limit"),
    (["--time-limit", "soon"], "--time-limit"),
    (["--input-shapes", "y:1x8x32x32"], "'y', which is not an input"),
    (["--input-shapes", "x:1x8x32"], "rank 4"),
    (["--input-shapes", "x:1xax3"], "bad --input-shapes"),
    (["--input-shapes", "x1x8"], "bad --input-shapes"),
    (["--input-shapes", "x:1x-8x32x32"], "bad --input-shapes"),
    (["--input-shapes", ""], "bad --input-shapes"),
    (["--algorithm", "magic"], "unknown algorithm"),
    (["--memory-model", "magic"], "invalid choice"),
    (["--no-such-option"], "unrecognized arguments"),
])
def test_analyze_bad_arguments(small_onnx, args, needle, capsys):
    with pytest.raises(SystemExit) as e:  # argparse errors leave through SystemExit(2)
        rc = main(["analyze", small_onnx[0], *args])
        raise SystemExit(rc)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.splitlines()) == 1, err


def test_tflite_input_shapes_must_name_inputs(tmp_path, capsys):
    pytest.importorskip("tflite")
    from memsched.generators.examples import example_tflite

    path = tmp_path / "m.tflite"
    path.write_bytes(example_tflite("two_branch"))
    assert main(["analyze", str(path), "--input-shapes", "nope:1x2"]) == 2
    err = capsys.readouterr().err
    assert "'nope', which is not an input" in err and len(err.splitlines()) == 1


@pytest.fixture
def no_load(monkeypatch):
    """Fail the test if the model is loaded: the error must come before any work."""
    import memsched.importers.load as load

    def boom(*a, **k):
        raise AssertionError("model loaded before the argument error")

    monkeypatch.setattr(load, "load_relax", boom)


@pytest.mark.parametrize("args,needle", [
    (["--pass", "NoSuchPass"], "unknown pass 'NoSuchPass'"),
    (["--pass", "common"], "unknown pass"),
    (["--pass", "__class__"], "unknown pass"),
    (["--pass", "function_pass"], "needs arguments"),
    (["--pass-config", "no.such.key=1"], "unknown --pass-config key"),
    (["--pass-config", "novalue"], "bad --pass-config"),
    (["--target", "nonsense-target"], "bad --target"),
    (["-o", "/nonexistent-dir/out.so"], "does not exist"),
    (["-o", "{tmp}"], "is a directory"),
    (["-o", "{tmp}/afile/out.so"], "does not exist"),
])
def test_compile_bad_arguments_fail_before_work(small_onnx, args, needle, tmp_path, no_load,
                                                capsys):
    (tmp_path / "afile").write_text("x")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert main(["compile", small_onnx[0], *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.splitlines()) == 1, err


def test_compile_refuses_what_it_cannot_schedule(small_onnx, tmp_path, capsys):
    out = tmp_path / "dyn.so"
    assert main(["compile", small_onnx[1], "--pass", "MemoryAwareSchedule", "-o",
                 str(out)]) == 2
    err = capsys.readouterr().err
    assert "dynamic shape" in err and len(err.splitlines()) == 1
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["y1"])], "t", [],
                             [_vi("y1", TensorProto.FLOAT, [1, 4])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then,
                                            else_branch=then)], "g",
                          [_vi("c", TensorProto.BOOL, []), _vi("x", TensorProto.FLOAT, [1, 4])],
                          [_vi("y", TensorProto.FLOAT, [1, 4])])
    cf = tmp_path / "cf.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(cf))
    assert main(["compile", str(cf), "--pass", "MemoryAwareSchedule", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "control flow" in err and len(err.splitlines()) == 1
    assert main(["analyze", str(cf)]) == 2
    assert "control flow" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["cf.onnx"]  # nothing written, no temp file


def test_compile_writes_atomically(small_onnx, tmp_path, monkeypatch, capsys):
    import tvm

    out = tmp_path / "m.so"
    out.write_bytes(b"previous build")
    real = tvm.compile

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(tvm, "compile", interrupted)
    assert main(["compile", small_onnx[0], "-o", str(out)]) == 130
    assert capsys.readouterr().err.strip() == "memsched: interrupted"
    assert out.read_bytes() == b"previous build" and os.listdir(tmp_path) == ["m.so"]
    monkeypatch.setattr(tvm, "compile", real)
    assert main(["compile", small_onnx[0], "-o", str(out), "--pass", "PlanArena"]) == 0
    assert out.read_bytes()[:4] == b"\x7fELF" and os.listdir(tmp_path) == ["m.so"]


def test_ctrl_c_inside_tvm_callback_is_an_interrupt(small_onnx, tmp_path, monkeypatch, capsys):
    """TVM turns a KeyboardInterrupt raised in a Python callback into a RuntimeError; a real
    SIGINT must still end the command as an interrupt."""
    import memsched.importers.load as load

    def tvm_like(*a, **k):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10 ** 7):  # the handler runs between bytecodes
                pass
        except KeyboardInterrupt:
            raise RuntimeError from None  # what tvm_ffi does with it
        raise AssertionError("SIGINT not delivered")

    monkeypatch.setattr(load, "load_relax", tvm_like)
    # a background job (`cmd &` without job control) starts with SIGINT ignored; Python's
    # handler is what an interactive user has
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rc = main(["compile", small_onnx[0], "-o", str(tmp_path / "x.so")])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert rc == 130
    assert capsys.readouterr().err.strip() == "memsched: interrupted"
    assert os.listdir(tmp_path) == []


def test_broken_pipe_is_quiet(monkeypatch, capsys):
    class Closed(io.StringIO):
        def write(self, s):
            raise BrokenPipeError

        def fileno(self):
            raise io.UnsupportedOperation

    monkeypatch.setattr("sys.stdout", Closed())
    assert main(["analyze", "example:two_branch", "--json", "--time-limit", "5"]) == 141
    monkeypatch.undo()
    assert capsys.readouterr().err == ""


def test_unexpected_error_is_one_line_and_verbose_shows_traceback(monkeypatch, capsys):
    import memsched.schedulers as schedulers

    def bug(*a, **k):
        raise ZeroDivisionError("a bug\nsecond line")

    monkeypatch.setattr(schedulers, "schedule", bug)
    assert main(["analyze", "example:two_branch"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "ZeroDivisionError: a bug" in err
    assert main(["analyze", "example:two_branch", "--verbose"]) == 1
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.heavy
def test_ctrl_c_subprocess_exits_130_within_a_second(tmp_path):
    """A real Ctrl-C during the exact search of a large graph: one line, status 130, fast."""
    import subprocess
    import sys
    import time

    path = tmp_path / "big.onnx"
    onnx.save(example_onnx("randwire", nodes=40, seed=3), str(path))
    for cmd in (["analyze", str(path), "--time-limit", "120", "--json"],
                ["compile", str(path), "--pass", "MemoryAwareSchedule", "--time-limit", "120",
                 "-o", str(tmp_path / "out.so")]):
        for delay in (10, 16):  # past start-up: a signal cannot cut into loading a .so
            p = subprocess.Popen([sys.executable, "-m", "memsched.cli", *cmd],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 # SIGINT at its default, as in a terminal (not a worker's
                                 # SIG_IGN)
                                 preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                  signal.SIG_DFL))
            time.sleep(delay)
            if p.poll() is not None:
                continue
            t0 = time.perf_counter()
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=30)
            assert time.perf_counter() - t0 < 1.0, (cmd[0], delay, err)
            assert p.returncode == 130 and err.decode().strip() == "memsched: interrupted"
            assert sorted(os.listdir(tmp_path)) == ["big.onnx"]

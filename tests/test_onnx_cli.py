"""ONNX import, model loading and the command line."""
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

import memsched
from memsched.cli import main
from memsched.generators.examples import example_onnx
from memsched.importers.onnx import from_onnx
from memsched.importers.relax import UnsupportedModelError


@pytest.fixture(scope="module")
def rw_onnx(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "randwire.onnx"
    onnx.save(example_onnx("randwire", seed=0), str(path))
    return str(path)


def test_onnx_graph_matches_file(rw_onnx):
    model = onnx.load(rw_onnx)
    g = from_onnx(model)
    assert len(g) == len(model.graph.node)
    assert [op.source for op in g.ops] == list(range(len(g)))
    # graph input 1x8x16x16 float32
    assert g.tensors[g.input_tensors[0]].nbytes == 8 * 16 * 16 * 4


def test_onnx_pass_compile_run_bit_equal(rw_onnx):
    import onnxruntime as ort
    import tvm
    from tvm import relax

    from memsched.tvm_memory import planned_bytes

    mod = memsched.load_relax(rw_onnx)
    x = np.random.default_rng(0).standard_normal((1, 8, 16, 16)).astype("float32")
    outs = []
    for pipe in ("default", memsched.pipeline()):
        vm = relax.VirtualMachine(tvm.compile(mod, target="llvm", relax_pipeline=pipe), tvm.cpu())
        outs.append(vm["main"](tvm.runtime.tensor(x)).numpy())
    assert np.array_equal(outs[0], outs[1])
    ref = ort.InferenceSession(rw_onnx).run(None, {"x": x})[0]
    np.testing.assert_allclose(outs[1], ref, rtol=1e-4, atol=1e-4)
    assert planned_bytes(mod) < planned_bytes(mod, schedule=False, plan_arena=False)


def test_analyze_json(rw_onnx, capsys):
    assert main(["analyze", rw_onnx, "--json", "--time-limit", "30"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("ops", "input_order_peak_bytes", "peak_bytes", "lower_bound", "optimal",
                "order", "methods"):
        assert key in out
    assert out["optimal"] is True and out["peak_bytes"] == out["lower_bound"]
    assert out["peak_bytes"] <= min(out["methods"].values())
    assert out["peak_bytes"] < out["input_order_peak_bytes"]
    assert len(out["order"]) == out["ops"]


def test_analyze_table_and_memory_model(capsys):
    assert main(["analyze", "example:two_branch", "--memory-model", "tvm"]) == 0
    assert "auto" in capsys.readouterr().out


def test_compile_and_tvmc_entry_point(rw_onnx, tmp_path):
    out = tmp_path / "out.so"
    r = subprocess.run([sys.executable, "-c", "import sys; from memsched.cli import tvmc_main; "
                        "sys.exit(tvmc_main())", "compile", "--pass", "MemoryAwareSchedule",
                        "--pass", "FoldConstant", rw_onnx, "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert out.exists() and "planned storage" in r.stderr


def test_compile_plan_arena_reaches_peak(tmp_path, capsys):
    assert main(["compile", "example:randwire", "--pass", "MemoryAwareSchedule", "--pass",
                 "PlanArena", "-o", str(tmp_path / "a.so")]) == 0
    err = capsys.readouterr().err
    planned = int(err.split("planned storage ")[1].split(" B")[0].replace(",", ""))
    after = int(err.split(" -> ")[1].split(" B")[0].replace(",", ""))
    assert planned == after


@pytest.mark.parametrize("args,needle", [
    (["analyze", "/nonexistent/model.onnx"], "no such file"),
    (["analyze", __file__], "unknown format"),
    (["analyze", "example:nope"], "unknown example"),
    (["analyze", "example:randwire", "--algorithm", "magic"], "unknown algorithm"),
    (["compile", "example:two_branch", "--pass", "NoSuchPass"], "unknown pass"),
])
def test_cli_errors_are_one_line(args, needle, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_malformed_and_dynamic_onnx(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf")
    assert main(["analyze", str(bad)]) == 2
    assert "malformed ONNX" in capsys.readouterr().err
    m = example_onnx("two_branch")
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(UnsupportedModelError, match="dynamic shape"):
        from_onnx(m)
    # --input-shapes fixes it
    assert len(from_onnx(m, {"x": [1, 8, 32, 32]})) == len(m.graph.node)


def test_control_flow_onnx_is_rejected():
    from onnx import TensorProto, helper

    then = helper.make_graph([helper.make_node("Identity", ["x"], ["y1"])], "t", [],
                             [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then,
                                            else_branch=then)], "g",
                          [helper.make_tensor_value_info("c", TensorProto.BOOL, [1]),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    with pytest.raises(UnsupportedModelError, match="control flow"):
        from_onnx(helper.make_model(g))


def test_relax_view_shows_a_status_line_on_a_terminal():
    """analyze in the relax view says what it is doing on a terminal's stderr, although TVM's
    own fd-2 output is held back meanwhile; nothing of it with stderr not a terminal."""
    import os
    import pty

    cmd = [sys.executable, "-m", "memsched.cli", "analyze", "example:two_branch",
           "--time-limit", "5"]
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    out, _ = proc.communicate(timeout=300)
    os.close(master)
    assert proc.returncode == 0
    assert b"scheduling and planning (time limit 5 s)" in seen
    plain = subprocess.run(cmd, capture_output=True, timeout=300)
    assert plain.returncode == 0 and b"scheduling and planning" not in plain.stderr


def test_data_movement_prefold_gives_foldconstants_module(tmp_path):
    """load_relax binds constant reshapes/transposes with numpy before FoldConstant (which
    builds an LLVM kernel per constant op): the module is the one FoldConstant alone gives."""
    import tvm_ffi
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx as tvm_from_onnx

    from memsched.importers.load import (_fold_data_movement, _has_constant_computation,
                                         _inline_constants)

    h, TP, nh = onnx.helper, onnx.TensorProto, onnx.numpy_helper
    rng = np.random.default_rng(0)
    nodes = [h.make_node("Conv", ["x", "W", "B"], ["y"], kernel_shape=[1, 1]),
             h.make_node("Relu", ["y"], ["r"]),
             h.make_node("Flatten", ["r"], ["f"]),
             h.make_node("Gemm", ["f", "G", "C"], ["out"], transB=1)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [1, 3, 4, 4])],
                     [h.make_tensor_value_info("out", TP.FLOAT, [1, 5])],
                     initializer=[nh.from_array(rng.standard_normal((6, 3, 1, 1)).astype(
                         np.float32), "W"), nh.from_array(rng.standard_normal(6).astype(
                             np.float32), "B"), nh.from_array(rng.standard_normal((5, 96)).astype(
                                 np.float32), "G"), nh.from_array(np.zeros(5, np.float32), "C")])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8)
    mod = tvm_from_onnx(model, keep_params_in_input=False)
    pre = _fold_data_movement(mod)
    assert not tvm_ffi.structural_equal(pre["main"], mod["main"])  # it did bind something
    assert tvm_ffi.structural_equal(relax.transform.FoldConstant()(pre)["main"],
                                    relax.transform.FoldConstant()(mod)["main"])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert tvm_ffi.structural_equal(memsched.load_relax(str(path))["main"],
                                    relax.transform.FoldConstant()(mod)["main"])
    # nothing else constant: FoldConstant is replaced by inlining the bound constants
    assert not _has_constant_computation(pre)
    assert tvm_ffi.structural_equal(_inline_constants(pre)["main"],
                                    relax.transform.FoldConstant()(mod)["main"])

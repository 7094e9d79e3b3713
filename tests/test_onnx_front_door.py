"""The ONNX front door (issue 16, item 1): files as the classic ``torch.onnx.export`` path
writes them (reshape targets computed by Shape -> Gather -> Unsqueeze -> Concat, a symbolic
batch dim ``unk__0``, no value_info) and tensors of unknown rank import, schedule, compile and
run with outputs equal to ONNX Runtime; what stays dynamic is one line naming the tensor."""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

import memsched
from memsched.cli import main
from memsched.importers.load import ModelLoadError, load_graph

ort = pytest.importorskip("onnxruntime")


def _const(name, arr):
    return h.make_node("Constant", [], [name], value=nh.from_array(np.asarray(arr), name + "_v"))


def _model(nodes, name, inputs, outputs, inits):
    g = h.make_graph(nodes, name, inputs, outputs, initializer=inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=8)


def shufflenet_like(batch="unk__0", c=8, hw=6, groups=2, seed=0):
    """ShuffleNet's channel shuffle (view -> transpose -> view) and a flatten (x.view(n, -1))
    the way the TorchScript exporter writes them: every target shape is computed from the
    Shape of a tensor through Gather/Unsqueeze/Concat; Constant nodes; no value_info."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((c, c, 1, 1)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((c * hw * hw, 10)).astype(np.float32) * 0.05
    n = [h.make_node("Conv", ["x", "W"], ["y"], kernel_shape=[1, 1]),
         h.make_node("Relu", ["y"], ["y1"]),
         h.make_node("Shape", ["y1"], ["s"])]
    for i, nm in ((0, "b"), (2, "hh"), (3, "ww")):
        n += [_const(f"i{nm}", np.array(i, np.int64)),
              h.make_node("Gather", ["s", f"i{nm}"], [f"g{nm}"], axis=0),
              _const(f"ax{nm}", np.array([0], np.int64)),
              h.make_node("Unsqueeze", [f"g{nm}", f"ax{nm}"], [f"u{nm}"])]
    n += [_const("cg", np.array([groups], np.int64)),
          _const("cc", np.array([c // groups], np.int64)),
          h.make_node("Concat", ["ub", "cg", "cc", "uhh", "uww"], ["shp5"], axis=0),
          h.make_node("Reshape", ["y1", "shp5"], ["r5"]),
          h.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
          _const("m1", np.array([-1], np.int64)),
          h.make_node("Concat", ["ub", "m1", "uhh", "uww"], ["shp4"], axis=0),
          h.make_node("Reshape", ["t5", "shp4"], ["z"]),
          h.make_node("Shape", ["z"], ["s2"]),
          _const("i0", np.array(0, np.int64)),
          h.make_node("Gather", ["s2", "i0"], ["g2"], axis=0),
          _const("ax2", np.array([0], np.int64)),
          h.make_node("Unsqueeze", ["g2", "ax2"], ["u2"]),
          h.make_node("Concat", ["u2", "m1"], ["shp2"], axis=0),
          h.make_node("Reshape", ["z", "shp2"], ["f"]),
          h.make_node("MatMul", ["f", "W2"], ["out"])]
    return _model(n, "shufflenet_like", [h.make_tensor_value_info("x", TP.FLOAT,
                                                                   [batch, c, hw, hw])],
                  [h.make_tensor_value_info("out", TP.FLOAT, [batch, 10])],
                  [nh.from_array(w, "W"), nh.from_array(w2, "W2")])


def unknown_rank(c=4, hw=6, seed=1):
    """A Reshape whose target is a slice of a Shape with a computed end: ONNX shape inference
    does not know the rank of ``r`` and what follows it (as in Paddle2ONNX exports)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.3
    n = [h.make_node("Conv", ["x", "W"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         h.make_node("Shape", ["y"], ["s"]),
         _const("one", np.array([1], np.int64)), _const("two", np.array([2], np.int64)),
         h.make_node("Add", ["one", "two"], ["e"]),
         _const("zero", np.array([0], np.int64)),
         h.make_node("Slice", ["s", "zero", "e"], ["s3"]),
         _const("m1", np.array([-1], np.int64)),
         h.make_node("Concat", ["s3", "m1"], ["shp"], axis=0),
         h.make_node("Reshape", ["y", "shp"], ["r"]),
         h.make_node("Sigmoid", ["r"], ["sg"]),
         h.make_node("ReduceMean", ["sg"], ["out"], axes=[3], keepdims=0)]
    return _model(n, "unknown_rank", [h.make_tensor_value_info("x", TP.FLOAT, [1, c, hw, hw])],
                  [h.make_tensor_value_info("out", TP.FLOAT, None)], [nh.from_array(w, "W")])


def still_dynamic():
    """NonZero: a data-dependent shape no folding can fix."""
    n = [h.make_node("Relu", ["x"], ["r"]),
         h.make_node("NonZero", ["r"], ["nz"]),
         h.make_node("Transpose", ["nz"], ["out"])]
    return _model(n, "nonzero", [h.make_tensor_value_info("x", TP.FLOAT, [1, 4])],
                  [h.make_tensor_value_info("out", TP.INT64, None)], [])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("front")
    paths = {}
    for name, m in (("shuf_dyn", shufflenet_like()), ("shuf", shufflenet_like(batch=1)),
                    ("urank", unknown_rank()), ("nonzero", still_dynamic())):
        assert not m.graph.value_info
        paths[name] = str(d / f"{name}.onnx")
        onnx.save(m, paths[name])
    return paths


def test_plain_shape_inference_cannot_size_these(files):
    """The models do exercise the problem: ONNX shape inference alone leaves tensors without
    rank (what failed before the front door)."""
    for name in ("shuf", "urank"):
        m = onnx.shape_inference.infer_shapes(onnx.load(files[name]), data_prop=True)
        known = {vi.name for vi in m.graph.value_info if vi.type.tensor_type.HasField("shape")}
        assert {"f", "r"} & (set(n.output[0] for n in m.graph.node) - known)


@pytest.mark.parametrize("name,shapes,acts", [
    ("shuf", None, ["Conv", "Relu", "Reshape", "Transpose", "Reshape", "Reshape", "MatMul"]),
    ("shuf_dyn", {"x": [1, 8, 6, 6]},
     ["Conv", "Relu", "Reshape", "Transpose", "Reshape", "Reshape", "MatMul"]),
    ("urank", None, ["Conv", "Reshape", "Sigmoid", "ReduceMean"]),
])
def test_graph_is_static_and_folded(files, name, shapes, acts):
    g = load_graph(files[name], shapes)
    assert [op.kind for op in g.ops] == acts  # shape arithmetic folded away
    assert g.tensors[g.input_tensors[0]].nbytes == 4 * int(np.prod(
        (shapes or {}).get("x", [1, 8, 6, 6] if "shuf" in name else [1, 4, 6, 6])))
    conv = g.ops[0].outputs[0]
    assert g.tensors[conv].nbytes == g.tensors[g.input_tensors[0]].nbytes


def test_symbolic_batch_is_one_line_naming_input_and_fix(files, capsys):
    with pytest.raises(ModelLoadError) as e:
        load_graph(files["shuf_dyn"])
    msg = str(e.value)
    assert "\n" not in msg and "'x'" in msg and "unk__0" in msg
    assert "--input-shapes x:1x8x6x6" in msg
    assert main(["analyze", files["shuf_dyn"]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--input-shapes x:1x8x6x6" in err[0]


def test_symbolic_spatial_dims_get_placeholders(tmp_path):
    m = shufflenet_like()
    dims = m.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "height", "width"
    p = tmp_path / "hw.onnx"
    onnx.save(m, str(p))
    with pytest.raises(ModelLoadError, match=r"--input-shapes x:1x8x<height>x<width>"):
        load_graph(str(p))
    assert load_graph(str(p), {"x": [2, 8, 6, 6]}).tensors[0].nbytes == 2 * 8 * 6 * 6 * 4


def test_still_dynamic_is_one_line_naming_tensor(files, capsys):
    with pytest.raises(ModelLoadError) as e:
        load_graph(files["nonzero"])
    msg = str(e.value)
    assert "\n" not in msg and "'nz'" in msg and "NonZero" in msg and "--input-shapes" in msg
    assert main(["analyze", files["nonzero"]]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_modelproto_api_is_prepared_too(files):
    """`memsched.from_onnx` on a ModelProto runs the same front door and leaves the caller's
    model untouched."""
    m = onnx.load(files["shuf_dyn"])
    before = m.SerializeToString()
    g = memsched.from_onnx(m, {"x": [1, 8, 6, 6]})
    assert [op.kind for op in g.ops][-1] == "MatMul" and "Shape" not in {o.kind for o in g.ops}
    assert m.SerializeToString() == before


@pytest.mark.parametrize("name,shapes", [("shuf_dyn", "x:1x8x6x6"), ("urank", None)])
def test_schedule_compile_run_equals_onnxruntime(files, name, shapes, capsys):
    import tvm
    from tvm import relax

    from memsched.importers.load import parse_shapes

    args = ["analyze", files[name], "--json", "--time-limit", "5"]
    if shapes:
        args += ["--input-shapes", shapes]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["optimal"] is True and out["peak_bytes"] > 0
    dims = parse_shapes(shapes).get("x") if shapes else None
    mod = memsched.load_relax(files[name], parse_shapes(shapes) or None)
    x = np.random.default_rng(3).standard_normal(dims or [1, 4, 6, 6]).astype(np.float32)
    ex = tvm.compile(mod, target="llvm", relax_pipeline=memsched.pipeline(time_limit=5))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ref = ort.InferenceSession(files[name]).run(None, {"x": x})[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_compile_cli_writes_library(files, tmp_path, capsys):
    out = tmp_path / "shuf.so"
    assert main(["compile", files["shuf_dyn"], "--input-shapes", "x:1x8x6x6", "--pass",
                 "MemoryAwareSchedule", "-o", str(out)]) == 0
    assert out.exists()


def test_folding_respects_size_bound(tmp_path, monkeypatch):
    """A constant computation whose result would exceed the fold limit is not folded: the model
    is refused in one line instead of allocating."""
    import memsched.importers.onnx_front as front
    import memsched.importers.onnx_file as of

    m = shufflenet_like(batch=1)
    n = [_const("big", np.array([64, 64], np.int64)),
         h.make_node("ConstantOfShape", ["big"], ["cs"], value=nh.from_array(
             np.array([1.0], np.float32), "v")),
         h.make_node("ReduceSum", ["cs"], ["cs_sum"], keepdims=0)]
    m.graph.node.extend(n)
    m.graph.output.append(h.make_tensor_value_info("cs_sum", TP.FLOAT, None))
    p = tmp_path / "big.onnx"
    onnx.save(m, str(p))
    assert len(load_graph(str(p))) > 0  # 16 KiB: folded
    monkeypatch.setattr(front, "MAX_FOLD_BYTES", 1024)
    monkeypatch.setattr(of, "MAX_FOLD_BYTES", 1024)
    with pytest.raises(ModelLoadError, match="'cs'.*16,384 bytes"):
        load_graph(str(p))


def weighted_sum_cell(c=4, hw=5, seed=1):
    """RandWire's node aggregation as the classic exporter writes it: the edge weights are
    computed from a parameter at run time (Identity -> Sigmoid -> Gather per edge, a Constant
    index), then sum_i sigmoid(w)[i] * x_i. Those constant ops have no activation input, so
    left in the graph they are sources that run "any time" and hide every cut point."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((c, c, 1, 1)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.3
    agg = rng.standard_normal(2).astype(np.float32)
    n = [h.make_node("Conv", ["x", "W1"], ["a"], kernel_shape=[1, 1]),
         h.make_node("Conv", ["x", "W2"], ["b"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         h.make_node("Identity", ["agg"], ["agg_id"]),
         h.make_node("Sigmoid", ["agg_id"], ["agg_s"])]
    for i, src in enumerate(("a", "b")):
        n += [_const(f"k{i}", np.array(i, np.int64)),
              h.make_node("Gather", ["agg_s", f"k{i}"], [f"w{i}"], axis=0),
              h.make_node("Mul", [src, f"w{i}"], [f"m{i}"])]
    n += [h.make_node("Add", ["m0", "m1"], ["s"]),
          h.make_node("Relu", ["s"], ["out"])]
    return _model(n, "wsum", [h.make_tensor_value_info("x", TP.FLOAT, [1, c, hw, hw])],
                  [h.make_tensor_value_info("out", TP.FLOAT, None)],
                  [nh.from_array(w1, "W1"), nh.from_array(w2, "W2"), nh.from_array(agg, "agg")])


@pytest.mark.parametrize("folder", ["reference", "onnxslim"])
def test_constant_subgraphs_become_parameters(tmp_path, monkeypatch, capsys, folder):
    """Ops computing only on parameters are folded (ONNX's reference implementation; onnxslim
    when it cannot evaluate a node): the op graph holds the activation ops only, the two
    convolutions are the only sources, and the model compiles equal to ONNX Runtime."""
    import tvm
    from tvm import relax

    import memsched.importers.onnx_front as front

    if folder == "onnxslim":
        monkeypatch.setattr(front, "_fold_reference", lambda *a: None)
    p = str(tmp_path / "wsum.onnx")
    onnx.save(weighted_sum_cell(), p)
    g = load_graph(p)
    assert sorted(op.kind for op in g.ops) == ["Add", "Conv", "Conv", "Mul", "Mul", "Relu"]
    sources = [op.kind for op in g.ops if all(g.tensors[t].producer is None
                                              for t in op.inputs)]
    assert sources == ["Conv", "Conv"]
    mod = memsched.load_relax(p)
    x = np.random.default_rng(5).standard_normal([1, 4, 5, 5]).astype(np.float32)
    ex = tvm.compile(mod, target="llvm", relax_pipeline=memsched.pipeline(time_limit=5))
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ref = ort.InferenceSession(p).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)

"""RewriteConcatConv: identity rewriting of conv2d after concat, checked by compiling and running.

Every rewrite is compared with the original module after ``tvm.compile`` + VirtualMachine
(tolerance for the changed summation order), the frontends' forms (ONNX, TFLite) with their
reference runtimes, and the memory-aware decision and attributes with `memsched.schedule`.
"""
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402
import tvm_ffi  # noqa: E402

import memsched  # noqa: E402
from memsched.transform import MemoryAwareSchedule, RewriteConcatConv  # noqa: E402
from memsched.transform.rewrite_concat_conv import find_sites  # noqa: E402

RTOL, ATOL = 1e-5, 1e-5


# ----------------------------------------------------------------------------- helpers
def run(mod, inputs, **compile_opts):
    ex = tvm.compile(mod, target="llvm", **compile_opts)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
    if isinstance(out, tvm.runtime.Tensor):
        return [out.numpy()]
    return [o.numpy() for o in out]


def inputs_of(mod, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([int(d) for d in p.ty.shape.values]).astype("float32")
            for p in mod["main"].params]


def assert_same(mod, new, inputs=None):
    relax.analysis.well_formed(new)
    inputs = inputs if inputs is not None else inputs_of(mod)
    for a, b in zip(run(mod, inputs), run(new, inputs)):
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL)


def ops(mod, name="main"):
    out = []
    for blk in mod[name].body.blocks:
        for b in blk.bindings:
            v = b.value
            out.append(v.op.name if isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op)
                       else type(v).__name__)
    return out


def attr(mod, key, name="main"):
    v = mod[name].attrs[key]
    return v.value if hasattr(v, "value") else v


def _shape(layout, n, c, h, w):
    d = dict(N=n, C=c, H=h, W=w)
    return tuple(d[ch] for ch in layout)


def concat_conv(channels=(3, 5), layout="NCHW", kernel_layout=None, kind="conv", cout=4, m=1,
                groups=None, k=3, stride=1, dilation=1, hw=6, weight="const", tuple_var=False,
                extra_user=False, unary=None, bias=True, seed=0, batch=1, out_dtype=None):
    """x_i -> concat -> [unary] -> conv2d -> bias add -> relu, as a Relax module.

    kind: "conv" (groups=1), "depthwise" (groups=C, multiplier m), "grouped" (``groups``).
    weight: "const" (a constant) or "param" (a function parameter).
    """
    rng = np.random.default_rng(seed)
    C = sum(channels)
    if kind == "conv":
        groups, oc = 1, cout
    elif kind == "depthwise":
        groups, oc = C, C * m
    else:
        oc = groups * m
    kernel_layout = kernel_layout or {"NCHW": "OIHW", "NHWC": "HWOI" if kind == "depthwise"
                                      else "HWIO"}[layout]
    w_oihw = rng.standard_normal((oc, C // groups, k, k)).astype("float32") / np.sqrt(C * k * k)
    w_np = np.transpose(w_oihw, ["OIHW".index(ch) for ch in kernel_layout]).copy()
    xs = [relax.Var(f"x{i}", relax.TensorType(_shape(layout, batch, c, hw, hw), "float32"))
          for i, c in enumerate(channels)]
    params = list(xs)
    if weight == "param":
        wv = relax.Var("w", relax.TensorType(w_np.shape, "float32"))
        params.append(wv)
    else:
        wv = relax.const(w_np)
    c_axis = layout.index("C")
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            tup = bb.emit(relax.Tuple(xs)) if tuple_var else xs
            c = bb.emit(relax.op.concat(tup, axis=c_axis if seed % 2 else c_axis - 4))
            d = c
            for u in unary or ():
                d = u(bb, d, layout)
            y = bb.emit(relax.op.nn.conv2d(d, wv, strides=stride, padding=k // 2,
                                           dilation=dilation, groups=groups,
                                           data_layout=layout, kernel_layout=kernel_layout,
                                           out_dtype=out_dtype))
            if bias:
                bshape = [1, 1, 1, 1]
                bshape[c_axis] = oc
                y = bb.emit(relax.op.add(y, relax.const(
                    rng.standard_normal(bshape).astype("float32"))))
            y = bb.emit(relax.op.nn.relu(y))
            if extra_user:
                axes = [layout.index("H"), layout.index("W")]
                pooled = bb.emit(relax.op.mean(c, axis=axes, keepdims=True))
                out = bb.emit_output(relax.Tuple([y, pooled]))
            else:
                out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def U(op):
    """A chain step: a one-tensor op."""
    return lambda bb, x, layout: bb.emit(op(x))


def per_channel(op, rank=4, swap=False, full=True):
    """A chain step: ``op(x, p)`` with a per-channel constant ``p`` of ``rank`` dims (size C on
    the channel axis when ``full``, else 1)."""
    def step(bb, x, layout):
        shape = [1, 1, 1, 1]
        ax = layout.index("C")
        shape[ax] = int(x.ty.shape.values[ax]) if full else 1
        p = relax.const(np.random.default_rng(7).uniform(0.5, 1.5, shape[4 - rank:])
                        .astype("float32"))
        return bb.emit(op(p, x) if swap else op(x, p))
    return step


def batch_norm(bb, x, layout):
    """A chain step: inference batch norm on the channel axis, read through TupleGetItem 0."""
    ax = layout.index("C")
    c = int(x.ty.shape.values[ax])
    rng = np.random.default_rng(8)
    ps = [relax.const(rng.uniform(0.5, 1.5, c).astype("float32")) for _ in range(4)]
    t = bb.emit(relax.op.nn.batch_norm(x, *ps, axis=ax, training=False))
    return bb.emit(relax.TupleGetItem(t, 0))


def spatial_slice(bb, x, layout):
    """A chain step: strided_slice on H and W (FactorizedReduce's shifted input)."""
    axes = [layout.index("H"), layout.index("W")]
    hw = int(x.ty.shape.values[axes[0]])
    return bb.emit(relax.op.strided_slice(x, axes=axes, begin=[1, 1], end=[hw, hw]))


def forced(mod, **kw):
    return RewriteConcatConv(force=True, **kw)(mod)


# ----------------------------------------------------------------------------- numerics
CASES = [
    dict(),
    dict(layout="NHWC"),
    dict(layout="NHWC", kernel_layout="OHWI"),
    dict(channels=(2, 3, 4), weight="param"),
    dict(layout="NHWC", weight="param", k=1),
    dict(kind="depthwise"),
    dict(kind="depthwise", m=2, layout="NHWC"),
    dict(kind="depthwise", m=3, weight="param", channels=(1, 4, 2)),
    dict(kind="grouped", groups=4, m=3, channels=(2, 6)),  # cin_g = 2, boundaries aligned
    dict(stride=2, dilation=2, k=3, hw=9, channels=(4, 1), out_dtype="float32"),
    dict(tuple_var=True, channels=(3, 3, 3)),
    dict(unary=[U(relax.op.nn.relu)]),
    dict(unary=[U(lambda x: relax.op.clip(x, 0.0, 6.0)), U(relax.op.sigmoid)],
         kind="depthwise", layout="NHWC"),
    dict(unary=[batch_norm, U(relax.op.nn.relu)]),  # DenseNet: BN -> ReLU -> conv
    dict(unary=[batch_norm, per_channel(relax.op.multiply, rank=3)], layout="NHWC",
         kind="depthwise"),
    dict(unary=[per_channel(relax.op.subtract, swap=True), per_channel(relax.op.add, 1),
                per_channel(relax.op.divide, full=False)], layout="NHWC"),
    dict(unary=[spatial_slice, U(relax.op.nn.relu)], channels=(2, 4), hw=7),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()
                                                                   if k != "unary")
                         or "default")
def test_forced_rewrite_is_an_identity(case):
    mod = concat_conv(**case)
    new = forced(mod)
    assert attr(new, "memsched.rewrite_sites") == 1
    names = ops(new)
    assert "relax.concat" not in names or case.get("kind") in ("depthwise", "grouped")
    assert names.count("relax.nn.conv2d") == len(case.get("channels", (3, 5)))
    if case.get("weight") == "param":
        assert "relax.strided_slice" in names
    assert_same(mod, new)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(channels=st.lists(st.integers(1, 6), min_size=2, max_size=4),
       layout=st.sampled_from(["NCHW", "NHWC"]), kind=st.sampled_from(["conv", "depthwise"]),
       k=st.sampled_from([1, 3]), stride=st.sampled_from([1, 2]), hw=st.integers(3, 8),
       m=st.integers(1, 2), cout=st.integers(1, 6), weight=st.sampled_from(["const", "param"]),
       seed=st.integers(0, 100))
def test_random_shapes_and_layouts(channels, layout, kind, k, stride, hw, m, cout, weight, seed):
    mod = concat_conv(tuple(channels), layout, kind=kind, k=k, stride=stride, hw=hw, m=m,
                      cout=cout, weight=weight, seed=seed)
    new = forced(mod)
    assert attr(new, "memsched.rewrite_sites") == 1
    assert_same(mod, new, inputs_of(mod, seed))


def test_misaligned_groups_are_not_rewritten():
    mod = concat_conv(channels=(3, 5), kind="grouped", groups=4, m=1)  # cin_g = 2: 3 cuts one
    sites, why = find_sites(mod["main"].body.blocks[0])
    assert not sites and "cut" in why[0]
    assert forced(mod).same_as(mod)


def test_concat_with_other_users_is_kept():
    mod = concat_conv(channels=(4, 4), extra_user=True)
    new = forced(mod)
    assert attr(new, "memsched.rewrite_sites") == 1
    assert ops(new).count("relax.concat") == 1  # still there for the mean
    assert_same(mod, new)


def test_tuple_var_and_unary_ops_are_removed_when_dead():
    mod = concat_conv(channels=(2, 2, 2), tuple_var=True, unary=[U(relax.op.nn.relu)])
    names = ops(forced(mod))
    assert "relax.concat" not in names and "Tuple" not in names
    assert names.count("relax.nn.relu") == 3 + 1  # one per branch + the final activation


def test_full_tensor_operand_stops_the_match():
    def residual(bb, x, layout):
        other = relax.const(np.ones([int(d) for d in x.ty.shape.values], "float32"))
        return bb.emit(relax.op.add(x, other))

    mod = concat_conv(unary=[residual])
    assert not find_sites(mod["main"].body.blocks[0])[0]


def _dw_then_pw(branches=4, c=8, hw=12, m=2, from_params=False):
    """branches -> concat -> depthwise 3x3 (multiplier m) -> ReLU -> narrow 1x1 conv."""
    rng = np.random.default_rng(9)
    x = relax.Var("x", relax.TensorType((1, 4, hw, hw), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            brs = [bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(
                x, relax.const(rng.standard_normal((c, 4, 3, 3)).astype("float32") / 6),
                padding=1)))) for _ in range(branches)]
            cat = bb.emit(relax.op.concat(brs, axis=1))
            C = branches * c
            d = bb.emit(relax.op.nn.conv2d(cat, relax.const(
                rng.standard_normal((C * m, 1, 3, 3)).astype("float32") / 3), padding=1,
                groups=C))
            y = bb.emit(relax.op.nn.conv2d(bb.emit(relax.op.nn.relu(d)), relax.const(
                rng.standard_normal((4, C * m, 1, 1)).astype("float32") / 8)))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def test_depthwise_then_pointwise_is_rewritten_as_a_chain():
    mod = _dw_then_pw()
    new = RewriteConcatConv()(mod)  # memory-aware: the chain lowers the peak
    assert attr(new, "memsched.rewrite_candidates") == 1
    assert attr(new, "memsched.rewrite_sites") == 2  # the depthwise conv and the 1x1 after it
    assert "relax.concat" not in ops(new)
    assert attr(new, "memsched.rewrite_peak_after") < attr(new, "memsched.rewrite_peak_before")
    assert_same(mod, new)
    # without the follow-up (1x1 conv disabled) the depthwise split alone does not pay
    only_dw = RewriteConcatConv(conv=False)(mod)
    assert attr(only_dw, "memsched.rewrite_sites") == 0


def test_elementwise_can_be_disabled():
    mod = concat_conv(unary=[U(relax.op.nn.relu)])
    assert forced(mod, elementwise=False).same_as(mod)


# ----------------------------------------------------------------------------- frontends
def _onnx_concat_conv(c1=3, c2=5, hw=8, cout=4, group=1, relu_before=False):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    C = c1 + c2
    inits = [numpy_helper.from_array(
                 rng.standard_normal((cout, C // group, 3, 3)).astype("float32"), "W"),
             numpy_helper.from_array(rng.standard_normal(cout).astype("float32"), "B")]
    nodes = [helper.make_node("Concat", ["a", "b"], ["c"], axis=1)]
    src = "c"
    if relu_before:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        src = "r"
    nodes += [helper.make_node("Conv", [src, "W", "B"], ["y"], pads=[1] * 4, group=group,
                               kernel_shape=[3, 3]),
              helper.make_node("Relu", ["y"], ["z"])]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "g", [vi("a", TensorProto.FLOAT, [1, c1, hw, hw]),
                                       vi("b", TensorProto.FLOAT, [1, c2, hw, hw])],
                          [vi("z", TensorProto.FLOAT, [1, cout, hw, hw])], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("group,cout,relu_before", [(1, 4, False), (8, 16, False),
                                                    (1, 6, True)])
def test_onnx_frontend_form(group, cout, relu_before):
    ort = pytest.importorskip("onnxruntime")
    from tvm.relax.frontend.onnx import from_onnx

    model = _onnx_concat_conv(cout=cout, group=group, relu_before=relu_before)
    mod = from_onnx(model, keep_params_in_input=False)
    new = forced(mod)
    assert attr(new, "memsched.rewrite_sites") == 1
    ins = inputs_of(mod, 3)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]) \
        .run(None, {"a": ins[0], "b": ins[1]})[0]
    np.testing.assert_allclose(run(new, ins)[0], ref, rtol=1e-4, atol=1e-5)
    assert_same(mod, new, ins)


def _tflite_concat_conv(kind="conv", c1=3, c2=5, hw=8, cout=4, m=2, act=1):
    """CONCATENATION (axis 3) -> CONV_2D / DEPTHWISE_CONV_2D with bias and fused ReLU, NHWC,
    written with the flatbuffer object API (no TensorFlow)."""
    flatbuffers = pytest.importorskip("flatbuffers")
    s = pytest.importorskip("ai_edge_litert.schema_py_generated")
    rng = np.random.default_rng(2)
    buffers, tensors, codes = [s.BufferT()], [], []

    def tensor(name, shape, data=None):
        t = s.TensorT()
        t.name, t.shape, t.type = name.encode(), list(shape), s.TensorType.FLOAT32
        b = s.BufferT()
        if data is not None:
            b.data = np.frombuffer(data.astype("float32").tobytes(), np.uint8).tolist()
        buffers.append(b)
        t.buffer = len(buffers) - 1
        tensors.append(t)
        return len(tensors) - 1

    def operator(code, opt_type, opts, ins, outs):
        oc = s.OperatorCodeT()
        oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), 1
        codes.append(oc)
        op = s.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = len(codes) - 1, ins, outs
        op.builtinOptionsType, op.builtinOptions = opt_type, opts
        return op

    C = c1 + c2
    a, b = tensor("a", (1, hw, hw, c1)), tensor("b", (1, hw, hw, c2))
    c = tensor("c", (1, hw, hw, C))
    cat = s.ConcatenationOptionsT()
    cat.axis = 3
    ops_ = [operator(s.BuiltinOperator.CONCATENATION, s.BuiltinOptions.ConcatenationOptions,
                     cat, [a, b], [c])]
    if kind == "conv":
        W, co = rng.standard_normal((cout, 3, 3, C)), cout
        o, code, ot = s.Conv2DOptionsT(), s.BuiltinOperator.CONV_2D, s.BuiltinOptions.Conv2DOptions
    else:
        W, co = rng.standard_normal((1, 3, 3, C * m)), C * m
        o, code = s.DepthwiseConv2DOptionsT(), s.BuiltinOperator.DEPTHWISE_CONV_2D
        ot = s.BuiltinOptions.DepthwiseConv2DOptions
        o.depthMultiplier = m
    o.padding, o.strideH, o.strideW = s.Padding.SAME, 1, 1
    o.dilationHFactor = o.dilationWFactor = 1
    o.fusedActivationFunction = act
    w = tensor("w", W.shape, W)
    bias = tensor("bias", (co,), rng.standard_normal(co))
    y = tensor("y", (1, hw, hw, co))
    ops_.append(operator(code, ot, o, [c, w, bias], [y]))
    sg = s.SubGraphT()
    sg.tensors, sg.inputs, sg.outputs, sg.operators, sg.name = tensors, [a, b], [y], ops_, b"main"
    model = s.ModelT()
    model.version, model.subgraphs, model.buffers, model.operatorCodes = 3, [sg], buffers, codes
    fb = flatbuffers.Builder(1024)
    fb.Finish(model.Pack(fb), file_identifier=b"TFL3")
    return bytes(fb.Output()), (1, hw, hw, c1), (1, hw, hw, c2)


@pytest.mark.parametrize("kind", ["conv", "depthwise"])
def test_tflite_frontend_form(kind):
    tflite = pytest.importorskip("tflite")
    from tvm.relax.frontend.tflite import from_tflite

    buf, sa, sb = _tflite_concat_conv(kind)
    mod = from_tflite(tflite.Model.GetRootAsModel(buf, 0), {"a": sa, "b": sb},
                      {"a": "float32", "b": "float32"})
    new = forced(mod)
    assert attr(new, "memsched.rewrite_sites") == 1
    ins = inputs_of(mod, 4)
    assert_same(mod, new, ins)
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:  # pragma: no cover
        return
    it = Interpreter(model_content=buf)
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], ins[0] if d["name"] == "a" else ins[1])
    it.invoke()
    ref = it.get_tensor(it.get_output_details()[0]["index"])
    np.testing.assert_allclose(run(new, ins)[0], ref, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- memory-aware
def _wide_branches(cout=4, c=32, hw=16):
    """x -> three wide conv branches -> concat -> narrow 1x1 conv: the concat is the peak, so
    partitioning lowers it."""
    rng = np.random.default_rng(5)
    x = relax.Var("x", relax.TensorType((1, 8, hw, hw), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            br = [bb.emit(relax.op.nn.relu(bb.emit(relax.op.nn.conv2d(
                x, relax.const(rng.standard_normal((c, 8, 3, 3)).astype("float32") / 9),
                padding=1)))) for _ in range(3)]
            cat = bb.emit(relax.op.concat(br, axis=1))
            y = bb.emit(relax.op.nn.conv2d(cat, relax.const(
                rng.standard_normal((cout, 3 * c, 1, 1)).astype("float32") / 10)))
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    return bb.get()


def test_site_that_lowers_the_peak_is_rewritten():
    mod = _wide_branches()
    new = RewriteConcatConv()(mod)
    before, after = attr(new, "memsched.rewrite_peak_before"), attr(new,
                                                                     "memsched.rewrite_peak_after")
    assert attr(new, "memsched.rewrite_sites") == 1
    assert after < before
    assert attr(new, "memsched.rewrite_optimal") == 1
    # the recorded peaks are the optimal peaks of the block before/after
    g0 = memsched.from_relax(mod)
    g1 = memsched.from_relax(new)
    assert memsched.schedule(g0, memory_model="tvm").peak == before
    assert memsched.schedule(g1, memory_model="tvm").peak == after
    assert_same(mod, new)


def test_site_that_does_not_lower_the_peak_is_left_alone():
    mod = _wide_branches(cout=256, c=4)  # output much larger than the branches
    new = RewriteConcatConv()(mod)
    assert attr(new, "memsched.rewrite_sites") == 0
    assert attr(new, "memsched.rewrite_candidates") == 1
    assert attr(new, "memsched.rewrite_peak_after") == attr(new, "memsched.rewrite_peak_before")
    assert tvm_ffi.structural_equal(new["main"].body, mod["main"].body)
    f = forced(mod)
    assert attr(f, "memsched.rewrite_sites") == 1
    assert attr(f, "memsched.rewrite_peak_after") > attr(f, "memsched.rewrite_peak_before")


def test_paper_memory_model_is_an_option():
    new = RewriteConcatConv(memory_model="paper")(_wide_branches())
    assert attr(new, "memsched.rewrite_memory_model") == "paper"
    assert attr(new, "memsched.rewrite_peak_after") <= attr(new, "memsched.rewrite_peak_before")


def test_module_without_sites_is_returned_as_is():
    from memsched.generators.examples import example_model

    mod = example_model("two_branch")
    assert RewriteConcatConv()(mod).same_as(mod)


def _dynamic_batch():
    n = tvm.ir.prim.expr.Var("n", "int64")  # a symbolic batch (tvm.tir is gone in 0.27)
    xs = [relax.Var(f"x{i}", relax.TensorType((n, 4, 6, 6), "float32")) for i in range(2)]
    w = relax.const(np.random.default_rng(0).standard_normal((3, 8, 3, 3)).astype("float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", xs):
        with bb.dataflow():
            c = bb.emit(relax.op.concat(xs, axis=1))
            out = bb.emit_output(relax.op.nn.conv2d(c, w, padding=1))
        bb.emit_func_output(out)
    return bb.get()


def test_dynamic_shapes_leave_the_module_unchanged_with_a_message():
    mod = _dynamic_batch()
    with pytest.warns(UserWarning, match="dynamic shape"):
        new = RewriteConcatConv()(mod)
    assert tvm_ffi.structural_equal(new, mod)
    # forced: channel counts are static, so the rewrite itself is possible; no peaks recorded
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = forced(mod)
    assert attr(f, "memsched.rewrite_sites") == 1
    assert "memsched.rewrite_peak_before" not in f["main"].attrs
    relax.analysis.well_formed(f)
    ins = [np.random.default_rng(1).standard_normal((2, 4, 6, 6)).astype("float32")
           for _ in range(2)]
    np.testing.assert_allclose(run(f, ins)[0], run(mod, ins)[0], rtol=RTOL, atol=ATOL)


def test_dynamic_channel_count_is_not_matched():
    c = tvm.ir.prim.expr.Var("c", "int64")
    xs = [relax.Var("x0", relax.TensorType((1, c, 6, 6), "float32")),
          relax.Var("x1", relax.TensorType((1, 4, 6, 6), "float32"))]
    w = relax.Var("w", relax.TensorType((3, c + 4, 1, 1), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", xs + [w]):
        with bb.dataflow():
            cat = bb.emit(relax.op.concat(xs, axis=1))
            out = bb.emit_output(relax.op.nn.conv2d(cat, w))
        bb.emit_func_output(out)
    mod = bb.get()
    with pytest.warns(UserWarning, match="dynamic shape"):
        new = forced(mod)
    assert new.same_as(mod)


def test_bad_options_fail_early():
    with pytest.raises(ValueError, match="unknown memory model"):
        RewriteConcatConv(memory_model="nope")
    with pytest.raises(ValueError, match="unknown scheduling algorithm"):
        RewriteConcatConv(algorithm="nope")


# ----------------------------------------------------------------------------- composition
def test_composes_with_memory_aware_schedule():
    from memsched.generators.examples import example_inputs, example_model

    mod = example_model("nas_cell")
    seq = tvm.transform.Sequential([RewriteConcatConv(), MemoryAwareSchedule()])
    new = seq(mod)
    assert attr(new, "memsched.rewrite_sites") >= 1
    assert attr(new, "memsched.peak_after") <= attr(new, "memsched.rewrite_peak_after")
    only_order = MemoryAwareSchedule()(mod)
    assert attr(new, "memsched.peak_after") < attr(only_order, "memsched.peak_after")
    assert_same(mod, new, example_inputs(mod))


def test_pipeline_before():
    from memsched.generators.examples import example_inputs, example_model

    mod = example_model("nas_cell")
    ins = example_inputs(mod)
    ref = run(mod, ins)[0]
    got = run(mod, ins, relax_pipeline=memsched.pipeline(before=[RewriteConcatConv()]))[0]
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


# ----------------------------------------------------------------------------- heavy
def _bench():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[1] / "benchmarks" / "tvm" / "rewrite_concat_conv.py"
    spec = importlib.util.spec_from_file_location("_bench_rewrite_concat_conv", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.heavy
@pytest.mark.parametrize("model", ["darts_like", "densenet_like", "dw_cell"])
def test_nas_like_models_rewrite_plus_order_beats_order_only(model):
    from memsched.generators.examples import example_inputs

    mod = getattr(_bench(), model)()
    only = MemoryAwareSchedule(time_limit=10)(mod)
    both = tvm.transform.Sequential([RewriteConcatConv(time_limit=10),
                                     MemoryAwareSchedule(time_limit=10)])(mod)
    assert attr(both, "memsched.peak_after") < attr(only, "memsched.peak_after")
    assert_same(mod, both, example_inputs(mod))

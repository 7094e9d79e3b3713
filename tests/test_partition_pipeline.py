"""PartitionPipeline: the rewritten module builds and runs bit-equal to the original, the stages
chain to the same outputs, the report matches the partition evaluator, and the named build
pipeline works from tvm.compile and from `memsched compile`."""
import os

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402
from tvm.script import ir as I, relax as R  # noqa: E402

import memsched  # noqa: E402
from memsched.generators.examples import example_model  # noqa: E402
from memsched.partition import PartitionError, evaluate  # noqa: E402
from memsched.transform.partition_pipeline import (PartitionPipeline,  # noqa: E402
                                                   partition_problem, pipeline_report,
                                                   stage_functions, stage_modules,
                                                   stage_params)


def _inputs(func, seed=0):
    rng = np.random.default_rng(seed)
    n = int(func.attrs["num_input"]) if func.attrs is not None and "num_input" in func.attrs \
        else len(func.params)
    return [rng.standard_normal([int(d) for d in p.ty.shape.values]).astype(str(p.ty.dtype))
            for p in list(func.params)[:n]]


def _run(ex, args, fn="main"):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm[fn](*[a if isinstance(a, tvm.runtime.Tensor) else tvm.runtime.tensor(a)
                    for a in args])


def _np(out):
    if isinstance(out, tvm.runtime.Tensor):
        return [out.numpy()]
    return [t for o in out for t in _np(o)]


@pytest.fixture(scope="module")
def nas_cell():
    return relax.transform.FoldConstant()(example_model("nas_cell"))


def test_rewrite_builds_and_runs_bit_equal(nas_cell):
    mod = nas_cell
    new = PartitionPipeline(3, sram_bytes=16 << 10)(mod)
    relax.analysis.well_formed(new)
    names = {gv.name_hint for gv in new.get_global_vars()}
    assert {"main", "main_stage0", "main_stage1", "main_stage2"} <= names
    rep = pipeline_report(new)
    # the report is the evaluator's cost of the recorded assignment
    problem = partition_problem(mod["main"])[0]
    cost = evaluate(problem, rep["assignment"], 16 << 10, 3)
    assert (rep["P"], rep["O"], rep["C"]) == cost.key
    assert rep["m"] == list(cost.m) and rep["c"] == list(cost.c)
    assert rep["optimal"] is True and rep["lower_bounds"] == {"P": cost.P, "O": cost.O,
                                                                 "C": cost.C}
    assert (rep["P"], rep["O"], rep["C"]) <= tuple(rep["baseline"][k] for k in "POC")
    x = _inputs(mod["main"])
    ref = _run(tvm.compile(mod, target="llvm"), x).numpy()
    ex = tvm.compile(new, target="llvm")
    assert np.array_equal(_run(ex, x).numpy(), ref)
    # the stage functions chain to the same result; what crosses boundary j has c_j bytes
    vals = [tvm.runtime.tensor(a) for a in x]
    for j, name in enumerate(stage_functions(new)):
        out = _run(ex, vals, name)
        if j < 2:
            assert sum(t.numpy().nbytes for t in out) == rep["c"][j]
            vals = list(out)
    assert np.array_equal(out.numpy(), ref)


def test_explicit_assignment_and_separate_stage_builds(nas_cell):
    mod = nas_cell
    n = len(mod["main"].body.blocks[0].bindings)
    cut = [0] * (n // 2) + [1] * (n - n // 2)
    new = PartitionPipeline(2, assignment=cut)(mod)
    rep = pipeline_report(new)
    assert rep["assignment"] == cut and rep["method"] == "given" and rep["optimal"] is False
    x = _inputs(mod["main"])
    ref = _run(tvm.compile(mod, target="llvm"), x).numpy()
    vals = [tvm.runtime.tensor(a) for a in x]
    for sub, name in zip(stage_modules(new), stage_functions(new)):
        relaxed = [gv.name_hint for gv, f in sub.functions_items()
                   if isinstance(f, relax.Function)]
        assert relaxed == [name]  # one device builds only its stage
        vals = _run(tvm.compile(sub, target="llvm"), vals, name)
    assert np.array_equal(vals.numpy(), ref)
    with pytest.raises(PartitionError, match="later stage"):  # not monotone
        PartitionPipeline(2, assignment=[1] * (n - 1) + [0]).transform_module(mod, None)
    with pytest.raises(RuntimeError, match="later stage"):  # through TVM's pass runner
        PartitionPipeline(2, assignment=[1] * (n - 1) + [0])(mod)


@I.ir_module
class TupleAndWeights:
    """Weights given as inputs (num_input = 1), a tuple value crossing a boundary, a tensor
    that skips a stage, and a weight used in two stages."""

    @R.function
    def main(x: R.Tensor((2, 8), "float32"), w1: R.Tensor((8, 8), "float32"),
             w2: R.Tensor((8, 8), "float32")) -> R.Tuple(R.Tensor((2, 8), "float32"),
                                                         R.Tensor((2, 8), "float32")):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            a = R.matmul(x, w1)
            t = R.split(a, 2, axis=1)
            b = R.nn.relu(a)
            c = R.matmul(b, w2)
            t0 = t[0]
            t1 = t[1]
            d = R.concat((t1, t0), axis=1)
            e = R.add(c, d)
            f = R.matmul(e, w1)
            g = R.add(f, x)
            out = (g, a)
            R.output(out)
        return out


def test_weights_as_inputs_and_tuple_carry():
    mod = TupleAndWeights
    problem = partition_problem(mod["main"])[0]
    # weights are parameters of the cut, not activations: only x is a graph input
    assert len([t for t in problem.tensors if t.producer == -1]) == 1
    assert sorted(problem.param_bytes) == [256, 256]
    #            a  t  b  c  t0 t1 d  e  f  g  out
    cut = [0, 0, 1, 1, 2, 2, 2, 2, 2, 2, 2]
    new = PartitionPipeline(3, assignment=cut)(mod)
    relax.analysis.well_formed(new)
    rep = pipeline_report(new)
    assert rep["m"] == [256, 256, 256]  # w1 counted in stages 0 and 2
    s1 = new["main_stage1"]
    # stage 1 gets x, a and both tuple fields (t crosses as two tensors), then its weight w2
    assert int(s1.attrs["num_input"]) == 4 and len(s1.params) == 5
    rng = np.random.default_rng(1)
    x, w1, w2 = (rng.standard_normal(s).astype("float32") for s in ((2, 8), (8, 8), (8, 8)))
    ref = _np(_run(tvm.compile(mod, target="llvm"), [x, w1, w2]))
    got = _np(_run(tvm.compile(new, target="llvm"), [x, w1, w2]))
    assert all(np.array_equal(a, b) for a, b in zip(ref, got)) and len(got) == 2
    assert stage_params(new) == [[], [], []]  # no "params" attribute to take values from
    # explicit params= names override num_input
    new2 = PartitionPipeline(2, assignment=[0] * 5 + [1] * 6, params=["w1", "w2"])(mod)
    assert len(new2["main_stage1"].params) == int(new2["main_stage1"].attrs["num_input"]) + 1


def test_bad_requests():
    mod = example_model("two_branch")
    with pytest.raises(PartitionError):
        PartitionPipeline(0)
    with pytest.raises(PartitionError):
        PartitionPipeline(2, method="nope")
    with pytest.raises(ValueError, match="non-empty stages"):
        PartitionPipeline(99).transform_module(mod, None)
    with pytest.raises(ValueError, match="not parameters"):
        PartitionPipeline(2, params=["nope"]).transform_module(mod, None)


def test_edgetpu_pipeline_from_tvm_compile(nas_cell):
    mod = nas_cell
    x = _inputs(mod["main"])
    ref = _run(tvm.compile(mod, target="llvm"), x).numpy()
    ex = tvm.compile(example_model("nas_cell"), target="llvm",
                     relax_pipeline=memsched.edgetpu_pipeline(stages=2, sram_bytes=16 << 10))
    assert np.array_equal(_run(ex, x).numpy(), ref)
    s0 = _run(ex, x, "main_stage0")
    assert np.array_equal(_run(ex, list(s0), "main_stage1").numpy(), ref)


def test_memsched_compile_cli(tmp_path, capsys):
    from memsched.cli import main

    out = str(tmp_path / "p.so")
    rc = main(["compile", "example:nas_cell", "--pass", "PartitionPipeline", "--stages", "2",
               "--sram", "16KiB", "-o", out])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "cut: 2 stages" in err and "proven optimal" in err
    lib = tvm.runtime.load_module(out)
    mod = relax.transform.FoldConstant()(example_model("nas_cell"))
    x = _inputs(mod["main"])
    ref = _run(tvm.compile(mod, target="llvm"), x).numpy()
    assert np.array_equal(_run(lib, x).numpy(), ref)
    s0 = _run(lib, x, "main_stage0")
    assert np.array_equal(_run(lib, list(s0), "main_stage1").numpy(), ref)
    rc = main(["compile", "example:nas_cell", "--pass", "PartitionPipeline", "--stages", "500",
               "-o", str(tmp_path / "q.so")])
    assert rc == 2 and "non-empty stages" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "q.so")


def test_flops_balanced_cut(nas_cell):
    from memsched.partition import check_assignment
    from memsched.transform.partition_pipeline import binding_flops, flops_balanced_assignment

    f = nas_cell["main"]
    problem = partition_problem(f)[0]
    work = [binding_flops(b) for b in f.body.blocks[0].bindings]
    assert work[0] == 1 * 8 * 16 * 16 * 8 * 3 * 3  # conv: out elements x (Cin x kh x kw)
    for k in (1, 2, 3, 4):
        cut = flops_balanced_assignment(f, k)
        check_assignment(problem, cut, k)  # monotone, every stage non-empty
        per = [sum(w for w, s in zip(work, cut) if s == j) for j in range(k)]
        assert max(per) <= sum(work) / k + max(work)


def test_partition_balance_latency_cli(tmp_path, capsys):
    """--balance latency writes a cut whose slowest modelled stage is no slower than the
    (P, O, C) cut's or libcoral's, shown side by side."""
    import json

    from memsched.cli import main
    from memsched.generators.examples import example_tflite

    model = tmp_path / "rw.tflite"
    model.write_bytes(example_tflite("randwire", quantized=True))
    assert main(["partition", str(model), "--stages", "2", "--sram", "20000", "--balance",
                 "latency", "--time-limit", "20", "--json", "-o", str(tmp_path / "s")]) == 0
    d = json.loads(capsys.readouterr().out)
    rows = d["cuts"]
    assert set(rows) == {"param-balanced", d["method"], "latency-balanced"}
    best = rows["latency-balanced"]["slowest_stage_ms"]
    assert all(best <= r["slowest_stage_ms"] + 1e-9 for r in rows.values())
    assert len(d["files"]) == 2

"""TFLite reader -> partition -> segment files that load, chain and equal the unsplit model."""
import json
import os

import numpy as np
import pytest

from memsched.cli import main
from memsched.tflite.format.read import TFLiteModelError, read_tflite
from memsched.tflite.segments import pack_model, segment_models, write_segments
from memsched.generators.tflite_synth import residual_concat_model
from memsched.partition import PartitionProblem, evaluate, solve
from memsched.tflite.litert import (SegmentError, check_segments, make_interpreter,
                                       pipeline_runner, random_inputs, run_model)

from board_checks import assert_segments_equal_on_board


@pytest.fixture(scope="module", params=[False, True], ids=["float", "int8"])
def model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / ("rc_int8.tflite" if request.param else "rc.tflite")
    path.write_bytes(residual_concat_model(request.param))
    return str(path)


def test_reader(model):
    tg = read_tflite(model)
    kinds = [op.kind for op in tg.graph.ops]
    assert kinds == ["CONV_2D", "DEPTHWISE_CONV_2D", "CONV_2D", "ADD", "CONV_2D",
                     "CONCATENATION", "CONV_2D"]
    # conv "a" and conv "k" share one zero-bias buffer: one parameter id, counted once
    assert set(tg.op_params[0]) & set(tg.op_params[4])
    it = make_interpreter(model, preserve_all_tensors=True)
    sizes = {d["name"]: int(np.prod(d["shape"])) * np.dtype(d["dtype"]).itemsize
             for d in it.get_tensor_details()}
    for t in tg.graph.tensors:
        assert t.nbytes == sizes[t.name]
    consts = {i: d for i, d in enumerate(it.get_tensor_details())
              if d["name"].endswith(("/w", "/b"))}
    total = sum(tg.param_bytes)
    distinct = {}
    for i, d in consts.items():
        distinct[tg.model.subgraphs[0].tensors[d["index"]].buffer] = sizes[d["name"]]
    assert total == sum(distinct.values())
    assert [tg.graph.tensors[t].name for t in tg.graph.output_tensors] == ["sum", "y"]


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("method", ["exact", "param-balanced"])
def test_segments_chain_to_equal_tensors(model, k, method, tmp_path):
    tg = read_tflite(model)
    problem = PartitionProblem.from_graph(tg.graph, tg.op_params, tg.param_bytes)
    r = solve(problem, k, sram_bytes=300, method=method)
    paths = write_segments(tg, r.assignment, str(tmp_path))
    assert [os.path.basename(p) for p in paths] == \
        [f"{tg.name}_segment_{i}_of_{k}.tflite" for i in range(k)]
    # each segment holds exactly its stage's operators, and its parameters are m_j
    for i, p in enumerate(paths):
        seg = read_tflite(p)
        assert len(seg.graph) == r.assignment.count(i)
        assert sum(seg.param_bytes) == r.m[i]
        if i > 0:  # segment i takes what segment i-1 returns, in order
            it_prev = make_interpreter(paths[i - 1])
            it = make_interpreter(p)
            assert [d["name"] for d in it.get_input_details()] == \
                [d["name"] for d in it_prev.get_output_details()]
            # what crosses boundary i-1 is exactly c_{i-1}
            size = sum(int(np.prod(d["shape"])) * np.dtype(d["dtype"]).itemsize
                       for d in it.get_input_details())
            assert size == r.c[i - 1]
    pipe = pipeline_runner(str(tmp_path))
    inputs = random_inputs(pipe.input_details, 4, seed=1)
    outs, stats = pipe.run(inputs)
    ref, _ = run_model(model, inputs)
    for a, b in zip(outs, ref):
        assert set(a) == set(b) and all(np.array_equal(a[n], b[n]) for n in a)
    assert stats.count == 4 and len(stats.stage_latency) == k
    report = check_segments(model, paths, inputs[:2])
    assert report.equal and not report.skipped
    assert report.tensors_compared == 2 * len(tg.graph.tensors) - 2  # every op output, twice
    if method == "exact":
        assert_segments_equal_on_board(model, paths, tmp_path)


def test_broken_segment_is_detected(model, tmp_path):
    tg = read_tflite(model)
    problem = PartitionProblem.from_graph(tg.graph, tg.op_params, tg.param_bytes)
    s = solve(problem, 2, method="param-balanced").assignment
    paths = write_segments(tg, s, str(tmp_path))
    # flip one weight of the second segment's first parameter buffer
    seg = read_tflite(paths[1])
    buf = seg.model.buffers[seg.param_buffer[0]]
    data = np.array(buf.data, dtype=np.uint8)
    data[0] ^= 0x41
    buf.data = data
    with open(paths[1], "wb") as f:
        f.write(pack_model(seg.model))
    pipe = pipeline_runner(paths)
    inputs = random_inputs(pipe.input_details, 2)
    report = check_segments(model, paths, inputs)
    assert not report.equal and report.mismatches


def test_bad_files(tmp_path):
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\x00" * 4 + b"TFL3" + os.urandom(64))
    with pytest.raises(TFLiteModelError, match="bad.tflite"):
        read_tflite(str(bad))
    with pytest.raises(TFLiteModelError, match="not a .tflite"):
        read_tflite(b"hello world, not a model")
    with pytest.raises(SegmentError, match="no <model>_segment"):
        pipeline_runner(str(tmp_path))


def test_segment_models_reject_wrong_length(model):
    tg = read_tflite(model)
    with pytest.raises(TFLiteModelError, match="entries"):
        segment_models(tg, [0, 1])


def test_cli_partition_and_run(model, tmp_path, capsys):
    out = tmp_path / "seg"
    assert main(["partition", model, "--stages", "3", "--sram", "256", "--json",
                 "-o", str(out)]) == 0
    res = json.loads(capsys.readouterr().out)
    for key in ("stages", "assignment", "P", "O", "C", "lower_bounds", "optimal", "method",
                "seconds", "baseline"):
        assert key in res
    assert res["optimal"] and res["stages"] == 3 and len(res["files"]) == 3
    tg = read_tflite(model)
    problem = PartitionProblem.from_graph(tg.graph, tg.op_params, tg.param_bytes)
    assert evaluate(problem, res["assignment"], 256).P == res["P"]
    assert (res["P"], res["O"], res["C"]) <= (res["baseline"]["P"], res["baseline"]["O"],
                                              res["baseline"]["C"])
    assert main(["run-segments", str(out), "--model", model, "-n", "5", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["outputs_equal"] is True and run["tensors_compared"] > 0
    assert len(run["stage_latency_s"]) == 3 and run["throughput_per_s"] > 0
    assert_segments_equal_on_board(model, res["files"], tmp_path)


def test_cli_errors(tmp_path, capsys):
    bad = tmp_path / "x.tflite"
    bad.write_bytes(b"junk")
    assert main(["partition", str(bad), "--stages", "2"]) == 2
    assert main(["partition", str(tmp_path / "none.tflite"), "--stages", "2"]) == 2
    assert main(["run-segments", str(tmp_path / "nodir")]) == 2
    good = tmp_path / "m.tflite"
    good.write_bytes(residual_concat_model(False))
    assert main(["partition", str(good), "--stages", "99"]) == 2
    assert main(["partition", str(good), "--stages", "2", "--sram", "lots"]) == 2
    err = capsys.readouterr().err
    assert err.count("memsched: error:") == 5 and "Traceback" not in err


MUTATIONS = ["type", "shape", "op_input", "op_output", "opcode", "buffer", "sg_input",
             "sg_output", "drop_op", "no_ops", "dup_name"]


def _mutate(data: bytes, whats, a: int, b: int):
    """A structurally valid flatbuffer holding a broken model (None if not encodable)."""
    import flatbuffers

    from memsched.tflite.format.read import schema

    s = schema()
    model = s.ModelT.InitFromPackedBuf(data, 0)
    sg = model.subgraphs[0]
    for what in whats:
        if not sg.operators:
            break
        t = sg.tensors[a % len(sg.tensors)]
        op = sg.operators[a % len(sg.operators)]
        if what == "type":
            t.type = b % 25
        elif what == "shape":
            t.shape = [[-1, 0, 1 << 30, 7, 3][(b + i) % 5] for i in range(b % 5)]
        elif what == "op_input" and op.inputs is not None and len(op.inputs):
            op.inputs = [int(i) for i in op.inputs]
            op.inputs[b % len(op.inputs)] = [len(sg.tensors), -1, 1 << 30, a % len(sg.tensors)][
                b % 4]
        elif what == "op_output" and op.outputs is not None and len(op.outputs):
            op.outputs = [int(i) for i in op.outputs]
            op.outputs[0] = [len(sg.tensors) + 3, 0, b % len(sg.tensors)][b % 3]
        elif what == "opcode":
            op.opcodeIndex = [len(model.operatorCodes), 1 << 20][b % 2]
        elif what == "buffer":
            t.buffer = [len(model.buffers), 1 << 20, b % len(model.buffers)][b % 3]
        elif what == "sg_input":
            sg.inputs = [[len(sg.tensors)], [], [0, 0], [b % len(sg.tensors)]][b % 4]
        elif what == "sg_output":
            sg.outputs = [[len(sg.tensors) + 1], [], [0], [b % len(sg.tensors)]][b % 4]
        elif what == "drop_op":
            del sg.operators[a % len(sg.operators)]
        elif what == "no_ops":
            sg.operators = []
        elif what == "dup_name":
            t.name = sg.tensors[b % len(sg.tensors)].name
    fb = flatbuffers.Builder(1024)
    try:
        fb.Finish(model.Pack(fb), file_identifier=b"TFL3")
    except Exception:  # noqa: BLE001 - not encodable
        return None
    return bytes(fb.Output())


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(whats=st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=2),
       a=st.integers(0, 1000), b=st.integers(0, 1000), k=st.integers(1, 4),
       q=st.booleans())
def test_partition_of_broken_models_fails_cleanly(tmp_path_factory, whats, a, b, k, q):
    import contextlib
    import io

    data = _mutate(residual_concat_model(q), whats, a, b)
    if data is None:
        return
    d = tmp_path_factory.mktemp("fz")
    path = d / "m.tflite"
    path.write_bytes(data)
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(["partition", str(path), "--stages", str(k), "--json", "-o", str(d / "seg")])
    text = err.getvalue()
    assert rc in (0, 2), text
    if rc == 2:
        assert len(text.splitlines()) == 1 and text.startswith("memsched: error:"), text
    else:
        res = json.loads(out.getvalue())
        assert len(res["files"]) == k
        for f in res["files"]:  # what we wrote parses again
            assert len(read_tflite(f).graph) >= 1

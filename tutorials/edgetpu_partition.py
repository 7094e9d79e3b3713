"""Tutorial (Edge TPU users): cut an int8 .tflite into pipeline segments and run them.

A model too large for one Edge TPU's parameter SRAM is cut into K stages on K devices.
`memsched.partition.solve` finds the certified lexicographic optimum of (P, O, C): the largest
stage's parameter bytes, the bytes streamed off-chip, the largest transfer between stages.
`write_segments` writes one valid .tflite per stage; `pipeline_runner` runs them like libcoral's
PipelinedModelRunner (one LiteRT interpreter per segment, each on its own thread), and
`check_segments` compares every intermediate tensor with the unsplit model. On real hardware,
compile each segment with `edgetpu_compiler` and run it with libcoral.

Same thing from the command line:
    memsched partition model.tflite --stages 2 -o segs/
    memsched run-segments segs/ --model model.tflite -n 20

Run: .venv/bin/python tutorials/edgetpu_partition.py      (about 2 s on 2 cores)
"""
import os
import tempfile

import numpy as np

from memsched.generators.examples import example_tflite
from memsched.tflite.format.read import read_tflite
from memsched.tflite.segments import write_segments
from memsched.partition import PartitionProblem, param_balanced_cut, solve
from memsched.tflite.litert import (check_segments, pipeline_runner, random_inputs,
                                       run_model)

K = 2
SRAM = 32 << 10  # a tiny "device": the toy model's 54 KiB of int8 weights need two

with tempfile.TemporaryDirectory() as tmp:
    model = os.path.join(tmp, "randwire_int8.tflite")
    with open(model, "wb") as f:
        f.write(example_tflite("randwire", quantized=True, nodes=8))

    # 1. The partition problem: operators in file order, their constant buffers, activations.
    tg = read_tflite(model)
    problem = PartitionProblem.from_graph(tg.graph, tg.op_params, tg.param_bytes)
    result = solve(problem, K, sram_bytes=SRAM, method="auto", time_limit=30)
    baseline = param_balanced_cut(problem, K)  # the Edge TPU compiler's --num_segments rule
    print(f"{problem.n} operators -> {K} stages: P={result.P:,} B O={result.O:,} B "
          f"C={result.C:,} B, proven optimal={result.optimal}")
    print("stage of each operator:", "".join(str(s) for s in result.assignment))
    print("param-balanced baseline assignment:", "".join(str(s) for s in baseline))

    # 2. Write the segments: DIR/<model>_segment_<i>_of_<K>.tflite
    seg_dir = os.path.join(tmp, "segs")
    paths = write_segments(tg, result.assignment, seg_dir)
    print("segments:", ", ".join(os.path.basename(p) for p in paths))

    # 3. Run them pipelined and compare with the unsplit model.
    pipe = pipeline_runner(paths)
    inputs = random_inputs(pipe.input_details, 8, seed=0)
    outs, stats = pipe.run(inputs)
    refs, _ = run_model(model, inputs)
    equal = all(np.array_equal(o[name], r[name]) for o, r in zip(outs, refs) for name in r)
    print(f"{stats.count} inputs streamed, {stats.throughput:.0f} inferences/s, stage latency "
          + " / ".join(f"{t * 1e3:.2f} ms" for t in stats.stage_latency))
    report = check_segments(model, paths, inputs[:2])
    print(f"pipelined outputs equal the unsplit model: {equal}; every intermediate tensor: "
          f"{report.equal} ({report.tensors_compared} tensors compared)")
    assert equal and report.equal

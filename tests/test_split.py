"""GenEFlow split: encoding constraints, communication cases (i)-(iii), memory, solvers.

Hand-computed examples on a two-conv chain: x (graph input) -> A -> t1 -> B -> t2, every tensor
4 channels x 8 rows x 4 bytes (one float per row), so a tensor is 128 bytes and one row of all
channels is 16 bytes.
"""
import numpy as np
import pytest

from memsched.split import (CostModel, Device, Encoding, InputReq, Link, OpTimes, SplitError,
                            SplitOp, SplitProblem, TensorInfo, compare, evaluate, solve)
from memsched.split.evaluate import op_terms

CONV = dict(cmode="full", rmode="window", extent=3, stride=1, pad=1)


def chain(weight=0, req_b=None):
    tensors = [TensorInfo(name, 4, 8, 4) for name in ("x", "t1", "t2")]
    ops = [SplitOp("A", "relax.nn.conv2d", "conv", 1, [InputReq(0, **CONV)],
                   {"cout": 4, "fmh": 8}, weight_bytes=weight, weight_cout=weight),
           SplitOp("B", "relax.nn.conv2d", "conv", 2, [req_b or InputReq(1, **CONV)],
                   {"cout": 4, "fmh": 8})]
    return SplitProblem(ops, tensors, outputs=[2])


def cost_model(n, topology="router", broadcast=False, limits=None, count_weights=True):
    prob_times = OpTimes({d: np.zeros(2) for d in ("cout", "fmh", "whole")},
                         {d: np.zeros(2) for d in ("cout", "fmh", "whole")})
    limits = limits or [None] * n
    return CostModel([Device(m) for m in limits],
                     Link(bandwidth=1.0, latency=0.0, broadcast=broadcast, topology=topology),
                     prob_times, count_weights=count_weights)


def received(dims, xa, xb, n=2):
    p = chain()
    enc = Encoding(p, n, dims=dims)
    ev = evaluate(enc, cost_model(n), np.array([xa, xb]))
    return ev.received[0, 1].tolist(), ev


def test_case_i_cout_consumer_gets_the_whole_input_minus_its_slice():
    # B split by cout needs all of t1; each device holds 2 of its 4 channels
    recv, _ = received(["cout", "cout"], [0, 2, 4], [0, 2, 4])
    assert recv == [128 - 64, 128 - 64]


def test_case_ii_fmh_consumer_of_cout_producer():
    # A by cout: device 0 has channel 0, device 1 channels 1-3. B by fmh: device 0 computes
    # rows [0, 4) -> reads rows [0, 5) (3x3 halo, pad 1); device 1 rows [4, 8) -> reads [3, 8)
    recv, _ = received(["cout", "fmh"], [0, 1, 4], [0, 4, 8])
    m_out, C, H = 128, 4, 8
    paper = [m_out * (C - 1) / C * 5 / H, m_out * (C - 3) / C * 5 / H]
    assert recv == paper == [60, 20]


def test_case_iii_fmh_consumer_of_fmh_producer():
    # A by fmh: device 0 rows [0, 3), device 1 [3, 8). B: device 0 needs [0, 5) and holds
    # [0, 3): H_comm = max(0, 5 - 3) + max(0, 0 - 0) = 2 rows; device 1 needs [3, 8), holds it
    recv, _ = received(["fmh", "fmh"], [0, 3, 8], [0, 4, 8])
    assert recv == [2 * 16, 0]
    # no overlap: all of t1 on device 0, device 1 needs its 5 rows from it
    recv, _ = received(["fmh", "fmh"], [0, 8, 8], [0, 4, 8])
    assert recv == [0, 5 * 16]


def test_graph_input_comes_from_the_host():
    _, ev = received(["fmh", "fmh"], [0, 4, 8], [0, 4, 8])
    assert ev.received[0, 0].tolist() == [5 * 16, 5 * 16]  # rows [0,5) and [3,8) of x


def test_link_topologies_price_the_same_pieces_differently():
    # 3 devices, A by cout with slices of 1, 1, 2 channels (32, 32, 64 bytes); B by cout needs
    # all of t1 everywhere: every slice goes to the two other devices
    p = chain()
    enc = Encoding(p, 3, dims=["cout", "cout"])
    X = np.array([[[0, 1, 2, 4], [0, 1, 2, 4]]])
    t = {}
    for name, topo, bc in (("p2p", "router", False), ("bcast", "router", True),
                           ("host", "host", False)):
        t[name] = float(op_terms(enc, cost_model(3, topo, bc), X, 1).t_comm[0])
    assert t["p2p"] == (128 - 32) + (128 - 32) + (128 - 64)  # each receiver, one by one
    assert t["bcast"] == 32 + 32 + 64  # each slice sent once
    assert t["host"] == 128 + 256  # download each slice once, upload every piece


def test_constraint_terms():
    p = chain()
    enc = Encoding(p, 2, dims=["cout", "fmh"], max_parts=1)
    bad = np.array([[1, 3, 5], [0, 6, 2]])  # x0 != 0, xn != length, unsorted, two parts
    cv = enc.constraints(bad)
    assert cv["cv1"][0].tolist() == [1, 0] and cv["cv2"][0].tolist() == [-1, 0]
    assert cv["cv3"][0].tolist() == [1, -6] and cv["cv4"][0].tolist() == [-1, 6]
    assert cv["cv5"][0].tolist() == [[-2, -2], [-6, 4]]
    assert cv["cv6"][0].tolist() == [2 - 1, 2 - 1]  # two devices used, k_max = 1
    assert not enc.is_legal(bad)[0]
    good = enc.chromosome([9, 3])  # genes are clipped and sorted by the repair
    assert good.tolist() == [[0, 4, 4], [0, 3, 8]]
    assert not enc.is_legal(good)[0]  # op B still uses two devices
    assert Encoding(p, 2, dims=["cout", "fmh"]).is_legal(good)[0]


def test_memory_single_device_matches_memsched_memory_model():
    from memsched.graph import GraphBuilder
    from memsched.memory import peak_memory

    p = chain()
    enc = Encoding(p, 1, dims=["cout", "cout"])
    ev = evaluate(enc, cost_model(1), enc.single())
    b = GraphBuilder("chain")
    x = b.input("x", 128)
    a = b.op("A", "conv", [x], [("t1", 128)])
    bb = b.op("B", "conv", [b.ops[a].outputs[0]], [("t2", 128)])
    b.mark_output(b.ops[bb].outputs[0])
    assert ev.peak[0, 0] == peak_memory(b.build(), [0, 1], "paper") == 256


def test_memory_per_device_and_limits():
    # both ops by fmh in halves: device 0 at B holds t1 rows [0,4) (64) and t2 rows [0,4)
    # (64), receives row 4 of t1 (16) and assembles rows [0,5) (80): 224; symmetric device 1
    p = chain(weight=100)
    enc = Encoding(p, 2, dims=["fmh", "fmh"])
    X = np.array([[0, 4, 8], [0, 4, 8]])
    ev = evaluate(enc, cost_model(2, count_weights=False), X)
    assert ev.peak[0].tolist() == [224, 224]
    ev = evaluate(enc, cost_model(2), X)  # fmh replicates A's 100 weight bytes
    assert ev.weights[0].tolist() == [100, 100] and ev.peak[0].tolist() == [324, 324]
    assert ev.feasible[0]
    ev = evaluate(enc, cost_model(2, limits=[324, 323]), X)
    assert not ev.feasible[0] and ev.cv["cv7"][0].max() == 1
    # cout slices the weights
    enc = Encoding(p, 2, dims=["cout", "fmh"])
    ev = evaluate(enc, cost_model(2), np.array([[0, 1, 4], [0, 4, 8]]))
    assert ev.weights[0].tolist() == [25, 75]


def test_compute_stages_and_latency():
    # 1 s per unit of slice; two devices in parallel; no transfers between aligned ops
    p = chain()
    times = OpTimes({d: np.zeros(2) for d in ("cout", "fmh", "whole")},
                    {"cout": np.ones(2), "fmh": np.ones(2), "whole": np.ones(2)})
    cost = CostModel([Device(), Device(speed=2.0)], Link(bandwidth=1e12, latency=0.0), times)
    enc = Encoding(p, 2, dims=["cout", "cout"])
    ev = evaluate(enc, cost, np.array([[0, 4, 4], [0, 4, 4]]))  # all on device 0
    assert ev.stages[0] == 1 and ev.latency[0] == pytest.approx(8.0, rel=1e-9)
    ev = evaluate(enc, cost, np.array([[0, 0, 4], [0, 0, 4]]))  # all on the fast device 1
    assert ev.latency[0] == pytest.approx(4.0, rel=1e-6)


def test_ga_is_deterministic_and_never_worse_than_its_seeds():
    tvm = pytest.importorskip("tvm")  # noqa: F841
    from memsched.transform.split_relax import from_relax
    from split_models import tiny_cnn

    prob = from_relax(tiny_cnn())
    cost = CostModel([Device(), Device(), Device()],
                     Link(bandwidth=2e8, latency=2e-5, topology="host", call_overhead=1e-4),
                     OpTimes.from_flops(prob))
    r1 = compare(prob, cost, seed=3, n_gen=10, pop_size=12)
    r2 = solve(prob, cost, "ga", seed=3, n_gen=10, pop_size=12,
               seeds=[r1[m].X for m in ("single", "uniform", "greedy")])
    assert np.array_equal(r1["ga"].X, r2.X)
    best_seed = min(r1[m].latency for m in ("single", "uniform", "greedy"))
    assert r1["ga"].latency <= best_seed + 1e-15
    assert r1["ga"].feasible


def test_from_relax_classifies_the_operators():
    pytest.importorskip("tvm")
    from memsched.transform.split_relax import from_relax
    from split_models import tiny_cnn

    prob = from_relax(tiny_cnn())
    cls = {op.name: (op.cls, sorted(op.dims)) for op in prob.ops}
    kinds = [c for c, _ in cls.values()]
    assert kinds.count("conv") == 3 and "pool" in kinds and "concat" in kinds
    assert "mean" in kinds and "dense" in kinds
    dw = [op for op in prob.ops if op.cls == "conv" and op.inputs[0].cmode == "group"]
    assert len(dw) == 1 and dw[0].inputs[0].cin_group == 1
    add_xx = [op for op in prob.ops if op.kind == "relax.add" and op.cls == "eltwise"
              and len(op.inputs) == 1 and not op.weight_bytes]
    assert add_xx  # add(x, x) reads one region
    assert prob.outputs == [prob.ops[-1].output]


def test_bad_input_is_a_clear_error():
    p = chain()
    with pytest.raises(SplitError, match="at least one device"):
        Encoding(p, 0)
    with pytest.raises(SplitError, match="cannot be split along"):
        Encoding(p, 2, dims=["cout", "sideways"])
    with pytest.raises(SplitError, match="topology"):
        Link(topology="mesh")
    with pytest.raises(SplitError, match="unknown split method"):
        solve(p, cost_model(2), "magic")

"""Memory banks on the ``.pte`` side (issue 59 items 3-4, `memsched.executorch.plan.pte_banks`):

* the traffic of a planned tensor (bytes x (1 + the calls that read it)), per planned buffer
  in ``analyze``'s ``banks`` and its fast bank's share;
* ``reorder --memory-map``: a program's planned tensors placed across two banks whose fast
  one is too small for everything; the fast bank's share at least that of ExecuTorch's greedy
  rule on the same tensors, within the proven bound, the independent check passing on the
  written plan, the written program loading and running bit-equal in ExecuTorch's runtime
  (float programs) and on the emulated Cortex-M55 (an int8 Cortex-M program; skipped where
  the board cannot run);
* a malformed map, or one that cannot hold the program: one line, exit status 2, the output
  untouched.
"""
from __future__ import annotations

import copy
import json
import warnings

import pytest

pytest.importorskip("executorch")
torch = pytest.importorskip("torch")
nn = torch.nn

from memsched.banks import Bank, Buffer, greedy_place  # noqa: E402
from memsched.cli import main  # noqa: E402
from memsched.executorch import pte  # noqa: E402
from memsched.executorch.plan import pte_banks  # noqa: E402


class Branches(nn.Module):
    """Two branches of different widths joined by a cat, then a view of the stem read by a
    reduction: tensors of several sizes, lifetimes and read counts."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.a, self.b = nn.Conv2d(8, 16, 1), nn.Conv2d(8, 16, 3, padding=1)
        self.c = nn.Conv2d(32, 8, 1)

    def forward(self, x):
        s = torch.relu(self.stem(x))
        y = torch.cat([torch.relu(self.a(s)), self.b(s)], 1)
        return self.c(y).reshape(1, -1) + s.sum()


class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.relu(self.c(x))


@pytest.fixture(scope="module")
def programs():
    from executorch.exir import to_edge

    torch.manual_seed(0)
    x = torch.randn(1, 3, 16, 16)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, m in (("branches", Branches()), ("chain", Chain())):
            out[name] = to_edge(torch.export.export(m, (x,))).to_executorch().buffer
    return out


def _model(data: bytes):
    plan = pte.read_program(data).program.execution_plan[0]
    graph, info = pte.plan_graph(plan, 16)
    return plan, graph, info


def test_traffic_is_bytes_times_one_plus_reads(programs):
    """conv(x) -> relu: the input read once, the conv's output once, the output never."""
    plan, graph, info = _model(programs["chain"])
    got = {info["storages"][t]: tr for t, tr in
           enumerate(pte_banks.tensor_traffic(plan, info))}
    x, y = 3 * 16 * 16 * 4, 4 * 14 * 14 * 4
    assert sorted(got.values()) == sorted([2 * x, 2 * y, y])
    row = pte.analyze(programs["chain"])["forward"]
    assert row["banks"] == [{"mem_id": 1, "name": None, "bytes": plan.non_const_buffer_sizes[1],
                             "traffic_bytes": 2 * x + 3 * y}]
    assert row["fast_bank_traffic_share"] == 1.0 and row["fast_bank_mem_id"] == 1


def test_a_view_counts_for_its_storage(programs):
    """The stem's ReLU output is read by three calls (two convolutions and the sum): 4x its
    bytes. The last convolution's output is read only through its reshape (a view the planner
    puts at the same bytes) by the add: that read counts for the storage, 2x. The output
    is read by nobody: 1x."""
    plan, graph, info = _model(programs["branches"])
    times = [t // (s.hi - s.lo) for t, s in
             zip(pte_banks.tensor_traffic(plan, info), info["instances"])]
    every = info["by_index"]
    through_view = {id(every[i]) for res in info["resolved"] for v, i in res
                    if every[i].value != v}
    assert len(through_view) == 1
    (viewed,) = [k for k, s in enumerate(info["instances"]) if id(s) in through_view]
    assert times[viewed] == 2
    assert sorted(times).count(4) == 1 and times[-1] == 1
    assert all(t in (1, 2, 4) for t in times)


def _naive_share(data: bytes, banks) -> float:
    """ExecuTorch's greedy rule (`banks.greedy_place`) on the file's own order."""
    plan, graph, info = _model(data)
    n = len(graph.ops)
    traffic = pte_banks.tensor_traffic(plan, info)
    bufs = []
    for t, ten in enumerate(graph.tensors):
        lo = -1 if ten.producer is None else ten.producer
        hi = n if ten.is_output else max([lo] + list(ten.consumers))
        bufs.append(Buffer(ten.nbytes, lo + 1, hi + 1, traffic[t]))
    return greedy_place(bufs, [Bank(nm, size, 16) for nm, size, _ in banks]).share(0)


def test_reorder_across_two_banks(programs, tmp_path, capsys):
    data = programs["branches"]
    total = pte.planned_sizes(data)["forward"][1]
    fast = total * 15 // 100 // 16 * 16  # 15 %: the greedy rule leaves traffic behind here
    banks = [("dtcm", fast, 1), ("sram", 1 << 20, 2)]
    out, report = pte.reorder(data, time_limit=5, measure=True, memory_map=banks)
    row = report["forward"]
    assert row["changed"] and row["bit_equal"]
    sizes = pte.planned_sizes(out)["forward"]
    assert len(sizes) == 3 and 0 < sizes[1] <= fast and sizes[2] > 0
    assert [(r["name"], r["mem_id"], r["bytes"]) for r in row["banks"]] == \
        [("dtcm", 1, sizes[1]), ("sram", 2, sizes[2])]
    # the fast bank: no less than the greedy rule's share, and within the proven bound
    share = row["fast_bank_traffic_share"]
    assert share >= row["fast_bank_traffic_share_greedy"]
    assert share > _naive_share(data, banks)
    assert row["banks"][0]["traffic_bytes"] <= row["traffic_bound"]
    assert row["fast_bank_optimal"] == (row["banks"][0]["traffic_bytes"] >= row["traffic_bound"])
    assert 0 < share < 1 and not row["fits_before"]
    # the written plan: loads, passes the independent check, every tensor at a mapped mem_id
    plan, graph, info = _model(out)
    pte.check_written_plan(plan, graph, info)
    assert {s.mem for s in info["instances"]} == {1, 2}
    # bit-equal once more, on other inputs
    xs = pte.random_inputs(plan, seed=7)
    a = pte.run_method(data, "forward", [x.clone() for x in xs])
    b = pte.run_method(out, "forward", [x.clone() for x in xs])
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    # analyze's JSON of the written file: the same banks and share
    path = tmp_path / "banked.pte"
    path.write_bytes(out)
    capsys.readouterr()
    assert main(["analyze", str(path), "--json", "--memory-map", "dtcm:%d:1,sram:1M:2" % fast,
                 "--time-limit", "5"]) == 0
    got = json.loads(capsys.readouterr().out)["methods"]["forward"]
    assert got["banks"] == row["banks"] and got["plan_check"] == "passed"
    assert got["fast_bank_traffic_share"] == share
    # the text output: one line per bank
    assert main(["analyze", str(path), "--time-limit", "5"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("  bank ")]
    assert len(lines) == 2 and "fastest" in lines[0]


def test_map_breaking_plan_is_placed_even_when_order_gains_nothing(programs):
    """A chain: reorder alone leaves it as written; a map whose fast bank is too small for
    its plan places it across the banks all the same. A map it fits leaves it as written."""
    data = programs["chain"]
    _, report = pte.reorder(data, time_limit=5, measure=False)
    assert not report["forward"]["changed"]
    total = pte.planned_sizes(data)["forward"][1]
    out, report = pte.reorder(data, time_limit=5, measure=True,
                              memory_map=[("fast", total // 2, 1), ("slow", 1 << 20, 2)])
    assert report["forward"]["changed"] and report["forward"]["bit_equal"]
    assert pte.planned_sizes(out)["forward"][1] <= total // 2
    same, report = pte.reorder(data, time_limit=5, measure=False,
                               memory_map=[("fast", total, 1), ("slow", 1 << 20, 2)])
    assert same == data and not report["forward"]["changed"]
    assert report["forward"]["fast_bank_traffic_share"] == 1.0


@pytest.mark.parametrize("memory_map, words", [
    ("dtcm:4K", ["NAME:SIZE:MEM_ID"]),
    ("dtcm:4K:0,sram:1M:2", ["MEM_ID >= 1"]),
    ("dtcm:x:1", ["integers"]),
    ("dtcm:4K:1,sram:1K:2", ["'sram'", "more than its 1,024 B"]),
])
def test_cli_bad_or_small_map(programs, tmp_path, capsys, memory_map, words):
    src = tmp_path / "m.pte"
    src.write_bytes(programs["branches"])
    out = tmp_path / "out.pte"
    out.write_bytes(b"before")
    capsys.readouterr()
    assert main(["reorder", str(src), "-o", str(out), "--memory-map", memory_map]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(w in err[0] for w in words), err
    assert out.read_bytes() == b"before"
    assert src.read_bytes() == programs["branches"]


def test_cli_reorder_with_a_map(programs, tmp_path, capsys):
    src = tmp_path / "m.pte"
    src.write_bytes(programs["branches"])
    out = tmp_path / "out.pte"
    capsys.readouterr()
    assert main(["reorder", str(src), "-o", str(out), "--measure", "--json",
                 "--memory-map", "dtcm:16K:1,sram:1M:2"]) == 0
    row = json.loads(capsys.readouterr().out)["methods"]["forward"]
    assert row["bit_equal"] and [b["name"] for b in row["banks"]] == ["dtcm", "sram"]
    assert pte.planned_sizes(str(out))["forward"][1] <= 16384
    assert main(["reorder", str(src), "-o", str(out), "--memory-map",
                 "dtcm:16K:1,sram:1M:2"]) == 0
    text = capsys.readouterr().out
    assert "fast bank's traffic share" in text and "bank mem_id 2 (sram)" in text


def test_cortex_m_program_on_the_board(tmp_path):
    """An int8 Cortex-M program (ExecuTorch's default plan, the M55's MVE export) placed
    across a fast bank of a quarter of its arena and an 8 MiB one: the check passes, and the
    board, whose runner gives each planned buffer a span of its own, runs it bit-equal."""
    pytest.importorskip("tosa_serializer", reason="the Cortex-M quantizer imports tosa-tools")
    from cortex_m_models import int8_edge, stack

    from memsched import board

    try:
        board.firmware("executorch")
    except board.BoardUnavailable as e:
        pytest.skip(str(e))
    torch.manual_seed(0)
    edge, x = int8_edge(stack(["conv3s2", "dw3", "conv1"]), (1, 3, 32, 32), isa="mve")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = copy.deepcopy(edge).to_executorch().buffer
    total = pte.planned_sizes(prog)["forward"][1]
    banks = [("dtcm", total // 4 // 16 * 16, 1), ("sram", 8 << 20, 2)]
    out, report = pte.reorder(prog, time_limit=5, measure=False, memory_map=banks)
    row = report["forward"]
    assert row["changed"] and row["banks"][0]["bytes"] <= banks[0][1]
    assert row["fast_bank_traffic_share"] >= row["fast_bank_traffic_share_greedy"]
    plan, graph, info = _model(out)
    pte.check_written_plan(plan, graph, info)
    r0, o0 = board.run_pte(prog, [x], tmp_path / "default")
    r1, o1 = board.run_pte(out, [x], tmp_path / "banked")
    assert r0["status"] == 0 and r1["status"] == 0, (r0, r1)
    assert r1["planned_buffers"] == pte.planned_sizes(out)["forward"][1:]
    assert o1 == o0

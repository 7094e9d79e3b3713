"""`memsched analyze` on the Cortex-M programs memsched writes (issue 60, item 1).

The written-plan check (`pte.check_written_plan`) and the liveness model (`pte.plan_graph`)
must explain what memsched's writer does:

* patched programs whose equal values `share_values` made one: a patch's copy of an operator
  writes the value all copies share (a new tensor each time), a layout view names the pad
  output of its own patch, equal CMSIS-NN scratch buffers of several calls are one value
  (each call's scratch lives for that call);
* the in-place Cortex-M quantize: its int8 output written over the float model input it reads
  last (the input planned), as the kernel's forward loop allows (`inplace.may_share`).

Every program memsched writes passes the check, and the certified optimum analyze prints is
never above the bytes the program plans; a corrupted plan still fails. Host only: small int8
models, no kernels run.
"""
from __future__ import annotations

import copy
import warnings

import pytest

pytest.importorskip("executorch")
pytest.importorskip("tosa_serializer", reason="the Cortex-M quantizer imports tosa-tools")

from cortex_m_models import Block, cba, int8_edge, stack  # noqa: E402
from torch import nn  # noqa: E402

import memsched.executorch as mx  # noqa: E402
from memsched.executorch import pte  # noqa: E402
from memsched.executorch.format import pte as pte_format  # noqa: E402

MODELS = {
    # a stem, a depthwise and a pointwise layer (MobileNetV1-like)
    "stack": (lambda: stack(["conv3s2", "dw3", "conv1"]), (1, 3, 32, 32)),
    # inverted residuals (an add), through a stride-2 block
    "blocks": (lambda: nn.Sequential(cba(3, 8, 3, 2), Block(8, 8, 1), Block(8, 16, 2),
                                     nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4)),
               (1, 3, 48, 48)),
    # a stride-2 stem on few channels: the float input is the peak, quantized in place
    "stem": (lambda: nn.Sequential(cba(3, 4, 3, 2), cba(4, 4, 3, 1, 4), nn.AdaptiveAvgPool2d(1),
                                   nn.Flatten(), nn.Linear(4, 3)), (1, 3, 32, 32)),
}


@pytest.fixture(scope="module")
def edges():
    import torch

    torch.manual_seed(0)
    return {name: int8_edge(make(), shape, isa="mve")[0]
            for name, (make, shape) in MODELS.items()}


def _program(edge, patched: bool, shared: bool, planned: bool, forced: bool = True) -> bytes:
    """The program memsched writes: patched (``tile_patches``; ``forced``: a 2x2 grid at a
    generous overhead, so small models are patched too) or not, its equal values shared or
    not, the float input planned or the caller's."""
    kw = dict(alloc_graph_input=planned, time_limit=3.0)
    if patched:
        kw.update(tile_patches=True, share_values=shared)
        if forced:
            kw.update(grid="2x2", max_overhead=10.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        buf = copy.deepcopy(edge).to_executorch(mx.backend_config(**kw)).buffer
    return mx.share_values(buf)[0] if shared else buf


_CASES = [(m, p, s, i) for m in MODELS for p in (True, False) for s in (True, False)
          for i in (False, True)]
_programs: dict = {}


def _cached(edges, case) -> bytes:
    if case not in _programs:
        m, p, s, i = case
        _programs[case] = _program(edges[m], p, s, i)
    return _programs[case]


@pytest.mark.parametrize("case", _CASES, ids=[
    f"{m}-{'patched' if p else 'plain'}-{'shared' if s else 'unshared'}-"
    f"{'input-planned' if i else 'caller-input'}" for m, p, s, i in _CASES])
def test_analyze_explains_memsched_programs(edges, case):
    """The check passes, and the certified optimum (and the file order's peak) is at most the
    planned bytes: the model allows what the program does. A patched program has more
    instructions than the plain one (the patches applied)."""
    m, patched, shared, planned = case
    data = _cached(edges, case)
    row = pte.analyze(data, time_limit=5)["forward"]
    assert "error" not in row, row.get("error")
    assert row["plan_check"] == "passed", row["plan_check"]
    assert row["optimum_peak"] <= row["file_order_peak"] <= row["planned_bytes"]
    if patched:
        plain = pte.summary(_cached(edges, (m, False, shared, planned)))["forward"]
        assert row["instructions"] > plain["instructions"]
    # reordering such a program never makes it larger (a value standing for several
    # tensors leaves it as written)
    out, report = pte.reorder(data, time_limit=5, measure=False)
    pte.read_program(out)
    assert report["forward"]["planned_after"] <= report["forward"]["planned_before"]


@pytest.mark.parametrize("planned", [False, True], ids=["caller-input", "input-planned"])
def test_analyze_explains_the_default_options(edges, planned):
    """``backend_config(tile_patches=True, share_values=True)`` as a user writes it, then
    ``mx.share_values``: the check passes, the optimum is at most the planned bytes."""
    data = _program(edges["blocks"], True, True, planned, forced=False)
    row = pte.analyze(data, time_limit=5)["forward"]
    assert row["plan_check"] == "passed", row["plan_check"]
    assert row["optimum_peak"] <= row["file_order_peak"] <= row["planned_bytes"]


def _quantize_in_place(plan):
    """(float input, int8 output) values of the first quantize written over its input."""
    for ins in plan.chains[0].instructions:
        a = ins.instr_args
        if plan.operators[a.op_index].name != "cortex_m::quantize_per_tensor":
            continue
        x, y = a.args[0], a.args[-1]
        ax, ay = plan.values[x].val.allocation_info, plan.values[y].val.allocation_info
        if ax is not None and ay is not None and ax.memory_id == ay.memory_id and \
                ax.memory_offset_low == ay.memory_offset_low:
            return x, y
    return None


def _set_offset(plan, v, off):
    a = plan.values[v].val.allocation_info
    a.memory_offset_low, a.memory_offset_high = off & 0xFFFFFFFF, off >> 32


@pytest.mark.parametrize("case", [("blocks", True, True, True), ("blocks", True, False, True),
                                  ("stem", False, False, True)],
                         ids=["patched-shared", "patched-unshared", "plain"])
def test_in_place_quantize_only_under_the_kernels_rule(edges, case):
    """With the input planned, the quantize's int8 output sits on the float input it reads
    last (the check passes, above). Moved 16 B up -- past the ``a - b`` = 3 B the forward loop
    allows -- the same overlap is an error."""
    data = _cached(edges, case)
    pf = pte_format.read_pte(data)
    plan = pf.program.execution_plan[0]
    pair = _quantize_in_place(plan)
    assert pair is not None, "no in-place quantize in a program with the input planned"
    _x, y = pair
    off = plan.values[y].val.allocation_info.memory_offset_low
    _set_offset(plan, y, off + 16)
    row = pte.analyze(pte_format.write_pte(pf), time_limit=5)["forward"]
    assert row["plan_check"] != "passed" and "overlap" in row["plan_check"]


def _overlapping_pairs(plan) -> list[tuple[int, int]]:
    """Tensors written by instructions and live at once in different bytes of one arena (a
    call's input and output ...), the first read by its own value only when or after the
    second is written, the second named by its own value only and not the int8 output of a quantize
    over the first, of another size: (value to move, offset to move it to) each. (A tensor
    read after that only through a view names no value of its own there: a tensor written
    over exactly its bytes, or over more, is the view's base as far as the file tells, as
    before. With values shared, a tensor of the same size and dtype written over exactly
    its bytes reads as a layout view of that tensor, which is what such programs do.)"""
    graph, info = pte.plan_graph(plan)
    n = len(graph.ops)
    insts = info["instances"]
    every = info["by_index"]
    names = {}  # instance -> the values that name it
    reads = {}  # instance -> (instruction, whether its own value names it there)
    for k, res in enumerate(info["resolved"]):
        for v, i in res:
            names.setdefault(id(every[i]), set()).add(v)
            reads.setdefault(id(every[i]), []).append((k, v == every[i].value))
    in_place = {(id(every[a]), id(every[b])) for a, b in info["inplace"].values()}
    made = {}
    for s in insts:
        made[s.value] = made.get(s.value, 0) + 1
    spans = []
    for t, s in enumerate(insts):
        ten = graph.tensors[t]
        lo = -1 if ten.producer is None else ten.producer
        hi = n if ten.is_output else max([lo] + list(ten.consumers))
        spans.append((lo, hi))
    sizes = plan.non_const_buffer_sizes
    out = []
    for sa, (la, ha) in zip(insts, spans):
        for sb, (lb, hb) in zip(insts, spans):
            if sa is sb or sa.kind != "written" or sb.kind != "written" or sa.mem != sb.mem:
                continue
            if names[id(sb)] != {sb.value} or made[sb.value] != 1 or sb.hi == sb.lo or \
                    sb.hi - sb.lo == sa.hi - sa.lo or (id(sa), id(sb)) in in_place:
                continue
            apart = sa.hi <= sb.lo or sb.hi <= sa.lo
            later = [own for k, own in reads.get(id(sa), ()) if k >= lb]
            read_after = bool(later) and all(later)
            if apart and la < lb <= ha and read_after and \
                    sa.lo + (sb.hi - sb.lo) <= sizes[sa.mem]:
                out.append((sb.value, sa.lo))
    return out


@pytest.mark.parametrize("case", [("stack", True, True, False), ("blocks", True, True, True),
                                  ("blocks", False, False, False), ("stem", True, False, True)],
                         ids=["patched-shared", "patched-shared-planned", "plain",
                              "patched-unshared-planned"])
def test_a_corrupted_plan_fails(edges, case):
    """Two live tensors moved onto each other (up to 12 such moves, spread over the program,
    one at a time): the check fails each time -- the model explains memsched's programs, it
    does not accept everything."""
    data = _cached(edges, case)
    assert pte.analyze(data, time_limit=5)["forward"]["plan_check"] == "passed"
    moves = _overlapping_pairs(pte.read_program(data).program.execution_plan[0])
    assert moves
    for v, off in moves[::max(1, len(moves) // 12)]:
        pf = pte_format.read_pte(data)
        _set_offset(pf.program.execution_plan[0], v, off)
        row = pte.analyze(pte_format.write_pte(pf), time_limit=5)["forward"]
        assert row["plan_check"] != "passed" and "overlap" in row["plan_check"], \
            (v, off, row["plan_check"])

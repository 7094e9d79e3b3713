"""Regions as a search dimension (`memsched.patches.sequence`): on random stacks the k-region
choice is never worse than the best single region, and equals brute-force enumeration of every
sequence of regions and grids priced by the same evaluator (`price_sequence`)."""
import itertools

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memsched.memory import MemoryModel
from memsched.patches import RuntimeMemory
from memsched.patches import evaluator as evaluator_mod
from memsched.patches.errors import Refused
from memsched.patches.plans import plan_patches
from patch_reference import stack_model
from memsched.patches.regions import regions
from memsched.patches.sequence import price_sequence
from test_patches_se import _graph_of, search

GRIDS = ((1, 2), (2, 1), (2, 2), (3, 1))
MEMORY = RuntimeMemory("test", MemoryModel.get("tvm"))


@st.composite
def chains(draw, max_ops=5):
    """Convolution / depthwise / pooling chains on an 8..24 square map (a residual add at the
    end sometimes): spatially local throughout, so every cut is a region boundary."""
    n = draw(st.integers(2, max_ops))
    specs = []
    for _ in range(n):
        kind = draw(st.sampled_from(["CONV_2D", "DEPTHWISE_CONV_2D", "MAX_POOL_2D"]))
        specs.append((kind, draw(st.sampled_from([1, 3])), draw(st.sampled_from([1, 1, 2])),
                      1, "SAME"))
    size = draw(st.integers(8, 24))
    try:
        return stack_model(specs, size, size, draw(st.integers(1, 3)),
                           residual=draw(st.booleans()))
    except ValueError:
        assume(False)


def _brute(sm, graph, index, max_overhead: float, max_regions: int, fits=None):
    """The lowest total of every sequence of up to ``max_regions`` regions (each starting where
    the one before ends) and grids within the MAC budget (and ``fits(plans)``, when given)
    that beats the unpatched file order, each priced by `price_sequence`; None when none
    does."""
    total_macs = sum(sm.op_macs(op) for op in sm.ops)
    from memsched.memory import Problem

    bar = max(Problem.from_graph(graph, MEMORY.activations).evaluate(
        list(range(len(graph)))).steps)
    best = None

    def walk(start: int, plans: list) -> None:
        nonlocal best
        if len(plans) == max_regions:
            return
        for r in regions(sm, [start])[0]:
            for g in GRIDS:
                try:
                    p = plan_patches(sm, r, g)
                except Refused:
                    continue
                seq = plans + [p]
                total, macs = price_sequence(sm, graph, index, MEMORY, seq)
                if macs <= (1 + max_overhead) * total_macs + 1e-9 and total < bar and \
                        (best is None or total < best) and (fits is None or fits(seq)):
                    best = total
                walk(r.length, seq)

    walk(0, [])
    return best


@pytest.fixture
def deterministic(monkeypatch):
    """The search's evaluator with every heuristic on, always (as `price_sequence`), and the
    small grid set the brute force enumerates."""
    monkeypatch.setattr(evaluator_mod, "REFINE_WINDOW", float("inf"))
    monkeypatch.setattr(evaluator_mod, "DEFAULT_GRIDS", GRIDS)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(sm=chains(), max_overhead=st.sampled_from([0.1, 0.3, 1.0]))
def test_regions_equal_brute_force(deterministic, sm, max_overhead):
    graph, index = _graph_of(sm)
    kw = dict(max_overhead=max_overhead, time_limit=60.0, certify=False,
              frontier_overhead=float("inf"))
    res = search(sm, graph, index, MEMORY, max_regions=3, **kw)
    want = _brute(sm, graph, index, max_overhead, 3)
    got = res.choice.total if res.choice is not None else None
    assert got == want
    one = search(sm, graph, index, MEMORY, max_regions=1, **kw).choice
    if one is not None:  # never worse than the best single region
        assert got is not None and got <= one.total
    if res.choice is not None:
        c = res.choice
        assert c.overhead <= max_overhead + 1e-9
        seq = c.sequence
        for a, b in itertools.pairwise(seq):  # each region starts where the one before ends
            assert b.region_start == a.region_ops
        # the totals the search reports are the sequence's under the one evaluator
        assert price_sequence(sm, graph, index, MEMORY, res.plans_of(c)) == (c.total, c.macs)


def test_two_regions_beat_one_on_a_deep_stack():
    """A 96x96 MobileNet-like stack: within +30 % MACs the first blocks in 4x4 patches, then
    the next ones in a few, is below any single region (measured: 6,784 B vs 7,488 B)."""
    specs = [("CONV_2D", 3, 2, 1, "SAME"), ("DEPTHWISE_CONV_2D", 3, 1, 1, "SAME"),
             ("CONV_2D", 1, 1, 1, "SAME"), ("DEPTHWISE_CONV_2D", 3, 2, 1, "SAME"),
             ("CONV_2D", 1, 1, 1, "SAME"), ("DEPTHWISE_CONV_2D", 3, 1, 1, "SAME"),
             ("CONV_2D", 1, 1, 1, "SAME"), ("CONV_2D", 3, 2, 1, "SAME")]
    sm = stack_model(specs, 96, 96, 3)
    graph, index = _graph_of(sm)
    one = search(sm, graph, index, MEMORY, time_limit=3, max_regions=1).choice
    res = search(sm, graph, index, MEMORY, time_limit=3)
    c = res.choice
    assert len(c.sequence) >= 2 and c.total < one.total and c.overhead <= 0.3
    assert res.as_dict()["choice"]["regions"][1]["region_start"] == c.sequence[0].region_ops
    assert res.bound(c)["regions"] == len(c.sequence)
    # forced grid or split: one region, as asked
    forced = search(sm, graph, index, MEMORY, time_limit=2, grid=(2, 2))
    assert forced.choice is None or len(forced.choice.sequence) == 1


class ToyTime:
    """A `RuntimeTime` whose kernels cost a fixed call overhead plus their work (MACs, or
    the bytes a cut, pad or concatenation moves): patches pay per node, as on a Cortex-M."""

    name = "toy"
    CALL = 4000

    def program(self, sm):
        return 100 + sum(self.op(sm, k) for k in range(len(sm.ops)))

    def op(self, sm, k):
        return self.CALL + sm.op_macs(sm.ops[k])

    def plan(self, sm, plan):
        out = 0
        for k, nd in enumerate(plan.nodes):
            out += self.CALL + (sm.op_macs(sm.ops[nd.op], nd.win) if nd.kind == "op"
                                else 2 * plan.node_bytes(sm, k))
        return out


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(sm=chains(), max_slowdown=st.sampled_from([1.0, 1.05, 1.2, 2.0, None]),
       depth=st.sampled_from([1, 3]))
def test_time_budget_equals_brute_force(deterministic, sm, max_slowdown, depth):
    """With a runtime cost model, the k-region choice is the lowest total of every sequence
    within both the MAC and the instruction budget (brute force over the same evaluator), its
    predicted instructions are the sequence's, and the (RAM, time) frontier is a frontier."""
    import dataclasses

    from memsched.patches.runtime import runtime_of

    graph, index = _graph_of(sm)
    time = ToyTime()
    rt = dataclasses.replace(runtime_of(MEMORY), time=time)
    kw = dict(max_overhead=1.0, time_limit=60.0, certify=False, frontier_overhead=float("inf"))
    res = search(sm, graph, index, rt, max_regions=depth, max_slowdown=max_slowdown, **kw)
    base = time.program(sm)

    def instructions(plans):
        return base + sum(time.plan(sm, p) - sum(time.op(sm, k) for k in p.region.ops)
                          for p in plans)

    best = _brute(sm, graph, index, 1.0, depth, fits=lambda seq: max_slowdown is None or
                  instructions(seq) <= max_slowdown * base + 1e-9)
    got = res.choice.total if res.choice is not None else None
    assert got == best
    assert res.original.instructions == base
    if res.choice is not None:
        assert res.choice.instructions == instructions(res.plans_of(res.choice))
        assert max_slowdown is None or res.choice.slowdown <= max_slowdown + 1e-9
    front = res.time_frontier()
    assert front and front[0].instructions <= base
    for a, b in itertools.pairwise(front):
        assert a.instructions <= b.instructions and a.total > b.total
    assert res.as_dict()["time_frontier"][0]["cpu_instructions"] == front[0].instructions


class MacTime(ToyTime):
    """A `RuntimeTime` of MACs alone: the halos are the whole price of a patch."""

    def op(self, sm, k):
        return sm.op_macs(sm.ops[k])

    def plan(self, sm, plan):
        return sum(sm.op_macs(sm.ops[nd.op], nd.win) for nd in plan.nodes if nd.kind == "op")


def test_sequence_search_prices_nothing_over_the_time_budget(monkeypatch):
    """After the first region the search prices no candidate already over ``max_slowdown``
    (it can be neither chosen nor extended: its plan's instructions say so before its part is
    built), so its budget goes to those that may be chosen (before: 43 of the 70 it priced
    here were over); the one-region search still prices them (the report's time frontier).
    The choice stays within the bound."""
    import dataclasses

    from memsched.patches.evaluator import Evaluator
    from memsched.patches.runtime import runtime_of

    specs = [("CONV_2D", 3, 2, 1, "SAME"), ("DEPTHWISE_CONV_2D", 3, 1, 1, "SAME"),
             ("CONV_2D", 1, 1, 1, "SAME"), ("DEPTHWISE_CONV_2D", 3, 2, 1, "SAME"),
             ("CONV_2D", 1, 1, 1, "SAME"), ("DEPTHWISE_CONV_2D", 3, 1, 1, "SAME")]
    sm = stack_model(specs, 48, 48, 3)
    graph, index = _graph_of(sm)
    rt = dataclasses.replace(runtime_of(MEMORY), time=MacTime())
    priced = []
    real = Evaluator.price

    def price(self, *args):
        c = real(self, *args)
        priced.append(c)
        return c

    monkeypatch.setattr(Evaluator, "price", price)
    bound = 1.02
    res = search(sm, graph, index, rt, time_limit=60.0, max_slowdown=bound)
    after = [c for c in priced if c.before]
    assert after and all(c.slowdown <= bound + 1e-12 for c in after)
    assert any(c.slowdown > bound for c in priced if not c.before)  # for the frontier
    assert res.choice is not None and res.choice.slowdown <= bound + 1e-12


def test_without_cost_model_time_is_not_priced():
    """A runtime without a cost model (TVM): no instructions, the MAC budget alone."""
    sm = stack_model([("CONV_2D", 3, 1, 1, "SAME"), ("CONV_2D", 3, 1, 1, "SAME")], 16, 16, 3)
    graph, index = _graph_of(sm)
    res = search(sm, graph, index, MEMORY, time_limit=5.0, max_slowdown=1.0)
    assert res.original.instructions is None and res.time_frontier() == []
    assert res.choice is None or res.choice.instructions is None


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sm=chains(max_ops=6), begin_at=st.integers(0, 3),
       model=st.sampled_from(["tvm", "paper"]))
def test_node_floor_bounds_every_order(sm, begin_at, model):
    """`Evaluator.node_floor` (what lets the sequence search skip building and ordering a
    hopeless candidate's part) never exceeds the part's peak in any order the search or the
    scheduler gives it: the patch-by-patch order, the heuristics' and the file order; under
    a model that counts model outputs and one that does not."""
    _check_node_floor(sm, begin_at, RuntimeMemory("test", MemoryModel.get(model)), se=False)


@pytest.mark.parametrize("model", ["tvm", "paper"])
def test_node_floor_bounds_se_plans(model):
    """... and on squeeze-and-excitation plans, recomputed and kept."""
    from test_patches_se import SE_STACK

    sm = stack_model(SE_STACK, 32, 32, 3)
    assert _check_node_floor(sm, 0, RuntimeMemory("test", MemoryModel.get(model)), se=True)


def _check_node_floor(sm, begin_at: int, memory, se: bool) -> int:
    from memsched.memory import Problem
    from memsched.patches import Described
    from memsched.patches.evaluator import Evaluator, resolve
    from memsched.patches.patched import heuristic_order, patch_order, patched_graph
    from memsched.schedulers import best_heuristic

    graph, index = _graph_of(sm)
    ev = Evaluator(Described(sm, graph, index), memory,
                   resolve(None, memory, sm, starts=(0,)))
    begin = min(begin_at, len(sm.ops) - 1)
    checked = 0
    for r in regions(sm, [begin], se=se)[0]:
        for g in GRIDS:
            for keep in (False, True) if se else (False,):
                try:
                    p = plan_patches(sm, r, g, keep=keep)
                except Refused:
                    continue
                pg = patched_graph(sm, graph, index, p, prefix_only=True, begin=begin)
                prob = Problem.from_graph(pg, memory.activations)
                floor = ev.node_floor(p)
                assert floor > 0
                for order in (patch_order(pg, p), list(range(len(pg))),
                              best_heuristic(prob)[0],
                              heuristic_order(pg, p, prob, baselines=False)[1]):
                    assert floor <= max(prob.evaluate(order).steps)
                checked += 1
    assume(checked)
    return checked


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(sm=chains(max_ops=6), max_overhead=st.sampled_from([0.3, 1.0]))
def test_hopeless_candidates_skipped_same_answer(monkeypatch, sm, max_overhead):
    """Skipping the parts of candidates whose nodes alone cannot beat the incumbent
    (`RegionSearch._hopeless`) changes nothing the search answers: the same choice, totals,
    MACs and work counted."""
    from memsched.patches.search import RegionSearch

    graph, index = _graph_of(sm)
    kw = dict(max_overhead=max_overhead, time_limit=None, max_regions=3)
    fast = search(sm, graph, index, MEMORY, **kw)
    with monkeypatch.context() as m:
        m.setattr(RegionSearch, "_hopeless", lambda self, plan, persist, bar: False)
        slow = search(sm, graph, index, MEMORY, **kw)

    def key(res):
        c = res.choice
        return None if c is None else (
            [(x.region_start, x.region_ops, x.grid) for x in c.sequence], c.total, c.macs)

    assert key(fast) == key(slow)
    assert fast.priced == slow.priced

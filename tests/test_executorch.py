"""memsched.executorch: certified order and exact arenas inside ExecuTorch's export.

Every model is exported twice (ExecuTorch's default config and `backend_config()`), both
programs run in ExecuTorch's runtime: outputs must be bit-equal, the planned bytes read back
from the serialized program never above the default's, equal to the certified optimum when both
order and packing are proven. Small random programs are checked against brute force over every
topological order, each measured by ExecuTorch's own lifetime code.
"""
from __future__ import annotations

import random
import subprocess
import sys

import pytest

pytest.importorskip("executorch")
torch = pytest.importorskip("torch")
nn = torch.nn

from executorch.exir import ExecutorchBackendConfig, to_edge  # noqa: E402
from executorch.exir.memory_planning import update_all_tensors_lifetime  # noqa: E402
from executorch.exir.passes import MemoryPlanningPass  # noqa: E402

import memsched.executorch as mx  # noqa: E402
from memsched.executorch.memory import model as mm  # noqa: E402
from memsched.executorch import pte  # noqa: E402
from memsched.executorch.plan.reorder import apply_node_order, schedule_model  # noqa: E402
from memsched.arena_problem import max_live  # noqa: E402


# ------------------------------------------------------------------ models
class Residual(nn.Module):
    """Branches of different widths, a residual, split/getitem, a reshape view, a mutable
    buffer updated in place (copy_ back) and read after the update."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.wide = nn.Conv2d(8, 32, 1)
        self.narrow = nn.Conv2d(32, 8, 1)
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        a = torch.relu(self.c1(x))
        big = self.wide(a)
        b = self.c2(a) + a
        self.count.add_(1)
        q, r = torch.split(b, 4, dim=1)
        y = self.narrow(big)
        return (q * r).reshape(1, -1) + y.sum(), self.count * 2


class Inception(nn.Module):
    """Parallel branches concatenated twice (the irregular kind greedy packs badly)."""

    def __init__(self, c=8):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.b = nn.ModuleList([nn.Conv2d(c, w, 1) for w in (4, 16, 8, 24)])
        self.b2 = nn.ModuleList([nn.Conv2d(52, w, 3, padding=1) for w in (8, 32)])
        self.head = nn.Conv2d(40, 8, 1)

    def forward(self, x):
        s = torch.relu(self.stem(x))
        cat = torch.cat([torch.relu(m(s)) for m in self.b], dim=1)
        cat2 = torch.cat([m(cat) for m in self.b2], dim=1)
        return self.head(cat2).mean(dim=(2, 3))


class MobileBlock(nn.Module):
    """Inverted residuals (expand, depthwise, project, add): MobileNetV2-like."""

    def __init__(self, c=8, e=4):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.blocks = nn.ModuleList(nn.Sequential(
            nn.Conv2d(c, c * e, 1), nn.ReLU6(),
            nn.Conv2d(c * e, c * e, 3, padding=1, groups=c * e), nn.ReLU6(),
            nn.Conv2d(c * e, c, 1)) for _ in range(2))
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        h = self.stem(x)
        for blk in self.blocks:
            h = h + blk(h)
        return self.fc(h.mean(dim=(2, 3)))


def _export(model, x, config=None):
    ep = torch.export.export(model.eval(), (x,))
    return to_edge(ep).to_executorch(config)


def _run(buffer, x):
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(buffer).load_method("forward")
    return [o.clone() for o in method.execute([x])]


def _planned(buffer) -> int:
    return sum(pte.planned_sizes(buffer)["forward"][1:])


MODELS = [(Residual, (1, 3, 16, 16)), (Inception, (1, 3, 12, 12)), (MobileBlock, (1, 3, 12, 12))]


@pytest.mark.parametrize("make,shape", MODELS, ids=[m.__name__ for m, _ in MODELS])
def test_backend_config_end_to_end(make, shape):
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(*shape)
    base = _export(make_copy(model), x)
    config = mx.backend_config(time_limit=5)
    ours = _export(make_copy(model), x, config)
    # outputs bit-equal in ExecuTorch's runtime
    for a, b in zip(_run(base.buffer, x), _run(ours.buffer, x)):
        assert torch.equal(a, b)
    (rep,) = mx.report(config).values()
    assert rep.note == ""  # model agreed with ExecuTorch's lifetimes, order taken or kept
    planned = _planned(ours.buffer)
    assert planned == rep.planned_bytes
    assert planned <= _planned(base.buffer)
    for a in rep.arenas:
        assert a.lower_bound <= a.memsched <= a.greedy
    # certified: order optimal and arena at the order's liveness peak -> the optimum
    o = rep.order
    assert o.lower_bound <= o.peak <= o.input_peak
    if o.optimal and all(a.optimal for a in rep.arenas):
        assert planned == o.peak
    assert rep.checked_tensors > 0
    # the .pte reader models the written instruction order the same way, and checks the plan
    for buffer, peak in ((base.buffer, o.input_peak), (ours.buffer, o.peak)):
        info = pte.analyze(buffer, time_limit=5)["forward"]
        assert info["plan_check"] == "passed"
        assert info["file_order_peak"] == peak
        if info["optimal"] and o.optimal:
            assert info["optimum_peak"] == o.lower_bound
    # reorder the default .pte itself: bit-equal (measured inside), never larger, the same
    # certified optimum as the export path when both are proven
    data, rr = pte.reorder(base.buffer, time_limit=5)
    r = rr["forward"]
    assert r["planned_after"] <= r["planned_before"] == _planned(base.buffer)
    assert _planned(data) == r["planned_after"]
    if r["changed"]:
        assert r["bit_equal"]
    if r.get("order_optimal") and r.get("arena_optimal") and r["changed"] and o.optimal \
            and all(a.optimal for a in rep.arenas):
        assert r["planned_after"] == planned


def make_copy(model):
    import copy

    return copy.deepcopy(model)


def test_packer_alone_never_above_greedy():
    from executorch.exir.memory_planning import MemoryPlanningAlgorithmSuite, greedy

    torch.manual_seed(1)
    model, x = Inception().eval(), torch.randn(1, 3, 12, 12)
    algo = mx.MemschedAlgo(time_limit=5)
    suite = MemoryPlanningAlgorithmSuite(algo_list=[greedy, algo])
    ours = _export(make_copy(model), x,
                   ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(suite)))
    base = _export(make_copy(model), x)
    (a,) = algo.reports
    assert _planned(ours.buffer) == min(a.greedy, a.memsched) <= _planned(base.buffer)
    for u, v in zip(_run(base.buffer, x), _run(ours.buffer, x)):
        assert torch.equal(u, v)


def test_options_go_to_the_right_place():
    torch.manual_seed(2)
    model, x = MobileBlock().eval(), torch.randn(1, 3, 8, 8)
    config = mx.backend_config(time_limit=2, alloc_graph_input=False, alloc_graph_output=False,
                               emit_stacktrace=False)
    assert config.memory_planning_pass.alloc_graph_input is False
    ours = _export(make_copy(model), x, config)
    base = _export(make_copy(model), x, ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False,
                                                alloc_graph_output=False)))
    assert _planned(ours.buffer) <= _planned(base.buffer)
    with pytest.raises(TypeError):
        mx.backend_config(memory_planning_pass=None)


# ------------------------------------------------------------------ brute force
def _random_model(seed: int, n_ops: int, mutable: bool = False):
    """A random DAG of 1x1 convs, relus, concats and adds; with ``mutable``, a buffer read
    (old value) by one op and updated in place (copy_ back) from another value."""
    rng = random.Random(seed)

    class R(nn.Module):
        def __init__(self):
            super().__init__()
            self.plan = []
            self.convs = nn.ModuleList()
            widths = [2]
            for _ in range(n_ops):
                k = rng.choice(["conv", "conv", "relu", "cat", "add"])
                i = rng.randrange(len(widths))
                j = rng.randrange(len(widths))
                if k == "add" and widths[i] != widths[j]:
                    k = "cat"
                if k == "conv":
                    w = rng.choice([1, 2, 4, 8])
                    self.convs.append(nn.Conv2d(widths[i], w, 1))
                    self.plan.append(("conv", i, len(self.convs) - 1))
                elif k == "relu":
                    w = widths[i]
                    self.plan.append(("relu", i, None))
                elif k == "cat":
                    w = widths[i] + widths[j]
                    self.plan.append(("cat", i, j))
                else:
                    w = widths[i]
                    self.plan.append(("add", i, j))
                widths.append(w)
            if mutable:
                self.register_buffer("acc", torch.zeros(1))
                self.read_at = rng.randrange(1, n_ops + 1)
                self.update_from = rng.randrange(1, n_ops + 1)
            for prm in self.parameters():  # a buffer updated from weights: no autograd
                prm.requires_grad_(False)

        def forward(self, x):
            vals = [x]
            used = set()
            for k, i, j in self.plan:
                used.add(i)
                if k == "conv":
                    v = self.convs[j](vals[i])
                elif k == "relu":
                    v = torch.relu(vals[i])
                else:
                    used.add(j)
                    v = torch.cat([vals[i], vals[j]], 1) if k == "cat" else vals[i] + vals[j]
                vals.append(v)
            outs = tuple(v for t, v in enumerate(vals) if t not in used and t > 0)
            if mutable:
                old = vals[self.read_at] * self.acc
                self.acc.add_(vals[self.update_from].mean())
                outs = outs + (old,)
            return outs

    return R().eval()


def _topological_orders(graph, limit):
    n = len(graph.ops)
    preds = [set(op.preds) for op in graph.ops]
    out = []

    def rec(done, order):
        if len(out) > limit:
            return
        if len(order) == n:
            out.append(list(order))
            return
        for v in range(n):
            if v not in done and preds[v] <= done:
                done.add(v)
                order.append(v)
                rec(done, order)
                order.pop()
                done.discard(v)

    rec(set(), [])
    return out if len(out) <= limit else None


def _et_peak(gm, gs, flags, planned):
    """ExecuTorch's own lifetimes (update_all_tensors_lifetime) -> liveness peak."""
    for n in gm.graph.nodes:
        for s in mm.node_refs(n, gs):
            s.lifetime = [None, None]
    update_all_tensors_lifetime(gm, gs)
    return max_live([(mm.aligned_size(s, flags.alignment), s.lifetime[0], s.lifetime[1])
                     for s in planned if s.storage_base is None])


class _BruteForce(MemoryPlanningPass):
    def __init__(self):
        super().__init__()
        self.result = None

    def run(self, gm, gs=None):
        self._set_alloc_node_spec(gm)
        flags = mm.PlanFlags()
        model = mm.build_model(gm, gs, flags)
        planned = mm.planned_specs(gm, gs, flags)
        original = list(gm.graph.nodes)
        orders = _topological_orders(model.graph, 3000)
        if orders is not None:
            from memsched.memory import Problem

            prob = Problem.from_graph(model.graph, mm.EXECUTORCH_MODEL)
            best = None
            for order in orders:
                apply_node_order(gm, model.nodes_in_order(order))
                et = _et_peak(gm, gs, flags, planned)
                assert prob.evaluate(order).peak == et  # the model is exact on every order
                best = et if best is None else min(best, et)
            apply_node_order(gm, original)
            s = schedule_model(model, 5)
            self.result = (s.peak, s.optimal, best, len(orders))
        for n in gm.graph.nodes:
            for s in mm.node_refs(n, gs):
                s.lifetime = [None, None]
        # alloc specs are set: skip the base's second assignment
        self._set_alloc_node_spec = lambda gm: None
        return super().run(gm, gs)


@pytest.mark.parametrize("seed", range(7))
def test_optimum_matches_brute_force(seed):
    torch.manual_seed(seed)
    model = _random_model(seed, n_ops=5 + seed % 3, mutable=seed % 2 == 1)
    x = torch.randn(1, 2, 4, 4)
    bf = _BruteForce()
    _export(make_copy(model), x, ExecutorchBackendConfig(memory_planning_pass=bf))
    if bf.result is None:
        pytest.skip("too many orders")
    peak, optimal, best, n_orders = bf.result
    assert optimal and peak == best, (peak, best, n_orders)
    # and the whole path: planned bytes at the optimum whenever the packer proves its arena
    config = mx.backend_config(time_limit=5)
    ours = _export(make_copy(model), x, config)
    (rep,) = mx.report(config).values()
    assert rep.order.peak == best
    if all(a.optimal for a in rep.arenas):
        assert _planned(ours.buffer) == best
    for a, b in zip(_run(_export(make_copy(model), x).buffer, x), _run(ours.buffer, x)):
        assert torch.equal(a, b)


# ------------------------------------------------------------------ checker and files
def test_checker_catches_overlap():
    class S:
        def __init__(self, lo, hi, size):
            self.lifetime, self.allocated_memory, self.storage_base = [lo, hi], size, None

    a, b = S(0, 3, 16), S(2, 5, 16)
    mx.check_intervals([(a, 0, 3, 0, 16), (b, 4, 5, 0, 16)], 32)  # disjoint in time
    with pytest.raises(mx.PlanCheckError):
        mx.check_intervals([(a, 0, 3, 0, 16), (b, 2, 5, 8, 16)], 32)
    with pytest.raises(mx.PlanCheckError):
        mx.check_intervals([(a, 0, 3, 20, 16)], 32)


def test_pte_reader(tmp_path):
    torch.manual_seed(3)
    et = _export(Residual(), torch.randn(1, 3, 8, 8))
    path = tmp_path / "m.pte"
    path.write_bytes(et.buffer)
    info = pte.summary(path)["forward"]
    assert info["planned_bytes"] == sum(pte.planned_sizes(path)["forward"][1:]) > 0
    assert info["operators"]["aten::convolution.out"] == 4
    for bad in (et.buffer[:100], et.buffer[: len(et.buffer) // 3], b"hello world"):
        with pytest.raises(mx.PteFileError) as e:
            pte.read_program(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(mx.PteFileError):
        pte.read_program(tmp_path / "missing.pte")
    out = tmp_path / "out.pte"
    with pytest.raises(mx.PteFileError):
        pte.write_reordered(et.buffer[:500], out)
    assert not out.exists()
    report = pte.write_reordered(path, out, time_limit=5)
    assert pte.planned_sizes(out)["forward"][1] == report["forward"]["planned_after"]


def test_import_memsched_does_not_import_torch():
    code = ("import sys, memsched; "
            "assert 'torch' not in sys.modules and 'executorch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
    code = ("import sys, memsched.executorch; "
            "assert 'torch' not in sys.modules and 'executorch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_delegate_is_planned_around():
    """An XNNPACK-lowered program: the delegate call is one op; only its boundary tensors are
    ExecuTorch's to plan (with XNNPACK's 64 B padding); outputs stay bit-equal."""
    xnn = pytest.importorskip("executorch.backends.xnnpack.partition.xnnpack_partitioner")
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(4)
    model, x = Inception().eval(), torch.randn(1, 3, 12, 12)

    def lower(config=None):
        ep = torch.export.export(make_copy(model), (x,))
        return to_edge_transform_and_lower(
            ep, partitioner=[xnn.XnnpackPartitioner()]).to_executorch(config)

    config = mx.backend_config(time_limit=2)
    base, ours = lower(), lower(config)
    (rep,) = mx.report(config).values()
    assert rep.note == "" and _planned(ours.buffer) <= _planned(base.buffer)
    info = pte.analyze(base.buffer)["forward"]
    assert info["delegates"] == 1 and info["plan_check"] == "passed"
    for a, b in zip(_run(base.buffer, x), _run(ours.buffer, x)):
        assert torch.equal(a, b)


class Interleaved(nn.Module):
    """Two wide branches whose first layers are emitted before either branch finishes: in
    export order both wide tensors are live at once, branch by branch only one."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 4, 1)
        self.c, self.d = nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 4, 1)

    def forward(self, x):
        a = torch.relu(self.a(x))
        c = torch.relu(self.c(x))
        return torch.cat([self.b(a), self.d(c)], dim=1)


def test_cli_analyze_and_reorder_pte(tmp_path, capsys, monkeypatch):
    """``memsched analyze/reorder model.pte``: the numbers of the Python API, the file written
    only after the bit-equal measure, one line and exit 2 for a bad file, exit 1 and no file
    when the outputs differ."""
    import json

    from memsched.cli import main

    torch.manual_seed(1)
    x = torch.randn(1, 3, 16, 16)
    et = _export(Interleaved(), x)
    src = tmp_path / "inc.pte"
    src.write_bytes(et.buffer)
    out = tmp_path / "inc.memsched.pte"
    assert main(["analyze", str(src), "--json", "--time-limit", "10"]) == 0
    row = json.loads(capsys.readouterr().out)["methods"]["forward"]
    assert row["planned_bytes"] == _planned(et.buffer) and row["plan_check"] == "passed"
    assert row["optimum_peak"] <= row["file_order_peak"]
    assert main(["reorder", str(src), "-o", str(out), "--measure", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    m = rep["methods"]["forward"]
    assert rep["written"] and out.exists()
    assert _planned(out.read_bytes()) == m["planned_after"] <= m["planned_before"]
    # the branches are emitted in an order greedy packs badly: the rewrite shrinks the plan
    assert m["changed"] and m["bit_equal"] and m["planned_after"] < m["planned_before"]
    assert all(torch.equal(a, b) for a, b in zip(_run(et.buffer, x), _run(out.read_bytes(), x)))
    # bad input: one line, exit 2, nothing written
    bad = tmp_path / "bad.pte"
    bad.write_bytes(et.buffer[:200])
    for argv in (["reorder", str(bad), "-o", str(tmp_path / "x.pte")], ["analyze", str(bad)],
                 ["reorder", str(src), "-o", str(tmp_path / "x.pte"), "--offline-plan"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("memsched: error:"), err
    assert not (tmp_path / "x.pte").exists()
    # a program that computes something else after the rewrite: exit 1, no file
    real = pte.run_method
    calls = []

    def differing(data, name, inputs):
        calls.append(1)
        outs = real(data, name, inputs)
        return [o + 1 for o in outs] if len(calls) % 2 == 0 else outs

    monkeypatch.setattr(pte, "run_method", differing)
    out2 = tmp_path / "diff.pte"
    assert main(["reorder", str(src), "-o", str(out2), "--measure"]) == 1
    assert not out2.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "outputs differ" in err[0], err


def _preset_mem_id(config, mem_id: int = 2):
    """A user's preset ``mem_id`` (as a custom pool pass sets it): every convolution output
    goes to arena ``mem_id``, set on the specs right before the planning pass plans."""
    from executorch.exir.tensor import TensorSpec

    mp = config.memory_planning_pass
    plan = mp.run

    def run(graph_module, graph_signature=None):
        for node in graph_module.graph.nodes:
            spec = node.meta.get("spec")
            if node.op == "call_function" and "convolution" in str(node.target) and \
                    isinstance(spec, TensorSpec):
                spec.mem_id = mem_id
        return plan(graph_module, graph_signature)

    mp.run = run
    return config


def test_preset_mem_id_arenas_planned_on_their_own():
    """A preset ``mem_id`` is kept: two arenas, each planned and checked on its own, never
    above ExecuTorch's greedy with the same presets, outputs bit-equal."""
    torch.manual_seed(4)
    model, x = Inception().eval(), torch.randn(1, 3, 12, 12)
    greedy_cfg = _preset_mem_id(ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass()))
    ours_cfg = _preset_mem_id(mx.backend_config(time_limit=5))
    base = _export(make_copy(model), x, greedy_cfg)
    ours = _export(make_copy(model), x, ours_cfg)
    sizes_base = pte.planned_sizes(base.buffer)["forward"]
    sizes = pte.planned_sizes(ours.buffer)["forward"]
    assert len(sizes) == len(sizes_base) == 3 and sizes[2] > 0  # arenas 1 and 2
    rep = next(iter(mx.report(ours_cfg).values()))
    assert {a.mem_id for a in rep.arenas} == {1, 2}
    assert sum(sizes[1:]) <= sum(sizes_base[1:])
    for a in rep.arenas:  # each arena never above greedy's for it
        assert a.memsched >= a.lower_bound and min(a.greedy, a.memsched) == sizes[a.mem_id]
    # the independent check of the written file, arena by arena, and the same outputs
    assert pte.analyze(ours.buffer, time_limit=5)["forward"]["plan_check"] == "passed"
    for u, v in zip(_run(base.buffer, x), _run(ours.buffer, x)):
        assert torch.equal(u, v)


class WithCond(nn.Module):
    """Branchy convolutions around a ``torch.cond`` (a control-flow submodule)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 4, 1)
        self.c, self.d = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 4, 1)

    def forward(self, x):
        a = torch.relu(self.a(x))
        c = torch.relu(self.c(x))
        y = torch.cat([self.b(a), self.d(c)], dim=1)
        return torch.cond(y.sum() > 0, lambda t: t * 2.0, lambda t: t - 1.0, (y,))


def test_control_flow_submodule_planned_around():
    """A ``torch.cond`` submodule: the top level is reordered and packed, the submodules are
    planned as ExecuTorch plans them; never above greedy, outputs bit-equal on both branches."""
    torch.manual_seed(5)
    model = WithCond().eval()
    x = torch.randn(1, 3, 12, 12)
    config = mx.backend_config(time_limit=5)
    ours = _export(make_copy(model), x, config)
    base = _export(make_copy(model), x)
    assert _planned(ours.buffer) <= _planned(base.buffer)
    for sign in (1.0, -1.0):  # both branches of the cond
        xs = x * sign
        for u, v in zip(_run(base.buffer, xs), _run(ours.buffer, xs)):
            assert torch.equal(u, v)
    rep = next(iter(mx.report(config).values()))
    assert any(a.graph == "submodule" for a in rep.arenas) or rep.order is not None


def test_cli_export_pt2_to_pte(tmp_path, capsys):
    """``memsched export model.pt2 -o model.pte --measure``: the .pte memsched plans, never
    above ExecuTorch's default plan, bit-equal in its runtime; bad input one line, exit 2."""
    import json

    from memsched.cli import main

    torch.manual_seed(1)
    x = torch.randn(1, 3, 16, 16)
    src = tmp_path / "inter.pt2"
    torch.export.save(torch.export.export(Interleaved().eval(), (x,)), str(src))
    out = tmp_path / "inter.pte"
    assert main(["export", str(src), "-o", str(out), "--measure", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["written"] and out.exists() and rep["max_abs_diff"] == 0.0
    ours, base = rep["planned_bytes"]["forward"], rep["executorch_default_bytes"]["forward"]
    assert ours == _planned(out.read_bytes()) < base  # the interleaved branches: reordered
    default = _export(Interleaved().eval().requires_grad_(False), x)
    assert base == _planned(default.buffer)
    for argv in (["export", str(tmp_path / "missing.pt2")], ["export", str(out)],
                 ["export", str(src), "-o", str(tmp_path / "x.tflite")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("memsched: error:"), err
    assert not (tmp_path / "x.tflite").exists()


class LateInput(nn.Module):
    """A second input read only by the last op: ExecuTorch's rule keeps it live from the
    start (a placeholder), so an order cannot free its bytes before that op."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 8, 1)
        self.b = nn.Conv2d(8, 3, 1)

    def forward(self, x, y):
        return self.b(torch.relu(self.a(x))) + y


@pytest.mark.parametrize("make,args", [
    (LateInput, ((1, 3, 8, 8), (1, 3, 8, 8))),
    (Inception, ((1, 3, 12, 12),)),
    (lambda: _random_model(3, 7), ((1, 2, 4, 4),)),
], ids=["late-input", "inception", "random"])
def test_pte_graph_has_the_fx_models_optimum(make, args):
    """The op graph built from a ``.pte`` (`pte.plan_graph`: instructions) and the one the
    planning pass builds from the FX graph (`model.build_model`) are the same problem: the
    same certified optimum, and the file order's peak equals the FX order's."""
    from memsched.executorch.memory.model import EXECUTORCH_MODEL
    from memsched.memory import peak_memory
    from memsched.schedulers import schedule

    torch.manual_seed(0)
    xs = tuple(torch.randn(*s) for s in args)
    caught = {}
    import memsched.executorch.plan.reorder as reorder
    original = reorder.schedule_model

    def keep(model, time_limit=10.0, options=None):
        caught["graph"] = model.graph
        return original(model, time_limit, options)

    reorder.schedule_model = keep
    try:
        ep = torch.export.export(make().eval(), xs)
        to_edge(ep).to_executorch(mx.backend_config(time_limit=5, reorder=True))
    finally:
        reorder.schedule_model = original
    buffer = to_edge(torch.export.export(make().eval(), xs)).to_executorch().buffer
    graph, _ = pte.plan_graph(pte.read_program(buffer).program.execution_plan[0])
    fx = schedule(caught["graph"], "auto", EXECUTORCH_MODEL, time_limit=5)
    ours = schedule(graph, "auto", EXECUTORCH_MODEL, time_limit=5)
    assert fx.optimal and ours.optimal
    assert ours.peak == fx.peak
    assert peak_memory(graph, None, EXECUTORCH_MODEL) == \
        peak_memory(caught["graph"], None, EXECUTORCH_MODEL)


def test_pte_reorder_keeps_a_late_input_live():
    """The second input of `LateInput` is written by the caller before the run: the `.pte`
    graph counts it from the start, so no order frees its bytes early (it was created by its
    reader: the search found 4,096 B, and `reorder --measure` refused the plan because the
    outputs differed)."""
    torch.manual_seed(0)
    xs = (torch.randn(1, 3, 8, 8), torch.randn(1, 3, 8, 8))
    buffer = to_edge(torch.export.export(LateInput().eval(), xs)).to_executorch().buffer
    row = pte.analyze(buffer, time_limit=5)["forward"]
    assert row["file_order_peak"] == row["optimum_peak"] == 4864 and row["optimal"]
    _, report = pte.reorder(buffer, time_limit=5, measure=True)
    assert report["forward"]["peak"] == 4864

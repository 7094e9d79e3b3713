"""memsched's own ``.pte`` reader and writer (`memsched.executorch.format.pte`,
`format.verify`) against ExecuTorch's: the same Program read from every file, files written here
read back by ExecuTorch's deserializer as the same program and run bit-equal by its runtime;
segments (constants, delegate blobs) byte for byte; what a kernel call writes, read from the
call, equal to what the operator schemas say; byte-mutated files either refused here with one
line or loaded by ExecuTorch's runtime (in a subprocess: a bad file may crash it).

Programs (exported once per module): a mutable buffer with views and a split, two methods in
one program, an XNNPACK delegate with its blob in a segment and inline.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import random
import subprocess
import sys
import warnings

import pytest

pytest.importorskip("executorch")
torch = pytest.importorskip("torch")
nn = torch.nn

from memsched.executorch import pte  # noqa: E402
from memsched.executorch.format import pte as pte_format  # noqa: E402
from memsched.executorch.errors import PteFileError  # noqa: E402


class Buffered(nn.Module):
    """Constants, a mutable buffer updated in place, a split (tensor lists) and a view."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.wide = nn.Conv2d(8, 16, 1)
        self.narrow = nn.Conv2d(16, 8, 1)
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        a = torch.relu(self.c1(x))
        big = self.wide(a)
        self.count.add_(1)
        q, r = torch.split(a, 4, dim=1)
        return (q * r).reshape(1, -1) + self.narrow(big).sum(), self.count * 2


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.relu(self.c(x))


class Branches(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.a, self.b = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        s = torch.relu(self.stem(x))
        return torch.cat([self.a(s), self.b(s)], 1)


@pytest.fixture(scope="module")
def programs():
    """name -> .pte bytes (ExecuTorch 1.5.1's serializer; constants always in a segment)."""
    from executorch.exir import ExecutorchBackendConfig, to_edge

    torch.manual_seed(0)
    x = torch.randn(1, 3, 8, 8)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["buffered"] = to_edge(torch.export.export(Buffered(), (x,))).to_executorch().buffer
        two = {"forward": torch.export.export(Small(), (x,)),
               "branches": torch.export.export(Branches(), (x,))}
        out["two_methods"] = to_edge(two).to_executorch().buffer
        try:
            from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
                XnnpackPartitioner)
            from executorch.exir import to_edge_transform_and_lower
        except ImportError:  # pragma: no cover - XNNPACK not in this wheel
            return out
        for name, extract in (("xnnpack", True), ("xnnpack_inline", False)):
            ep = torch.export.export(Branches().eval(), (x,))
            out[name] = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]) \
                .to_executorch(ExecutorchBackendConfig(extract_delegate_segments=extract)).buffer
    return out


def _norm(o):
    """A dataclass tree (ExecuTorch's or ours) as plain tuples, dicts and lists."""
    if dataclasses.is_dataclass(o):
        fields = dataclasses.fields(o)
        return (type(o).__name__, {f.name: _norm(getattr(o, f.name)) for f in fields})
    if isinstance(o, enum.Enum):
        return int(o.value)
    if isinstance(o, (list, tuple)):
        return [_norm(x) for x in o]
    if isinstance(o, (bytes, bytearray, memoryview)):
        return bytes(o)
    if isinstance(o, str) and o in ("inf", "-inf"):  # ExecuTorch's Double spells these out
        return float(o)
    return o


def _et_flatbuffer(data: bytes):
    from executorch.exir._serialize._program import _flatbuffer_to_program, _get_extended_header

    eh = _get_extended_header(data)
    return _flatbuffer_to_program(data[:eh.program_size] if eh else data)


def test_reader_reads_what_executorch_reads(programs):
    for name, data in programs.items():
        ours = pte_format.read_pte(data, name)
        assert _norm(ours.program) == _norm(_et_flatbuffer(data)), name


def _run_all(data: bytes, seed: int = 0) -> dict:
    prog = pte.read_program(data)
    return {plan.name: pte.run_method(data, plan.name, pte.random_inputs(plan, seed))
            for plan in prog.program.execution_plan}


def _same_outputs(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        len(a[m]) == len(b[m]) and all(torch.equal(x, y) for x, y in zip(a[m], b[m]))
        for m in a)


def test_writer_round_trip_through_executorch(programs):
    """Read and write back unchanged: ExecuTorch's deserializer gets the same program,
    constants, mutable data and named data; the segments are the same bytes; the runtime
    runs it bit-equal (the XNNPACK blob included)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    for name, data in programs.items():
        pf = pte_format.read_pte(data, name)
        out = pte_format.write_pte(pf)
        again = pte_format.read_pte(out, name)
        assert again.segment_data == pf.segment_data, name
        assert _norm(again.program) == _norm(pf.program), name
        a, b = deserialize_pte_binary(data), deserialize_pte_binary(out)
        assert _norm(a.program) == _norm(b.program), name
        assert _norm(a.mutable_data) == _norm(b.mutable_data), name
        assert _norm(a.named_data) == _norm(b.named_data), name
        assert _same_outputs(_run_all(data), _run_all(out)), name
    # the programs cover what the issue asks for
    assert len(pte.read_program(programs["two_methods"]).program.execution_plan) == 2
    cs = pte.read_program(programs["buffered"]).program.constant_segment
    assert len(cs.offsets) > 1  # constants in their own segment
    if "xnnpack" in programs:
        for name, loc in (("xnnpack", 1), ("xnnpack_inline", 0)):
            (d,) = pte.read_program(programs[name]).program.execution_plan[0].delegates
            assert d.processed.location == loc, name


def test_reordered_programs_load_and_run_bit_equal(programs):
    """`reorder` writes with our writer: ExecuTorch's deserializer reads the file, the runtime
    runs every method bit-equal to the original (``measure``), and our reader's load checks
    pass on it."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    changed = 0
    for name, data in programs.items():
        out, report = pte.reorder(data, time_limit=5, measure=True)
        changed += sum(bool(r.get("changed")) for r in report.values())
        for r in report.values():
            assert "error" not in r, (name, r)
            assert r.get("bit_equal") or not r.get("changed"), (name, r)
        deserialize_pte_binary(out)
        pte.read_program(out)
        assert _same_outputs(_run_all(data, 3), _run_all(out, 3)), name
    assert changed >= 1  # at least one plan shrank, so a rewritten program was run


def _schema_writes(plan, args, op) -> set:
    """The old answer: the positions an operator's schema marks written, and its returns."""
    ns, name = op.name.split("::")
    schema = getattr(getattr(getattr(torch.ops, ns), name), op.overload or "default")._schema
    writes = {i for i, a in enumerate(schema.arguments)
              if a.alias_info is not None and a.alias_info.is_write}
    return {v for i, v in enumerate(args) if i in writes or i >= len(schema.arguments)}


def _with_items(plan, values) -> set:
    out = set()
    for v in values:
        out.add(v)
        val = plan.values[v].val
        if type(val).__name__ in ("TensorList", "OptionalTensorList"):
            out.update(i for i in val.items if i >= 0)
    return out


def test_kernel_writes_agree_with_the_operator_schemas(programs):
    """What `kernel_writes` reads from each call (trailing out arguments repeated as the
    return) is what torch's schema registry says, on every kernel call of every program."""
    import executorch.exir  # noqa: F401  (registers ExecuTorch's own ops in torch)

    calls = 0
    for name, data in programs.items():
        for plan in pte.read_program(data).program.execution_plan:
            for ins in plan.chains[0].instructions:
                a = ins.instr_args
                if type(a).__name__ != "KernelCall":
                    continue
                calls += 1
                op = plan.operators[a.op_index]
                ours = {v for v, w in zip(a.args, pte.kernel_writes(a.args, plan.values)) if w}
                assert _with_items(plan, ours) == \
                    _with_items(plan, _schema_writes(plan, a.args, op)), (name, op, a.args)
    assert calls >= 20


def test_kernel_writes_rule():
    """Out block repeated as the return; multi-output; a returned list equal to the out list;
    a functional call writes its return."""
    V = pte_format
    vals = [V.EValue(V.Tensor(sizes=[1], dim_order=[0])) for _ in range(8)]
    vals += [V.EValue(V.TensorList(items=[5, 6])), V.EValue(V.TensorList(items=[5, 6]))]
    assert pte.kernel_writes([0, 1, 7, 2, 2], vals) == [False] * 3 + [True] * 2
    assert pte.kernel_writes([0, 3, 4, 3, 4], vals) == [False] + [True] * 4
    assert pte.kernel_writes([0, 1, 8, 9], vals) == [False, False, True, True]
    assert pte.kernel_writes([0, 1, 2], vals) == [False, False, True]


def _with_backend_kernel(data: bytes) -> bytes:
    """The program with its first convolution renamed to a backend kernel
    (``cortex_m::quantized_conv2d.out``) that takes a scratch tensor before its out block, as
    the Cortex-M emitter passes it (``[..., scratch, out, out]``); the scratch gets an arena of
    its own, so the written plan stays valid."""
    pf = pte_format.read_pte(data)
    plan = pf.program.execution_plan[0]
    plan.operators.append(pte_format.Operator(name="cortex_m::quantized_conv2d",
                                              overload="out"))
    plan.non_const_buffer_sizes.append(64)
    mem = len(plan.non_const_buffer_sizes) - 1
    plan.values.append(pte_format.EValue(pte_format.Tensor(
        scalar_type=1, sizes=[64], dim_order=[0], allocation_info=pte_format.AllocationDetails(
            memory_id=mem, memory_offset_low=0, memory_offset_high=0))))
    scratch = len(plan.values) - 1
    for ins in plan.chains[0].instructions:
        a = ins.instr_args
        if plan.operators[a.op_index].name == "aten::convolution":
            a.op_index = len(plan.operators) - 1
            a.args = a.args[:-2] + [scratch] + a.args[-2:]
            break
    return pte_format.write_pte(pf)


def test_backend_kernel_with_scratch(programs, tmp_path):
    """A kernel no schema table knows is analyzed and reordered; its scratch lives for its
    call only; the rewritten file passes our load checks and ExecuTorch reads it."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    data = _with_backend_kernel(programs["buffered"])
    row = pte.analyze(data, time_limit=5)["forward"]
    assert "error" not in row and row["scratch"] == 1 and row["plan_check"] == "passed"
    assert row["operators"]["cortex_m::quantized_conv2d.out"] == 1
    graph, info = pte.plan_graph(pte.read_program(data).program.execution_plan[0])
    (t,) = [graph.tensors[i] for i, v in enumerate(info["storages"])
            if v == len(pte.read_program(data).program.execution_plan[0].values) - 1]
    assert t.producer is not None and not t.consumers and not t.is_output
    out, report = pte.reorder(data, time_limit=5, measure=False)
    pte.read_program(out)
    deserialize_pte_binary(out)
    assert report["forward"]["planned_after"] <= report["forward"]["planned_before"]


# ------------------------------------------------------------------ broken files
_LOADER = r"""
import sys
from executorch.runtime import Runtime
rt = Runtime.get()
for path in sys.stdin:
    path = path.strip()
    try:
        p = rt.load_program(open(path, "rb").read())
        for m in sorted(p.method_names):
            p.load_method(m)
        print("ok", path, flush=True)
    except Exception as e:
        print("err", path, str(e).replace("\n", " ")[:200], flush=True)
"""


def runtime_loads(paths) -> dict:
    """``{path: (status, message)}``: ExecuTorch's runtime loading each file and every method
    in a subprocess (status ``ok``, ``err`` or ``crash``: a file that kills the process is
    recorded and the rest go to a new one)."""
    res, todo = {}, list(map(str, paths))
    while todo:
        p = subprocess.run([sys.executable, "-c", _LOADER], input="\n".join(todo),
                           capture_output=True, text=True, timeout=600)
        for line in p.stdout.splitlines():
            status, path, *msg = line.split(" ", 2)
            res[path] = (status, msg[0] if msg else "")
        rest = [t for t in todo if t not in res]
        if rest and p.returncode != 0:
            res[rest[0]] = ("crash", f"exit status {p.returncode}")
            rest = rest[1:]
        elif rest:  # pragma: no cover - the loader stopped without a reason
            raise AssertionError(p.stderr[-500:])
        todo = rest
    return res


def _kernel_missing(msg: str) -> bool:
    """Error 0x14 (OperatorMissing): the runtime here has no kernel for a (mutated) operator
    name or dtype; the file itself is well-formed. No reader can know the registry."""
    return "0x:14" in msg or "0x14" in msg


def test_mutated_files_refused_here_or_loaded_by_the_runtime(programs, tmp_path):
    """Seeded byte mutations of a program's flatbuffer (1 to 3 bytes each): every mutant our
    reader accepts, ExecuTorch's runtime loads (program and every method), and so does every
    file `reorder` writes from an accepted mutant; every refusal is one line."""
    data = programs["buffered"]
    size = pte_format.read_pte(data).program_size
    rng = random.Random(41)
    accepted, written, refused = [], [], 0
    for i in range(500):
        b = bytearray(data)
        for _ in range(1 if rng.random() < 0.6 else rng.randint(2, 3)):
            pos = rng.randrange(size)
            b[pos] = rng.randrange(256) if rng.random() < 0.7 else b[pos] ^ (1 << rng.randrange(8))
        try:
            pte.read_program(bytes(b))
        except PteFileError as e:
            assert "\n" not in str(e)
            refused += 1
            continue
        path = tmp_path / f"m{i}.pte"
        path.write_bytes(b)
        accepted.append(path)
        try:
            out, report = pte.reorder(bytes(b), time_limit=1, measure=False)
        except ValueError as e:  # e.g. a plan memsched cannot model: one line, nothing written
            assert "\n" not in str(e)
            continue
        if out != bytes(b):
            (tmp_path / f"w{i}.pte").write_bytes(out)
            written.append(tmp_path / f"w{i}.pte")
    assert len(accepted) > 50 and refused > 200
    res = runtime_loads(accepted + written)
    bad = {p: r for p, r in res.items() if r[0] != "ok" and not _kernel_missing(r[1])}
    assert not bad, bad
    assert sum(r[0] == "ok" for r in res.values()) > 40


def test_cli_refuses_a_file_the_runtime_refuses(programs, tmp_path, capsys):
    """The issue's case: a mutated program the runtime refuses at method load (error 0x23:
    here a planned tensor past its arena) is one line and exit 2 from `analyze` and
    `reorder`, and nothing is written."""
    from memsched.cli import main

    pf = pte_format.read_pte(programs["buffered"])
    plan = pf.program.execution_plan[0]
    plan.non_const_buffer_sizes[1] //= 2
    src = tmp_path / "bad.pte"
    src.write_bytes(pte_format.write_pte(pf))
    from executorch.runtime import Runtime

    with pytest.raises(RuntimeError, match="0x:?12|0x:?23|0x:?21"):  # refused, not a crash
        Runtime.get().load_program(src.read_bytes()).load_method("forward")
    capsys.readouterr()  # the runtime's own log lines
    out = tmp_path / "out.pte"
    for argv in (["analyze", str(src)], ["reorder", str(src), "-o", str(out)],
                 ["reorder", str(src), "-o", str(out), "--json"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "would refuse" in err[0] and "arena" in err[0], err
    assert not out.exists()


def test_pte_commands_import_neither_torch_nor_executorch(programs, tmp_path):
    src = tmp_path / "m.pte"
    src.write_bytes(programs["buffered"])
    code = ("import sys; from memsched.cli import main; "
            f"assert main(['analyze', {str(src)!r}, '--json']) == 0; "
            f"assert main(['reorder', {str(src)!r}, '-o', {str(tmp_path / 'o.pte')!r}, "
            "'--json']) == 0; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'executorch')]; "
            "assert not bad, bad[:5]")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-1000:]
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert rows[0]["methods"]["forward"]["plan_check"] == "passed"
    assert rows[1]["written"]


def test_reorder_progress_per_method_quiet_under_json(programs, tmp_path, monkeypatch, capsys):
    """`reorder` of a .pte shows each method's stages on the terminal's status line; under
    ``--json`` there is no status line."""
    import contextlib

    from memsched.cli import main
    from memsched.cli import pte as cli_pte

    seen = []

    @contextlib.contextmanager
    def status(enabled, text):
        seen.append(("enabled", enabled))
        yield (lambda line: seen.append(line)) if enabled else (lambda line: None)

    monkeypatch.setattr(cli_pte, "_status", status)
    src = tmp_path / "two.pte"
    src.write_bytes(programs["two_methods"])
    assert main(["reorder", str(src), "-o", str(tmp_path / "o.pte")]) == 0
    lines = [s for s in seen if isinstance(s, str)]
    assert seen[0] == ("enabled", True)
    for method in ("forward", "branches"):
        assert any(f"'{method}'" in s and "searching the order" in s for s in lines), lines
    assert any("(2/2)" in s for s in lines)
    seen.clear()
    capsys.readouterr()
    assert main(["reorder", str(src), "-o", str(tmp_path / "o2.pte"), "--json"]) == 0
    assert seen == [("enabled", False)] and capsys.readouterr().err == ""


def test_cortex_m_int8_program(tmp_path):
    """A program of the Cortex-M int8 flow (the backend's own recipe, `cortex_m::` kernels,
    scratch buffers): `kernel_writes` agrees with the backend's operator schemas, `analyze`
    models it (scratch live for one call, the written plan passes the check), `reorder`
    writes a file ExecuTorch reads back. Needs the Arm backend's ``tosa-tools`` (skipped
    without it)."""
    pytest.importorskip("tosa")  # the tosa-tools package
    from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
    from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
    from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer
    from executorch.backends.cortex_m.target_config import CortexM, CortexMTargetConfig
    from executorch.backends.transforms.duplicate_dynamic_quant_chain import (
        DuplicateDynamicQuantChainPass)
    from executorch.exir import to_edge
    from executorch.exir._serialize._program import deserialize_pte_binary
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    torch.manual_seed(0)
    x = torch.rand(1, 3, 16, 16).to(memory_format=torch.channels_last) * 2 - 1
    captured = torch.export.export(Branches().eval(), (x,), strict=True) \
        .module(check_guards=False)  # no _guards_fn call_module for the quantizer
    prepared = prepare_pt2e(captured, CortexMQuantizer())
    prepared(x)
    converted = convert_pt2e(prepared, fold_quantize=True)
    DuplicateDynamicQuantChainPass()(converted)
    edge = to_edge(torch.export.export(converted, (x,), strict=True),
                   compile_config=cortex_m_edge_compile_config())
    pm = CortexMPassManager(edge.exported_program(), CortexMPassManager.pass_list,
                            target_config=CortexMTargetConfig(cpu=CortexM.M55))
    edge._edge_programs["forward"] = pm.transform()
    data = edge.to_executorch().buffer
    plan = pte.read_program(data).program.execution_plan[0]
    names = {op.name for op in plan.operators}
    assert any(n.startswith("cortex_m::") for n in names), names
    for ins in plan.chains[0].instructions:
        a = ins.instr_args
        op = plan.operators[a.op_index]
        ours = {v for v, w in zip(a.args, pte.kernel_writes(a.args, plan.values)) if w}
        assert _with_items(plan, ours) == _with_items(plan, _schema_writes(plan, a.args, op))
    row = pte.analyze(data, time_limit=5)["forward"]
    assert "error" not in row and row["plan_check"] == "passed" and row["scratch"] >= 1
    out, report = pte.reorder(data, time_limit=5, measure=False)
    assert report["forward"]["planned_after"] <= report["forward"]["planned_before"]
    pte.read_program(out)
    deserialize_pte_binary(out)


def test_shared_values_on_every_kind_of_program(programs):
    """`share_values` on programs with a mutable buffer updated in place, tensor lists, views,
    two methods and XNNPACK delegates (inline and in segments): each loads and runs
    bit-equal in ExecuTorch's runtime (the mutable buffer's second run too), has no more
    values than before, and keeps the method's inputs, outputs and delegate arguments as
    they were."""
    from memsched.executorch.plan.share import pinned_values, share_values

    for name, data in programs.items():
        shared, reports = share_values(data)
        assert all(r.values_after <= r.values_before for r in reports), name
        prog = pte.read_program(data)
        for plan, after in zip(prog.program.execution_plan,
                               pte.read_program(shared).program.execution_plan):
            pinned = {v for v in pinned_values(plan)
                      if type(plan.values[v].val).__name__ == "Tensor"}
            kept = {v for v in pinned_values(after)
                    if type(after.values[v].val).__name__ == "Tensor"}
            assert len(kept) == len(pinned), name  # no two pinned tensors became one
        runs = [_run_all(d, seed=3) for d in (data, shared)]
        assert _same_outputs(*runs), name
        if name == "buffered":  # the buffer's state: a second run on the same method
            from executorch.runtime import Runtime

            for d in (data, shared):
                m = Runtime.get().load_program(d).load_method("forward")
                x = torch.ones(1, 3, 8, 8)
                m.execute([x])
                second = m.execute([x])
                runs.append(second)
            assert torch.equal(runs[2][1], runs[3][1])

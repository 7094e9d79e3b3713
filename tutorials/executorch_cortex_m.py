"""ExecuTorch's Cortex-M int8 flow with memsched: the same program, patch by patch.

A microcontroller user quantizes with the Cortex-M backend (``CortexMQuantizer``), lowers with
its compile config and ``CortexMPassManager`` (``cortex_m::`` kernels on CMSIS-NN, channels-last
int8 feature maps), and writes a ``.pte``. The planned arena is then set by the widest early
feature maps, and by the float input and its int8 copy. ``memsched.executorch.backend_config(
tile_patches=True)`` runs the spatial prefix patch by patch (MCUNetV2-style) inside that same
lowering and plans the result with memsched's certified order and exact packer.

The check: both programs run in ``executorch.runtime`` with the backend's own C++ kernels
(``backends/cortex_m/ops`` on CMSIS-NN's portable C path), which
`memsched.executorch.host_kernels` builds from ``../shared`` (about 20 s, once), outputs compared
bit for bit. Programs for those kernels are exported for the scalar path
(`host_kernels.target_config`). Where ``../shared`` is absent, the edge programs are run eagerly
through the backend's Python reference kernels instead (they compute on logical tensors: they
cannot see memory layout).

Run: ``.venv/bin/python tutorials/executorch_cortex_m.py`` (needs ``executorch`` and the Arm
backend's ``tosa-tools``, which the Cortex-M quantizer imports: the README's set-up line installs
both).
"""
import copy
import warnings

import torch
from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer
from executorch.exir import ExecutorchBackendConfig, to_edge
from executorch.exir.passes import MemoryPlanningPass
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

import memsched.executorch as mx
from memsched.executorch import host_kernels, pte

nn = torch.nn
warnings.simplefilter("ignore")
torch.manual_seed(0)


def conv_bn(cin, cout, k=3, s=1, g=1, act=True):
    """Conv2d - BatchNorm2d - ReLU6 as users write them (the quantizer folds the batch norm)."""
    layers = [nn.Conv2d(cin, cout, k, s, k // 2, groups=g, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([nn.ReLU6()] if act else []))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand=4):
        super().__init__()
        hid = cin * expand
        self.body = nn.Sequential(conv_bn(cin, hid, 1), conv_bn(hid, hid, 3, stride, hid),
                                  conv_bn(hid, cout, 1, act=False))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


# a small MobileNetV2-like network on 64x64 images
model = nn.Sequential(conv_bn(3, 16, 3, 2), InvertedResidual(16, 16, 1),
                      InvertedResidual(16, 24, 2), InvertedResidual(24, 24, 1),
                      InvertedResidual(24, 32, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(32, 10)).eval()


def sample(seed):
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    return x.to(memory_format=torch.channels_last)  # the Cortex-M kernels are channels-last


try:
    host_kernels.load()  # before any Cortex-M program is loaded
    runtime = True
except host_kernels.KernelsUnavailable as e:
    print(f"not running the programs ({e}); checking with the reference kernels")
    runtime = False

# 1. The Cortex-M flow, as the backend's own test harness runs it.
x = sample(0)
prepared = prepare_pt2e(torch.export.export(model, (x,), strict=True).module(check_guards=False),
                        CortexMQuantizer())
for i in range(4):
    prepared(sample(100 + i))  # calibration
converted = convert_pt2e(prepared, fold_quantize=True)
quantized = to_edge(torch.export.export(converted, (x,), strict=True),
                    compile_config=cortex_m_edge_compile_config())


def lower_for(target_config):
    """The quantized graph after the backend's passes for one target: the host kernels' scalar
    C path (to check here) or the M55's default, MVE (what users flash)."""
    e = copy.deepcopy(quantized)
    e._edge_programs["forward"] = CortexMPassManager(
        e.exported_program(), CortexMPassManager.pass_list,
        target_config=target_config).transform()
    return e


edge = lower_for(host_kernels.target_config())

# 2. ExecuTorch's default plan and memsched's patched plan, input in the arena (ExecuTorch's
#    default) and not (alloc_graph_input=False: the caller's buffer, common on MCUs).
ep = edge.exported_program()
for planned in (True, False):
    default = copy.deepcopy(edge).to_executorch(ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=planned)))
    config = mx.backend_config(tile_patches=True, alloc_graph_input=planned, time_limit=5.0)
    ours = copy.deepcopy(edge).to_executorch(config)
    before = sum(pte.planned_sizes(default.buffer)["forward"][1:])
    after = sum(pte.planned_sizes(ours.buffer)["forward"][1:])
    rep = mx.report(config)["method0"]
    print(f"input in the arena: {planned}")
    print(f"  ExecuTorch default plan: {before:>9,} B")
    print(f"  memsched, tile_patches:  {after:>9,} B  ({before / after:.2f}x)")
    print("  " + rep.summary().replace("\n", "\n  "))
    assert rep.patches.patched and after == rep.planned_bytes < before

    # 3. The check: both programs on the same float input, outputs bit for bit.
    if runtime:
        want, got = host_kernels.run(default.buffer, [x]), host_kernels.run(ours.buffer, [x])
        where = "ExecuTorch's runtime, the backend's kernels"
    else:
        new, _ = mx.tile_graph_module(ep.graph_module, planned_inputs=planned, time_limit=5.0)
        args = [x if s.kind.name == "USER_INPUT" else
                ep.state_dict[s.target] if s.kind.name in ("PARAMETER", "BUFFER") else
                ep.constants[s.target] for s in ep.graph_signature.input_specs]
        want, got = ep.graph_module(*args), new(*args)
        where = "reference kernels"
    assert all(torch.equal(a, b) for a, b in zip(want, got))
    print(f"  patched program, {where}: bit-equal")

# 4. Will it fit? Users flash the M55's default export (MVE). `memsched analyze model.pte`
#    prints the RAM the program needs on a 32-bit Cortex-M -- planned buffers, method allocator,
#    temp allocator -- computed from the file (`memsched.executorch.memory.ram`), no board needed.
#    Where the emulated Cortex-M55 is built (`python -m memsched.board build`, a test oracle
#    from ../shared), the same programs run there: the number is the board's, outputs bit-equal.
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from executorch.backends.cortex_m.target_config import CortexM, CortexMTargetConfig  # noqa: E402

from memsched import board  # noqa: E402
from memsched.executorch.memory.ram import program_ram  # noqa: E402

mve = lower_for(CortexMTargetConfig(cpu=CortexM.M55))
default = copy.deepcopy(mve).to_executorch(ExecutorchBackendConfig(
    memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False)))
# share_values: the patches' records priced for the program with its equal values shared, and
# the .pte written so (one EValue per distinct scalar, list or placed tensor: fewer
# method-allocator bytes, the same kernels on the same bytes; proven against the emitter's)
ours = copy.deepcopy(mve).to_executorch(
    mx.backend_config(tile_patches=True, alloc_graph_input=False, time_limit=5.0,
                      share_values=True))
ours_pte, _ = mx.share_values(ours)
try:
    board.firmware("executorch")
    on_board = True
except board.BoardUnavailable as e:
    print(f"not running on the emulated Cortex-M55 ({e})")
    on_board = False
work = Path(tempfile.mkdtemp(prefix="memsched-m55-"))
outs = []
for name, program in (("default", default.buffer), ("memsched", ours_pte)):
    ram = program_ram(program)["forward"]  # what `memsched analyze model.pte --json` reports
    print(f"M55 program, {name}: RAM on cortex-m {ram['ram_bytes']:,} B = planned "
          f"{sum(ram['planned_buffers']):,} + method allocator "
          f"{ram['method_allocator_bytes']:,} + temp allocator {ram['temp_allocator_bytes']:,}")
    if on_board:
        res, out = board.run_pte(program, [x], work / name)
        assert res["status"] == 0, (res["error"], res["et_log"])
        measured = sum(res["planned_buffers"]) + res["method_allocator_bytes"] + \
            res["temp_allocator_bytes"]
        assert measured == ram["ram_bytes"]  # computed = the board's, to the byte
        print(f"  on the emulated Cortex-M55: {measured:,} B, "
              f"{res['execute_instructions']:,} instructions per inference")
        outs.append(out)
if on_board:
    assert outs[0] == outs[1]
    print("  patched program on the M55 (CMSIS-NN MVE kernels): bit-equal")

"""ExecuTorch users: export a program with memsched's certified order and exact arena packing,
and shrink a .pte file you already have.

ExecuTorch plans activation memory in the order the exporter left the graph, packing tensors
greedily. `memsched.executorch.backend_config()` puts memsched's reorder (the certified
peak-optimal order under ExecuTorch's own lifetime rules) and its exact packer into the export,
with ExecuTorch's greedy kept as a fallback, so the plan is never larger than ExecuTorch's own.

Run: ``.venv/bin/python tutorials/executorch_export.py`` (needs ``executorch``: the test extra
installs it, or ``pip install -e '.[executorch]'``).
"""
import os
import subprocess
import sys
import tempfile

import torch
from executorch.exir import to_edge
from executorch.runtime import Runtime

import memsched.executorch as mx
from memsched.executorch import pte

nn = torch.nn


class TwoBranches(nn.Module):
    """An Inception-style cell whose wide branches are emitted before either finishes: in
    export order both wide tensors are live at once."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 48, 3, padding=1), nn.Conv2d(48, 8, 1)
        self.c, self.d = nn.Conv2d(3, 48, 3, padding=1), nn.Conv2d(48, 8, 1)
        self.head = nn.Conv2d(16, 4, 3, padding=1)

    def forward(self, x):
        a = torch.relu(self.a(x))
        c = torch.relu(self.c(x))
        return self.head(torch.cat([self.b(a), self.d(c)], dim=1))


def run(buffer: bytes, x: torch.Tensor) -> torch.Tensor:
    method = Runtime.get().load_program(buffer).load_method("forward")
    return method.execute([x])[0].clone()


def main() -> None:
    torch.manual_seed(0)
    model, x = TwoBranches().eval(), torch.randn(1, 3, 32, 32)
    program = torch.export.export(model, (x,))

    # 1. ExecuTorch's default plan, and memsched's, from the same exported program
    default = to_edge(program).to_executorch()
    config = mx.backend_config(time_limit=10)
    ours = to_edge(program).to_executorch(config)
    before = sum(pte.planned_sizes(default.buffer)["forward"][1:])
    after = sum(pte.planned_sizes(ours.buffer)["forward"][1:])
    for rep in mx.report(config).values():
        print(rep.summary())
    same = torch.equal(run(default.buffer, x), run(ours.buffer, x))
    print(f"planned activation bytes: ExecuTorch {before:,} B -> memsched {after:,} B "
          f"({before / after:.2f}x); outputs bit-equal: {same}")
    assert after <= before and same

    # 2. a .pte that already exists: the same on the command line (measured before writing)
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "model.pte"), os.path.join(d, "model.memsched.pte")
        with open(src, "wb") as f:
            f.write(default.buffer)
        memsched = os.path.join(os.path.dirname(sys.executable), "memsched")
        subprocess.run([memsched, "reorder", src, "-o", dst, "--measure"], check=True)
        print(f"{os.path.basename(dst)}: {sum(pte.planned_sizes(dst)['forward'][1:]):,} B")


if __name__ == "__main__":
    main()

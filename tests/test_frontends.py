"""Other model formats through the CLI: torch.export programs (.pt2)."""
import json

import pytest

from memsched.cli import main


@pytest.fixture(scope="module")
def pt2_path(tmp_path_factory):
    torch = pytest.importorskip("torch")

    class Cell(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a = torch.nn.Conv2d(4, 32, 3, padding=1)
            self.a2 = torch.nn.Conv2d(32, 4, 1)
            self.b = torch.nn.Conv2d(4, 4, 3, padding=1)
            self.b2 = torch.nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            return torch.cat([self.a2(torch.relu(self.a(x))), self.b2(self.b(x))], 1)

    ep = torch.export.export(Cell().eval(), (torch.randn(1, 4, 16, 16),))
    path = tmp_path_factory.mktemp("pt2") / "cell.pt2"
    torch.export.save(ep, str(path))
    return str(path)


def test_pt2_analyze_and_compile(pt2_path, capsys, tmp_path):
    assert main(["analyze", pt2_path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["optimal"] and out["ops"] > 4
    assert main(["compile", pt2_path, "--pass", "MemoryAwareSchedule", "-o",
                 str(tmp_path / "cell.so")]) == 0
    assert (tmp_path / "cell.so").exists()

"""FuseIsolatedSubgraphs: groups contiguous, outputs bit-equal, peak not higher, attributes."""
import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402

from memsched.generators.examples import example_inputs, example_model  # noqa: E402
from memsched.importers.relax import from_relax  # noqa: E402
from memsched.memory import Problem  # noqa: E402
from memsched.transform.fuse_isolated_subgraphs import (  # noqa: E402
    FuseIsolatedSubgraphs, block_groups)


def run(mod, inputs):
    ex = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in inputs]).numpy()


@pytest.mark.parametrize("name", ["randwire", "nas_cell", "two_branch"])
def test_fuse_pass_groups_contiguously_and_keeps_outputs(name):
    mod = example_model(name)
    inputs = example_inputs(mod)
    new = FuseIsolatedSubgraphs()(mod)
    relax.analysis.well_formed(new)
    attrs = new["main"].attrs
    assert attrs["memsched.fusion_peak_after"] <= attrs["memsched.fusion_peak_before"]
    assert attrs["memsched.fused_ops"] <= len(from_relax(mod))
    assert np.array_equal(run(new, inputs), run(mod, inputs))
    # in the rewritten block every group is contiguous, in its internal order
    g = from_relax(new)
    simp = block_groups(g)
    assert len(simp.groups) == int(attrs["memsched.fused_groups"])
    order = list(range(len(g)))
    assert simp.canonicalize(order) == order
    p = Problem.from_graph(g, "tvm")
    assert p.evaluate(order).peak == int(attrs["memsched.fusion_peak_after"])

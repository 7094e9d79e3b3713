"""`FuseIsolatedSubgraphs`: group each optimality-preserving fused subgraph contiguously.

The fusion of `memsched.simplify` (Zhong et al., ICCAD 2023, §IV-B: Theorems IV.1/IV.2,
Algorithm 1) finds groups of bindings that some optimal schedule runs back to back in a fixed
internal order. This pass reorders every dataflow block so that each group's bindings are
contiguous, in that internal order, starting from the block's current order: the exchange
argument of each group's theorem is executed (`Simplified.canonicalize`), so the peak under
the memory model never rises (it often drops). Bindings stay inline (no new functions): TVM
still plans memory across the whole function, and a later `MemoryAwareSchedule` sees the same
graph. Blocks that cannot be modelled are left unchanged.

Attributes recorded on each function (integers; bytes for peaks):
``memsched.fused_groups`` (groups of two or more bindings), ``memsched.fused_bindings``
(bindings inside groups), ``memsched.fused_ops`` (ops of the fused problems: what a scheduler
would search), ``memsched.fusion_rounds``, ``memsched.fusion_peak_before``,
``memsched.fusion_peak_after`` and ``memsched.fusion_skipped`` (reasons) when a block was
skipped.
"""
from __future__ import annotations

import warnings

import tvm
from tvm import relax

from ..importers.relax import UnsupportedModelError, block_graph, reorder_block
from ..memory import MemoryModel, Problem
from ..simplify import simplify
from .common import map_relax_functions, with_blocks


def block_groups(graph, memory_model="tvm", max_group: int = 32):
    """The fusion of one block's graph: a `memsched.simplify.Simplified` whose ``groups`` list
    the fused groups (binding ids = op ids of ``graph``, internal order, rule, peak above the
    memory live before the group, live-memory change)."""
    return simplify(Problem.from_graph(graph, MemoryModel.get(memory_model)), max_group)


@tvm.transform.module_pass(opt_level=0, name="FuseIsolatedSubgraphs")
class FuseIsolatedSubgraphs:
    """Make every fused group of every dataflow block contiguous (see module docstring).

    Parameters
    ----------
    memory_model : str or MemoryModel
        ``"tvm"`` (default) or ``"paper"``: the model the fusion theorems are checked under.
    max_group : int
        Largest candidate group, in ops (Algorithm 1's ``M``).
    functions : list of str, optional
        Only these functions (default: every Relax function).
    """

    def __init__(self, memory_model="tvm", max_group: int = 32, functions=None):
        self.model = MemoryModel.get(memory_model)
        self.max_group = max_group
        self.functions = None if functions is None else set(functions)

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        self._mod = mod  # kernels: writes a fused call_tir makes into its arguments
        return map_relax_functions(mod, self.functions, self._function)

    def _function(self, func, name):
        body = func.body
        if not isinstance(body, relax.SeqExpr):
            return None
        blocks = list(body.blocks)
        groups = grouped = fused = rounds = 0
        before = after = 0
        changed = False
        skipped = []
        n_blocks = 0
        for i, blk in enumerate(blocks):
            if not isinstance(blk, relax.DataflowBlock):
                continue
            n_blocks += 1
            try:
                graph = block_graph(blk, name=f"{name}.block{i}", mod=self._mod)
            except UnsupportedModelError as e:
                skipped.append(f"block {i}: {e}")
                warnings.warn(f"FuseIsolatedSubgraphs: {name}: left block {i} unchanged: {e}",
                              stacklevel=2)
                continue
            simp = block_groups(graph, self.model, self.max_group)
            p = simp.original
            order = list(range(len(graph)))
            new = simp.canonicalize(order)
            pk0, pk1 = p.evaluate(order).peak, p.evaluate(new).peak
            before, after = max(before, pk0), max(after, min(pk0, pk1))
            groups += len(simp.groups)
            grouped += sum(len(g.ops) for g in simp.groups)
            fused += simp.problem.n
            rounds = max(rounds, simp.rounds)
            if new != order and pk1 <= pk0:
                blocks[i] = reorder_block(blk, graph, new)
                changed = True
        if n_blocks == 0:
            return None
        attrs = {
            "memsched.fused_groups": int(groups),
            "memsched.fused_bindings": int(grouped),
            "memsched.fused_ops": int(fused),
            "memsched.fusion_rounds": int(rounds),
            "memsched.fusion_peak_before": int(before),
            "memsched.fusion_peak_after": int(after),
        }
        if skipped:
            attrs["memsched.fusion_skipped"] = "; ".join(skipped)
        if changed:
            func = with_blocks(func, blocks)
        return func.with_attrs(attrs)

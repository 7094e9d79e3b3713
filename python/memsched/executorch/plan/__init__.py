"""The plan: order, pack, share. Imports `format` and `memory`.

* `reorder`: a graph module's nodes in memsched's certified peak-optimal order;
* `packer`: the exact arena packer as an ExecuTorch memory planning algorithm (`MemschedAlgo`);
* `banks`: planning across ExecuTorch's target memory map (the fast bank's traffic first);
* `pte_banks`: memory banks of a ``.pte`` method as written (traffic per planned buffer, the
  placement across a memory map for ``memsched reorder``);
* `share`: one value where the emitter wrote several equal ones (`share_values`).
"""

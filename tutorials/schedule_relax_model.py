"""Tutorial: reorder a Relax model for minimum peak memory and check it with TVM.

Run: .venv/bin/python tutorials/schedule_relax_model.py
"""
import numpy as np
import tvm
from tvm import relax

import memsched
from memsched.generators.examples import example_inputs, example_model

# 1. A randomly wired network, emitted breadth-first as many frontends do.
mod = example_model("randwire", seed=0)

# 2. The pass alone: attributes tell what it did.
scheduled = tvm.transform.Sequential([relax.transform.FoldConstant(),
                                      memsched.MemoryAwareSchedule(time_limit=30)])(mod)
attrs = scheduled["main"].attrs
print(f"peak {int(attrs['memsched.peak_before']):,} -> {int(attrs['memsched.peak_after']):,} B, "
      f"lower bound {int(attrs['memsched.lower_bound']):,} B, "
      f"optimal={bool(attrs['memsched.optimal'])}")

# 3. The whole build: TVM's default CPU pipeline with the reorder before memory planning.
x = [tvm.runtime.tensor(a) for a in example_inputs(mod)]
ref = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](*x).numpy()
ex = tvm.compile(mod, target="llvm", relax_pipeline=memsched.pipeline())
out = relax.VirtualMachine(ex, tvm.cpu())["main"](*x).numpy()
print("outputs bit-equal:", np.array_equal(ref, out))

# 4. TVM's real planned storage, its own order vs ours.
print(f"TVM planned storage: {memsched.planned_bytes(mod, schedule=False):,} B -> "
      f"{memsched.planned_bytes(mod):,} B")

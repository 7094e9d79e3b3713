"""Tutorial (TVM users): build a Relax model with MemoryAwareSchedule + PlanArena.

`memsched.pipeline()` is TVM's default CPU pipeline with two additions: MemoryAwareSchedule
reorders every dataflow block for the certified minimum peak before memory planning, and
PlanArena packs TVM's storage tokens into one arena at computed offsets after it. This script
prints the bytes TVM plans without and with them and checks the outputs are equal.

Run: .venv/bin/python tutorials/tvm_pipeline.py      (about 15 s on 2 cores)
"""
import numpy as np
import tvm
from tvm import relax

import memsched
from memsched.generators.examples import example_inputs, example_model

# 1. A randomly wired network (the Relax module behind `memsched analyze example:randwire`),
#    its operators emitted breadth-first as many frontends do.
mod = example_model("randwire", seed=0)

# 2. What TVM plans for activations: plain tvm.compile, then memsched's pipeline.
plain = memsched.planned_bytes(mod, schedule=False, plan_arena=False)
ours = memsched.planned_bytes(mod)  # MemoryAwareSchedule + PlanArena
print(f"planned activation storage: plain TVM {plain:,} B -> memsched.pipeline() {ours:,} B "
      f"({plain / ours:.2f}x less)")

# 3. The pass alone records what it proved on the function's attributes.
scheduled = tvm.transform.Sequential([relax.transform.FoldConstant(),
                                      memsched.MemoryAwareSchedule(time_limit=30)])(mod)
attrs = scheduled["main"].attrs
print(f"liveness peak {int(attrs['memsched.peak_before']):,} -> "
      f"{int(attrs['memsched.peak_after']):,} B, lower bound "
      f"{int(attrs['memsched.lower_bound']):,} B, optimal={bool(attrs['memsched.optimal'])}")

# 4. Build both ways and run: the reordered, arena-planned build computes the same outputs.
x = [tvm.runtime.tensor(a) for a in example_inputs(mod)]
ref = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](*x).numpy()
ex = tvm.compile(mod, target="llvm", relax_pipeline=memsched.pipeline())
out = relax.VirtualMachine(ex, tvm.cpu())["main"](*x).numpy()
equal = np.array_equal(ref, out)
print("outputs bit-equal:", equal)
assert equal and ours <= plain

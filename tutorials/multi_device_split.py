"""Tutorial (several devices over TVM RPC): split every operator across two devices.

When no single device holds a model, `SplitAcrossDevices` / `split_module` (GenEFlow) splits
every operator along output channels or feature-map rows over N devices, under each device's
memory limit, searched by a genetic algorithm (deterministic for a seed). The rewritten module
keeps the model's signature; `run_split` uploads each device's part to its own TVM RPC server
and runs it end to end, the host relaying tensors. Here the two "devices" are two local
`tvm.rpc` server processes that `ServerPool` starts and always stops; on real boards pass
``ServerPool(servers="host:port,host:port")`` or ``"KEY@tracker_host:port"`` entries instead.

Same thing from the command line (calibrates the cost model on the servers first):
    memsched split example:randwire --devices 2 --device-memory 300KiB --run-rpc

Run: .venv/bin/python tutorials/multi_device_split.py      (about 30 s on 2 cores)
"""
import numpy as np
import tvm
from tvm import relax

from memsched.generators.examples import example_inputs, example_model
from memsched.runtime.rpc_servers import ServerPool
from memsched.runtime.rpc_split import run_split
from memsched.split import Device, Link
from memsched.transform.split_across_devices import split_module

# 1. The model: its weights and activations need ~400 KiB on one device; give each of two
#    devices 300 KiB, so that it must be split.
mod = example_model("randwire", seed=0)
x = example_inputs(mod)
ref = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())["main"](
    *[tvm.runtime.tensor(a) for a in x]).numpy()

# 2. Search the split (FLOP-based operator times; `memsched profile-devices` measures real
#    ones) and rewrite the module. The host relays every transfer: topology "host".
devices = [Device(memory_bytes=300 << 10), Device(memory_bytes=300 << 10)]
new, result = split_module(mod, devices, Link(topology="host"), method="ga", seed=0)
print(f"split found: predicted latency {result.latency * 1e3:.2f} ms, peak per device "
      + ", ".join(f"{p:,} B" for p in result.evaluation.row()["per_device_peak_bytes"])
      + f" (limit {300 << 10:,} B each), fits: {result.feasible}")

# 3. Two local RPC servers (TVM_NUM_THREADS=1 each), stopped when the block ends.
with ServerPool(local=2) as pool:
    report = run_split(new, x, pool, repeat=3, warmup=1)
out = report["outputs"][0]
print(f"measured {report['measured_s'] * 1e3:.2f} ms per inference over RPC, "
      f"{report['bytes_up'] + report['bytes_down']:,} bytes moved")
equal = np.allclose(out, ref, rtol=1e-5, atol=1e-6)
print("outputs equal the unsplit model:", equal)
assert equal

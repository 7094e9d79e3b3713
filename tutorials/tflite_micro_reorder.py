"""Tutorial (TFLite / TFLite Micro users): reorder a .tflite and write an offline arena plan.

TFLite Micro runs a .tflite file's operators in file order and plans its arena from that
order. `reorder_tflite` rewrites the operator list into the certified minimum-peak order and,
with ``offline_plan=True``, writes memsched's arena offsets into the file's
`OfflineMemoryAllocation` metadata, which TFLM's planner then uses. This script measures TFLM's
smallest working arena before and after, and checks both files compute the same (LiteRT: every
tensor; TFLM: the outputs). The measuring needs the `tflite-micro` package (in the `test`
extra); without it the script says so and stops after the reorder.

Same thing from the command line:
    memsched reorder model.tflite -o model.memsched.tflite --offline-plan --measure

Run: .venv/bin/python tutorials/tflite_micro_reorder.py      (about 15 s on 2 cores)
"""
import os
import sys
import tempfile

from memsched.generators.examples import example_tflite
from memsched.tflite.plan.reorder import reorder_tflite
from memsched.tflite import tflm

with tempfile.TemporaryDirectory() as tmp:
    # 1. An int8 randomly wired network (8 nodes), operators in breadth-first file order.
    src = os.path.join(tmp, "randwire_int8.tflite")
    with open(src, "wb") as f:
        f.write(example_tflite("randwire", quantized=True, nodes=8))

    # 2. Reorder and write the offline plan (the file is checked before it is written).
    dst = os.path.join(tmp, "randwire_int8.memsched.tflite")
    _, r = reorder_tflite(src, dst, offline_plan=True, time_limit=30)
    print(f"{r.ops} operators; activation peak {r.input_peak:,} B (file order) -> "
          f"{r.peak:,} B (optimal={r.optimal}); offline plan {r.offline_arena:,} B")

    # 3. Measure TFLite Micro's minimal arena (bisection, one subprocess per probe).
    if not tflm.available():
        print("tflite-micro is not installed (pip install tflite-micro): skipping the "
              "TFLM measurement")
        sys.exit(0)
    before, after = tflm.min_arena_bytes(src), tflm.min_arena_bytes(dst)
    print(f"TFLM minimal arena: {before:,} B -> {after:,} B ({before / after:.2f}x less)")

    # 4. Same outputs: LiteRT compares every activation tensor, TFLM the outputs.
    cmp = tflm.compare_models(src, dst, count=2)
    print(f"equal: {cmp['equal']} (LiteRT {cmp['litert_equal']}, "
          f"{cmp['tensors_compared']} tensors; TFLM {cmp['tflm_equal']})")
    assert cmp["equal"] and after <= before

"""Where a patch region may start: one rule for every runtime.

At the model inputs, and after each of the first `MAX_START` operators when what crosses that
boundary (tensors produced before it and read after, model inputs still read) is smaller than
the model inputs: a leading quantize of a float input (TFLite's QUANTIZE, the Cortex-M flow's
``quantize_per_tensor``, a Relax model that begins with one) then runs whole and the float input
dies before the patches, instead of being sliced per patch and kept live through all of them.
The search prices both, so a start the rule offers is taken only when it lowers the total.
"""
from __future__ import annotations

from .geometry import SpatialModel

MAX_START = 4  # regions may start after the first MAX_START operators (run whole)


def region_starts(sm: SpatialModel, max_start: int = MAX_START) -> list[int]:
    """The operator indices a region of ``sm`` may start at (0 first)."""
    def crossing(s: int) -> int:
        live = {t for k in range(s, len(sm.ops)) for t in sm.ops[k].inputs
                if t in sm.inputs or sm.producer.get(t, len(sm.ops)) < s}
        return sum(sm.tensors[t].nbytes for t in live)

    first = crossing(0)
    return [0] + [s for s in range(1, min(max_start, len(sm.ops) - 1) + 1)
                  if crossing(s) < first]

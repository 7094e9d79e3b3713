"""TFLite Micro's ``GreedyMemoryPlanner``, reproduced exactly: offline-planned buffers at
their offsets, the others first fit, largest first."""
from __future__ import annotations

from .abi import ONLINE

# ---------------------------------------------------------------------------------------------
# the greedy planner (GreedyMemoryPlanner::CalculateOffsetsIfNeeded), exactly


def greedy_plan(buffers: list[tuple[int, int, int, int]]) -> list[int]:
    """Offsets TFLM's ``GreedyMemoryPlanner`` gives ``buffers`` (size, first, last,
    offline offset or -1), in its order of addition."""
    n = len(buffers)
    if n == 0:
        return []
    offline = [i for i in range(n) if buffers[i][3] != ONLINE]
    online = [i for i in range(n) if buffers[i][3] == ONLINE]
    # the online buffers are stored from the end of the sort arrays (so in reverse order of
    # addition), then ReverseSortInPlace bubble-sorts them by size, descending, stably: equal
    # sizes keep that reverse order
    online.reverse()
    online.sort(key=lambda i: -buffers[i][0])
    order = offline + online
    offsets = [buffers[i][3] if buffers[i][3] != ONLINE else -1 for i in range(n)]
    # the placed buffers sorted by offset (TFLM's linked list; a tie goes after)
    placed: list[tuple[int, int]] = []  # (offset, buffer)
    first = order[0]
    if buffers[first][3] == ONLINE:
        offsets[first] = 0
    placed.append((offsets[first], first))
    for b in order[1:]:
        size, t0, t1, off = buffers[b]
        if off == ONLINE:
            cand = 0
            for o, p in placed:  # entries overlapping in time, in offset order
                ps, p0, p1, _ = buffers[p]
                if p0 > t1 or t0 > p1:
                    continue
                if o - cand >= size:
                    break
                cand = max(cand, o + ps)
            off = cand
        offsets[b] = off
        # insert: before the first entry when strictly smaller than it, else after the last
        # entry whose offset is <= off
        if placed[0][0] > off:
            placed.insert(0, (off, b))
        else:
            k = 1
            while k < len(placed) and placed[k][0] <= off:
                k += 1
            placed.insert(k, (off, b))
    return offsets

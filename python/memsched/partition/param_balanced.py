"""The Edge TPU tool chain's segmentation rule: balance parameter bytes along one order.

Reference: libcoral's ``ParameterCountBasedPartitioner``
(``coral/tools/partitioner/parameter_count_based_partitioner.cc`` with ``TopologicalSort`` and
``CalculateParameterSizes`` in ``coral/tools/partitioner/utils.cc``, google-coral/libcoral), the
open re-implementation of ``edgetpu_compiler --num_segments K``. Re-implemented here
(`libcoral_cut`) as published:

1. order: Kahn's algorithm driven by a stack: the ops without producers, in index order, start
   the stack; the op on top is taken; a successor whose last input is now done is pushed on top,
   except an op without successors, which goes to the bottom ("visit as late as possible");
2. sizes: an op's parameter bytes are the bytes of its constant inputs (a buffer shared by two
   ops counts for each); ``average = total // K + 1``;
3. segments ``0 .. K-2`` each take the next ops of the order while their sum stays
   ``<= average`` and while every later segment can still get one op before the first op
   without successors; the last segment takes the rest. libcoral aborts (``CHECK``) when a
   segment would be empty: `libcoral_cut` raises `PartitionError` then.

Two details libcoral leaves to its hash set (the order in which one op's successors are pushed)
are fixed here: by output position, then by consumer index. Custom operators count 0 bytes in
libcoral; `PartitionProblem` does not know op kinds, so they count their constants here.

`param_balanced_cut` is the baseline every table and solver compares with: libcoral's cut, or,
where libcoral aborts, the nearest cut with every stage non-empty (the cut moved just enough).
"""
from __future__ import annotations

from .base import register
from .problem import PartitionError, PartitionProblem


def libcoral_order(problem: PartitionProblem) -> list[int]:
    """libcoral's execution order (``TopologicalSort``: stack-driven Kahn, sinks last)."""
    indeg = [len(p) for p in problem.preds]
    stack = [v for v in range(problem.n) if indeg[v] == 0]
    # pushed in index order: the stack's top (its end) is the source with the largest index
    order = []
    while stack:
        v = stack.pop()
        order.append(v)
        for c in problem.succs[v]:
            indeg[c] -= 1
            if indeg[c] == 0:
                if problem.succs[c]:
                    stack.append(c)
                else:
                    stack.insert(0, c)
    if len(order) != problem.n:
        raise PartitionError("libcoral's order: the graph is not a DAG")
    return order


def libcoral_cut(problem: PartitionProblem, stages: int) -> list[int]:
    """Stage of every op under libcoral's ``ParameterCountBasedPartitioner`` (module docstring);
    `PartitionError` where libcoral aborts (a segment left without operators)."""
    problem.check_stages(stages)
    k, n = stages, problem.n
    order = libcoral_order(problem)
    if k == 1:
        return [0] * n
    sizes = [problem.op_param_bytes(v) for v in range(n)]
    average = sum(sizes) // k + 1
    first_sink = next(i for i, v in enumerate(order) if not problem.succs[v])
    seg = [0] * n
    i = 0
    for j in range(k - 1):
        last = first_sink - (k - j - 1)  # later segments keep one op each before the sink
        if last < i:
            raise PartitionError(f"libcoral's parameter-count rule fails: segment {j} of {k} "
                                 "cannot end before the model's first output op")
        total = 0
        start = i
        while i <= last and total + sizes[order[i]] <= average:
            total += sizes[order[i]]
            seg[order[i]] = j
            i += 1
        if i == start:
            raise PartitionError(f"libcoral's parameter-count rule fails: segment {j} of {k} "
                                 f"gets no operator (op {order[i]} alone has "
                                 f"{sizes[order[i]]:,} B > average {average:,} B)")
    if i >= n:
        raise PartitionError(f"libcoral's parameter-count rule fails: segment {k - 1} of {k} "
                             "gets no operator")
    for v in order[i:]:
        seg[v] = k - 1
    return seg


def param_balanced_cut(problem: PartitionProblem, stages: int,
                       order: list[int] | None = None) -> list[int]:
    """libcoral's cut (`libcoral_cut`); where libcoral aborts, or along another ``order``, the
    running-sum rule: op ``v`` starts stage ``j`` once the parameters before it reach
    ``j * total / k``, moved just enough to leave no stage empty."""
    if order is None:
        try:
            return libcoral_cut(problem, stages)
        except PartitionError:
            order = libcoral_order(problem)
    problem.check_stages(stages)
    order = problem.topological_order() if order is None else list(order)
    n, k = problem.n, stages
    total = problem.total_param_bytes
    seen: set[int] = set()
    running = 0
    raw = []
    for v in order:
        # op v starts stage j when the parameters of the ops before it reach j * total / k
        j = sum(1 for i in range(1, k) if total > 0 and running * k >= i * total) \
            if total > 0 else (len(raw) * k) // n
        raw.append(j)
        for b in problem.op_params[v]:
            if b not in seen:
                seen.add(b)
                running += problem.param_bytes[b]
    # every stage non-empty: stage of the i-th op in [k - (n - i), i], non-decreasing, steps <= 1
    stage_of_pos = []
    prev = -1
    for i, j in enumerate(raw):
        j = max(j, k - (n - i), prev)
        j = min(j, prev + 1, k - 1)
        stage_of_pos.append(j)
        prev = j
    s = [0] * n
    for i, v in enumerate(order):
        s[v] = stage_of_pos[i]
    return s


@register("param-balanced", "the Edge TPU tool chain's rule (libcoral's "
                            "ParameterCountBasedPartitioner)")
def param_balanced(problem: PartitionProblem, stages: int, sram_bytes: int,
                   time_limit: float | None = None, order: list[int] | None = None, **_):
    stats = {}
    if order is None:
        try:
            libcoral_cut(problem, stages)
        except PartitionError as e:
            stats["libcoral"] = str(e)  # libcoral aborts here; the repaired cut is returned
    return param_balanced_cut(problem, stages, order), {}, False, stats


def linear_cut(problem: PartitionProblem, stages: int, order: list[int] | None = None) -> list[int]:
    """The cut of one topological order into ``stages`` contiguous runs with the smallest
    ``P`` (binary search on ``P``; for a cap, filling each stage greedily is optimal because a
    stage's parameter bytes only grow with its ops), every stage non-empty. A starting cut."""
    order = problem.topological_order() if order is None else order
    n, k = problem.n, stages
    pb = problem.param_bytes

    def fill(cap):
        """Stage of each position, or None when ``k`` stages of <= cap do not suffice."""
        st, j, used, load = [0] * n, 0, set(), 0
        for i, v in enumerate(order):
            new = [b for b in problem.op_params[v] if b not in used]
            add = sum(pb[b] for b in new)
            # open a new stage when v does not fit, or when the ops left are needed one per stage
            if i > 0 and (load + add > cap or n - i <= k - 1 - j) and j < k - 1 \
                    and (load + add > cap or n - i == k - 1 - j):
                j, used, load = j + 1, set(), 0
                new = list(problem.op_params[v])
                add = sum(pb[b] for b in set(new))
            if load + add > cap:
                return None
            used.update(new)
            load += add
            st[i] = j
        return st if j == k - 1 else None

    lo = max([problem.op_param_bytes(v) for v in range(n)] + [0])
    hi = max(lo, sum(pb))
    best = fill(hi)
    while lo < hi:
        mid = (lo + hi) // 2
        st = fill(mid)
        if st is None:
            lo = mid + 1
        else:
            hi, best = mid, st
    if best is None:
        best = fill(hi)
    s = [0] * n
    for i, v in enumerate(order):
        s[v] = best[i]
    return s

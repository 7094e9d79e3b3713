"""`RewriteConcatConv`: identity graph rewriting of ``concat -> conv2d`` (SERENITY §3.3).

A ``relax.concat`` of several branches followed by a ``relax.nn.conv2d`` keeps every branch and
the concatenated copy alive while the convolution runs. Two rewrites compute the same values
without the concat:

* **channel-wise partitioning** (``groups == 1``): ``conv(concat(x_1..x_n), W)`` =
  ``sum_i conv(x_i, W[:, off_i:off_i+c_i])`` -- the weight is sliced on its input-channel axis
  (``kernel_layout.index("I")``) and the partial convolutions are added; each partial conv can
  run as soon as its branch is ready, so the branches need not all be alive at once.
* **kernel-wise partitioning** (depthwise ``groups == C``, channel multiplier ``m >= 1``, and
  any grouped conv whose branch boundaries fall on group boundaries):
  ``conv(concat(x_i), W)`` = ``concat(conv(x_i, W[o_i:o_i+c_i*m], groups=c_i))`` -- the weight is
  sliced on its output-channel axis (``kernel_layout.index("O")``).

Channel-wise ops between the concat and the conv commute with the concat and are moved onto
the branches (`UNARY`, `BINARY` with a per-channel operand, batch norm, spatial strided_slice):
``conv(relu(concat(x_i)))`` (ReLU-Conv of NAS cells) and ``conv(relu(bn(concat(x_i))))``
(DenseNet) are sites too. A kernel-wise rewrite leaves a concat of the per-branch outputs; a
conv reading it (the pointwise conv after a depthwise one) is rewritten in the same step, since
TVM's concat copies its inputs and the depthwise split alone would only move the peak.

A grouped conv whose branch boundaries cut through a group is left alone. NCHW, NHWC and any
other permutation of N/C/H/W (O/I/H/W for the kernel) are handled; strides, padding, dilation,
layouts and ``out_dtype`` are copied. Constant weights are sliced in numpy; any other weight
(a function parameter, a computed value) through ``R.strided_slice``. Only the convolution is
replaced: the rewritten value is bound to the conv's own variable, so the bias add, activation
and every other user downstream are untouched. The concat (and a tuple bound to a variable for
it) is removed only when no other binding or return value uses it; otherwise it stays for them.

**Memory-aware by default.** Each dataflow block is imported as an `OpGraph` and scheduled
exactly (`memsched.schedule`, memory model ``"tvm"`` by default, anytime under ``time_limit``
seconds per search; ``budget`` caps the whole choice). A set of sites is kept only if it
lowers the block's optimal peak. The set is grown from the peak: only concats whose tensors are
live at a step at the current peak can lower it; they are tried together (repeated cells peak
at several steps at once) and then one at a time, an improvement is kept minus the concats it
does not need, and the next round looks at the new peak, until nothing improves or the peak
reaches a floor no rewrite can pass (the largest footprint of an op the rewrites leave alone).
``force=True`` rewrites every matched site. A function's peak is the maximum over its blocks,
so it never rises.

Candidate sets are *screened* first (milliseconds): an upper bound from the best baseline
order and from the order of the set it is compared with (new ops as early as possible), and
the search-free lower bounds (`memsched.schedulers.bounds`). The exact search runs only where
the screen leaves the comparison open (the combined trial of a round, a set the screen can
neither accept nor reject) and once on the chosen set, whose order and peak are reported.
DenseNet-121: 12.0 s -> 1.8 s by default, the same site and the same certified peak.

Results are function attributes (bytes for peaks), set on every function with at least one
matched site: ``memsched.rewrite_sites`` (convolutions rewritten, follow-ups included),
``memsched.rewrite_candidates`` (convolutions matched), ``memsched.rewrite_peak_before`` /
``memsched.rewrite_peak_after`` (optimal peak without / with the chosen rewrites; both under
``memsched.rewrite_memory_model``),
``memsched.rewrite_optimal`` (1 when every search was certified optimal), and
``memsched.rewrite_unmatched`` (why a concat -> conv2d pair was not matched) when there is one.

Functions that cannot be modelled (dynamic shapes, impure bindings inside a dataflow block) are
left exactly as they were, with a warning naming the reason. Rewriting changes the float
summation order (relative differences around 1e-6), nothing else.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import tvm
from tvm import relax

from ..importers.relax import UnsupportedModelError, block_graph
from ..memory import MemoryModel, Problem
from ..schedulers import schedule
from . import timings
from .common import (check_scheduler_options, map_relax_functions, scheduler_options,
                     with_blocks)
# matching and rewriting live in their own modules; their public names are importable here
from .concat_conv_match import CONV2D, Site, Step, _op_name, find_sites  # noqa: F401
from .concat_conv_rewrite import _outside_uses, apply_sites, rewrite_site  # noqa: F401


# ----------------------------------------------------------------------------- the choice
def _floor(block, sites, model) -> int:
    """A peak no choice of ``sites`` can go below: the largest footprint of an op the rewrites
    leave as it is (its inputs and outputs keep their sizes)."""
    index = {b.var: k for k, b in enumerate(block.bindings)}
    users: dict = {}
    for k, b in enumerate(block.bindings):
        for v in relax.analysis.free_vars(b.value):
            users.setdefault(v, []).append(k)
    touched = set()
    for s in sites:
        touched.add(s.conv_index)
        for v in [s.concat_var, s.tuple_var] + [st.var for st in s.chain]:
            if v is not None and v in index:
                touched.add(index[v])
        if s.kind == "kernel":  # follow-ups: channel-wise ops and convs reading the conv
            todo = [s.conv_var]
            while todo:
                for k in users.get(todo.pop(), []):
                    if k not in touched:
                        touched.add(k)
                        if _op_name(block.bindings[k].value) != CONV2D:
                            todo.append(block.bindings[k].var)
    graph = block_graph(block)
    p = Problem.from_graph(graph, model)
    return max((p.static_bound(v) for v in range(p.n) if graph.ops[v].source not in touched),
               default=0)


# ----------------------------------------------------------------------------- the pass
@dataclass
class _Eval:
    peak: int  # the peak of ``order``: an upper bound on the block's optimum
    optimal: bool
    order: list[int] | None = None  # binding indices in schedule order
    hot: set = field(default_factory=set)  # vars live (or computed) at a step at the peak
    lower: int = 0  # a proven lower bound on the block's optimum
    exact: bool = True  # from the configured scheduler (False: cheap screen, see _screen)


def _hot_vars(block, graph, problem, order) -> set:
    """Vars of ``block`` whose value is live, or computed, at a step whose footprint is the
    peak of ``order`` (op ids of ``graph``)."""
    prof = problem.evaluate(order)
    steps = [k for k, f in enumerate(prof.steps) if f == prof.peak]
    if not steps:
        return set()
    pos = {v: k for k, v in enumerate(order)}
    n = len(order)
    hot = set()
    for v, op in enumerate(graph.ops):
        lo = hi = pos[v]
        for t in op.outputs:
            ten = graph.tensors[t]
            hi = max([hi] + [pos[c] for c in ten.consumers] + ([n] if ten.is_output else []))
        if any(lo <= k <= hi for k in steps):
            hot.add(block.bindings[op.source].var)
    return hot


def _follow(block, graph, hint) -> list[int]:
    """A topological order of ``graph`` (ops of ``block``) that keeps the ops whose vars are in
    ``hint`` in hint order and runs every other op (what a rewrite added) right after its
    last predecessor."""
    import heapq

    pos = {v: k for k, v in enumerate(hint)}
    prio = []
    for op in graph.ops:
        k = pos.get(block.bindings[op.source].var)
        prio.append(k if k is not None else max([prio[u] for u in op.preds], default=-1) + 0.5)
    indeg = [len(set(op.preds)) for op in graph.ops]
    succs: list[list[int]] = [[] for _ in graph.ops]
    for v, op in enumerate(graph.ops):
        for u in set(op.preds):
            succs[u].append(v)
    ready = [(prio[v], v) for v in range(len(graph.ops)) if not indeg[v]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, v = heapq.heappop(ready)
        order.append(v)
        for w in succs[v]:
            indeg[w] -= 1
            if not indeg[w]:
                heapq.heappush(ready, (prio[w], w))
    return order


@tvm.transform.module_pass(opt_level=0, name="RewriteConcatConv")
class RewriteConcatConv:
    """Partition ``conv2d`` after ``concat`` (SERENITY identity graph rewriting), where it lowers
    the optimal peak memory.

    Parameters
    ----------
    force : bool
        Rewrite every matched site, whether or not it lowers the peak (default False).
    memory_model : str or MemoryModel
        Memory model of the peak comparison: ``"tvm"`` (default) or ``"paper"``.
    time_limit : float or None
        Seconds for each exact search (anytime: on timeout the best order found is used, and
        ``memsched.rewrite_optimal`` is 0). None means no limit.
    algorithm : str
        Scheduler for the comparison (default ``"auto"``, the exact search).
    conv, depthwise : bool
        Enable channel-wise (groups == 1) / kernel-wise (grouped, depthwise) partitioning.
    elementwise : bool
        Also match elementwise ops of one tensor between the concat and the conv
        (``conv(relu(concat(x_i)))``, the ReLU-Conv-BN of NAS cells); they are moved onto the
        branches (default True).
    budget : float or None
        Seconds for choosing the sites of one block (default None: no limit). The choice
        costs up to ``2 * concats + 1`` searches; when the budget is spent the best set found
        so far is kept.
    functions : list of str, optional
        Only these functions (default: every Relax function).
    """

    def __init__(self, force: bool = False, memory_model: str | MemoryModel | None = None,
                 time_limit: float | None = -1.0, algorithm: str | None = None,
                 conv: bool = True, depthwise: bool = True, elementwise: bool = True,
                 budget: float | None = None, functions=None):
        self.force = bool(force)
        self.memory_model = memory_model
        self.time_limit = time_limit
        self.algorithm = algorithm
        self.conv = conv
        self.depthwise = depthwise
        self.elementwise = elementwise
        self.budget = budget
        self.functions = None if functions is None else set(functions)
        check_scheduler_options(algorithm, memory_model)

    def _options(self, ctx):
        return scheduler_options(ctx, self.algorithm, self.time_limit, self.memory_model, 2.0)

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        self._algorithm, self._time_limit, self._model = self._options(ctx)
        self._mod = mod
        return map_relax_functions(mod, self.functions, self._rewrite_function)

    # -- evaluation
    def _evaluate(self, block, name) -> _Eval:
        graph = block_graph(block, name=name, mod=getattr(self, "_mod", None))
        s = schedule(graph, self._algorithm, self._model, time_limit=self._time_limit)
        hot = _hot_vars(block, graph, Problem.from_graph(graph, self._model), s.order)
        return _Eval(s.peak, bool(s.optimal), [graph.ops[v].source for v in s.order], hot,
                     s.lower_bound)

    def _screen(self, block, name, hint=None) -> _Eval:
        """The cheap evaluation: an upper bound from the best baseline order and from ``hint``
        (vars of the unrewritten block in its best order: that order with the rewrite's new
        ops run as early as possible, `_follow`), and the search-free lower bounds (trivial,
        ancestry); milliseconds where a search costs up to ``time_limit``."""
        from ..schedulers.bounds import ancestry_bound
        from ..schedulers.heuristics import best_heuristic

        graph = block_graph(block, name=name, mod=getattr(self, "_mod", None))
        p = Problem.from_graph(graph, self._model)
        order, peak, _ = best_heuristic(p)
        if hint:
            o = _follow(block, graph, hint)
            pk = p.evaluate(o).peak
            if pk < peak:
                order, peak = o, pk
        lower = min(peak, ancestry_bound(p))
        return _Eval(peak, lower >= peak, [graph.ops[v].source for v in order],
                     _hot_vars(block, graph, p, order), lower, exact=lower >= peak)

    def _enabled(self, site: Site) -> bool:
        return self.conv if site.kind == "channel" else self.depthwise

    def _rewrite_function(self, func, name):
        body = func.body
        if not isinstance(body, relax.SeqExpr):
            return None
        blocks = list(body.blocks)
        found = []  # (block position, sites)
        unmatched = []
        for i, blk in enumerate(blocks):
            if not isinstance(blk, relax.DataflowBlock):
                continue
            sites, why = find_sites(blk, self.elementwise)
            unmatched += why
            sites = [s for s in sites if self._enabled(s)]
            if sites:
                found.append((i, sites))
        candidates = sum(len(s) for _, s in found)
        dynamic = [w for w in unmatched if "dynamic shape" in w]
        if dynamic:
            warnings.warn(f"RewriteConcatConv: {name}: not rewritten: " + "; ".join(dynamic),
                          stacklevel=3)
        if not candidates:
            return None
        before = after = 0
        optimal = True
        measured = True
        rewritten = 0
        t0 = time.perf_counter()
        # Peaks of the blocks with no candidate site count for the function's peak too.
        for i, blk in enumerate(blocks):
            if not isinstance(blk, relax.DataflowBlock) or i in dict(found):
                continue
            try:
                e = self._evaluate(blk, f"{name}.block{i}")
            except UnsupportedModelError:
                continue  # not ours to judge; the sites' blocks decide
            before, after = max(before, e.peak), max(after, e.peak)
            optimal = optimal and e.optimal
        for i, sites in found:
            blk = blocks[i]
            outside = _outside_uses(func, i)
            try:
                base = self._evaluate(blk, f"{name}.block{i}")
            except UnsupportedModelError as e:
                if not self.force:
                    warnings.warn(f"RewriteConcatConv: {name}: left function unchanged: block "
                                  f"{i} cannot be modelled ({e}); use force=True to rewrite "
                                  "without a memory check", stacklevel=3)
                    return None
                measured = False
                blocks[i], n = self._apply(blk, sites, outside)
                rewritten += n
                continue
            # sum the branches in the order the best schedule makes them (inputs first)
            at = {blk.bindings[src].var: k for k, src in enumerate(base.order)}
            for s in sites:
                s.order = sorted(range(len(s.fields)), key=lambda f, s=s: at.get(s.fields[f], -1))
            new, n, ev = self._choose(blk, sites, outside, base, f"{name}.block{i}")
            before = max(before, base.peak)
            after = max(after, ev.peak)
            optimal = optimal and base.optimal and ev.optimal
            if n:
                blocks[i] = new
                rewritten += n
        attrs = {
            "memsched.rewrite_sites": int(rewritten),
            "memsched.rewrite_candidates": int(candidates),
            "memsched.rewrite_memory_model": self._model.name,
        }
        timings.record("RewriteConcatConv", name, time.perf_counter() - t0)  # not in attrs
        if measured:
            attrs.update({"memsched.rewrite_peak_before": int(before),
                          "memsched.rewrite_peak_after": int(after),
                          "memsched.rewrite_optimal": int(optimal)})
        if unmatched:
            attrs["memsched.rewrite_unmatched"] = "; ".join(unmatched)
        if rewritten:
            func = with_blocks(func, blocks)
        return func.with_attrs(attrs)

    def _apply(self, block, sites, outside):
        """(block with ``sites`` rewritten, number of convs rewritten). A kernel-wise rewrite
        turns the conv into a concat of per-branch convs; convs reading that concat (the
        pointwise conv after a depthwise one) are rewritten with it, transitively: without them
        the new concat only moves the memory peak (TVM's concat copies its inputs)."""
        new = apply_sites(block, sites, outside)
        count = len(sites)
        produced = {s.conv_var for s in sites if s.kind == "kernel"}
        while produced:
            more, _ = find_sites(new, self.elementwise)
            more = [s for s in more if s.concat_var in produced and self._enabled(s)]
            if not more:
                break
            new = apply_sites(new, more, outside)
            count += len(more)
            produced = {s.conv_var for s in more if s.kind == "kernel"}
        return new, count

    def _choose(self, block, sites, outside, base: _Eval, name):
        """(new block, convs rewritten, its evaluation); (block, 0, base) when no subset of the
        sites lowers the peak.

        Peak-directed: only concats whose tensors (branches, concat, ops up to the conv) are
        live at a step at the current peak can lower it. Each round tries all of those together
        (repeated cells peak at several steps at once), then one at a time; an improvement is
        kept, minus the concats it does not need, and the next round looks at the new peak.
        The search stops when nothing improves, at a proven floor, or when the budget is spent.
        """
        units: dict = {}  # concat var -> its sites: a concat disappears only with all of them
        for s in sites:
            units.setdefault(s.concat_var, []).append(s)
        units = list(units.values())
        touch = []
        for u in units:
            vs = {u[0].concat_var, u[0].tuple_var} | {f for f in u[0].fields
                                                       if isinstance(f, tvm.ir.Var)}
            for s in u:
                vs |= {s.conv_var} | {st.var for st in s.chain}
            touch.append(vs - {None})
        cache: dict = {frozenset(): (block, 0, base)}  # keep -> (block, convs, evaluation)

        def ev(keep: frozenset, exact: bool = False, near: frozenset | None = None) -> _Eval:
            """Screened (`_screen`, following the order of the evaluated set ``near``) unless
            ``exact`` or the screen proved it; an exact evaluation replaces the screen."""
            if keep not in cache:
                chosen = [s for u in sorted(keep) for s in units[u]]
                new, n = self._apply(block, chosen, outside)
                nb, _, ne = cache[near if near in cache else frozenset()]
                hint = [nb.bindings[k].var for k in ne.order] if ne.order else None
                cache[keep] = (new, n, self._screen(new, name, hint))
            new, n, e = cache[keep]
            if exact and not e.exact:
                cache[keep] = (new, n, self._evaluate(new, name))
            return cache[keep][2]

        def below(keep: frozenset, near: frozenset, strict: bool = True,
                  exact: bool = True) -> bool:
            """Whether ``keep``'s best order goes below the peak of ``near`` (or to it,
            ``strict`` False). The exact scheduler runs only when the cheap bounds leave it
            open (and ``exact``)."""
            threshold = ev(near).peak
            e = ev(keep, near=near)
            if e.peak < threshold or (not strict and e.peak == threshold):
                return True
            if e.lower > threshold or (strict and e.lower == threshold) or e.exact or \
                    not exact:
                return False
            e = ev(keep, exact=True)
            return e.peak < threshold or (not strict and e.peak == threshold)

        if self.force:
            every = frozenset(range(len(units)))
            ev(every, exact=True)
            return cache[every]
        end = None if self.budget is None else time.perf_counter() + self.budget
        floor = _floor(block, sites, self._model)

        def spent():
            return end is not None and time.perf_counter() > end

        cur = frozenset()
        while not spent() and ev(cur).peak > floor:
            hot = ev(cur).hot
            crit = [u for u in range(len(units)) if u not in cur and touch[u] & hot]
            trials = [cur | frozenset(crit)]
            if len(crit) > 1:
                trials += [cur | {u} for u in crit]
            better = None
            for k, trial in enumerate(trials):
                if spent():
                    break
                # the exact search for the combined trial only; single sites are screened
                if below(trial, cur, exact=k == 0):
                    better = trial
                    break
            if better is None:
                break
            for u in sorted(better - cur):  # drop what the improvement does not need
                if spent():
                    break
                fewer = better - {u}
                if fewer != cur and below(fewer, better, strict=False):
                    better = fewer
            cur = better
        # the chosen set once with the configured scheduler (the order and peak reported)
        if cur and not spent():
            ev(cur, exact=True)
        if ev(cur).peak >= base.peak:
            return block, 0, base
        return cache[cur]

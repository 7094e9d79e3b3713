"""`Problem.evaluate` (readers counted, per-op sums) against the mask walk it replaced, on
random DAGs, memory models and orders that share prefixes."""
import random

from hypothesis import given, settings, strategies as st

import memsched
from memsched.generators.random_graphs import random_dag
from memsched.memory import Problem


def _order(p: Problem, rng: random.Random, prefix: list[int] | None = None) -> list[int]:
    """A random topological order of ``p`` starting with ``prefix``."""
    done = set(prefix or [])
    order = list(prefix or [])
    while len(order) < p.n:
        ready = [v for v in range(p.n) if v not in done and all(u in done for u in p.preds[v])]
        v = ready[rng.randrange(len(ready))]
        order.append(v)
        done.add(v)
    return order


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 25), seed=st.integers(0, 10**6), inplace=st.booleans(),
       outputs=st.booleans())
def test_evaluate_equals_the_mask_walk(n, seed, inplace, outputs):
    g = random_dag(n, seed=seed)
    p = Problem.from_graph(g, memsched.MemoryModel(True, outputs, inplace, True, "x"))
    rng = random.Random(seed)
    base = _order(p, rng)
    for order in [base] + [_order(p, rng, base[:rng.randrange(p.n + 1)]) for _ in range(6)]:
        got, want = p.evaluate(order), p._evaluate_masks(order)
        assert (got.steps, got.lives, got.peak) == (want.steps, want.lives, want.peak)

"""memsched.dominators equals networkx.immediate_dominators (used by fusion and HMCOS)."""
import networkx as nx
from hypothesis import given, settings, strategies as st

from memsched.dominators import immediate_dominators


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30), st.lists(st.tuples(st.integers(0, 29), st.integers(0, 29)),
                                    max_size=80), st.integers(0, 29))
def test_equals_networkx(n, edges, start):
    start %= n
    edges = [(u % n, v % n) for u, v in edges]
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    succs = [[] for _ in range(n)]
    for u, v in edges:
        succs[u].append(v)
    assert immediate_dominators(succs, start) == nx.immediate_dominators(g, start)

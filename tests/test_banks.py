"""memsched.banks: placement across memory banks, against brute force on small cases."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsched.arena import Lifetime, plan
from memsched.banks import (Bank, BankCapacityError, Buffer, check_plan, greedy_place,
                            parse_memory_map, place)


def _fits(bufs, idx, bank) -> bool:
    if not idx:
        return True
    p = plan([Lifetime(bufs[i].size, bufs[i].start, bufs[i].end) for i in idx], "exact",
             alignment=bank.alignment)
    assert p.optimal  # tiny instances: the packer proves its arena
    return p.arena <= bank.capacity


def _brute_fast(bufs, fast) -> int:
    """The most traffic any packable subset of the buffers gives the fast bank."""
    best = 0
    n = len(bufs)
    for r in range(n + 1):
        for sub in itertools.combinations(range(n), r):
            t = sum(bufs[i].traffic for i in sub)
            if t > best and _fits(bufs, list(sub), fast):
                best = t
    return best


buffers = st.lists(st.tuples(st.sampled_from([16, 32, 48, 64, 96]), st.integers(0, 6),
                             st.integers(0, 3), st.integers(0, 3)),
                   min_size=1, max_size=7).map(
    lambda xs: [Buffer(s, a, a + d, s * (1 + r)) for s, a, d, r in xs])


@settings(max_examples=40, deadline=None)
@given(buffers, st.sampled_from([48, 64, 96, 128]))
def test_fast_bank_traffic_is_the_brute_force_optimum_when_certified(bufs, cap):
    fast, slow = Bank("fast", cap, 16), Bank("slow", 1 << 20, 16)
    p = place(bufs, [fast, slow])
    check_plan(bufs, p)
    best = _brute_fast(bufs, fast)
    assert p.traffic[0] <= best <= p.traffic_bound[0]
    if p.optimal:
        assert p.traffic[0] == best
    # never worse than ExecuTorch's rule (largest first into the fastest bank with room)
    assert p.traffic[0] >= greedy_place(bufs, [fast, slow]).traffic[0]
    assert sum(p.traffic) == sum(b.traffic for b in bufs)


def test_everything_in_the_fast_bank_when_it_fits():
    bufs = [Buffer(64, 0, 1, 128), Buffer(64, 1, 2, 64), Buffer(64, 2, 3, 64)]
    p = place(bufs, [Bank("fast", 128, 16), Bank("slow", 1024, 16)])
    assert p.bank_of == [0, 0, 0] and p.share() == 1.0 and p.optimal
    assert p.used == [128, 0]


def test_pins_are_kept_and_a_pin_that_does_not_fit_names_its_bank():
    bufs = [Buffer(64, 0, 3, 1000, bank=1), Buffer(64, 0, 3, 10)]
    p = place(bufs, [Bank("fast", 128, 16), Bank("slow", 1024, 16)])
    assert p.bank_of == [1, 0]
    with pytest.raises(BankCapacityError, match="'fast'.*32 B more"):
        place([Buffer(160, 0, 1, 5, bank=0)], [Bank("fast", 128, 16), Bank("slow", 64, 16)])


def test_too_small_a_map_names_the_last_bank_and_the_bytes_missing():
    bufs = [Buffer(100, 0, 1, 1), Buffer(100, 0, 1, 1), Buffer(100, 0, 1, 1)]
    with pytest.raises(BankCapacityError, match="'slow' needs 224 B, 96 B more"):
        place(bufs, [Bank("fast", 112, 16), Bank("slow", 128, 16)])


def test_per_bank_alignment():
    bufs = [Buffer(10, 0, 2, 100), Buffer(10, 0, 2, 50), Buffer(10, 0, 2, 1)]
    p = place(bufs, [Bank("fast", 128, 64), Bank("slow", 64, 16)])
    assert all(o % 64 == 0 for o, k in zip(p.offsets, p.bank_of) if k == 0)
    assert p.bank_of == [0, 0, 1] and p.used == [128, 16]


def test_the_fallback_fits_where_the_lexicographic_choice_does_not():
    # the most fast-bank traffic (64 B then 32 B) leaves the 96-B buffer to a 64-B slow bank;
    # ExecuTorch's rule (largest first into the fastest bank with room) fits
    bufs = [Buffer(96, 0, 1, 96), Buffer(64, 0, 1, 200), Buffer(32, 2, 3, 100)]
    p = place(bufs, [Bank("fast", 96, 16), Bank("slow", 64, 16)])
    check_plan(bufs, p)
    assert p.method == "greedy" and p.bank_of == [0, 1, 0] and p.traffic_bound[0] == 300


@pytest.mark.parametrize("text,err", [
    ("dtcm:64K", "NAME:SIZE:MEM_ID"), ("dtcm:x:1", "integers"), ("dtcm:64K:0", "MEM_ID >= 1"),
    ("a:1:1,a:2:2", "unique"), ("a:1:1,b:2:1", "unique")])
def test_memory_map_text(text, err):
    with pytest.raises(BankCapacityError, match=err):
        parse_memory_map(text)
    assert parse_memory_map("dtcm:64K:1, sram:8M:2") == [("dtcm", 65536, 1),
                                                         ("sram", 8 << 20, 2)]


def test_patch_search_buffers_of_an_activation_graph():
    """`patches.fast_bank.buffers_of`: each counted tensor's bytes, its lifetime in the order
    given, traffic = bytes x (1 + readers); the in-place pairs; uncounted inputs left out."""
    from memsched.graph import GraphBuilder
    from memsched.memory import MemoryModel
    from memsched.patches.fast_bank import buffers_of

    b = GraphBuilder("g")
    x = b.input("x", 64)
    a = b.ops[b.op("a", "conv", [x], [("ta", 32)])].outputs[0]
    c = b.ops[b.op("c", "conv", [a], [("tc", 16)])].outputs[0]
    d = b.ops[b.op("d", "add", [a, c], [("td", 16)], inplace=[c])].outputs[0]
    b.mark_output(d)
    g = b.build()
    bufs, pairs = buffers_of(g, [0, 1, 2], MemoryModel(count_inputs=False, inplace=True))
    assert [(u.size, u.start, u.end, u.traffic) for u in bufs] == \
        [(32, 0, 2, 32 * 3), (16, 1, 2, 16 * 2), (16, 2, 2, 16)]
    assert pairs == [(1, 2)]
    bufs, pairs = buffers_of(g, [0, 1, 2], MemoryModel(count_inputs=True, inplace=False))
    assert (bufs[0].size, bufs[0].start, bufs[0].end, bufs[0].traffic) == (64, 0, 0, 128)
    assert pairs == []

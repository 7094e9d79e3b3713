"""memsched.packing: the exact (MiniMalloc-class) arena packer and MiniMalloc's CSV format."""
import io
import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsched import arena, packing

needs_native = pytest.mark.skipif(not packing.native_available(),
                                  reason="native packer (libmemsched_native) not built")
BENCH = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "minimalloc"


def overlaps_ok(bufs, offsets, capacity=None):
    """Independent check: every pair live at the same time is disjoint in memory."""
    assert len(offsets) == len(bufs)
    for (lo, hi, s), o in zip(bufs, offsets):
        assert o >= 0
        if capacity is not None:
            assert o + s <= capacity
    for (i, (l1, h1, s1)), (j, (l2, h2, s2)) in itertools.combinations(enumerate(bufs), 2):
        if l1 < h2 and l2 < h1 and s1 and s2:
            o1, o2 = offsets[i], offsets[j]
            assert o1 + s1 <= o2 or o2 + s2 <= o1, (i, j)


def brute_force(bufs):
    """Minimum arena: every order, each buffer on top of the placed ones it meets in time
    (every packing's buffers sorted by offset, let fall, is such an order)."""
    best = None
    for perm in itertools.permutations(range(len(bufs))):
        off = {}
        for i in perm:
            l1, h1, _ = bufs[i]
            off[i] = max([off[j] + bufs[j][2] for j in off
                          if bufs[j][0] < h1 and l1 < bufs[j][1]], default=0)
        a = max((off[i] + bufs[i][2] for i in off), default=0)
        best = a if best is None else min(best, a)
    return best or 0


def greedy_arena(bufs, alignment=1):
    return arena.plan_greedy([arena.Lifetime(s, lo, hi - 1) for lo, hi, s in bufs],
                             alignment).arena


buffer = st.tuples(st.integers(0, 30), st.integers(1, 12), st.integers(0, 40)).map(
    lambda t: (t[0], t[0] + t[1], t[2]))
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@needs_native
@FAST
@given(st.lists(buffer, min_size=0, max_size=40), st.sampled_from([1, 4, 16]))
def test_random_valid_and_never_worse_than_greedy(bufs, alignment):
    r = packing.pack(bufs, time_limit=None, max_nodes=20000, alignment=alignment)
    assert r.arena >= 0
    sizes = [(lo, hi, arena.align_up(s, alignment)) for lo, hi, s in bufs]
    overlaps_ok(sizes, r.offsets)
    assert all(o % alignment == 0 for o in r.offsets)
    assert r.arena == max((o + s for o, (_, _, s) in zip(r.offsets, sizes)), default=0)
    assert r.arena <= greedy_arena(bufs, alignment)
    peak = arena.max_live([arena.Lifetime(s, lo, hi - 1) for lo, hi, s in bufs], alignment)
    assert peak <= r.lower_bound <= r.arena
    assert r.optimal == (r.arena == r.lower_bound)


@needs_native
@settings(max_examples=80, deadline=None)
@given(st.lists(buffer, min_size=1, max_size=6))
def test_small_optimum_equals_brute_force(bufs):
    r = packing.pack(bufs, time_limit=None)
    assert r.optimal and r.stop == "done"
    assert r.arena == brute_force(bufs)
    overlaps_ok(bufs, r.offsets)


@needs_native
@settings(max_examples=60, deadline=None)
@given(st.lists(buffer, min_size=1, max_size=6), st.integers(0, 60))
def test_small_capacity_decision(bufs, capacity):
    r = packing.pack(bufs, capacity=capacity, time_limit=None)
    opt = brute_force(bufs)
    assert r.fits == (opt <= capacity)
    if r.fits:
        overlaps_ok(bufs, r.offsets, capacity)
    else:
        # the best packing known (over the capacity), and the proof that none fits
        assert r.arena > capacity and r.lower_bound > capacity
        overlaps_ok(bufs, r.offsets)


@needs_native
def test_arena_plan_exact_and_auto():
    lts = [arena.Lifetime(s, st_, en) for s, st_, en in
           [(100, 0, 3), (60, 2, 5), (60, 4, 8), (40, 0, 8), (100, 6, 9), (30, 3, 6)]]
    for method in ("exact", "auto"):
        p = arena.plan(lts, method, alignment=8, time_limit=5)
        arena.verify(lts, p.offsets, 8, p.arena)
        assert p.optimal and p.arena == p.lower_bound == arena.max_live(lts, 8)
        assert p.method == method


@needs_native
def test_deterministic():
    r = __import__("random").Random(3)
    bufs = []
    for _ in range(60):
        lo = r.randrange(100)
        bufs.append((lo, lo + r.randint(1, 30), r.choice([8, 16, 24, 40, 64])))
    a = packing.pack(bufs, time_limit=None, max_nodes=50000)
    b = packing.pack(bufs, time_limit=None, max_nodes=50000)
    assert (a.arena, a.offsets, a.lower_bound, a.nodes) == (b.arena, b.offsets, b.lower_bound,
                                                           b.nodes)


@needs_native
def test_run_pack_report(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n")
    rep = packing.run_pack(f, capacity=12, time_limit=5)
    json.dumps(rep)
    assert rep["fits"] is True and rep["arena"] == 12 and rep["lower_bound"] == 12
    assert rep["optimal"] is True and len(rep["offsets"]) == 5
    bufs = [(b.lower, b.upper, b.size) for b in packing.read_minimalloc_csv(f)]
    overlaps_ok(bufs, rep["offsets"], 12)
    rep = packing.run_pack(f, capacity=11, time_limit=5)
    assert rep["fits"] is False and rep["arena"] >= 12 and rep["lower_bound"] == 12
    rep = packing.run_pack(f, time_limit=5)
    assert rep["arena"] == 12 and rep["optimal"] and rep["fits"] is None


@needs_native
@pytest.mark.skipif(not (BENCH / "C.1048576.csv").exists(), reason="benchmark not present")
def test_minimalloc_instance_fits():
    rep = packing.run_pack(BENCH / "C.1048576.csv", capacity=1048576, time_limit=30)
    assert rep["fits"]
    bufs = [(b.lower, b.upper, b.size)
            for b in packing.read_minimalloc_csv(BENCH / "C.1048576.csv")]
    overlaps_ok(bufs, rep["offsets"], 1048576)


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("text, words", [
    ("", "empty"),
    ("id,lower,upper\n1,0,3\n", "size"),
    ("id,lower,upper,size,size\n1,0,3,4,4\n", "twice"),
    ("id,lower,upper,size\n1,0,3,x4\n", "not an integer"),
    ("id,lower,upper,size\n1,0,3,-4\n", "negative size"),
    ("id,lower,upper,size\n1,3,3,4\n", "upper 3 <= lower 3"),
    ("id,lower,upper,size\n1,5,3,4\n", "upper 3 <= lower 5"),
    ("id,lower,upper,size\n1,0\n", "fields"),
    ("id,lower,upper,size\n1,0,3,99999999999999999999999\n", "out of range"),
    ("id,lower,upper,size\n1,0,3,\"4\n", "malformed"),
])
def test_bad_csv_one_line(tmp_path, text, words):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(packing.PackingInputError) as e:
        packing.read_minimalloc_csv(f)
    msg = str(e.value)
    assert isinstance(e.value, ValueError) and "\n" not in msg
    assert words in msg, msg


def test_bad_csv_size_and_binary(tmp_path):
    f = tmp_path / "big.csv"
    f.write_text("id,lower,upper,size\n" + "1,0,3,4\n" * 100)
    with pytest.raises(packing.PackingInputError, match="larger than"):
        packing.read_minimalloc_csv(f, max_bytes=100)
    g = tmp_path / "bin.csv"
    g.write_bytes(b"id,lower,upper,size\n\x00\x01")
    with pytest.raises(packing.PackingInputError, match="NUL"):
        packing.read_minimalloc_csv(g)
    with pytest.raises(packing.PackingInputError, match="cannot read"):
        packing.read_minimalloc_csv(tmp_path / "missing.csv")


def test_csv_columns_any_order_and_extra():
    bufs = packing.read_minimalloc_csv(io.StringIO(
        "size,id,upper,lower,offset\n4,b1,3,0,8\n\n5,b2,9,3,0\n"))
    assert bufs == [packing.Buffer("b1", 0, 3, 4), packing.Buffer("b2", 3, 9, 5)]


def test_pack_rejects_bad_buffers():
    with pytest.raises(packing.PackingInputError):
        packing.pack([(3, 3, 4)])
    with pytest.raises(packing.PackingInputError):
        packing.pack([(0, 3, -1)])
    with pytest.raises(packing.PackingInputError):
        packing.pack([(0, 3, 1)], alignment=0)


def test_too_large_refused_or_left_to_greedy(monkeypatch):
    bufs = [(0, 10, 4)] * 30
    assert packing.overlapping_pairs([b[:2] for b in bufs]) == 435
    assert packing.overlapping_pairs([(0, 2), (2, 4), (1, 3)]) == 2
    monkeypatch.setattr(packing, "MAX_PAIRS", 100)
    with pytest.raises(packing.PackingInputError, match="too large"):
        packing.pack(bufs)
    lts = [arena.Lifetime(s, lo, hi - 1) for lo, hi, s in bufs] + [arena.Lifetime(3, 0, 0)]
    p = arena.plan(lts, "exact", alignment=1)
    arena.verify(lts, p.offsets, 1, p.arena)
    assert p.stats.get("skipped")  # greedy optimal, or left to greedy as too large


@needs_native
@settings(max_examples=40, deadline=None)
@given(st.lists(buffer, min_size=1, max_size=14), st.randoms(use_true_random=False),
       st.sampled_from([None, 60]))
def test_row_order_does_not_matter(bufs, rnd, capacity):
    """Ties are broken by the buffers' content, never by their input position: any order of
    the rows gives the same arena, bound, node count and the same offset per buffer."""
    a = packing.pack(bufs, capacity=capacity, time_limit=None, max_nodes=3000)
    perm = list(range(len(bufs)))
    rnd.shuffle(perm)
    b = packing.pack([bufs[i] for i in perm], capacity=capacity, time_limit=None,
                     max_nodes=3000)
    assert (a.arena, a.lower_bound, a.nodes, a.fits) == (b.arena, b.lower_bound, b.nodes, b.fits)
    assert sorted(zip(bufs, a.offsets)) == sorted(zip([bufs[i] for i in perm], b.offsets))
    overlaps_ok([bufs[i] for i in perm], b.offsets)


@needs_native
def test_row_order_does_not_matter_medium():
    """A 120-buffer instance cut by a node budget: the same (partial) search in every order."""
    r = __import__("random").Random(11)
    bufs = []
    for _ in range(120):
        lo = r.randrange(200)
        bufs.append((lo, lo + r.randint(1, 40), r.choice([16, 32, 48, 64, 96, 128])))
    ref = packing.pack(bufs, time_limit=None, max_nodes=20000)
    for seed in range(3):
        perm = list(range(len(bufs)))
        __import__("random").Random(seed).shuffle(perm)
        got = packing.pack([bufs[i] for i in perm], time_limit=None, max_nodes=20000)
        assert (got.arena, got.lower_bound, got.nodes) == (ref.arena, ref.lower_bound,
                                                          ref.nodes)
        assert sorted(zip([bufs[i] for i in perm], got.offsets)) == sorted(zip(bufs, ref.offsets))

"""The learned initial cut: valid cuts from the shipped weights; numpy inference == torch."""
import numpy as np
import pytest

from memsched.partition import evaluate, solve
from memsched.partition.learned import (N_FEATURES, cut_to_assignment, features, learned_cut,
                                        pointer_cut)
from memsched.partition.synthetic import synthetic_problem


@pytest.mark.parametrize("seed", range(4))
def test_learned_cut_is_valid(seed):
    for n, k in [(6, 6), (30, 2), (40, 4), (120, 6)]:
        p = synthetic_problem(n, 2 + seed, seed)
        s = learned_cut(p, k)  # greedy
        evaluate(p, s, stages=k)  # raises unless monotone and every stage non-empty
        r = solve(p, k, method="learned", sram_bytes=1000)
        evaluate(p, r.assignment, stages=k)
        assert not r.optimal
        # best of greedy + samples is never worse than greedy, and deterministic
        assert r.key <= evaluate(p, s, 1000).key
        assert r.assignment == solve(p, k, method="learned", sram_bytes=1000).assignment


def test_features_are_finite_and_normalised():
    p = synthetic_problem(30, 4, 1)
    f = features(p, 5)
    assert f.shape == (30, N_FEATURES) and np.isfinite(f).all()
    assert f.min() >= 0.0 and f.max() <= 1.0 + 1e-6


def test_cut_to_assignment():
    assert cut_to_assignment([0, 1, 2, 3, 4], [2, 3], 5) == [0, 0, 1, 2, 2]
    assert cut_to_assignment([2, 0, 1], [1], 3) == [1, 1, 0]


def test_numpy_inference_matches_torch():
    torch = pytest.importorskip("torch")
    from memsched.partition.train_pointer import batches, export, make_model

    torch.manual_seed(3)
    model = make_model(N_FEATURES, 16, 24)
    model.eval()
    data = []
    for i, (n, k) in enumerate([(12, 3), (20, 5), (31, 4), (25, 6)]):
        p = synthetic_problem(n, 3, i)
        data.append({"x": features(p, k), "label": np.zeros(n, dtype=np.int64), "k": k,
                     "problem": p})
    import os
    import random
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "w.npz")
        export(model, path)
        with np.load(path) as z:
            weights = {key: z[key].astype(np.float64) for key in z.files}
    for chunk, x, _, lengths, ks, _ in batches(data, 8, random.Random(0), shuffle=False):
        with torch.no_grad():
            cuts, _ = model(x, lengths, ks, sample=False)
        for row, d in zip(cuts.tolist(), chunk):
            expect = [c for c in row if c >= 0]
            assert pointer_cut(d["problem"], d["k"], weights) == expect

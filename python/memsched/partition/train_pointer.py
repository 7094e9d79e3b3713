"""Train the learned initial cut's pointer network (torch, CPU, minutes) and export numpy weights.

    python -m memsched.partition.train_pointer [--graphs 2400] [--epochs 60] [--hidden 128]
        [--out python/memsched/partition/data/pointer_net.npz] [--seed 0]

1. data: synthetic DAGs (`memsched.partition.synthetic`, ``|V|`` 25-35 as in the Inc-ILP paper,
   plus 30 % with ``|V|`` 40-120 so the LSTM sees sequences closer to real models' 75-409 ops;
   maximum in-degree 2..6), each labelled for ``k`` in 3..6 with the exact solver's
   lexicographic optimum (SRAM = total/k so the O term matters too);
1b. a warm start (not in the paper, which trains 300 epochs on a million graphs on a GPU):
   ``--warmup`` epochs of cross-entropy on the labels' cut positions (teacher forcing);
2. REINFORCE (the paper's objective ``J = E[1 - R]``) with ``R`` the cosine similarity between
   the sampled cut's stage vector and the label's (stages counted from 1 so every entry counts);
   several sampled cuts per instance, their mean reward as the baseline, advantages normalised
   over the batch; Adam with a cosine learning-rate schedule;
3. export: the weights `memsched.partition.learned` reads (same layout as torch's LSTM: gates
   i, f, g, o).

Prints the held-out cosine reward and the mean P gap of the greedy cut to the optimum.
"""
from __future__ import annotations

import argparse
import os
import random
import time

import numpy as np


def label_cuts(label, k: int) -> np.ndarray:
    """Cut positions closest to a (possibly non-contiguous) label along the order: stage ``t``
    starts where the label first reaches ``t``, kept strictly increasing and feasible."""
    n = len(label)
    cuts, prev = [], 0
    for t in range(1, k):
        pos = next((i for i, s in enumerate(label) if s >= t), n - (k - t))
        pos = min(max(pos, prev + 1), n - (k - t))
        cuts.append(pos)
        prev = pos
    return np.array(cuts, dtype=np.int64)


def build_dataset(count: int, seed: int, ks=(3, 4, 5, 6), long_share: float = 0.3):
    from .exact import exact
    from .learned import features
    from .synthetic import synthetic_problem

    rng = random.Random(seed)
    data = []
    for i in range(count):
        n = rng.randint(40, 120) if rng.random() < long_share else rng.randint(25, 35)
        p = synthetic_problem(n, rng.randint(2, 6), seed * 1_000_003 + i)
        k = ks[i % len(ks)]
        sram = max(1, p.total_param_bytes // k)
        label, _, optimal, _ = exact(p, k, sram, time_limit=10)
        order = p.topological_order()
        lab = np.array([label[v] for v in order])
        data.append({"x": features(p, k, order), "label": lab, "cuts": label_cuts(lab, k),
                     "k": k, "problem": p, "sram": sram, "optimal": optimal})
    return data


def make_model(n_features: int, emb: int, hidden: int):
    import torch
    from torch import nn

    class PointerNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Linear(n_features, emb)
            self.enc = nn.LSTM(emb, hidden, batch_first=True)
            self.dec = nn.LSTMCell(emb, hidden)
            self.dec_start = nn.Parameter(torch.randn(emb) * 0.1)
            self.ref = nn.Linear(hidden, hidden)
            self.q = nn.Linear(hidden, hidden)
            self.v = nn.Parameter(torch.randn(hidden) * 0.1)

        def forward(self, x, lengths, ks, sample: bool, target=None):
            """x: (B, N, F) padded; returns cut positions (B, K-1) padded with -1 and the sum
            of their log-probabilities (B,). ``target`` (B, K-1): teacher forcing -- the given
            positions are taken and their log-probability returned."""
            from .learned import CLIP

            B, N, _ = x.shape
            e = self.emb(x)
            packed = nn.utils.rnn.pack_padded_sequence(e, lengths.cpu(), batch_first=True,
                                                       enforce_sorted=False)
            out, (h, c) = self.enc(packed)
            enc, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=N)
            h, c = h[0], c[0]
            ref = self.ref(enc)
            inp = self.dec_start.expand(B, -1)
            prev = torch.zeros(B, dtype=torch.long)
            ar = torch.arange(N).expand(B, N)
            logp = torch.zeros(B)
            kmax = int(ks.max())
            cuts = torch.full((B, kmax - 1), -1, dtype=torch.long)
            for t in range(kmax - 1):
                active = (t < ks - 1)
                h, c = self.dec(inp, (h, c))
                u = CLIP * torch.tanh(torch.tanh(ref + self.q(h)[:, None, :]) @ self.v)
                hi = lengths - (ks - 1 - t)
                allowed = (ar > prev[:, None]) & (ar <= hi[:, None])
                allowed = allowed | ~active[:, None]  # finished rows: any (ignored) choice
                u = u.masked_fill(~allowed, float("-inf"))
                dist = torch.distributions.Categorical(logits=u)
                if target is not None:
                    p = target[:, t].clamp(min=0)
                else:
                    p = dist.sample() if sample else u.argmax(dim=1)
                logp = logp + torch.where(active, dist.log_prob(p), torch.zeros(B))
                p = torch.where(active, p, prev)
                cuts[:, t] = torch.where(active, p, torch.full_like(p, -1))
                prev = p
                inp = e[torch.arange(B), p]
            return cuts, logp

    return PointerNet()


def stages_from_cuts(cuts, lengths, N):
    """(B, N) stage per position (padding positions = 0)."""
    import torch

    ar = torch.arange(N)[None, :, None]
    c = cuts[:, None, :]
    st = ((c >= 0) & (ar >= c)).sum(-1)
    return st * (torch.arange(N)[None, :] < lengths[:, None])


def reward(stages, labels):
    """The paper's cosine similarity, stages counted from 1 (padding is 0 in both)."""
    a = stages.float() + (labels >= 0).float()
    b = labels.float().clamp(min=-1) + 1.0
    return (a * b).sum(1) / ((a.norm(dim=1) * b.norm(dim=1)).clamp(min=1e-9))


def batches(data, size, rng, shuffle=True):
    import torch

    idx = list(range(len(data)))
    if shuffle:
        rng.shuffle(idx)
    for s in range(0, len(idx), size):
        chunk = [data[i] for i in idx[s:s + size]]
        N = max(len(d["x"]) for d in chunk)
        F = chunk[0]["x"].shape[1]
        x = torch.zeros(len(chunk), N, F)
        lab = torch.full((len(chunk), N), -1, dtype=torch.long)
        K = max(d["k"] for d in chunk) - 1
        tgt = torch.full((len(chunk), K), -1, dtype=torch.long)
        for j, d in enumerate(chunk):
            if "cuts" in d:
                tgt[j, :len(d["cuts"])] = torch.from_numpy(d["cuts"])
            x[j, :len(d["x"])] = torch.from_numpy(d["x"])
            lab[j, :len(d["x"])] = torch.from_numpy(d["label"])
        lengths = torch.tensor([len(d["x"]) for d in chunk])
        ks = torch.tensor([d["k"] for d in chunk])
        yield chunk, x, lab, lengths, ks, tgt


def export(model, path: str) -> None:
    sd = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    out = {"emb_w": sd["emb.weight"], "emb_b": sd["emb.bias"],
           "enc_w_ih": sd["enc.weight_ih_l0"], "enc_w_hh": sd["enc.weight_hh_l0"],
           "enc_b_ih": sd["enc.bias_ih_l0"], "enc_b_hh": sd["enc.bias_hh_l0"],
           "dec_w_ih": sd["dec.weight_ih"], "dec_w_hh": sd["dec.weight_hh"],
           "dec_b_ih": sd["dec.bias_ih"], "dec_b_hh": sd["dec.bias_hh"],
           "dec_start": sd["dec_start"], "ref_w": sd["ref.weight"], "ref_b": sd["ref.bias"],
           "q_w": sd["q.weight"], "q_b": sd["q.bias"], "v": sd["v"]}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    np.savez_compressed(path, **out)


def evaluate_gap(data, weights, method: str = "learned") -> tuple[float, float]:
    """Mean P gap (%) of the greedy numpy cut (or the param-balanced one) to the label's P,
    and the fraction with equal P."""
    from .learned import learned_cut
    from .param_balanced import param_balanced_cut
    from .problem import evaluate

    gaps = []
    for d in data:
        p, k = d["problem"], d["k"]
        order = p.topological_order()
        label = [0] * p.n
        for i, v in enumerate(order):
            label[v] = int(d["label"][i])
        opt = evaluate(p, label, d["sram"]).P
        cut = learned_cut(p, k, weights) if method == "learned" else param_balanced_cut(p, k)
        got = evaluate(p, cut, d["sram"]).P
        gaps.append(100.0 * (got - opt) / max(1, opt))
    return float(np.mean(gaps)), float(np.mean([g == 0 for g in gaps]))


def main(argv=None) -> None:
    import torch

    from .learned import N_FEATURES, WEIGHTS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", type=int, default=2400, help="training instances")
    ap.add_argument("--val", type=int, default=200, help="held-out instances")
    ap.add_argument("--epochs", type=int, default=60)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--samples", type=int, default=4, help="sampled cuts per instance")
    ap.add_argument("--warmup", type=int, default=10,
                    help="epochs of imitation (cross-entropy on the labels' cut positions) "
                         "before REINFORCE")
    ap.add_argument("--emb", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=WEIGHTS)
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    train = build_dataset(args.graphs, args.seed)
    val = build_dataset(args.val, args.seed + 1)
    print(f"labelled {len(train)} + {len(val)} instances with the exact solver "
          f"({sum(d['optimal'] for d in train + val)} proven) in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    model = make_model(N_FEATURES, args.emb, args.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.epochs)
    t1 = time.perf_counter()
    best, best_state = -1.0, None
    for epoch in range(args.epochs):
        model.train()
        for _, x, lab, lengths, ks, tgt in batches(train, args.batch, rng):
            if epoch < args.warmup:  # imitation warm start on the labels' cut positions
                _, logp = model(x, lengths, ks, sample=False, target=tgt)
                loss = -(logp / (ks - 1).float()).mean()
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                continue
            # S sampled cuts per instance; advantage = reward - the instance's mean sampled
            # reward, normalised over the batch (the cosine reward varies little in absolute
            # terms, so unnormalised gradients vanish)
            S = args.samples
            xs, labs = x.repeat(S, 1, 1), lab.repeat(S, 1)
            ls, kss = lengths.repeat(S), ks.repeat(S)
            cuts, logp = model(xs, ls, kss, sample=True)
            with torch.no_grad():
                r = reward(stages_from_cuts(cuts, ls, x.shape[1]), labs).view(S, -1)
                adv = r - r.mean(0, keepdim=True)
                adv = (adv / (adv.std() + 1e-8)).view(-1)
            loss = -(adv * logp).mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        sched.step()
        model.eval()
        with torch.no_grad():
            vr = []
            for _, x, lab, lengths, ks, _ in batches(val, 256, rng, shuffle=False):
                gcuts, _ = model(x, lengths, ks, sample=False)
                vr.append(reward(stages_from_cuts(gcuts, lengths, x.shape[1]), lab))
            vr = float(torch.cat(vr).mean())
        if vr > best:
            best = vr
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
            export(model, args.out)  # usable even if training is stopped early
        if epoch % 5 == 0 or epoch == args.epochs - 1:
            print(f"epoch {epoch}: held-out cosine reward {vr:.4f} (best {best:.4f}), "
                  f"{time.perf_counter() - t1:.0f} s", flush=True)
    model.load_state_dict(best_state)
    export(model, args.out)
    from .learned import load_weights

    load_weights.cache_clear()
    gap, same = evaluate_gap(val, load_weights(args.out))
    pb_gap, pb_same = evaluate_gap(val, None, "param-balanced")
    print(f"wrote {args.out}; held-out: reward {best:.4f}, greedy cut P gap to optimum "
          f"{gap:.2f}% (equal P on {100 * same:.0f}%; param-balanced: {pb_gap:.2f}%, "
          f"{100 * pb_same:.0f}%); total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()

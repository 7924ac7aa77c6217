"""One training step of Transformer (base) on the CPU: minitensor vs PyTorch, target tokens/s.

Batch: 16 sentences x 32 source and 32 target tokens, vocabulary 37000, dropout 0.1,
label smoothing 0.1, Adam (0.9, 0.98, 1e-9). A step is forward, loss, backward and the
Adam update. PyTorch is optional (a separate environment with torch==2.13.0).

    python benchmarks/base_step_vs_torch.py --steps 3
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

import minitensor as mt
from transformer import Transformer, TransformerConfig, label_smoothed_loss, paper_adam


def batch(rng, B, T, V):
    src = rng.integers(3, V, (B, T))
    tgt = rng.integers(3, V, (B, T + 1))
    tgt[:, 0] = 1
    return src, tgt[:, :-1], tgt[:, 1:]


def time_minitensor(args, data) -> dict:
    mt.manual_seed(0)
    model = Transformer(TransformerConfig.base(args.vocab))
    opt = paper_adam(model.parameters(), lr=1e-4)
    times = []
    for i in range(args.steps + 1):
        src, ti, to = data[i % len(data)]
        t0 = time.perf_counter()
        loss = label_smoothed_loss(model(mt.tensor(src), mt.tensor(ti)), mt.tensor(to), 0, 0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return summarize(times[1:], args)  # the first step allocates optimizer state


def time_torch(args, data) -> dict:
    import torch

    from torch_reference import TorchTransformer

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = TorchTransformer(args.vocab, 512, 8, 2048, 6, dropout=0.1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    times = []
    for i in range(args.steps + 1):
        src, ti, to = (torch.from_numpy(a) for a in data[i % len(data)])
        t0 = time.perf_counter()
        logits = model(src, ti)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, args.vocab), to.reshape(-1), ignore_index=0,
                                                 label_smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return summarize(times[1:], args)


def summarize(times, args) -> dict:
    s = float(np.median(times))
    return {"seconds_per_step": round(s, 3), "target_tokens_per_s": round(args.batch * args.length / s, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--length", type=int, default=32)
    p.add_argument("--vocab", type=int, default=37000)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    data = [batch(rng, a.batch, a.length, a.vocab) for _ in range(2)]
    out = {"config": vars(a), "minitensor": time_minitensor(a, data)}
    try:
        out["torch"] = time_torch(a, data)
        out["ratio_tokens_per_s_minitensor_over_torch"] = round(
            out["minitensor"]["target_tokens_per_s"] / out["torch"]["target_tokens_per_s"], 3)
    except ImportError:
        out["torch"] = "not installed"
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

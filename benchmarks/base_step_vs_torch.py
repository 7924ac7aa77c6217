"""One training step of Transformer (base): minitensor vs PyTorch eager, same configuration,
same device, per precision: target tokens/s, ms/step, peak memory and model FLOP utilisation.

A step is forward, label-smoothed loss, backward and the Adam update (0.9, 0.98, 1e-9);
dropout 0.1, vocabulary 37000. Precisions: fp32, tf32 (float32 products on TF32 tensor
cores), fp16 (autocast + dynamic loss scaling), bf16 (autocast). PyTorch is optional (a
separate environment, or the GPU machine's own).

    # CPU (the default), a small batch:
    python benchmarks/base_step_vs_torch.py --steps 3
    # GPU, a paper-sized batch (about 25,000 target tokens), every precision, JSON kept:
    python benchmarks/base_step_vs_torch.py --device cuda --batch 400 --length 64 \\
        --precisions fp32,tf32,fp16,bf16 --out benchmarks/results/base_step_h100.json

The JSON also holds the projection of the paper's base run (100,000 steps of about 25,000
target tokens) to hours on this one device, beside the paper's 12 hours on 8 P100s.
"""
from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np
from gpu_common import environment, peak_tflops, sync, write_results

import minitensor as mt
from minitensor import amp
from transformer import Transformer, TransformerConfig, label_smoothed_loss, paper_adam

PAPER = {"steps": 100_000, "target_tokens_per_step": 25_000, "hours": 12.0, "hardware": "8 x P100"}


def batch(rng, B, T, V):
    src = rng.integers(3, V, (B, T))
    tgt = rng.integers(3, V, (B, T + 1))
    tgt[:, 0] = 1
    return src, tgt[:, :-1], tgt[:, 1:]


def train_flops(cfg: TransformerConfig, B: int, Ts: int, Tt: int) -> float:
    """Matrix-product FLOPs of one training step (forward x 3), counted layer by layer."""
    d, f, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    src, tgt = B * Ts, B * Tt
    enc = src * (2 * 4 * d * d + 2 * 2 * d * f) + B * 2 * 2 * Ts * Ts * d
    dec = (tgt * (2 * 4 * d * d + 2 * 2 * d * d + 2 * 2 * d * f) + src * 2 * 2 * d * d
           + B * 2 * 2 * (Tt * Tt + Tt * Ts) * d)
    forward = cfg.n_encoder_layers * enc + cfg.n_decoder_layers * dec + tgt * 2 * d * V
    return 3.0 * forward


def time_minitensor(args, data, precision: str) -> dict:
    dev = args.device
    if dev == "cuda":
        mt.cuda.set_tf32(precision == "tf32")
    mt.manual_seed(0)
    model = Transformer(TransformerConfig.base(args.vocab)).to(dev)
    opt = paper_adam(model.parameters(), lr=1e-4)
    scaler = amp.LossScaler() if precision == "fp16" else None
    half = {"fp16": "float16", "bf16": "bfloat16"}.get(precision)
    inputs = [tuple(mt.tensor(a, device=dev) for a in d) for d in data]

    def step(i):
        src, ti, to = inputs[i % len(inputs)]
        with amp.autocast(half):
            loss = label_smoothed_loss(model(src, ti), to, 0, 0.1, reduction="sum")
        opt.zero_grad()
        (loss * scaler.scale if scaler else loss).backward()
        if scaler:
            ok = scaler.unscale_(opt.params)
            scaler.update(not ok)
            if not ok:
                return
        opt.step()

    return run_steps(args, step, peak=lambda: mt.cuda.PeakMemory() if dev == "cuda" else contextlib.nullcontext())


def time_torch(args, data, precision: str) -> dict:
    import torch
    from torch_reference import TorchTransformer

    dev = args.device
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.manual_seed(0)
    model = TorchTransformer(args.vocab, 512, 8, 2048, 6, dropout=0.1).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler(dev) if precision == "fp16" else None
    inputs = [tuple(torch.from_numpy(a).to(dev) for a in d) for d in data]

    def step(i):
        src, ti, to = inputs[i % len(inputs)]
        with torch.autocast(dev, dtype=half or torch.float16, enabled=half is not None):
            logits = model(src, ti)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, args.vocab).float(), to.reshape(-1),
                                                     ignore_index=0, label_smoothing=0.1, reduction="sum")
        opt.zero_grad()
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    class TorchPeak:
        def __enter__(self):
            torch.cuda.reset_peak_memory_stats()
            return self

        def __exit__(self, *exc):
            self.peak_bytes = torch.cuda.max_memory_allocated()

    return run_steps(args, step, peak=lambda: TorchPeak() if dev == "cuda" else contextlib.nullcontext())


def run_steps(args, step, peak) -> dict:
    """Median seconds per step after a warm-up, and the peak memory of one extra step."""
    for i in range(args.warmup):
        step(i)
    sync(args.device)
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        step(i)
        sync(args.device)
        times.append(time.perf_counter() - t0)
    out = {"ms_per_step": round(1000 * float(np.median(times)), 2),
           "target_tokens_per_s": round(args.batch * args.length / float(np.median(times)), 1)}
    with peak() as p:
        step(0)
        sync(args.device)
    if p is not None and hasattr(p, "peak_bytes"):
        out["peak_memory_gib"] = round(p.peak_bytes / 2**30, 3)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--precisions", default="fp32", help="comma-separated: fp32, tf32, fp16, bf16")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--length", type=int, default=32, help="source and target tokens per sentence")
    p.add_argument("--vocab", type=int, default=37000)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="PyTorch CPU threads")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--out", help="also write the JSON here (e.g. benchmarks/results/...json)")
    a = p.parse_args()
    precisions = a.precisions.split(",")
    if a.device == "cpu" and set(precisions) - {"fp32", "fp16"}:
        p.error("on the CPU only fp32 and fp16 (NumPy float16) exist")
    rng = np.random.default_rng(0)
    data = [batch(rng, a.batch, a.length, a.vocab) for _ in range(2)]
    env = environment(a.device)
    cfg = TransformerConfig.base(a.vocab)
    flops = train_flops(cfg, a.batch, a.length, a.length)
    out = {"benchmark": "transformer-base training step", "environment": env, "config": vars(a),
           "train_gflop_per_step": round(flops / 1e9, 1), "paper_base_run": PAPER, "results": {}}
    for prec in precisions:
        row = {"minitensor": time_minitensor(a, data, prec)}
        if not a.no_torch:
            try:
                row["torch"] = time_torch(a, data, prec)
                row["ratio_tokens_per_s_minitensor_over_torch"] = round(
                    row["minitensor"]["target_tokens_per_s"] / row["torch"]["target_tokens_per_s"], 3)
            except ImportError:
                row["torch"] = "not installed"
        peak = peak_tflops(env.get("gpu", ""), prec) if a.device == "cuda" else None
        for who in ("minitensor", "torch"):
            r = row.get(who)
            if isinstance(r, dict):
                achieved = flops / (r["ms_per_step"] / 1000) / 1e12
                r["achieved_tflops"] = round(achieved, 2)
                if peak:
                    r["mfu"] = round(achieved / peak, 4)
                tps = r["target_tokens_per_s"]
                r["paper_base_run_hours_on_this_device"] = round(
                    PAPER["steps"] * PAPER["target_tokens_per_step"] / tps / 3600, 1)
        out["results"][prec] = row
    write_results(out, a.out)


if __name__ == "__main__":
    main()

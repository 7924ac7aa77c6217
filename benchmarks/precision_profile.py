"""Where a transformer-base training step's time goes in each precision (the profiler's table
per precision), and the rate of the array library's own matrix product per dtype, on the
shapes of the step's feed-forward layer and of its attention heads.

    python benchmarks/precision_profile.py --device cuda --out benchmarks/results/precision_profile_h200.json
    python benchmarks/precision_profile.py --device cpu --batch 16 --length 32 --precisions fp32 --steps 5

On the CPU only float32 products are rated (NumPy has no BLAS for 16-bit products), and the
table adds the BLAS's own rate on each op's product shapes ("BLAS alone").

It answers "why is fp16 slower than tf32 here?": the table says which op grew, and the product
rates say whether the array library's 16-bit products, alone, are fast on this device.
"""
from __future__ import annotations

import argparse
import gc

import ml_dtypes
import numpy as np
from base_step_vs_torch import batch, minitensor_step
from harness import environment, median_seconds, sync, write_results

import minitensor as mt
from minitensor import profiler
from minitensor.speed import products


def product_rates(xp, device: str, B: int, T: int, repeat: int = 10) -> dict:
    """TFLOP/s of ``products.product`` (the engine's product) per dtype, each from the median of
    ``repeat`` calls after one warm-up: (B·T, 512) x (512, 2048) and (8B, T, 64) x (8B, 64, T)."""
    rng = np.random.default_rng(0)
    rates = {}
    for name in ("float32", "float16", "bfloat16") if device == "cuda" else ("float32",):
        dt = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
        for sa, sb in (((B * T, 512), (512, 2048)), ((B * 8, T, 64), (B * 8, 64, T))):
            a = xp.asarray(rng.standard_normal(sa).astype(np.float32)).astype(dt)
            b = xp.asarray(rng.standard_normal(sb).astype(np.float32)).astype(dt)
            for tf32 in ([False, True] if name == "float32" and device == "cuda" else [False]):
                if device == "cuda":
                    mt.cuda.set_tf32(tf32)
                seconds = median_seconds(lambda: products.product(a, b), device, warmup=1, repeat=repeat)
                key = f"{name}{'+tf32' if tf32 else ''} {sa}x{sb}"
                rates[key] = round(2 * np.prod(sa) * sb[-1] / seconds / 1e12, 2)
                print(key, "TFLOP/s", rates[key], flush=True)
    return rates


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--batch", type=int, default=400)
    p.add_argument("--length", type=int, default=64)
    p.add_argument("--vocab", type=int, default=37000)
    p.add_argument("--layers", type=int, default=6, help="encoder and decoder layers each (the base model's 6)")
    p.add_argument("--precisions", default="tf32,bf16,fp16", help="comma-separated: fp32, tf32, fp16, bf16")
    p.add_argument("--steps", type=int, default=2, help="profiled steps per precision (after --warmup unprofiled)")
    p.add_argument("--warmup", type=int, default=3, help="unprofiled steps per precision first")
    p.add_argument("--out", help="also write the JSON here")
    a = p.parse_args()
    xp = np
    if a.device == "cuda":
        import cupy as xp  # noqa: PLC0415
    rng = np.random.default_rng(0)
    data = [batch(rng, a.batch, a.length, a.vocab) for _ in range(2)]
    out = {"benchmark": "transformer-base step per precision: profile and product rates",
           "environment": environment(a.device), "config": vars(a),
           "rates": product_rates(xp, a.device, a.batch, a.length), "profiles": {}}
    for prec in a.precisions.split(","):
        step, _ = minitensor_step(a, data, prec)
        for i in range(a.warmup):
            step(i)
        sync(a.device)
        prof = profiler.profile()
        with prof:
            for i in range(a.steps):
                step(i)
        blas = a.device == "cpu"  # (on a GPU the step's own rates are the question, and device time is dear)
        print("==", prec, flush=True)
        print(prof.table(per=a.steps, blas=blas), flush=True)
        out["profiles"][prec] = {"wall_ms_per_step": round(prof.wall_s / a.steps * 1e3, 1),
                                 "rows": prof.summary(blas=blas)}
        del step
        gc.collect()
    write_results(out, a.out)


if __name__ == "__main__":
    main()

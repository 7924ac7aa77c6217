"""Tensor-core attention, forward + backward, with one or two blocks of 16 rows a warp, side by side
(needs a GPU): the measurement behind ``flash_attention.TC_TWO_BLOCKS_FROM``, the sequence length
from which the forward and dQ kernels give each warp two blocks (64 or 128 queries a block).

At each length the two settings alternate, ``--repeat`` rounds of each; B x T is the same at every
length (``--tokens``, by default the base step's 400 x 64), 8 heads of 64.

    python benchmarks/attention_warp_rows.py --out benchmarks/results/attention_warp_rows_h100.json
"""
from __future__ import annotations

import argparse

import numpy as np
from harness import environment, write_results

from minitensor import backend
from minitensor.cuda import flash_attention as flash


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="64,128,256,512,1024,4096")
    p.add_argument("--dtypes", default="bfloat16,tf32", help="bfloat16, float16, tf32 (float32 in TF32)")
    p.add_argument("--tokens", type=int, default=25_600)
    p.add_argument("--repeat", type=int, default=5, help="rounds of each setting")
    p.add_argument("--out")
    a = p.parse_args()
    cp = backend.cupy()
    from cupyx.profiler import benchmark

    settings = {"one block a warp": 10**9, "two blocks a warp": 0}   # TC_TWO_BLOCKS_FROM for each
    rows = []
    for name in a.dtypes.split(","):
        tf32, dtype = name == "tf32", "float32" if name == "tf32" else name
        for T in map(int, a.lengths.split(",")):
            B, H, d = max(1, a.tokens // T), 8, 64
            q, k, v, g = (cp.random.standard_normal((B, H, T, d), dtype=cp.float32).astype(dtype) for _ in range(4))

            def step():
                out, lse = flash.forward(q, k, v, None, d ** -0.5, tf32=tf32)
                flash.backward(g, q, k, v, out, lse, None, d ** -0.5, tf32=tf32)

            times = {s: [] for s in settings}
            for _ in range(a.repeat):
                for s, threshold in settings.items():
                    flash.TC_TWO_BLOCKS_FROM = threshold
                    times[s].append(float(np.median(benchmark(step, n_repeat=10, n_warmup=2).gpu_times) * 1e3))
            r = {"dtype": name, "batch": B, "heads": H, "T": T, "head_size": d}
            r.update({f"{s.replace(' ', '_')}_ms": round(float(np.median(t)), 4) for s, t in times.items()})
            r["two_over_one_speed"] = round(r["one_block_a_warp_ms"] / r["two_blocks_a_warp_ms"], 3)
            rows.append(r)
            print(r, flush=True)
    write_results({"benchmark": "tensor-core attention, one or two blocks of 16 rows a warp",
                   "environment": environment("cuda"), "rows": rows}, a.out)


if __name__ == "__main__":
    main()

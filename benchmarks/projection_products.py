"""The projections' products, their bias and their bias gradients in the base step's shapes,
each way of calling the device timed alone ("now": what ``Linears`` does), PyTorch's linear
beside: x (25600, 512) and n weights (512, 512)
(Linears: Q, K, V or K, V of one input); a bias gradient over 25600 rows of 512 or 2048 columns
by CuPy's ``sum(axis=0)`` and by ``speed.products.sum_rows`` (one product with a row of ones).

    python benchmarks/projection_products.py --out benchmarks/results/gpu_projection_products_<card>_<date>.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from harness import environment, median_seconds, write_results  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=25600)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--out")
    a = p.parse_args()
    import cupy as cp
    import ml_dtypes

    from minitensor import cuda
    from minitensor.cuda import gemm
    from minitensor.speed import products

    rows, d = a.rows, a.width
    results = []
    for name in ("tf32", "bfloat16"):
        cuda.set_tf32(name == "tf32")
        dt = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(np.float32)
        out_w = np.float32
        rng = np.random.default_rng(0)
        for n in (3, 2):
            x = cp.asarray(rng.standard_normal((rows, d), np.float32)).astype(dt)
            w = cp.asarray(rng.standard_normal((d, n * d), np.float32) * 0.05).astype(dt)
            gs = [cp.asarray(rng.standard_normal((rows, d), np.float32)).astype(dt) for _ in range(n)]
            gcat = cp.concatenate(gs, axis=1)
            bs = [cp.asarray(rng.standard_normal(d, np.float32)) for _ in range(n)]
            bcat = cp.concatenate(bs)

            def batched_with_bias():
                y = gemm.matmul(x, w.reshape(d, n, d).transpose(1, 0, 2))
                y += cp.stack(bs)[:, None, :]
                return y

            def one_with_bias():
                y = gemm.matmul(x, w)
                y += bcat
                return y

            def one_with_bias_kernel():
                return products.block_products(cp, x, w, bs)

            def dx_accumulated():
                gx = gemm.matmul(gs[0], w[:, :d].T)
                for i in range(1, n):
                    gemm.matmul(gs[i], w[:, i * d:(i + 1) * d].T, out=gx, accumulate=True)
                return gx

            def dx_blocks():
                buf = cp.empty((rows, n * d), dt)
                for i, g in enumerate(gs):
                    buf[:, i * d:(i + 1) * d] = g
                return gemm.matmul(buf, w.T)
            flop = 2 * rows * d * d * n
            variants = {
                "forward: batched, x broadcast (before)":
                    lambda: gemm.matmul(x, w.reshape(d, n, d).transpose(1, 0, 2)),
                "forward: one product, outputs as column views (now)":
                    lambda: gemm.matmul(x, w),
                "forward: one product, outputs copied contiguous":
                    lambda: [cp.ascontiguousarray(c) for c in cp.split(gemm.matmul(x, w), n, axis=1)],
                "forward: n products, W_i as column views":
                    lambda: [gemm.matmul(x, w[:, i * d:(i + 1) * d]) for i in range(n)],
                "forward + bias: batched, stacked bias added (before)": batched_with_bias,
                "forward + bias: one product, CuPy's bias add, column views": one_with_bias,
                "forward + bias: products.block_products, the bias kernel (now)": one_with_bias_kernel,
                "dx: n products accumulated in place (beta 1; now)": dx_accumulated,
                "dx: G_i copied into column blocks, one product": dx_blocks,
                "dx: concatenate G, one product (before)":
                    lambda: gemm.matmul(cp.concatenate(gs, axis=1), w.T),
                "dW: n products x^T G_i (now)":
                    lambda: [gemm.matmul(x.T, g, out_w) for g in gs],
                "dW: one product x^T [G_1 ... G_n], split":
                    lambda: [cp.ascontiguousarray(c) for c in cp.split(gemm.matmul(x.T, gcat, out_w), n, axis=1)],
            }
            for what, fn in variants.items():
                ms = median_seconds(fn, "cuda", 3, 20) * 1e3
                results.append({"precision": name, "n": n, "variant": what, "ms": round(ms, 4),
                                "tflop_s": round(flop / ms / 1e9, 1)})
                print(f"{name:8s} n={n} {what:48s} {ms:7.3f} ms {flop / ms / 1e9:7.1f} TFLOP/s", flush=True)
            try:
                import torch
                torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
                tdt = torch.bfloat16 if name == "bfloat16" else torch.float32
                tx = torch.randn(rows, d, device="cuda", dtype=tdt, requires_grad=True)
                tw = torch.randn(n * d, d, device="cuda", dtype=tdt, requires_grad=True)
                tg = torch.randn(rows, n * d, device="cuda", dtype=tdt)
                fwd = lambda: torch.nn.functional.linear(tx, tw)  # noqa: E731

                def both():
                    y = fwd()
                    y.backward(tg)
                for what, fn in (("torch: linear forward", fwd), ("torch: linear forward + backward", both)):
                    ms = median_seconds(lambda: (fn(), torch.cuda.synchronize()), "cuda", 3, 20) * 1e3
                    f = flop * (3 if "backward" in what else 1)
                    results.append({"precision": name, "n": n, "variant": what, "ms": round(ms, 4),
                                    "tflop_s": round(f / ms / 1e9, 1)})
                    print(f"{name:8s} n={n} {what:48s} {ms:7.3f} ms {f / ms / 1e9:7.1f} TFLOP/s", flush=True)
            except ImportError:
                pass
        for width in (512, 2048):
            g = cp.asarray(rng.standard_normal((rows, width), np.float32)).astype(dt)
            for what, fn in (("bias gradient: sum(axis=0)", lambda: g.sum(axis=0, dtype=np.float32)),
                             ("bias gradient: sum_rows", lambda: products.sum_rows(cp, g, np.float32))):
                ms = median_seconds(fn, "cuda", 3, 20) * 1e3
                results.append({"precision": name, "width": width, "variant": what, "ms": round(ms, 4),
                                "gb_s": round(g.nbytes / ms / 1e6, 1)})
                print(f"{name:8s} {rows}x{width} {what:44s} {ms:7.3f} ms {g.nbytes / ms / 1e6:7.1f} GB/s", flush=True)
    cuda.set_tf32(False)
    write_results({"benchmark": "the projections' products and bias gradients, variant by variant", "environment": environment("cuda"),
                   "rows": rows, "width": d, "results": results}, a.out)


if __name__ == "__main__":
    main()

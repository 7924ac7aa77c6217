"""The hand-written CUDA kernels, timed side by side with PyTorch on the same GPU (needs one).

* the device's copy bandwidth (a large device-to-device copy: bytes read + written / time);
* LayerNorm, the fused attention softmax and the fused label-smoothed cross-entropy, forward
  and backward: GB/s (the fewest bytes each must move, over its time) as a fraction of that
  copy bandwidth, next to PyTorch's layer_norm, softmax and cross_entropy on the same shapes;
* the step's products on cuBLAS against CuPy's matmul and torch.matmul;
* the fused bias + ReLU and dropout + residual + LayerNorm at the base step's shapes, forward
  + backward, against the unfused ops and PyTorch;
* attention at sequence lengths 128 to 4096: the flash kernels (in 16 bits also with the
  one-pass backward, ``flash_one_pass``, and on a compute capability 9.0 GPU with their products
  on wgmma: ``flash_wgmma``, ``flash_wgmma_one_pass``), the fused-softmax
  path and the plain CuPy path, forward + backward, against PyTorch's
  scaled_dot_product_attention (and each of its backends on its own), with the peak extra
  memory of each;
* a transformer-base training step with the kernels on and off.

    python benchmarks/kernels.py --out benchmarks/results/kernels_h100.json

``--tiny`` cuts every shape down so that the whole script runs in seconds where the kernels are
emulated (CI runs it on the CuPy double, tests/cupy_double); its timings mean nothing.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

import numpy as np
from harness import environment, write_results

import minitensor as mt
import minitensor.functional as F
from minitensor import cuda
from minitensor.cuda import flash_attention as flash_kernels


@dataclass(frozen=True)
class Sizes:
    copy_mib: int
    layer_norm: list       # (rows, d, dtype)
    softmax: list          # (B, H, T, dtype)
    cross_entropy: list    # (rows, V, dtype): the logits of a step
    attention_lengths: tuple
    attention_tokens: int  # B x T at every length
    attention_heads: int
    attention_dtypes: tuple  # float32: the CUDA-core flash kernels; bfloat16, tf32 (float32 in TF32): the tensor-core ones
    step: tuple            # (B, T, V, layers) of the transformer-base step (layers: encoder and decoder, each)
    repeat: int            # timed calls per figure (attention: a fifth of it)
    fused: list            # (rows, d_model, d_ff, sub-layer dtype) of the fused bias + ReLU and residual LayerNorm


FULL = Sizes(256, [(25_600, 512, "float32"), (25_600, 1024, "float32"), (25_600, 512, "float16"), (8192, 768, "float32")],
             [(64, 8, 128, "float32"), (16, 8, 512, "float32"), (4, 8, 2048, "float32"), (64, 8, 128, "float16")],
             [(25_600, 37_000, "float32"), (25_600, 37_000, "float16")],
             (128, 256, 512, 1024, 2048, 4096), 16384, 8, ("float32", "bfloat16", "tf32"), (400, 64, 37000, 6), 50,
             [(25_600, 512, 2048, "float32"), (25_600, 512, 2048, "float16")])
TINY = Sizes(1, [(16, 512, "float32"), (16, 512, "float16")], [(2, 2, 128, "float32"), (2, 2, 128, "float16")],
             [(8, 300, "float32")], (64, 128), 128, 2, ("float32", "bfloat16", "tf32"), (2, 8, 64, 1), 2,
             [(24, 32, 64, "float32"), (24, 32, 64, "float16")])


def gpu_ms(fn, repeat=50, warmup=5) -> float:
    """Median GPU time of fn() in ms, from CUDA events (cupyx.profiler.benchmark)."""
    from cupyx.profiler import benchmark

    res = benchmark(fn, n_repeat=repeat, n_warmup=warmup)
    return float(np.median(res.gpu_times[0])) * 1e3


def torch_ms(fn, repeat=50, warmup=5) -> float:
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return float(np.median(times))


def copy_bandwidth(sizes: Sizes) -> float:
    import cupy as cp

    x = cp.random.standard_normal(sizes.copy_mib * 2**20 // 4, dtype=cp.float32)
    y = cp.empty_like(x)
    ms = gpu_ms(lambda: cp.copyto(y, x), repeat=max(2, sizes.repeat // 2))
    return 2 * x.nbytes / (ms / 1e3) / 1e9


def layer_norm_rows(sizes: Sizes, bw: float, torch_ok: bool) -> list[dict]:
    import cupy as cp

    from minitensor.cuda import layer_norm as k

    rows = []
    ms = lambda fn: gpu_ms(fn, repeat=sizes.repeat)  # noqa: E731
    for n, d, dtype in sizes.layer_norm:
        x = cp.random.standard_normal((n, d)).astype(dtype)
        dy = cp.random.standard_normal((n, d)).astype(dtype)
        w, b = cp.ones(d, dtype), cp.zeros(d, dtype)
        y, mean, rstd = k.forward(x, w, b, 1e-5)
        item = x.itemsize
        fwd_bytes = 2 * n * d * item + 8 * n            # read x, write y (+ mean, rstd)
        bwd_bytes = 3 * n * d * item + 8 * n            # read dy, x, write dx (+ mean, rstd)
        r = {"shape": [n, d], "dtype": dtype,
             "forward_ms": ms(lambda: k.forward(x, w, b, 1e-5)),
             "backward_ms": ms(lambda: k.backward(dy, x, w, mean, rstd))}
        r["forward_gb_s"] = fwd_bytes / (r["forward_ms"] / 1e3) / 1e9
        r["backward_gb_s"] = bwd_bytes / (r["backward_ms"] / 1e3) / 1e9
        r["forward_fraction_of_copy"] = r["forward_gb_s"] / bw
        r["backward_fraction_of_copy"] = r["backward_gb_s"] / bw
        if torch_ok:
            import torch

            tx = torch.randn(n, d, device="cuda", dtype=getattr(torch, dtype), requires_grad=True)
            tw = torch.ones(d, device="cuda", dtype=tx.dtype, requires_grad=True)
            tb = torch.zeros(d, device="cuda", dtype=tx.dtype, requires_grad=True)
            tdy = torch.randn_like(tx)
            r["torch_forward_ms"] = torch_ms(lambda: torch.nn.functional.layer_norm(tx, (d,), tw, tb))
            ty = torch.nn.functional.layer_norm(tx, (d,), tw, tb)
            r["torch_backward_ms"] = torch_ms(lambda: torch.autograd.grad(ty, (tx, tw, tb), tdy, retain_graph=True))
            r["speed_vs_torch_forward"] = r["torch_forward_ms"] / r["forward_ms"]
            r["speed_vs_torch_backward"] = r["torch_backward_ms"] / r["backward_ms"]
        rows.append({key: (round(v, 4) if isinstance(v, float) else v) for key, v in r.items()})
    return rows


def softmax_rows(sizes: Sizes, bw: float, torch_ok: bool) -> list[dict]:
    import cupy as cp

    from minitensor.cuda import softmax as k

    rows = []
    ms = lambda fn: gpu_ms(fn, repeat=sizes.repeat)  # noqa: E731
    for B, H, T, dtype in sizes.softmax:
        s = cp.random.standard_normal((B, H, T, T)).astype(dtype)
        g = cp.random.standard_normal((B, H, T, T)).astype(dtype)
        mask = cp.asarray(np.random.default_rng(0).random((B, 1, 1, T)) > 0.1)
        p = k.forward(s, mask, 0.125)
        nbytes = s.size * s.itemsize
        r = {"shape": [B, H, T, T], "dtype": dtype, "mask": "padding (B,1,1,T)",
             "forward_ms": ms(lambda: k.forward(s, mask, 0.125)),
             "backward_ms": ms(lambda: k.backward(p, g, 0.125))}
        r["forward_gb_s"] = 2 * nbytes / (r["forward_ms"] / 1e3) / 1e9
        r["backward_gb_s"] = 3 * nbytes / (r["backward_ms"] / 1e3) / 1e9
        r["forward_fraction_of_copy"] = r["forward_gb_s"] / bw
        r["backward_fraction_of_copy"] = r["backward_gb_s"] / bw
        if torch_ok:
            import torch

            ts = torch.randn(B, H, T, T, device="cuda", dtype=getattr(torch, dtype), requires_grad=True)
            tm = torch.as_tensor(cp.asnumpy(mask), device="cuda")
            tg = torch.randn_like(ts)
            fwd = lambda: torch.softmax((ts * 0.125).masked_fill(~tm, float("-inf")), -1)  # noqa: E731
            r["torch_forward_ms"] = torch_ms(fwd)
            ty = fwd()
            r["torch_backward_ms"] = torch_ms(lambda: torch.autograd.grad(ty, ts, tg, retain_graph=True))
            r["speed_vs_torch_forward"] = r["torch_forward_ms"] / r["forward_ms"]
            r["speed_vs_torch_backward"] = r["torch_backward_ms"] / r["backward_ms"]
        rows.append({key: (round(v, 4) if isinstance(v, float) else v) for key, v in r.items()})
    return rows


def cross_entropy_rows(sizes: Sizes, bw: float, torch_ok: bool) -> list[dict]:
    """The fused kernels (label smoothing 0.1, pad 0 ignored): the forward reads the logits once,
    the backward reads them and writes the gradient; PyTorch's cross_entropy alongside."""
    import cupy as cp

    from minitensor.cuda import cross_entropy as k

    rows = []
    ms = lambda fn: gpu_ms(fn, repeat=max(2, sizes.repeat // 5))  # noqa: E731
    for N, V, dtype in sizes.cross_entropy:
        x = cp.random.standard_normal((N, V), dtype=cp.float32).astype(dtype)
        t = cp.random.randint(0, V, N).astype(cp.int64)
        loss, lse = k.forward(x, t, 0, 0.1)
        w = (t != 0).astype(cp.float32) / N
        nbytes = x.size * x.itemsize
        r = {"shape": [N, V], "dtype": dtype, "forward_ms": ms(lambda: k.forward(x, t, 0, 0.1)),
             "backward_ms": ms(lambda: k.backward(x, t, lse, w, 0.1))}
        r["forward_backward_ms"] = r["forward_ms"] + r["backward_ms"]
        r["forward_fraction_of_copy"] = nbytes / (r["forward_ms"] / 1e3) / 1e9 / bw
        r["backward_fraction_of_copy"] = 2 * nbytes / (r["backward_ms"] / 1e3) / 1e9 / bw
        if torch_ok:
            import torch

            tx = torch.randn(N, V, device="cuda", dtype=getattr(torch, dtype), requires_grad=True)
            tt = torch.as_tensor(cp.asnumpy(t), device="cuda")
            fwd = lambda: torch.nn.functional.cross_entropy(tx.float(), tt, ignore_index=0,  # noqa: E731
                                                           label_smoothing=0.1)
            r["torch_forward_ms"] = torch_ms(fwd, repeat=max(2, sizes.repeat // 5))
            ty = fwd()
            r["torch_backward_ms"] = torch_ms(lambda: torch.autograd.grad(ty, tx, retain_graph=True),
                                              repeat=max(2, sizes.repeat // 5))
            r["speed_vs_torch"] = (r["torch_forward_ms"] + r["torch_backward_ms"]) / r["forward_backward_ms"]
        rows.append({key: (round(v, 4) if isinstance(v, float) else v) for key, v in r.items()})
    return rows


def fused_rows(sizes: Sizes, torch_ok: bool) -> list[dict]:
    """The base step's fused elementwise kernels at its shapes, forward + backward: the
    feed-forward's bias + ReLU (rows x d_ff, the product and the bias gradient in the
    sub-layer's dtype and float32) against the unfused CuPy ops it replaces and PyTorch's
    relu(x + b); dropout (p 0.1) + residual + LayerNorm (a float32 residual stream, the
    sub-layer's output in its dtype) against PyTorch's layer_norm(x + dropout(s))."""
    import cupy as cp

    from minitensor.cuda import bias_relu, layer_norm

    rows = []
    ms = lambda fn: gpu_ms(fn, repeat=sizes.repeat)  # noqa: E731
    for n, d, d_ff, dtype in sizes.fused:
        p16 = cp.random.standard_normal((n, d_ff), dtype=cp.float32).astype(dtype)
        g16 = cp.random.standard_normal((n, d_ff), dtype=cp.float32).astype(dtype)
        b = cp.random.standard_normal(d_ff, dtype=cp.float32)
        y = bias_relu.forward(p16.copy(), b)

        def unfused_relu():
            h = p16 + b.astype(dtype)
            out = cp.maximum(h, 0)
            g = g16 * (out > 0)
            return out, g.sum(axis=0, dtype=cp.float32)

        r = {"op": "bias + ReLU", "shape": [n, d_ff], "dtype": dtype,
             "forward_backward_ms": ms(lambda: bias_relu.forward(p16, b)) + ms(
                 lambda: bias_relu.backward(g16, y, cp.float32)),
             "cupy_unfused_ms": ms(unfused_relu)}
        r["speed_vs_cupy_unfused"] = r["cupy_unfused_ms"] / r["forward_backward_ms"]
        if torch_ok:
            import torch

            tp = torch.randn(n, d_ff, device="cuda", dtype=getattr(torch, dtype), requires_grad=True)
            tb = torch.randn(d_ff, device="cuda", requires_grad=True)
            tg = torch.randn_like(tp)
            fwd = lambda: torch.relu(tp + tb).to(tp.dtype)  # noqa: E731
            ty = fwd()
            r["torch_forward_backward_ms"] = torch_ms(fwd, repeat=sizes.repeat) + torch_ms(
                lambda: torch.autograd.grad(ty, (tp, tb), tg, retain_graph=True), repeat=sizes.repeat)
            r["speed_vs_torch"] = r["torch_forward_backward_ms"] / r["forward_backward_ms"]
        rows.append({key: (round(v, 4) if isinstance(v, float) else v) for key, v in r.items()})

        x = cp.random.standard_normal((n, d), dtype=cp.float32)
        sub = cp.random.standard_normal((n, d), dtype=cp.float32).astype(dtype)
        dy = cp.random.standard_normal((n, d), dtype=cp.float32)
        w, bias = cp.ones(d, cp.float32), cp.zeros(d, cp.float32)
        _, z, mean, rstd = layer_norm.residual_forward(x, sub, w, bias, 1e-5, 0.1, 0, 0)
        r = {"op": "dropout + residual + LayerNorm", "shape": [n, d], "dtype": dtype,
             "forward_backward_ms": ms(lambda: layer_norm.residual_forward(x, sub, w, bias, 1e-5, 0.1, 0, 0)) + ms(
                 lambda: layer_norm.residual_backward(dy, z, w, mean, rstd, sub.dtype, 0.1, 0, 0))}
        if torch_ok:
            import torch

            tx = torch.randn(n, d, device="cuda", requires_grad=True)
            ts = torch.randn(n, d, device="cuda", dtype=getattr(torch, dtype), requires_grad=True)
            tw = torch.ones(d, device="cuda", requires_grad=True)
            tbias = torch.zeros(d, device="cuda", requires_grad=True)
            tdy = torch.randn_like(tx)
            fwd = lambda: torch.nn.functional.layer_norm(  # noqa: E731
                tx + torch.nn.functional.dropout(ts, 0.1), (d,), tw, tbias)
            ty = fwd()
            r["torch_forward_backward_ms"] = torch_ms(fwd, repeat=sizes.repeat) + torch_ms(
                lambda: torch.autograd.grad(ty, (tx, ts, tw, tbias), tdy, retain_graph=True), repeat=sizes.repeat)
            r["speed_vs_torch"] = r["torch_forward_backward_ms"] / r["forward_backward_ms"]
        rows.append({key: (round(v, 4) if isinstance(v, float) else v) for key, v in r.items()})
    return rows


def product_rows(sizes: Sizes, torch_ok: bool) -> list[dict]:
    """The step's products on cuBLAS directly (``speed.products.product``) against CuPy's matmul (a
    bfloat16 batch through float32, as the ops did before) and torch.matmul: the attention
    scores (B·H, T, d) x (B·H, T, d)ᵀ and a projection (B·T, d) x (d, 4d), with each one's
    largest error against the float64 product of the same inputs."""
    import cupy as cp

    from minitensor.speed.products import product

    B, T, _, _ = sizes.step
    H, d = 8, 64
    rows = []
    for name, a_shape, b_shape, trans in (("attention scores", (B * H, T, d), (B * H, T, d), True),
                                          ("projection", (B * T, 512), (512, 2048), False)):
        for dtype in ("float32", "float16", "bfloat16"):
            dt = np.dtype(getattr(__import__("ml_dtypes"), dtype)) if dtype == "bfloat16" else np.dtype(dtype)
            a = cp.random.standard_normal(a_shape, dtype=cp.float32).astype(dt)
            b = cp.random.standard_normal(b_shape, dtype=cp.float32).astype(dt)
            bb = b.swapaxes(-1, -2) if trans else b
            flops = 2 * np.prod(a_shape) * bb.shape[-1]
            exact = cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(bb).astype(np.float64)
            got = cp.asnumpy(product(a, bb)).astype(np.float64)
            r = {"product": name, "shape": [list(a_shape), list(bb.shape)], "dtype": dtype,
                 "max_rel_error": float(np.abs(got - exact).max() / np.abs(exact).max()),
                 "cublas_ms": gpu_ms(lambda: product(a, bb), repeat=sizes.repeat)}

            def cupy_matmul():
                if dt.name == "bfloat16" and a.ndim > 2:      # CuPy 14 refuses batched bfloat16
                    return (a.astype(cp.float32) @ bb.astype(cp.float32)).astype(dt)
                return a @ bb
            r["cupy_matmul_ms"] = gpu_ms(cupy_matmul, repeat=sizes.repeat)
            r["tflop_s"] = flops / (r["cublas_ms"] / 1e3) / 1e12
            r["speed_vs_cupy_matmul"] = r["cupy_matmul_ms"] / r["cublas_ms"]
            if torch_ok:
                import torch

                ta = torch.randn(a_shape, device="cuda", dtype=getattr(torch, dtype))
                tb = torch.randn(b_shape, device="cuda", dtype=getattr(torch, dtype))
                tbb = tb.transpose(-1, -2) if trans else tb
                r["torch_ms"] = torch_ms(lambda: torch.matmul(ta, tbb), repeat=sizes.repeat)
                r["speed_vs_torch"] = r["torch_ms"] / r["cublas_ms"]
            rows.append({key: (round(v, 4) if isinstance(v, float) else v) for key, v in r.items()})
    return rows


# the largest difference allowed between a route's output or gradients and the two-pass mma.sync
# kernels', relative to the largest magnitude of the latter: a few roundings of the dtype
AGREEMENT = {"float32": 1e-4, "tf32": 2e-2, "float16": 1e-2, "bfloat16": 5e-2}


def results_of(q, k, v, g) -> list:
    """Attention's output and the three gradients of one forward + backward, as float32 on the host."""
    q.grad = k.grad = v.grad = None
    out = F.scaled_dot_product_attention(q, k, v)
    out.backward(g)
    return [x.astype(np.float32) for x in (out.numpy(), q.grad.numpy(), k.grad.numpy(), v.grad.numpy())]


def check_against(route: str, got: list, reference: list, dtype: str, T: int) -> float:
    """The largest relative difference of ``got`` from ``reference`` (output, dQ, dK, dV); past
    :data:`AGREEMENT`, the script stops (exit status 1) before the route is timed."""
    worst = 0.0
    for what, a, b in zip(("output", "dQ", "dK", "dV"), got, reference):
        scale = float(np.abs(b).max()) or 1.0
        error = float(np.abs(a - b).max()) / scale if np.isfinite(a).all() else float("inf")
        worst = max(worst, error)
        if error > AGREEMENT[dtype]:
            raise SystemExit(f"attention {dtype}, T {T}: the {route} route's {what} differs from the two-pass "
                             f"mma.sync kernels' by {error:.3g} of its largest value (allowed "
                             f"{AGREEMENT[dtype]:g}); not timed")
    return worst


def attention_rows(sizes: Sizes, torch_ok: bool) -> list[dict]:
    """Attention forward + backward (no mask) on each route, against PyTorch's
    scaled_dot_product_attention in the same dtype, with the extra memory of one step; the flash
    kernels' forward and PyTorch's alone too. "tf32" is float32 with TF32 allowed on both sides.
    In 16 bits the flash kernels are also timed with the one-pass backward, and where wgmma runs
    (compute capability 9.0) with their products on it, each right after the kind it changes;
    PyTorch's backends (flash, efficient, cuDNN)
    are timed one by one, so that the default's time says which it took. Each route's output and
    gradients are checked against the two-pass mma.sync kernels' at the same size before it is
    timed (:func:`check_against`)."""
    import cupy as cp

    rows = []
    H, d = sizes.attention_heads, 64
    repeat, warmup = max(1, sizes.repeat // 5), min(2, sizes.repeat)
    for name in sizes.attention_dtypes:
        dtype = "float32" if name == "tf32" else name
        cuda.set_tf32(name == "tf32")
        for T in sizes.attention_lengths:
            B = max(1, sizes.attention_tokens // T)  # the same number of tokens at every length
            q, k_, v = (mt.tensor(cp.random.standard_normal((B, H, T, d), dtype=cp.float32).astype(dtype),
                                  requires_grad=True) for _ in range(3))
            g = mt.tensor(cp.random.standard_normal((B, H, T, d), dtype=cp.float32).astype(dtype))
            r = {"dtype": name, "batch": B, "heads": H, "T": T, "head_size": d}

            def step():
                q.grad = k_.grad = v.grad = None
                F.scaled_dot_product_attention(q, k_, v).backward(g)

            def forward():
                with mt.no_grad():
                    F.scaled_dot_product_attention(q, k_, v)

            t = flash_kernels.ctype(q.dtype)
            wgmma = flash_kernels.wgmma_applies(t, d, q.data)
            one_pass = flash_kernels.one_pass_applies(t, d)
            # (route, attention mode, kernels on, wgmma, one-pass backward)
            routes = [("flash", "flash", True, False, False)] \
                + ([("flash_one_pass", "flash", True, False, True)] if one_pass else []) \
                + ([("flash_wgmma", "flash", True, True, False)] if wgmma else []) \
                + ([("flash_wgmma_one_pass", "flash", True, True, True)] if wgmma and one_pass else []) \
                + [("fused", "fused", True, False, False), ("plain_cupy", "auto", False, False, False)]
            reference = None  # the two-pass mma.sync kernels' output and gradients, the first route's
            for route, mode, kernels_on, wg, one in routes:
                cuda.set_attention(mode)
                cuda.set_wgmma(wg)
                cuda.set_one_pass_backward(one)
                with cuda.use_kernels(kernels_on):
                    # proved before timed: a route that computes something else is never recorded as a speed-up
                    got = results_of(q, k_, v, g)
                    if reference is None:
                        reference = got
                    r[f"{route}_error_vs_two_pass"] = check_against(route, got, reference, name, T)
                    r[f"{route}_ms"] = gpu_ms(step, repeat=repeat, warmup=warmup)
                    if route in ("flash", "flash_wgmma"):   # the forward alone, so that the backward's share is known
                        r[f"{route}_forward_ms"] = gpu_ms(forward, repeat=repeat, warmup=warmup)
                    cp.get_default_memory_pool().free_all_blocks()
                    with cuda.PeakMemory() as mem:
                        step()
                r[f"{route}_extra_mib"] = round((mem.peak_bytes - mem.start_bytes) / 2**20, 1)
            cuda.set_attention("auto")
            cuda.set_wgmma(False)
            cuda.set_one_pass_backward(False)
            if torch_ok:
                import torch

                torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = name == "tf32"
                tq, tk, tv = (torch.randn(B, H, T, d, device="cuda", dtype=getattr(torch, dtype), requires_grad=True)
                              for _ in range(3))
                tg = torch.randn_like(tq)

                def tstep():
                    tq.grad = tk.grad = tv.grad = None
                    torch.nn.functional.scaled_dot_product_attention(tq, tk, tv).backward(tg)

                r["torch_sdpa_ms"] = torch_ms(tstep, repeat=repeat, warmup=warmup)
                with torch.no_grad():
                    r["torch_sdpa_forward_ms"] = torch_ms(
                        lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv), repeat=repeat, warmup=warmup)
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                tstep()
                r["torch_sdpa_extra_mib"] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
                r.update(sdpa_backend_ms(tstep, repeat, warmup))
                for route, *_ in routes:
                    if route.startswith("flash"):
                        r[f"{route}_speed_vs_torch"] = r["torch_sdpa_ms"] / r[f"{route}_ms"]
            r["flash_speed_vs_fused"] = r["fused_ms"] / r["flash_ms"]
            if wgmma:
                r["wgmma_speed_vs_mma"] = r["flash_ms"] / r["flash_wgmma_ms"]
            if one_pass:   # the step with the one-pass backward against the two passes, on each instruction
                r["one_pass_speed_vs_two"] = r["flash_ms"] / r["flash_one_pass_ms"]
                if wgmma:
                    r["wgmma_one_pass_speed_vs_two"] = r["flash_wgmma_ms"] / r["flash_wgmma_one_pass_ms"]
            rows.append({key: (round(v, 3) if isinstance(v, float) else v) for key, v in r.items()})
    cuda.set_tf32(False)
    return rows


def base_step_with_and_without_kernels(sizes: Sizes) -> dict:
    import time

    import cupy as cp

    from transformer import Transformer, TransformerConfig, fuse, label_smoothed_loss, paper_adam

    rng = np.random.default_rng(0)
    B, T, V, layers = sizes.step
    src = mt.tensor(rng.integers(3, V, (B, T)), device="cuda")
    tgt = rng.integers(3, V, (B, T + 1))
    ti, to = mt.tensor(tgt[:, :-1], device="cuda"), mt.tensor(tgt[:, 1:], device="cuda")
    mt.manual_seed(0)
    model = fuse(Transformer(TransformerConfig.base(V, n_encoder_layers=layers, n_decoder_layers=layers))).to("cuda")
    opt = paper_adam(model.parameters(), lr=1e-4)
    out = {"batch": B, "length": T, "layers": layers}
    warmup, timed = min(2, sizes.repeat - 1), min(4, sizes.repeat - 1)   # 2 and 4; --tiny: 1 and 1
    for on in (True, False, True):  # on, off, on again: the spread between the two "on" runs is the noise
        with cuda.use_kernels(on):
            times = []
            for i in range(warmup + timed):
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                opt.zero_grad()
                label_smoothed_loss(model(src, ti), to, 0, 0.1, reduction="sum").backward()
                opt.step()
                cp.cuda.Device().synchronize()
                times.append(time.perf_counter() - t0)
            out.setdefault("kernels_on_ms" if on else "kernels_off_ms", []).append(
                round(1000 * float(np.median(times[warmup:])), 2))
    out["speedup_with_kernels"] = round(out["kernels_off_ms"][0] / min(out["kernels_on_ms"]), 3)
    return out


def sdpa_backend_ms(tstep, repeat: int, warmup: int) -> dict:
    """PyTorch's step on each of scaled_dot_product_attention's backends alone (those that take
    the inputs): {"torch_sdpa_flash_ms": ..., ...}."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = {}
    for key, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                         ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                out[f"torch_sdpa_{key}_ms"] = torch_ms(tstep, repeat=repeat, warmup=warmup)
        except RuntimeError:   # the backend does not take these inputs on this GPU
            out[f"torch_sdpa_{key}_ms"] = None
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--skip-step", action="store_true", help="leave out the transformer-base step")
    p.add_argument("--only", default=None, help="a comma-separated list of the sections to run "
                   "(layer_norm, attention_softmax, cross_entropy, products, fused, attention, base_step); default: all")
    p.add_argument("--attention-dtypes", default=None,
                   help="the attention section's dtypes, comma-separated: float32, bfloat16, float16, tf32 "
                   "(float32 with TF32 allowed; default: float32,bfloat16,tf32)")
    p.add_argument("--lengths", default=None,
                   help="the attention section's sequence lengths, comma-separated (default: 128 to 4096)")
    p.add_argument("--tiny", action="store_true", help="every shape cut down: checks that the script runs, "
                   "timings meaningless (CI runs it on the CuPy double)")
    a = p.parse_args()
    sizes = TINY if a.tiny else FULL
    if a.attention_dtypes:
        sizes = replace(sizes, attention_dtypes=tuple(a.attention_dtypes.split(",")))
    if a.lengths:
        sizes = replace(sizes, attention_lengths=tuple(int(n) for n in a.lengths.split(",")))
    if not cuda.is_available():
        raise SystemExit("benchmarks/kernels.py needs a CUDA GPU and CuPy")
    try:
        import torch

        torch_ok = torch.cuda.is_available()
    except ImportError:
        torch_ok = False
    bw = copy_bandwidth(sizes)
    sections = {"layer_norm": lambda: layer_norm_rows(sizes, bw, torch_ok),
                "attention_softmax": lambda: softmax_rows(sizes, bw, torch_ok),
                "cross_entropy": lambda: cross_entropy_rows(sizes, bw, torch_ok),
                "products": lambda: product_rows(sizes, torch_ok),
                "fused": lambda: fused_rows(sizes, torch_ok),
                "attention": lambda: attention_rows(sizes, torch_ok),
                "base_step": lambda: base_step_with_and_without_kernels(sizes)}
    chosen = list(sections) if a.only is None else a.only.split(",")
    if a.skip_step and "base_step" in chosen:
        chosen.remove("base_step")
    unknown = [c for c in chosen if c not in sections]
    if unknown:
        raise SystemExit(f"--only: no section {', '.join(unknown)} (there are {', '.join(sections)})")
    out = {"benchmark": "hand-written CUDA kernels and cuBLAS products", "environment": environment("cuda"),
           "tiny": a.tiny, "copy_bandwidth_gb_s": round(bw, 1)}
    for name in chosen:
        out[name] = sections[name]()
    write_results(out, a.out)


if __name__ == "__main__":
    main()

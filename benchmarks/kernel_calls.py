"""One call of each kernel a profiler should read, nothing timed: Nsight Compute (``ncu``) replays
each launch and reports where it spends its cycles (the stall reasons, the tensor and memory
pipes' use, occupancy). ``benchmarks/gpu_session.sh ncu`` runs it under ncu.

* ``attention``: scaled dot-product attention forward + backward on the tensor-core flash kernels
  (B x T = 16384 tokens, 8 heads, head size 64, no mask), as in ``kernels.py``'s attention section
  (``--wgmma``: with their products on wgmma, compute capability 9.0; ``--one-pass``: the backward
  in one pass);
* ``cross_entropy``: the fused label-smoothed cross-entropy's forward and backward kernels on the
  base step's logits (25600 x 37000 float32).

    ncu --clock-control none --set full -k regex:flash_attention_tc python benchmarks/kernel_calls.py attention
"""
from __future__ import annotations

import argparse

import minitensor as mt
import minitensor.functional as F
from minitensor import backend, cuda


def attention(T: int, dtype: str, tokens: int, wgmma: bool = False, one_pass: bool = False) -> None:
    cp = backend.cupy()

    cuda.set_tf32(dtype == "tf32")
    cuda.set_wgmma(wgmma)
    cuda.set_one_pass_backward(one_pass)
    storage = "float32" if dtype == "tf32" else dtype
    B, H, d = max(1, tokens // T), 8, 64
    q, k, v = (mt.tensor(cp.random.standard_normal((B, H, T, d), dtype=cp.float32).astype(storage), requires_grad=True)
               for _ in range(3))
    g = mt.tensor(cp.random.standard_normal((B, H, T, d), dtype=cp.float32).astype(storage))
    cuda.set_attention("flash")
    F.scaled_dot_product_attention(q, k, v).backward(g)
    cp.cuda.Device().synchronize()


def cross_entropy(N: int, V: int) -> None:
    cp = backend.cupy()

    from minitensor.cuda import cross_entropy as k

    x = cp.random.standard_normal((N, V), dtype=cp.float32)
    t = cp.random.randint(0, V, N).astype(cp.int64)
    loss, lse = k.forward(x, t, 0, 0.1)
    k.backward(x, t, lse, (t != 0).astype(cp.float32) / N, 0.1, out=x)
    cp.cuda.Device().synchronize()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("attention", "cross_entropy"))
    p.add_argument("--length", type=int, default=4096, help="attention: the sequence length T")
    p.add_argument("--tokens", type=int, default=16384, help="attention: B x T")
    p.add_argument("--dtype", default="bfloat16", help="attention: bfloat16, float16 or tf32")
    p.add_argument("--logits", default="25600,37000", help="cross_entropy: rows,V")
    p.add_argument("--wgmma", action="store_true", help="attention: the products on wgmma (compute capability 9.0)")
    p.add_argument("--one-pass", action="store_true", help="attention: the backward in one pass (16-bit)")
    a = p.parse_args()
    if a.what == "attention":
        attention(a.length, a.dtype, a.tokens, a.wgmma, a.one_pass)
    else:
        cross_entropy(*map(int, a.logits.split(",")))


if __name__ == "__main__":
    main()

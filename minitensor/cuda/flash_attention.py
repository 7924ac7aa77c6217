"""Launcher for the FlashAttention-style kernels of ``flash_attention.cu``, and
:class:`FlashAttention`, the attention op on this route.

The plain xp reference is :class:`minitensor.ops.attention.ScaledDotProductAttention`'s own
code (scores, softmax, weights); tests compare the two, and a float64 gradcheck goes through
the kernels themselves.
"""
from __future__ import annotations

import numpy as np

from ..autograd import Function
from ..ops.attention import products
from .build import array_module, as4d, ctype, kernel, mask_view

SOURCE = "flash_attention.cu"
# (BQ, BK) of the forward, (BK, BQ) of the dK/dV pass, (BQ, BK) of the dQ pass: shared memory
# under 48 KB and no register spills at D = 64 (nvcc -Xptxas -v; tests/minitensor/cuda/test_sources.py)
TILES = {"float": ((64, 32), (64, 16), (64, 16)), "double": ((32, 32), (32, 8), (32, 8))}
HEAD_SIZES = {"float": (16, 32, 64), "double": (16, 32)}


def padded_head_size(d: int, t: str) -> int | None:
    return next((D for D in HEAD_SIZES[t] if d <= D), None)


def applies(q, k, v) -> bool:
    """float32/float64 q, k, v of one shape (B, H, T, d) up to 4-D, d the same for v, d <= 64."""
    t = ctype(q.dtype)
    return (t in TILES and k.dtype == q.dtype and v.dtype == q.dtype and 2 <= q.ndim <= 4
            and k.ndim == q.ndim and v.ndim == q.ndim and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
            and k.shape[-1] == q.shape[-1] == v.shape[-1] and k.shape[-2] == v.shape[-2]
            and q.shape[-2] > 0 and k.shape[-2] > 0 and padded_head_size(q.shape[-1], t) is not None)


def names(t: str, d: int) -> tuple[str, str, str]:
    """The instantiations (forward, dK/dV, dQ) for type ``t`` and head size ``d``."""
    D = padded_head_size(d, t)
    (fq, fk), (bk, bq), (qq, qk) = TILES[t]
    return (f"flash_attention_forward<{t}, {D}, {fq}, {fk}>", f"flash_attention_backward_dkdv<{t}, {D}, {bk}, {bq}>",
            f"flash_attention_backward_dq<{t}, {D}, {qq}, {qk}>")


def instantiations() -> list[str]:
    return [name for t in TILES for D in HEAD_SIZES[t] for name in names(t, D)]


def _dims(q, k):
    B, H, Tq, d = as4d(q.shape)
    return B, H, Tq, k.shape[-2], d


def forward(q, k, v, mask, scale: float):
    """(out, lse): out like q; lse (..., Tq), +inf on rows with no allowed key."""
    cp = array_module(q)
    q, k, v = (cp.ascontiguousarray(a) for a in (q, k, v))
    B, H, Tq, Tk, d = _dims(q, k)
    t = ctype(q.dtype)
    (BQ, BK), _, _ = TILES[t]
    out = cp.empty_like(q)
    lse = cp.empty(q.shape[:-1], dtype=q.dtype)
    fn = kernel(SOURCE, names(t, d)[0], cp)
    fn((B * H, (Tq + BQ - 1) // BQ), (BQ,),
       (q, k, v, out, lse) + mask_view(cp, mask, (B, H, Tq, Tk))
       + (np.int32(H), np.int32(Tq), np.int32(Tk), np.int32(d), np.float64(scale)))
    return out, lse


def backward(grad, q, k, v, out, lse, mask, scale: float):
    """dq, dk, dv from the output's cotangent, recomputing the probabilities from lse."""
    cp = array_module(q)
    q, k, v, out = (cp.ascontiguousarray(a) for a in (q, k, v, out))
    grad = cp.ascontiguousarray(grad, dtype=q.dtype)
    B, H, Tq, Tk, d = _dims(q, k)
    t = ctype(q.dtype)
    _, (BKk, BQk), (BQq, BKq) = TILES[t]
    _, dkdv, dq_name = names(t, d)
    delta = (grad * out).sum(axis=-1)                      # Σ_c dO_ic O_ic, one per query
    m = mask_view(cp, mask, (B, H, Tq, Tk))
    tail = (np.int32(H), np.int32(Tq), np.int32(Tk), np.int32(d), np.float64(scale))
    dq, dk, dv = cp.empty_like(q), cp.empty_like(k), cp.empty_like(v)
    fn = kernel(SOURCE, dkdv, cp)
    fn((B * H, (Tk + BKk - 1) // BKk), (BKk,), (q, k, v, grad, lse, delta, dk, dv) + m + tail)
    fn = kernel(SOURCE, dq_name, cp)
    fn((B * H, (Tq + BQq - 1) // BQq), (BQq,), (q, k, v, grad, lse, delta, dq) + m + tail)
    return dq, dk, dv


class FlashAttention(Function):
    """Equation 1, out = softmax(Q Kᵀ / √d_k + mask) V, without the Tq x Tk weights: the forward
    keeps one log Σ exp per query, the backward recomputes the weights tile by tile from it
    (Dao et al., 2022). No dropout on the weights (``dropout_p`` must be 0 or ``training``
    False: :func:`minitensor.ops.attention.attention_op` sends dropout elsewhere)."""

    @staticmethod
    def forward(ctx, q, k, v, mask=None, dropout_p=0.0, training=False):
        if training and dropout_p > 0:
            raise ValueError("FlashAttention: no dropout on the weights (they are never formed)")
        ctx.scale = 1.0 / (q.shape[-1] ** 0.5)
        ctx.weights = None
        out, lse = forward(q, k, v, mask, ctx.scale)
        ctx.save_for_backward(q, k, v, out, lse, mask)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse, mask = ctx.saved
        return backward(grad, q, k, v, out, lse, mask, ctx.scale) + (None,)

    products = staticmethod(products)

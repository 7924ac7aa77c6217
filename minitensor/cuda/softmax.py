"""Launcher for the fused scale + mask + softmax kernels of ``softmax.cu`` (attention scores),
and :class:`FusedSoftmaxAttention`, the attention op on this route.

The plain xp reference is :func:`minitensor.ops.attention.masked_softmax_reference` and the
backward in :class:`minitensor.ops.attention.ScaledDotProductAttention`; tests compare them.
"""
from __future__ import annotations

import numpy as np

from ..ops.attention import ScaledDotProductAttention
from ..speed.products import product
from .build import array_module, as4d, ctype, items_per_lane, kernel, mask_view

SOURCE = "softmax.cu"
ROWS_PER_BLOCK = 4        # one warp per row
MAX_ITEMS = 64            # rows of up to 32 x 64 = 2048 keys


def applies(dtype, shape: tuple) -> bool:
    """Whether the kernels take scores of this dtype and shape (..., Tq, Tk), up to 4-D."""
    return (ctype(dtype) is not None and 2 <= len(shape) <= 4 and all(n > 0 for n in shape)
            and items_per_lane(shape[-1], MAX_ITEMS) is not None)


def names(t: str, tk: int) -> tuple[str, str]:
    """The instantiations (forward, backward) for storage type ``t`` and rows of ``tk`` keys."""
    items = items_per_lane(tk, MAX_ITEMS)
    return f"attention_softmax_forward<{t}, {items}>", f"attention_softmax_backward<{t}, {items}>"


def instantiations() -> list[str]:
    return [name for t in ("float", "f16", "bf16", "double") for items in (1, 2, 4, 8, 16, 32, 64)
            for name in names(t, 32 * items)]


def forward(scores, mask, scale: float):
    """softmax(scale · scores) over the last axis where ``mask`` (bool, broadcastable to the
    scores, True = may attend) allows; forbidden entries and all-forbidden rows give 0."""
    cp = array_module(scores)
    scores = cp.ascontiguousarray(scores)
    B, H, Tq, Tk = as4d(scores.shape)
    rows = B * H * Tq
    probs = cp.empty_like(scores)
    k = kernel(SOURCE, names(ctype(scores.dtype), Tk)[0], cp)
    k(((rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK,), (32 * ROWS_PER_BLOCK,),
      (scores, probs) + mask_view(cp, mask, (B, H, Tq, Tk))
      + (np.int64(rows), np.int32(H), np.int32(Tq), np.int32(Tk), np.float64(scale)))
    return probs


def backward(probs, dprobs, scale: float):
    """d scores = scale · P ⊙ (dP - Σ_k dP ⊙ P)."""
    cp = array_module(probs)
    probs = cp.ascontiguousarray(probs)
    dprobs = cp.ascontiguousarray(dprobs, dtype=probs.dtype)
    Tk = probs.shape[-1]
    rows = probs.size // Tk
    dscores = cp.empty_like(probs)
    k = kernel(SOURCE, names(ctype(probs.dtype), Tk)[1], cp)
    k(((rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK,), (32 * ROWS_PER_BLOCK,),
      (probs, dprobs, dscores, np.int64(rows), np.int32(Tk), np.float64(scale)))
    return dscores


class FusedSoftmaxAttention(ScaledDotProductAttention):
    """:class:`minitensor.ops.attention.ScaledDotProductAttention` (equation 1, the same products
    on cuBLAS) with its masked softmax and the softmax's backward on the kernels: the mask is
    read through broadcast strides, never materialised, and each pass reads the scores once."""

    product = staticmethod(product)

    @staticmethod
    def softmax(xp, scores, mask):
        return forward(scores, mask, 1.0)

    @staticmethod
    def softmax_backward(xp, p, gp, scale: float):
        return backward(p, gp, scale)  # the kernel's scale turns d(scaled scores) into d(Q Kᵀ)

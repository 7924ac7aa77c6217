"""Inverted dropout (Srivastava et al., 2014): zero each entry with probability p and
scale the survivors by 1/(1-p), so the expected value is unchanged and evaluation is
the identity."""
from __future__ import annotations

from ..autograd import Function
from ..random import generator


def dropout_mask(xp, shape, p: float, dtype):
    """keep/(1-p) with keep ~ Bernoulli(1-p); all zeros when p == 1."""
    if p >= 1.0:
        return xp.zeros(shape, dtype=dtype)
    keep = generator(xp).random(shape, dtype=xp.float32) >= p
    return keep.astype(dtype) * dtype.type(1.0 / (1.0 - p))


class Dropout(Function):
    """y = x ⊙ m with m = keep/(1-p).  dy/dx = m (the same mask)."""

    @staticmethod
    def forward(ctx, x, p=0.5):
        m = dropout_mask(ctx.xp, x.shape, p, x.dtype)
        ctx.save_for_backward(m)
        return x * m

    @staticmethod
    def backward(ctx, grad):
        (m,) = ctx.saved
        return grad * m

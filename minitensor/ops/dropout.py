"""Inverted dropout (Srivastava et al., 2014): zero each entry with probability p and
scale the survivors by 1/(1-p), so the expected value is unchanged and evaluation is
the identity."""
from __future__ import annotations

import numpy as np

from ..autograd import Function
from ..random import generator
from ..tensor import Tensor, as_tensor


def check_probability(name: str, p: float, one_allowed: bool = True) -> None:
    """Raise ValueError unless ``p`` is a probability: in [0, 1], or [0, 1) where 1 would drop
    everything (attention's weights must keep something to renormalise)."""
    if not (0.0 <= p <= 1.0 if one_allowed else 0.0 <= p < 1.0):
        raise ValueError(f"{name} must be in [0, {'1]' if one_allowed else '1)'}, got {p}")


def dropout_mask(xp, shape, p: float, dtype):
    """keep/(1-p) with keep ~ Bernoulli(1-p); all zeros when p == 1.

    On NumPy an entry is dropped when 16 random bits fall below round(p·2¹⁶): p is then
    exact to 2⁻¹⁷ (a float32 uniform is exact to 2⁻²⁴), and the bits cost half of a float.
    """
    if p >= 1.0:
        return xp.zeros(shape, dtype=dtype)
    if xp is np:
        bits = generator(np).integers(0, 1 << 16, size=shape, dtype=np.uint16)
        m = np.empty(shape, dtype=dtype)
        np.greater_equal(bits, round(p * (1 << 16)), out=m)  # 1.0 where kept
    else:
        m = (generator(xp).random(shape, dtype=xp.float32) >= p).astype(dtype)
    m *= dtype.type(1.0 / (1.0 - p))
    return m


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


def dropout(x, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each entry with probability p and scale the rest by 1/(1-p); identity when not training."""
    check_probability("dropout: p", p)
    x = as_tensor(x)
    if not training or p == 0.0:
        return x
    return Dropout.apply(x, p=p)

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


def dropout_keep(xp, shape, p: float):
    """keep ~ Bernoulli(1-p), as a bool array (True = kept); all False when p == 1.

    On NumPy an entry is dropped when 16 random bits fall below round(p·2¹⁶): p is then
    exact to 2⁻¹⁷ (a float32 uniform is exact to 2⁻²⁴), and the bits cost half of a float.
    A bool mask is a quarter of a float32 one, and an update keeps one per dropout.
    """
    if p >= 1.0:
        return xp.zeros(shape, dtype=bool)
    if xp is np:
        bits = generator(np).integers(0, 1 << 16, size=shape, dtype=np.uint16)
        return bits >= round(p * (1 << 16))
    return generator(xp).random(shape, dtype=xp.float32) >= p


def dropped(x, keep, p: float, in_place: bool = False):
    """x ⊙ keep / (1-p): a new array, or x itself when ``in_place``; zeros when p == 1."""
    if in_place:
        x *= keep
    y = x if in_place else x * keep
    if p < 1.0:
        y *= y.dtype.type(1.0 / (1.0 - p))
    return y


class Dropout(Function):
    """y = x ⊙ keep / (1-p).  dy/dx = keep / (1-p): the backward drops the same entries."""

    @staticmethod
    def forward(ctx, x, p=0.5):
        keep = dropout_keep(ctx.xp, x.shape, p)
        ctx.p = p
        ctx.save_for_backward(keep)
        return dropped(x, keep, p)

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved
        return dropped(grad, keep, ctx.p)


def dropout(x, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each entry with probability p and scale the rest by 1/(1-p); identity when not training."""
    check_probability("dropout: p", p)
    x = as_tensor(x)
    if not training or p == 0.0:
        return x
    return Dropout.apply(x, p=p)

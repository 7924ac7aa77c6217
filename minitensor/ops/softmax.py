"""softmax and log_softmax along one axis, and the two steps they share with the rest of the
ops: the stable exp-normalise (also behind logsumexp and cross entropy) and the softmax
backward (also behind attention)."""
from __future__ import annotations

from ..autograd import Function
from ..tensor import Tensor, as_tensor


def exp_normalise(xp, x, axis, overwrite: bool = False):
    """(e, s, m) with m = max x, e = exp(x - m) and s = Σ e over ``axis`` (m and s kept as size 1).

    Then softmax(x) = e / s and log Σ exp(x) = m + log s, and no exp overflows: the largest
    is exp(0) = 1. A row that is all -inf gives e = 0 and s = 0. ``overwrite``: x is a
    temporary, and e is computed in its memory.
    """
    # an all -inf row's max clamped to the lowest finite value: x - m stays -inf there, not NaN
    m = xp.maximum(x.max(axis=axis, keepdims=True), xp.finfo(x.dtype).min)
    e = xp.subtract(x, m, out=x if overwrite and x.ndim else None)
    e = xp.exp(e, out=e) if e.ndim else xp.exp(e)  # in place: one temporary (0-d: a NumPy scalar)
    s = e.sum(axis=axis, keepdims=True)
    return e, s, m


def softmax_array(xp, x, axis: int):
    """softmax on a plain array; a row that is all -inf gives zeros, not NaN."""
    e, s, _ = exp_normalise(xp, x, axis)
    # every other row has s >= 1 (its max contributes exp(0)); an empty row has s = 0 and e = 0
    e *= 1 / xp.maximum(s, xp.finfo(x.dtype).tiny)
    return e


def softmax_backward(xp, y, g, axis: int = -1):
    """dx = y ⊙ (g - Σ_j g_j y_j): the softmax Jacobian diag(y) - y yᵀ applied to a cotangent g."""
    gy = g * y
    gy -= y * gy.sum(axis=axis, keepdims=True)
    return gy


class Softmax(Function):
    """y_i = exp(x_i) / Σ_j exp(x_j).

    The Jacobian is diag(y) - y yᵀ, so for a cotangent g:  dx = y ⊙ (g - Σ_j g_j y_j).
    (Checking only the gradient of sum(y) would miss a wrong backward: that gradient is 0.)
    """

    @staticmethod
    def forward(ctx, x, axis=-1):
        y = softmax_array(ctx.xp, x, axis)
        ctx.axis = axis
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return softmax_backward(ctx.xp, y, grad, ctx.axis)


def softmax(x, axis: int = -1) -> Tensor:
    """exp(x) / Σ exp(x) along ``axis``."""
    return Softmax.apply(as_tensor(x), axis=axis)


class LogSoftmax(Function):
    """y_i = x_i - log Σ_j exp(x_j).  dx = g - softmax(x) · Σ_j g_j."""

    @staticmethod
    def forward(ctx, x, axis=-1):
        _, s, m = exp_normalise(ctx.xp, x, axis)
        y = x - m
        y -= ctx.xp.log(s)  # (x - m) - log s: rounded near 0 where x is the max, not near m
        ctx.axis = axis
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return grad - ctx.xp.exp(y) * grad.sum(axis=ctx.axis, keepdims=True)


def log_softmax(x, axis: int = -1) -> Tensor:
    """x - logsumexp(x) along ``axis``."""
    return LogSoftmax.apply(as_tensor(x), axis=axis)

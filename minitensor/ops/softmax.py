"""softmax and log_softmax along one axis, computed stably (max subtracted first)."""
from __future__ import annotations

from ..autograd import Function


def softmax_array(xp, x, axis: int):
    """Plain-array softmax; a row that is all -inf gives zeros, not NaN."""
    m = x.max(axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    e = xp.exp(x - m)
    s = e.sum(axis=axis, keepdims=True)
    e /= xp.where(s == 0, 1, s)
    return e


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
        return y * (grad - (grad * y).sum(axis=ctx.axis, keepdims=True))


class LogSoftmax(Function):
    """y_i = x_i - log Σ_j exp(x_j).  dx = g - softmax(x) · Σ_j g_j."""

    @staticmethod
    def forward(ctx, x, axis=-1):
        xp = ctx.xp
        m = x.max(axis=axis, keepdims=True)
        m = xp.where(xp.isfinite(m), m, 0)
        shifted = x - m
        y = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
        ctx.axis = axis
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return grad - ctx.xp.exp(y) * grad.sum(axis=ctx.axis, keepdims=True)

"""softmax and log_softmax along one axis, computed stably (max subtracted first)."""
from __future__ import annotations

from ..autograd import Function
from ..tensor import Tensor, as_tensor
from .reduce import finite_max, sum_last


def softmax_array(xp, x, axis: int):
    """Plain-array softmax; a row that is all -inf gives zeros, not NaN."""
    m = finite_max(xp, x, axis)
    e = xp.exp(x - m)
    s = sum_last(xp, e) if axis in (-1, x.ndim - 1) else e.sum(axis=axis, keepdims=True)
    # every other row has s >= 1 (its max contributes exp(0)); an empty row has s = 0 and e = 0
    e *= 1 / xp.maximum(s, xp.finfo(x.dtype).tiny)
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
        gy = grad * y
        return gy - y * gy.sum(axis=ctx.axis, keepdims=True)


def softmax(x, axis: int = -1) -> Tensor:
    """exp(x) / Σ exp(x) along ``axis``."""
    return Softmax.apply(as_tensor(x), axis=axis)


class LogSoftmax(Function):
    """y_i = x_i - log Σ_j exp(x_j).  dx = g - softmax(x) · Σ_j g_j."""

    @staticmethod
    def forward(ctx, x, axis=-1):
        xp = ctx.xp
        shifted = x - finite_max(xp, x, axis)
        y = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
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

"""Reductions over axes: sum, mean, max, logsumexp.

Their backwards first put the reduced axes back (``keepdims``) so the gradient
broadcasts against the input.
"""
from __future__ import annotations

import builtins

from ..autograd import Function
from ..tensor import Tensor, as_tensor


def normalize_axes(axis, ndim: int) -> tuple:
    """``axis`` (None, int or tuple, negatives allowed) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < builtins.max(ndim, 1):
            raise ValueError(f"axis {a} is out of range for a tensor with {ndim} dimensions")
        out.append(a % builtins.max(ndim, 1))
    return tuple(sorted(set(out)))


# Up to this many entries per row, max_last folds the columns one by one (measured on the
# 2-core CI machine: 8x faster than ``max`` for attention's rows of 11, 1.6x at 64, slower at 128).
SHORT_ROW = 64


def max_last(xp, a):
    """max over the last axis, keeping it (size 1): (..., n) -> (..., 1).

    NumPy reduces a short last axis row by row, which for the 10-30 keys of an attention row
    costs far more than the arithmetic; taking the elementwise maximum of column after column
    runs n vectorised passes over all rows at once instead.
    """
    n = a.shape[-1] if a.ndim else 0
    if xp.__name__ != "numpy" or not 1 < n <= SHORT_ROW:
        return a.max(axis=-1, keepdims=True)
    m = a[..., 0].copy()
    for j in range(1, n):
        xp.maximum(m, a[..., j], out=m)
    return m[..., None]


def finite_max(xp, x, axis):
    """max over ``axis`` (kept), with an all -inf row clamped to the lowest finite value, so
    ``x - max`` stays -inf there instead of becoming NaN (stable softmax / logsumexp)."""
    last = axis in (-1, x.ndim - 1) or axis == (x.ndim - 1,)
    m = max_last(xp, x) if last else x.max(axis=axis, keepdims=True)
    return xp.maximum(m, xp.finfo(x.dtype).min)


def sum_last(xp, a):
    """Σ over the last axis, keeping it (size 1): (..., n) -> (..., 1).

    On NumPy a matrix-vector product with a vector of ones is ~3x faster than ``sum`` for
    the short rows of attention and layer norm (BLAS instead of a strided reduction).
    """
    if xp.__name__ == "numpy" and a.dtype.kind == "f" and a.ndim >= 1:
        return (a @ xp.ones(a.shape[-1], dtype=a.dtype))[..., None]
    return a.sum(axis=-1, keepdims=True)


def _keep(grad, axes: tuple, keepdims: bool, xp):
    """Re-insert the reduced axes of ``grad`` (as size 1) unless they were kept."""
    return grad if keepdims or not axes else xp.expand_dims(grad, axes)


class Sum(Function):
    """y = Σ_axes x.  dy/dx = 1 on every summed element."""

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        ctx.axes = normalize_axes(axis, x.ndim)
        ctx.keepdims = keepdims
        ctx.in_shape = x.shape
        return x.sum(axis=ctx.axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        return xp.broadcast_to(_keep(grad, ctx.axes, ctx.keepdims, xp), ctx.in_shape)


def sum(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over ``axis`` (None: all; int or tuple; negatives allowed)."""
    return Sum.apply(as_tensor(x), axis=axis, keepdims=keepdims)


class Mean(Function):
    """y = (1/n) Σ_axes x.  dy/dx = 1/n."""

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        ctx.axes = normalize_axes(axis, x.ndim)
        ctx.keepdims = keepdims
        ctx.in_shape = x.shape
        n = 1
        for a in ctx.axes:
            n *= x.shape[a]
        ctx.n = n
        return x.mean(axis=ctx.axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        return xp.broadcast_to(_keep(grad, ctx.axes, ctx.keepdims, xp) / ctx.n, ctx.in_shape)


def mean(x, axis=None, keepdims: bool = False) -> Tensor:
    """Mean over ``axis`` (None: all)."""
    return Mean.apply(as_tensor(x), axis=axis, keepdims=keepdims)


class Max(Function):
    """y = max_axes x.  The gradient is shared equally by the entries equal to the max."""

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        if x.size == 0:
            raise ValueError("max of an empty tensor")
        ctx.axes = normalize_axes(axis, x.ndim)
        ctx.keepdims = keepdims
        y = x.max(axis=ctx.axes, keepdims=True)
        ctx.save_for_backward(x, y)
        return y if keepdims else y.reshape([n for i, n in enumerate(x.shape) if i not in ctx.axes])

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved
        xp = ctx.xp
        hit = (x == y).astype(grad.dtype)
        hit /= hit.sum(axis=ctx.axes, keepdims=True)
        return _keep(grad, ctx.axes, ctx.keepdims, xp) * hit


def max(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Maximum over ``axis``; ties share the gradient equally."""
    return Max.apply(as_tensor(x), axis=axis, keepdims=keepdims)


class LogSumExp(Function):
    """y = log Σ exp(x), computed as m + log Σ exp(x - m).  dy/dx = softmax(x)."""

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        xp = ctx.xp
        ctx.axes = normalize_axes(axis, x.ndim)
        ctx.keepdims = keepdims
        m = finite_max(xp, x, ctx.axes)
        y = xp.log(xp.exp(x - m).sum(axis=ctx.axes, keepdims=True)) + m
        ctx.save_for_backward(x, y)
        return y if keepdims else y.reshape([n for i, n in enumerate(x.shape) if i not in ctx.axes])

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved
        return _keep(grad, ctx.axes, ctx.keepdims, ctx.xp) * ctx.xp.exp(x - y)


def logsumexp(x, axis=None, keepdims: bool = False) -> Tensor:
    """log Σ exp(x) over ``axis``, without overflow."""
    return LogSumExp.apply(as_tensor(x), axis=axis, keepdims=keepdims)

"""Reductions over axes: sum, mean, max, logsumexp.

Their backwards first put the reduced axes back (``keepdims``) so the gradient
broadcasts against the input.
"""
from __future__ import annotations

import builtins
import math

from ..autograd import Function
from ..tensor import Tensor, as_tensor
from .precision import compute_dtype
from .softmax import exp_normalise


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


def mean(x, axis=None, keepdims: bool = False) -> Tensor:
    """Mean over ``axis`` (None: all): Σ x / n, with n the number of entries summed, so dy/dx = 1/n.

    16-bit inputs are summed in float32 (their sum may exceed float16's range where the mean
    does not) and the mean is cast back.
    """
    x = as_tensor(x)
    n = math.prod(x.shape[a] for a in normalize_axes(axis, x.ndim))
    if x.dtype.kind == "f" and compute_dtype(x.dtype) != x.dtype:
        return mean(x.astype(compute_dtype(x.dtype)), axis, keepdims).astype(x.dtype)
    return sum(x, axis=axis, keepdims=keepdims) / n


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
        _, s, m = exp_normalise(xp, x, ctx.axes)
        y = m + xp.log(s)
        ctx.save_for_backward(x, y)
        return y if keepdims else y.reshape([n for i, n in enumerate(x.shape) if i not in ctx.axes])

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved
        return _keep(grad, ctx.axes, ctx.keepdims, ctx.xp) * ctx.xp.exp(x - y)


def logsumexp(x, axis=None, keepdims: bool = False) -> Tensor:
    """log Σ exp(x) over ``axis``, without overflow."""
    return LogSumExp.apply(as_tensor(x), axis=axis, keepdims=keepdims)

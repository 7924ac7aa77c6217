"""Ops that move elements around without changing them: their backwards route
gradients back to where each element came from."""
from __future__ import annotations

from .. import backend
from ..autograd import Function


class Reshape(Function):
    """y = x viewed with a new shape.  The gradient is reshaped back."""

    @staticmethod
    def forward(ctx, x, shape=None):
        ctx.in_shape = x.shape
        return x.reshape(shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(ctx.in_shape)


class Transpose(Function):
    """y = x with its axes permuted by ``axes``.  The gradient is permuted back by the inverse."""

    @staticmethod
    def forward(ctx, x, axes=None):
        ctx.axes = axes
        return x.transpose(axes)

    @staticmethod
    def backward(ctx, grad):
        inverse = [0] * len(ctx.axes)
        for i, a in enumerate(ctx.axes):
            inverse[a] = i
        return grad.transpose(inverse)


def _has_integer_array(index) -> bool:
    """True when ``index`` picks elements with an integer array (so one may repeat)."""
    parts = index if isinstance(index, tuple) else (index,)
    return any(getattr(p, "dtype", None) is not None and p.dtype.kind in "iu" for p in parts)


class GetItem(Function):
    """y = x[index] (ints, slices, None, Ellipsis, integer or bool arrays).

    The gradient is scattered back; with integer arrays an element picked twice gets
    both contributions (an unbuffered add)."""

    @staticmethod
    def forward(ctx, x, index=None):
        ctx.index = index
        ctx.in_shape = x.shape
        ctx.in_dtype = x.dtype
        return x[index]

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        g = xp.zeros(ctx.in_shape, dtype=grad.dtype)
        index = ctx.index
        if getattr(index, "ndim", None) == 1 and index.dtype.kind in "iu" and grad.ndim >= 2:
            # whole rows picked by one id array (a gather): add them back row by row, sorted;
            # negative ids are made positive first so that -1 and n-1 are one row
            rows = xp.where(index < 0, index + g.shape[0], index)
            backend.index_add_rows(xp, g.reshape(g.shape[0], -1), rows, grad.reshape(grad.shape[0], -1))
        elif _has_integer_array(index):
            backend.scatter_add(xp, g, index, grad)
        else:
            g[ctx.index] = grad
        return g


class Concat(Function):
    """y = the inputs joined along ``axis``.  Each input gets its slice of the gradient."""

    @staticmethod
    def forward(ctx, *xs, axis=0):
        ctx.axis = axis
        ctx.sizes = [x.shape[axis] for x in xs]
        return ctx.xp.concatenate(xs, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        splits, total = [], 0
        for n in ctx.sizes[:-1]:
            total += n
            splits.append(total)
        return tuple(ctx.xp.split(grad, splits, axis=ctx.axis))


class Stack(Function):
    """y = the inputs stacked along a new ``axis``.  Each input gets its slice of the gradient."""

    @staticmethod
    def forward(ctx, *xs, axis=0):
        ctx.axis = axis
        return ctx.xp.stack(xs, axis=axis)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        return tuple(xp.squeeze(g, axis=ctx.axis) for g in xp.split(grad, grad.shape[ctx.axis], axis=ctx.axis))


class BroadcastTo(Function):
    """y = x broadcast to ``shape``.  The engine's sum_to undoes it, so backward is the identity."""

    @staticmethod
    def forward(ctx, x, shape=None):
        return ctx.xp.broadcast_to(x, shape)

    @staticmethod
    def backward(ctx, grad):
        return grad


class ToDevice(Function):
    """y = x copied to another device.  The gradient is copied back."""

    @staticmethod
    def forward(ctx, x, device="cpu"):
        ctx.source = backend.device_of(x)
        return backend.to_device(x, device)

    @staticmethod
    def backward(ctx, grad):
        return backend.to_device(grad, ctx.source)

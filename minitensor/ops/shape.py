"""Ops that move elements around without changing them: their backwards route
gradients back to where each element came from."""
from __future__ import annotations

import builtins
import numbers
from typing import Sequence

import numpy as np

from .. import backend
from ..autograd import Function
from ..errors import ShapeError
from ..tensor import Tensor, as_tensor
from .reduce import normalize_axes


def broadcasts(shape: tuple, target: tuple) -> bool:
    """True when an array of ``shape`` broadcasts to exactly ``target``."""
    try:
        return np.broadcast_shapes(tuple(shape), tuple(target)) == tuple(target)
    except ValueError:
        return False


class Reshape(Function):
    """y = x viewed with a new shape.  The gradient is reshaped back."""

    @staticmethod
    def forward(ctx, x, shape=None):
        ctx.in_shape = x.shape
        return x.reshape(shape)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(ctx.in_shape)


def reshape(x, *shape) -> Tensor:
    """x with a new shape, given as a tuple or as separate sizes (one entry may be -1)."""
    x = as_tensor(x)
    shape = tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], numbers.Integral) else shape
    try:
        return Reshape.apply(x, shape=shape)
    except ShapeError as e:
        raise ShapeError(f"reshape: cannot reshape a tensor of shape {x.shape} ({x.size} elements) to {shape}") from e


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


def transpose(x, *axes) -> Tensor:
    """No axes: reverse all axes. Two axes: swap them. ndim axes: a full permutation."""
    x = as_tensor(x)
    if len(axes) == 1 and not isinstance(axes[0], numbers.Integral):
        axes = tuple(axes[0])
    n = x.ndim
    if not axes:
        perm = tuple(reversed(range(n)))
    elif len(axes) == 2 and n != 2:
        i, j = normalize_axes(axes[0], n)[0], normalize_axes(axes[1], n)[0]
        perm = list(range(n))
        perm[i], perm[j] = perm[j], perm[i]
        perm = tuple(perm)
    else:
        return permute(x, *axes)
    return Transpose.apply(x, axes=perm)


def permute(x, *axes) -> Tensor:
    """x with axes reordered: output axis i is input axis ``axes[i]``."""
    x = as_tensor(x)
    if len(axes) == 1 and not isinstance(axes[0], numbers.Integral):
        axes = tuple(axes[0])
    perm = tuple(a % x.ndim if x.ndim else a for a in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"permute: {axes} is not a permutation of the {x.ndim} axes of a tensor of shape {x.shape}")
    return Transpose.apply(x, axes=perm)


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


def _index_part(p, xp):
    if isinstance(p, Tensor):
        return p.data
    if isinstance(p, (list, np.ndarray)):
        return xp.asarray(p)
    return p


def getitem(x, index) -> Tensor:
    """x[index]: ints, slices, None, Ellipsis, integer or bool arrays (lists and tensors too)."""
    x = as_tensor(x)
    xp = x.xp
    index = tuple(_index_part(p, xp) for p in index) if isinstance(index, tuple) else _index_part(index, xp)
    try:
        return GetItem.apply(x, index=index)
    except IndexError as e:
        raise IndexError(f"getitem: index {index!r} does not fit a tensor of shape {x.shape}: {e}") from e


def split(x, sections, axis: int = 0) -> list:
    """Cut x along ``axis``: an int gives that many equal parts; a list gives parts of those sizes."""
    x = as_tensor(x)
    n = x.shape[axis]
    if isinstance(sections, numbers.Integral):
        if sections <= 0 or n % sections:
            raise ShapeError(f"split: axis {axis} of length {n} does not divide into {sections} equal parts")
        sizes = [n // sections] * sections
    else:
        sizes = [int(s) for s in sections]
        if builtins.sum(sizes) != n or any(s < 0 for s in sizes):
            raise ShapeError(f"split: sizes {sizes} do not add up to the length {n} of axis {axis}")
    pieces, start = [], 0
    lead = (slice(None),) * (axis % x.ndim)
    for s in sizes:
        pieces.append(getitem(x, lead + (slice(start, start + s),)))
        start += s
    return pieces


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


def concat(tensors: Sequence, axis: int = 0) -> Tensor:
    """Join tensors along an existing axis."""
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise ShapeError("concat: needs at least one tensor")
    return Concat.apply(*ts, axis=axis)


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


def stack(tensors: Sequence, axis: int = 0) -> Tensor:
    """Join same-shaped tensors along a new axis."""
    ts = [as_tensor(t) for t in tensors]
    if not ts:
        raise ShapeError("stack: needs at least one tensor")
    shapes = {t.shape for t in ts}
    if len(shapes) > 1:
        raise ShapeError(f"stack: all tensors need the same shape, got {sorted(shapes)}")
    return Stack.apply(*ts, axis=axis)


class BroadcastTo(Function):
    """y = x broadcast to ``shape``.  The engine's sum_to undoes it, so backward is the identity."""

    @staticmethod
    def forward(ctx, x, shape=None):
        return ctx.xp.broadcast_to(x, shape)

    @staticmethod
    def backward(ctx, grad):
        return grad


def broadcast_to(x, shape) -> Tensor:
    """x repeated along size-1 (or new leading) axes to reach ``shape``."""
    x = as_tensor(x)
    shape = tuple(shape)
    if not broadcasts(x.shape, shape):
        raise ShapeError(f"broadcast_to: cannot broadcast shape {x.shape} to {shape}")
    return BroadcastTo.apply(x, shape=shape)


class ToDevice(Function):
    """y = x copied to another device.  The gradient is copied back."""

    @staticmethod
    def forward(ctx, x, device="cpu"):
        ctx.source = backend.device_of(x)
        return backend.to_device(x, device)

    @staticmethod
    def backward(ctx, grad):
        return backend.to_device(grad, ctx.source)


def to_device(x, device) -> Tensor:
    """x copied to ``device`` ("cpu" or "cuda"); gradients flow back to x's device."""
    device = backend.normalize_device(device)
    if device == "cuda":
        backend.cupy()  # clear error when there is no GPU or no CuPy
    return ToDevice.apply(as_tensor(x), device=device)

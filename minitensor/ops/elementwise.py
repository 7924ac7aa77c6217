"""Elementwise ops. Inputs may broadcast; backwards return gradients in the broadcast
shape and the engine's ``sum_to`` reduces them to each input's shape."""
from __future__ import annotations

import numpy as np

from ..autograd import Function
from ..errors import ShapeError
from ..tensor import Tensor, as_mask, as_tensor, as_tensors
from .shape import broadcasts


class Add(Function):
    """z = a + b.  dz/da = dz/db = 1."""

    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, grad):
        return grad, grad


def add(a, b) -> Tensor:
    """a + b, broadcasting."""
    return Add.apply(*as_tensors(a, b))


class Sub(Function):
    """z = a - b.  dz/da = 1, dz/db = -1."""

    @staticmethod
    def forward(ctx, a, b):
        return a - b

    @staticmethod
    def backward(ctx, grad):
        return grad, (-grad if ctx.needs_input_grad[1] else None)


def sub(a, b) -> Tensor:
    """a - b, broadcasting."""
    return Sub.apply(*as_tensors(a, b))


class Mul(Function):
    """z = a * b.  dz/da = b, dz/db = a."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved
        na, nb = ctx.needs_input_grad
        return (grad * b if na else None), (grad * a if nb else None)


def mul(a, b) -> Tensor:
    """a * b, broadcasting."""
    return Mul.apply(*as_tensors(a, b))


class Div(Function):
    """z = a / b.  dz/da = 1/b, dz/db = -a/b² = -z/b."""

    @staticmethod
    def forward(ctx, a, b):
        z = a / b
        ctx.save_for_backward(b, z)
        return z

    @staticmethod
    def backward(ctx, grad):
        b, z = ctx.saved
        ga = grad / b
        gb = -ga * z if ctx.needs_input_grad[1] else None
        return ga, gb


def div(a, b) -> Tensor:
    """a / b, broadcasting."""
    return Div.apply(*as_tensors(a, b))


class Pow(Function):
    """z = a ** b.  dz/da = b·a^(b-1), dz/db = z·ln(a) (needs a > 0)."""

    @staticmethod
    def forward(ctx, a, b):
        z = a**b
        ctx.save_for_backward(a, b, z)
        return z

    @staticmethod
    def backward(ctx, grad):
        a, b, z = ctx.saved
        na, nb = ctx.needs_input_grad
        ga = grad * b * a ** (b - 1) if na else None
        gb = grad * z * ctx.xp.log(a) if nb else None
        return ga, gb


def pow(a, b) -> Tensor:  # noqa: A001 (mirrors the operator's name)
    """a ** b, broadcasting (the gradient wrt b needs a > 0)."""
    return Pow.apply(*as_tensors(a, b))


class Neg(Function):
    """z = -a."""

    @staticmethod
    def forward(ctx, a):
        return -a

    @staticmethod
    def backward(ctx, grad):
        return -grad


def neg(x) -> Tensor:
    return Neg.apply(as_tensor(x))


class Exp(Function):
    """y = exp(x).  dy/dx = y, so backward reuses the saved output."""

    @staticmethod
    def forward(ctx, x):
        y = ctx.xp.exp(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return grad * y


def exp(x) -> Tensor:
    return Exp.apply(as_tensor(x))


class Log(Function):
    """y = ln(x).  dy/dx = 1/x."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.log(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved
        return grad / x


def log(x) -> Tensor:
    return Log.apply(as_tensor(x))


class Sqrt(Function):
    """y = √x.  dy/dx = 1/(2y)."""

    @staticmethod
    def forward(ctx, x):
        y = ctx.xp.sqrt(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return grad / (2 * y)


def sqrt(x) -> Tensor:
    return Sqrt.apply(as_tensor(x))


class Tanh(Function):
    """y = tanh(x).  dy/dx = 1 - y²."""

    @staticmethod
    def forward(ctx, x):
        y = ctx.xp.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return grad * (1 - y * y)


def tanh(x) -> Tensor:
    return Tanh.apply(as_tensor(x))


class Relu(Function):
    """y = max(x, 0).  dy/dx = 1 where x > 0, else 0 (0 at x = 0, as PyTorch)."""

    @staticmethod
    def forward(ctx, x):
        y = ctx.xp.maximum(x, 0)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return grad * (y > 0)


def relu(x) -> Tensor:
    return Relu.apply(as_tensor(x))


class Sigmoid(Function):
    """y = 1 / (1 + exp(-x)).  dy/dx = y(1 - y)."""

    @staticmethod
    def forward(ctx, x):
        xp = ctx.xp
        # split by sign so exp never overflows
        e = xp.exp(-xp.abs(x))
        y = xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return grad * y * (1 - y)


def sigmoid(x) -> Tensor:
    return Sigmoid.apply(as_tensor(x))


class Where(Function):
    """z = a where cond else b (cond: bool, not differentiable)."""

    @staticmethod
    def forward(ctx, cond, a, b):
        ctx.save_for_backward(cond)
        return ctx.xp.where(cond, a, b)

    @staticmethod
    def backward(ctx, grad):
        (cond,) = ctx.saved
        _, na, nb = ctx.needs_input_grad
        zero = ctx.xp.zeros((), dtype=grad.dtype)
        return None, (ctx.xp.where(cond, grad, zero) if na else None), (ctx.xp.where(cond, zero, grad) if nb else None)


def where(cond, a, b) -> Tensor:
    """a where cond is True, else b (all three broadcast together)."""
    a, b = as_tensors(a, b)
    return Where.apply(as_mask(cond, a, "where"), a, b)


class MaskedFill(Function):
    """z = value where mask else x.  dz/dx = 0 where mask, else 1."""

    @staticmethod
    def forward(ctx, x, mask, value=0.0):
        ctx.save_for_backward(mask)
        return ctx.xp.where(mask, ctx.xp.asarray(value, dtype=x.dtype), x)

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved
        return ctx.xp.where(mask, ctx.xp.zeros((), dtype=grad.dtype), grad), None


def masked_fill(x, mask, value: float) -> Tensor:
    """x with ``value`` wherever the bool ``mask`` (broadcastable to x's shape) is True."""
    x = as_tensor(x)
    mask = as_mask(mask, x, "masked_fill")
    if not broadcasts(mask.shape, x.shape):
        raise ShapeError(f"masked_fill: mask of shape {mask.shape} does not broadcast to the input's shape {x.shape}")
    return MaskedFill.apply(x, mask, value=value)


class Cast(Function):
    """y = x converted to ``dtype``; the gradient goes back in x's dtype."""

    @staticmethod
    def forward(ctx, x, dtype=None):
        ctx.in_dtype = x.dtype
        return x.astype(dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.astype(ctx.in_dtype)


def cast(x, dtype) -> Tensor:
    """x converted to ``dtype``; differentiable between floating dtypes."""
    x = as_tensor(x)
    if np.dtype(dtype).kind != "f":
        return Tensor._wrap(x.data.astype(dtype))
    return Cast.apply(x, dtype=np.dtype(dtype))

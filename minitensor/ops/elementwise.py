"""Elementwise ops. Inputs may broadcast; backwards return gradients in the broadcast
shape and the engine's ``sum_to`` reduces them to each input's shape."""
from __future__ import annotations

from ..autograd import Function


class Add(Function):
    """z = a + b.  dz/da = dz/db = 1."""

    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, grad):
        return grad, grad


class Sub(Function):
    """z = a - b.  dz/da = 1, dz/db = -1."""

    @staticmethod
    def forward(ctx, a, b):
        return a - b

    @staticmethod
    def backward(ctx, grad):
        return grad, (-grad if ctx.needs_input_grad[1] else None)


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


class Neg(Function):
    """z = -a."""

    @staticmethod
    def forward(ctx, a):
        return -a

    @staticmethod
    def backward(ctx, grad):
        return -grad


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


class Cast(Function):
    """y = x converted to ``dtype``; the gradient goes back in x's dtype."""

    @staticmethod
    def forward(ctx, x, dtype=None):
        ctx.in_dtype = x.dtype
        return x.astype(dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.astype(ctx.in_dtype)

"""Matrix products: batched matmul, and the fused linear layer y = xW + b."""
from __future__ import annotations

from ..amp import autocast_dtype, cast_once
from ..backend import matmul as _matmul
from ..autograd import Function
from ..errors import ShapeError
from ..tensor import Tensor, as_tensor, as_tensors
from .elementwise import Cast


def _swap(a):
    """Transpose the last two axes."""
    return a.swapaxes(-1, -2)


class Products:
    """The three array steps of the ops below, plain: a product, a bias added in place, and column
    sums. A faster route of an op overrides them (``minitensor/speed/products.py``)."""

    @staticmethod
    def product(a, b, out_dtype=None):
        """a @ b over the last two axes, written in ``out_dtype`` (default: as it comes)."""
        c = _matmul(a, b)
        return c if out_dtype is None or c.dtype == out_dtype else c.astype(out_dtype)

    @staticmethod
    def add_bias(xp, y, b):
        """y += b in place (a float32 bias is added to a 16-bit y in float32 and rounded once); y."""
        y += b
        return y

    @staticmethod
    def column_sums(xp, g, dtype=None):
        """Σ over the rows of a 2-D g, in ``dtype`` (default: g's)."""
        return g.sum(axis=0, dtype=dtype)


class Matmul(Products, Function):
    """C = A @ B over the last two axes; leading axes broadcast.

    dC/dA · G = G @ Bᵀ,  dC/dB · G = Aᵀ @ G (then the engine sums broadcast axes away).
    Both inputs have at least 2 dimensions here (functional.matmul handles 1-D).
    """

    @staticmethod
    def forward(ctx, a, b):
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(
                f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not align "
                f"(last axis of the first is {a.shape[-1]}, second-to-last of the second is {b.shape[-2]})"
            )
        ctx.save_for_backward(a, b)
        return ctx.fn.product(a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved
        na, nb = ctx.needs_input_grad
        mm = ctx.fn.product
        return (mm(grad, _swap(b)) if na else None), (mm(_swap(a), grad) if nb else None)


def _autocast(*tensors):
    """Inside ``minitensor.amp.autocast``: floating inputs of a matrix product cast to its dtype
    (a differentiable cast, so float32 parameters get float32 gradients), each tensor once per
    block however many products read it (``amp.cast_once``)."""
    dt = autocast_dtype()
    if dt is None:
        return tensors
    return tuple(t if t is None or t.dtype == dt or t.dtype.kind != "f"
                 else cast_once(t, lambda t: Cast.apply(t, dtype=dt)) for t in tensors)


def _weight_in(w, dtype):
    """A weight's array in ``dtype`` under autocast (cast once per block: amp.cast_once), else as it is."""
    return w if dtype is None or w.dtype == dtype else cast_once(w, lambda a: a.astype(dtype))


def _autocast_input(x, *weights):
    """(x, dtype) for a linear layer inside ``amp.autocast``: the activation as a differentiable
    cast (once per block) and the dtype the weights are cast to inside the op, so that the
    parameters stay themselves and get their gradients in their own dtype; (x, None) outside."""
    dt = autocast_dtype() if all(w.dtype.kind == "f" for w in weights) else None
    if dt is not None:
        (x,) = _autocast(x)
    return x, dt


def matmul(a, b) -> Tensor:
    """a @ b: matrix product over the last two axes, leading axes broadcast.

    A 1-D operand is treated as a row (first) or column (second) vector, and that axis
    is dropped from the result, as in NumPy. Runs in 16-bit inside ``amp.autocast``.
    """
    a, b = _autocast(*as_tensors(a, b))
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: both operands need at least 1 dimension, got shapes {a.shape} and {b.shape}")
    if a.ndim == 1 and b.ndim == 1:
        if a.shape != b.shape:
            raise ShapeError(f"matmul: vectors of shapes {a.shape} and {b.shape} differ in length")
        return Matmul.apply(a.reshape(1, -1), b.reshape(-1, 1)).reshape(())
    if a.ndim == 1:
        out = Matmul.apply(a.reshape(1, -1), b)
        return out.reshape(out.shape[:-2] + out.shape[-1:])
    if b.ndim == 1:
        return Matmul.apply(a, b.reshape(-1, 1)).reshape(a.shape[:-1])
    return Matmul.apply(a, b)


class Linear(Products, Function):
    """y = x W + b for x (..., in), W (in, out), b (out,) — the paper's xW + b; with
    ``transposed``, W is stored (out, in) and y = x Wᵀ + b (the tied output layer h Eᵀ, whose
    gradient then comes out in E's own layout).

    The leading axes are flattened, so dW = xᵀ G is one matrix product (not a batch of
    them summed afterwards): dx = G Wᵀ, dW = x₂ᵈᵀ G₂ᵈ, db = Σ G over rows;
    transposed: dx = G W, dW = G₂ᵈᵀ x₂ᵈ.
    """

    @staticmethod
    def forward(ctx, x, w, b=None, transposed=False, dtype=None):
        n_in, n_out = (w.shape[::-1] if transposed else w.shape) if w.ndim == 2 else (None, None)
        if n_in is None or x.shape[-1] != n_in:
            layout = "(out_features, in_features) with transposed=True" if transposed else "(in_features, out_features)"
            raise ShapeError(
                f"linear: input of shape {tuple(x.shape)} does not fit weight of shape {tuple(w.shape)} "
                f"(the weight must be {layout} with in_features = {x.shape[-1]})"
            )
        if b is not None and b.shape != (n_out,):
            raise ShapeError(f"linear: bias of shape {tuple(b.shape)} does not fit weight of shape {tuple(w.shape)}")
        ctx.w_dtype, ctx.b_dtype = w.dtype, None if b is None else b.dtype
        w = _weight_in(w, dtype)
        ctx.save_for_backward(x, w)
        ctx.transposed = transposed
        y = ctx.fn.product(x.reshape(-1, x.shape[-1]), w.T if transposed else w)  # one product over all rows
        if b is not None:
            ctx.fn.add_bias(ctx.xp, y, b)
        return y.reshape(x.shape[:-1] + (n_out,))

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved
        nx, nw, nb = ctx.needs_input_grad
        g2 = grad.reshape(-1, grad.shape[-1])
        x2 = x.reshape(-1, x.shape[-1])
        mm = ctx.fn.product
        gx = mm(g2, w if ctx.transposed else w.T).reshape(x.shape) if nx else None
        # dW and db in the parameters' own dtype (float32 under autocast), each rounded once
        gw = (mm(g2.T, x2, ctx.w_dtype) if ctx.transposed else mm(x2.T, g2, ctx.w_dtype)) if nw else None
        gb = ctx.fn.column_sums(ctx.xp, g2, ctx.b_dtype) if nb else None
        return gx, gw, gb


def linear(x, weight, bias=None, transposed: bool = False) -> Tensor:
    """x @ weight + bias for x (..., in), weight (in, out), bias (out,) -> (..., out); with
    ``transposed``, x @ weight.T + bias for a weight stored (out, in), such as a tied
    embedding (V, d) used as the output layer: its gradient then needs no transposed copy.
    Runs in 16-bit inside ``amp.autocast``: the input is cast, the weight is cast inside and the
    bias added as it is, so their gradients come out in float32 without a cast of their own."""
    x = as_tensor(x)
    weight, bias = as_tensor(weight, x), None if bias is None else as_tensor(bias, x)
    x, dt = _autocast_input(x, weight)
    return Linear.apply(x, weight, bias, transposed=transposed, dtype=dt)

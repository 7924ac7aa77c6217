"""Matrix products: batched matmul, and the fused linear layer y = xW + b."""
from __future__ import annotations

from ..autograd import Function, ShapeError


def _swap(a):
    """Transpose the last two axes."""
    return a.swapaxes(-1, -2)


class Matmul(Function):
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
        return a @ b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved
        na, nb = ctx.needs_input_grad
        return (grad @ _swap(b) if na else None), (_swap(a) @ grad if nb else None)


class Linear(Function):
    """y = x W + b for x (..., in), W (in, out), b (out,) — the paper's xW + b.

    The leading axes are flattened, so dW = xᵀ G is one matrix product (not a batch of
    them summed afterwards): dx = G Wᵀ, dW = x₂ᵈᵀ G₂ᵈ, db = Σ G over rows.
    """

    @staticmethod
    def forward(ctx, x, w, b=None):
        if w.ndim != 2 or x.shape[-1] != w.shape[0]:
            raise ShapeError(
                f"linear: input of shape {tuple(x.shape)} does not fit weight of shape {tuple(w.shape)} "
                f"(the weight must be (in_features, out_features) with in_features = {x.shape[-1]})"
            )
        if b is not None and b.shape != (w.shape[1],):
            raise ShapeError(f"linear: bias of shape {tuple(b.shape)} does not fit weight of shape {tuple(w.shape)}")
        ctx.save_for_backward(x, w)
        y = x.reshape(-1, x.shape[-1]) @ w  # one GEMM over all rows
        if b is not None:
            y += b
        return y.reshape(x.shape[:-1] + (w.shape[1],))

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved
        nx, nw, nb = ctx.needs_input_grad
        g2 = grad.reshape(-1, grad.shape[-1])
        gx = (g2 @ w.T).reshape(x.shape) if nx else None
        gw = x.reshape(-1, x.shape[-1]).T @ g2 if nw else None
        gb = ctx.xp.ones(g2.shape[0], dtype=g2.dtype) @ g2 if nb else None  # column sums as one GEMV
        return gx, gw, gb

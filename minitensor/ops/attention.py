"""Scaled dot-product attention (Vaswani et al., 2017, Section 3.2.1, equation 1)."""
from __future__ import annotations

import numpy as np

from ..autograd import Function, ShapeError
from .dropout import dropout_mask
from .reduce import sum_last
from .softmax import softmax_array


class ScaledDotProductAttention(Function):
    """out = dropout(softmax(Q Kᵀ / √d_k + mask)) V for q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv).

    ``mask``: bool, broadcastable to (..., Tq, Tk), True where a query may attend to a
    key; a query that may attend to nothing gets all-zero weights (not NaN).

    Backward, with P the weights, A = dropout(P) and G the output's cotangent:
        dV = Aᵀ G,  dA = G Vᵀ,  dP = dA ⊙ dropmask,
        dS = P ⊙ (dP - Σ_k dP ⊙ P) · 1/√d_k,  dQ = dS K,  dK = dSᵀ Q.
    One op rather than five, so a fused kernel can stand in for it on the GPU.
    The weights P are kept on ``ctx.weights`` for callers that want to look at them.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask=None, dropout_p=0.0, training=False):
        xp = ctx.xp
        if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
            raise ShapeError(
                f"scaled_dot_product_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not fit "
                "(need q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv))"
            )
        scale = q.dtype.type(1.0 / (q.shape[-1] ** 0.5))
        s = (q * scale) @ k.swapaxes(-1, -2)  # scaling q (Tq x d) is cheaper than the scores (Tq x Tk)
        if mask is not None:
            if mask.dtype != bool:
                raise ShapeError(f"scaled_dot_product_attention: mask must be bool (True = may attend), got dtype {mask.dtype}")
            try:
                full = np.broadcast_shapes(mask.shape, s.shape)
            except ValueError:
                full = None
            if full != s.shape:
                raise ShapeError(
                    f"scaled_dot_product_attention: mask of shape {tuple(mask.shape)} does not broadcast to the "
                    f"scores' shape {tuple(s.shape)} (..., Tq, Tk)"
                )
            # an additive bias built on the mask's own (small, broadcast) shape: 0 or -inf
            bias = xp.zeros(mask.shape, dtype=s.dtype)
            bias[~mask] = -xp.inf
            s += bias
        p = softmax_array(xp, s, -1)
        dm = dropout_mask(xp, p.shape, dropout_p, p.dtype) if (training and dropout_p > 0) else None
        a = p * dm if dm is not None else p
        ctx.scale = scale
        ctx.weights = p
        ctx.save_for_backward(q, k, v, p, dm)
        return a @ v

    @staticmethod
    def backward(ctx, grad):
        q, k, v, p, dm = ctx.saved
        nq, nk, nv = ctx.needs_input_grad[:3]
        a = p * dm if dm is not None else p
        gv = a.swapaxes(-1, -2) @ grad if nv else None
        gp = grad @ v.swapaxes(-1, -2)
        if dm is not None:
            gp *= dm
        gs = gp * p
        gs -= p * sum_last(ctx.xp, gs)  # P ⊙ (dP - Σ_k dP ⊙ P)
        gs *= ctx.scale
        gq = gs @ k if nq else None
        gk = gs.swapaxes(-1, -2) @ q if nk else None
        return gq, gk, gv, None

"""Scaled dot-product attention (Vaswani et al., 2017, Section 3.2.1, equation 1).

:class:`ScaledDotProductAttention` is the plain xp code below (the reference: any device,
dtype, shape and mask). The speed layer registers faster routes of it (``minitensor/speed/``):
on CuPy arrays the fused mask + softmax kernel of ``minitensor/cuda/softmax.cu`` between the same
products, or the FlashAttention-style kernels of ``minitensor/cuda/flash_attention.cu``, which
never store the Tq x Tk weights; :func:`attention_op` says which runs for given arrays.
"""
from __future__ import annotations

import numpy as np

from .. import backend, routes
from ..autograd import Function
from ..errors import ShapeError
from ..tensor import Tensor, as_mask, as_tensor
from .dropout import check_probability, dropout_keep, dropped
from .linalg import Products
from .precision import compute_dtype
from .shape import broadcasts
from .softmax import softmax_array, softmax_backward


def masked_softmax_reference(xp, scores, mask, scale: float = 1.0, overwrite: bool = False):
    """softmax(scale · scores) over the last axis where ``mask`` (bool, True = may attend)
    allows; 0 elsewhere, and all zeros on a row where nothing is allowed. 16-bit scores are
    exponentiated in float32; the weights come back in the scores' dtype. ``overwrite``:
    the scores are a temporary that may be scaled and masked in place."""
    s = scores.astype(compute_dtype(scores.dtype), copy=not overwrite)
    if scale != 1.0:
        s *= s.dtype.type(scale)
    if mask is not None:
        # an additive bias built on the mask's own (small, broadcast) shape: 0 or -inf
        s += xp.where(mask, s.dtype.type(0), s.dtype.type(-np.inf))
    return softmax_array(xp, s, -1).astype(scores.dtype, copy=False)


def _check(q, k, v, mask, scores_shape):
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(
            f"scaled_dot_product_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not fit "
            "(need q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv))"
        )
    if mask is not None:
        if mask.dtype != bool:
            raise ShapeError(f"scaled_dot_product_attention: mask must be bool (True = may attend), got dtype {mask.dtype}")
        if not broadcasts(mask.shape, scores_shape):
            raise ShapeError(
                f"scaled_dot_product_attention: mask of shape {tuple(mask.shape)} does not broadcast to the "
                f"scores' shape {tuple(scores_shape)} (..., Tq, Tk)"
            )


def scores_shape(q, k) -> tuple:
    """(..., Tq, Tk): the shape of Q Kᵀ, leading axes broadcast."""
    return tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2])) + (q.shape[-2], k.shape[-2])


class ScaledDotProductAttention(Function):
    """out = dropout(softmax(Q Kᵀ / √d_k + mask)) V for q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv).

    ``mask``: bool, broadcastable to (..., Tq, Tk), True where a query may attend to a
    key; a query that may attend to nothing gets all-zero weights (not NaN).

    Backward, with P the weights, A = dropout(P) and G the output's cotangent:
        dV = Aᵀ G,  dA = G Vᵀ,  dP = dA ⊙ keep / (1-p_drop),
        dS = P ⊙ (dP - Σ_k dP ⊙ P) · 1/√d_k,  dQ = dS K,  dK = dSᵀ Q.
    One op rather than five, so fused kernels can stand in for it on the GPU: the masked
    softmax and its backward are the two methods ``softmax`` and ``softmax_backward``, which
    the fused kernel's op overrides (and ``product``, the matrix product, a faster route's). The
    weights P are kept on ``ctx.weights``; ``need_weights``
    says the caller reads them (a route that never forms them does not apply then).
    """

    product = staticmethod(Products.product)

    @staticmethod
    def softmax(xp, scores, mask):
        """P = softmax(S + mask) over the last axis; the scores are a temporary."""
        return masked_softmax_reference(xp, scores, mask, overwrite=True)

    @staticmethod
    def softmax_backward(xp, p, gp, scale: float):
        """d(Q Kᵀ) = P ⊙ (dP - Σ_k dP ⊙ P) · scale."""
        gs = softmax_backward(xp, p, gp)
        gs *= gs.dtype.type(scale)
        return gs

    @staticmethod
    def forward(ctx, q, k, v, mask=None, dropout_p=0.0, training=False, need_weights=False):
        xp = ctx.xp
        scale = 1.0 / (q.shape[-1] ** 0.5)
        dropping = training and dropout_p > 0
        ctx.scale = scale
        # scale q (Tq x d) before the product: cheaper than scaling the scores (Tq x Tk), and in
        # float16 the unscaled q·k overflows √d_k times sooner
        product = ctx.fn.product
        scores = product(q * q.dtype.type(scale), k.swapaxes(-1, -2))
        p = ctx.fn.softmax(xp, scores, mask)
        keep = dropout_keep(xp, p.shape, dropout_p) if dropping else None
        a = dropped(p, keep, dropout_p) if dropping else p
        ctx.weights, ctx.dropout_p = p, dropout_p
        ctx.save_for_backward(q, k, v, p, keep)
        return product(a, v)

    @staticmethod
    def backward(ctx, grad):
        nq, nk, nv = ctx.needs_input_grad[:3]
        q, k, v, p, keep = ctx.saved
        product = ctx.fn.product
        a = dropped(p, keep, ctx.dropout_p) if keep is not None else p
        gv = product(a.swapaxes(-1, -2), grad) if nv else None
        gp = product(grad, v.swapaxes(-1, -2))
        if keep is not None:
            dropped(gp, keep, ctx.dropout_p, in_place=True)
        gs = ctx.fn.softmax_backward(ctx.xp, p, gp, ctx.scale)
        gq = product(gs, k) if nq else None
        gk = product(gs.swapaxes(-1, -2), q) if nk else None
        return gq, gk, gv, None



def attention_op(q, k, v, dropout_p: float = 0.0, training: bool = False, need_weights: bool = False):
    """The class that computes equation 1 for these arrays: the reference, or the first route of
    the speed layer that applies to them (:mod:`minitensor.routes`)."""
    params = dict(dropout_p=dropout_p, training=training, need_weights=need_weights)
    return routes.choose(ScaledDotProductAttention, backend.array_module(q), [q, k, v, None], params)


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p: float = 0.0, training: bool = False,
                                 return_weights: bool = False):
    """softmax(q kᵀ/√d + mask) v for q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv) -> (..., Tq, dv).

    mask: bool, broadcastable to (..., Tq, Tk); True = may attend. With
    ``return_weights=True`` also returns the attention weights (..., Tq, Tk), detached.
    """
    check_probability("scaled_dot_product_attention: dropout_p", dropout_p, one_allowed=False)
    q = as_tensor(q)
    k, v = as_tensor(k, q), as_tensor(v, q)
    m = None if mask is None else as_mask(mask, q, "scaled_dot_product_attention")
    _check(q, k, v, m, scores_shape(q, k))
    out, ctx = ScaledDotProductAttention.apply_with_context(q, k, v, m, dropout_p=dropout_p, training=training,
                                                            need_weights=return_weights)
    if return_weights:
        return out, Tensor._wrap(ctx.weights)
    return out

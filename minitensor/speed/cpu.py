"""The NumPy routes: the reference ops' own formulas, with their row reductions and row-by-row
passes taken the faster ways of :mod:`minitensor.speed.rows`.

Each route is a subclass of its op that overrides only what it computes differently, and is
registered for NumPy arrays at the bottom of this file. ``tests/minitensor/speed/test_cpu.py``
proves each equal to its op. Why these are faster: ``docs/design.md``, "Short rows" and "Rows in
blocks".
"""
from __future__ import annotations

import math

import numpy as np

from .. import optim, routes, threads
from ..ops import attention, loss, norm, reduce, softmax
from ..ops.precision import compute_dtype
from .rows import max_kept, rowwise, sum_kept, sum_last


# ------------------------------------------------------------------ the softmax family's two steps
def exp_normalise(xp, x, axis, overwrite: bool = False):
    """:func:`minitensor.ops.softmax.exp_normalise`, its row max and row sum by ``rows``."""
    m = xp.maximum(max_kept(xp, x, axis), xp.finfo(x.dtype).min)
    e = xp.subtract(x, m, out=x if overwrite and x.ndim else None)
    e = xp.exp(e, out=e) if e.ndim else xp.exp(e)
    return e, sum_kept(xp, e, axis), m


def softmax_array(xp, x, axis: int):
    """:func:`minitensor.ops.softmax.softmax_array` on :func:`exp_normalise`."""
    e, s, _ = exp_normalise(xp, x, axis)
    e *= 1 / xp.maximum(s, xp.finfo(x.dtype).tiny)
    return e


def softmax_backward(xp, y, g, axis: int = -1):
    """:func:`minitensor.ops.softmax.softmax_backward`, its row sum by ``rows``."""
    gy = g * y
    gy -= y * sum_kept(xp, gy, axis)
    return gy


class Softmax(softmax.Softmax):
    @staticmethod
    def forward(ctx, x, axis=-1):
        y = softmax_array(ctx.xp, x, axis)
        ctx.axis = axis
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return softmax_backward(ctx.xp, y, grad, ctx.axis)


class LogSoftmax(softmax.LogSoftmax):
    @staticmethod
    def forward(ctx, x, axis=-1):
        _, s, m = exp_normalise(ctx.xp, x, axis)
        y = x - m
        y -= ctx.xp.log(s)
        ctx.axis = axis
        ctx.save_for_backward(y)
        return y


class LogSumExp(reduce.LogSumExp):
    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        ctx.axes, ctx.keepdims = reduce.normalize_axes(axis, x.ndim), keepdims
        _, s, m = exp_normalise(ctx.xp, x, ctx.axes)
        y = m + ctx.xp.log(s)
        ctx.save_for_backward(x, y)
        return y if keepdims else y.reshape([n for i, n in enumerate(x.shape) if i not in ctx.axes])


class ScaledDotProductAttention(attention.ScaledDotProductAttention):
    @staticmethod
    def softmax(xp, scores, mask):
        s = scores.astype(compute_dtype(scores.dtype), copy=False)
        if mask is not None:
            s += xp.where(mask, s.dtype.type(0), s.dtype.type(-np.inf))
        return softmax_array(xp, s, -1).astype(scores.dtype, copy=False)

    @staticmethod
    def softmax_backward(xp, p, gp, scale: float):
        gs = softmax_backward(xp, p, gp)
        gs *= gs.dtype.type(scale)
        return gs


# ------------------------------------------------------------------ layer norm
def layer_norm(xp, x, weight, bias, eps):
    """:func:`minitensor.ops.norm.layer_norm_reference`, its row means by BLAS row sums."""
    work = compute_dtype(x.dtype)
    xw = x.astype(work, copy=False)
    inv_d = work.type(1.0 / x.shape[-1])
    xhat = xw - sum_last(xp, xw) * inv_d
    r = 1 / xp.sqrt(sum_last(xp, xhat * xhat) * inv_d + work.type(eps))
    xhat *= r
    if weight is None:
        y = xhat + bias if bias is not None else xhat.copy()
    else:
        y = xhat * weight
        if bias is not None:
            y += bias
    return y.astype(x.dtype, copy=False), xhat, r


def layer_norm_backward(xp, grad, xhat, r, weight, need=(True, True, True)):
    """:func:`minitensor.ops.norm.layer_norm_backward_reference` in products: the row means of
    ĝ and ĝ ⊙ x̂ are g and g ⊙ x̂ times γ, the sums over rows a vector of ones times the rows,
    one BLAS pass each."""
    gx = gw = gb = None
    g = grad.astype(xhat.dtype, copy=False)
    d = g.shape[-1]
    inv_d = g.dtype.type(1.0 / d)
    g_xhat = g * xhat if need[0] or (need[1] and weight is not None) else None
    if need[0]:
        if weight is not None:
            w = weight.astype(g.dtype, copy=False)
            proj = (g_xhat @ w)[..., None] * inv_d              # mean(ĝ ⊙ x̂)
            mean_gh = (g @ w)[..., None] * inv_d                # mean(ĝ)
            gh = g * w
        else:
            proj = sum_last(xp, g_xhat) * inv_d
            mean_gh = sum_last(xp, g) * inv_d
            gh = g.copy()
        gh -= mean_gh
        gh -= xhat * proj
        gh *= r
        gx = gh.astype(grad.dtype, copy=False)
    ones = xp.ones(g.size // d, dtype=g.dtype)
    if need[1] and weight is not None:
        gw = (ones @ g_xhat.reshape(-1, d)).astype(weight.dtype, copy=False)
    if need[2]:
        gb = (ones @ g.reshape(-1, d)).astype(grad.dtype, copy=False)
    return gx, gw, gb


class LayerNorm(norm.LayerNorm):
    normalise = staticmethod(layer_norm)
    normalise_backward = staticmethod(layer_norm_backward)


# ------------------------------------------------------------------ cross entropy
def smoothed_nll(xp, x, t, eps: float, overwrite: bool = False):
    """:func:`minitensor.ops.loss.smoothed_nll` on :func:`exp_normalise`, the mean logit by a BLAS row sum."""
    picked = xp.take_along_axis(x, t, axis=-1)
    mean_x = sum_last(xp, x) / x.dtype.type(x.shape[-1]) if eps else None
    e, sum_e, m = exp_normalise(xp, x, -1, overwrite=overwrite)
    log_s = xp.log(sum_e)
    nll = log_s - (picked - m)
    if eps:
        nll = (1 - eps) * nll + eps * (log_s - (mean_x - m))
    return e, sum_e, nll


class CrossEntropy(loss.CrossEntropy):
    """Both row-by-row steps a block of rows at a time, in cache, on every core (``rowwise``)."""

    @staticmethod
    def smoothed_nll(xp, x, t, eps: float, overwrite: bool = False):
        return rowwise(smoothed_nll, xp, x, t, eps=eps, overwrite=overwrite, into={0: x} if overwrite else None)

    @staticmethod
    def smoothed_softmax_grad(xp, e, scale, w, eps_over_v: float, overwrite: bool = False):
        return rowwise(loss.smoothed_softmax_grad, xp, e, scale, w, eps_over_v=eps_over_v, overwrite=overwrite,
                       into={0: e} if overwrite else None)


# ------------------------------------------------------------------ Adam
class Adam(optim.Adam):
    """Every parameter cut into cache-sized pieces, the pieces shared among worker threads
    (:mod:`minitensor.threads`): the update's dozen passes then stay in cache and run on every
    core. Each piece takes the reference's arithmetic in the same order, into scratch arrays made
    once per thread. (A parameter that is not contiguous is updated whole, by the reference.)"""

    def _update_all(self, items: list) -> None:  # self: the Adam being stepped (see Optimizer.step)
        pieces, whole = [], []
        for w, g, state in items:
            if not w.flags.c_contiguous:
                whole.append((w, g, state))
                continue
            m, v = self._moments(w, state)
            flat = [a.reshape(-1) for a in (w, g, m, v)]  # views (g is copied if it is not contiguous)
            pieces += [tuple(a[s] for a in flat) for s in threads.pieces(w.size)]
        optim.Adam._update_all(self, whole)

        def work(_, share):
            scratch = {}
            for w, g, m, v in share:
                tmp = scratch.get(w.dtype)
                if tmp is None:
                    tmp = scratch[w.dtype] = np.empty((2, threads.PIECE), w.dtype)
                adam_in_place(self, w, g, m, v, tmp[0, :w.size], tmp[1, :w.size])

        threads.share(work, pieces)


def adam_in_place(opt: optim.Adam, w, g, m, v, tmp, tmp_g) -> None:
    """:meth:`minitensor.optim.Adam._update` on one piece, every step into ``w``, ``m``, ``v``
    or the scratch ``tmp`` (and ``tmp_g`` for the scaled gradient): no array made."""
    b1, b2 = opt.betas
    if opt._grad_scale != 1.0:
        g = np.multiply(g, g.dtype.type(opt._grad_scale), out=tmp_g)
    if opt.weight_decay:
        g = g + opt.weight_decay * w
    np.multiply(g, 1 - b1, out=tmp)
    m *= b1
    m += tmp                                   # m = b1 m + (1-b1) g
    np.multiply(g, g, out=tmp)
    tmp *= 1 - b2
    v *= b2
    v += tmp                                   # v = b2 v + (1-b2) g²
    np.sqrt(v, out=tmp)
    tmp *= 1 / math.sqrt(opt._c2)
    tmp += opt.eps                             # √(v / (1-b2^t)) + eps
    np.divide(m, tmp, out=tmp)
    tmp *= opt.lr / opt._c1
    w -= tmp                                   # w -= lr · m̂ / (√v̂ + eps)


def on_numpy(xp, arrays, params) -> bool:
    return xp is np


ROUTES = [routes.register(op, route, on_numpy) for op, route in (
    (softmax.Softmax, Softmax), (softmax.LogSoftmax, LogSoftmax), (reduce.LogSumExp, LogSumExp),
    (attention.ScaledDotProductAttention, ScaledDotProductAttention), (norm.LayerNorm, LayerNorm),
    (loss.CrossEntropy, CrossEntropy), (optim.Adam, Adam),
)]

"""Cross entropy with label smoothing and ignored targets, fused with log_softmax."""
from __future__ import annotations

import numpy as np

from ..autograd import Function
from ..errors import ShapeError
from ..tensor import Tensor, as_ids, as_tensor
from .precision import compute_dtype
from .reduce import sum_last


_REDUCTIONS = ("mean", "sum", "none")


class CrossEntropy(Function):
    """Loss of logits (..., V) against integer targets (...), classes on the LAST axis.

    With p = softmax(logits) and label smoothing ε, the target distribution is
    q = (1-ε)·onehot(t) + ε/V (PyTorch's definition: the true class gets 1-ε+ε/V), and
        loss_i = -Σ_c q_c log p_c = (1-ε)·(-log p_t) + ε·mean_c(-log p_c).
    Targets equal to ``ignore_index`` contribute nothing; "mean" divides by the number of
    targets that are not ignored. The gradient wrt the logits is w_i · (p - q).

    16-bit logits are widened to float32 for the log-sum-exp; the loss is float32 then, and
    the logits' gradient comes back in their own dtype. On the GPU nothing here waits for the
    device: the target range is checked on the host only, and the count of targets stays a
    device scalar.
    """

    @staticmethod
    def forward(ctx, logits, target, ignore_index=None, label_smoothing=0.0, reduction="mean"):
        xp = ctx.xp
        if target.dtype.kind not in "iu":
            raise ShapeError(f"cross_entropy: target must hold integer class ids, got dtype {target.dtype}")
        if logits.shape[:-1] != target.shape:
            raise ShapeError(
                f"cross_entropy: logits of shape {tuple(logits.shape)} need a target of shape "
                f"{tuple(logits.shape[:-1])} (classes on the last axis), got {tuple(target.shape)}"
            )
        V = logits.shape[-1]
        valid = target != ignore_index if ignore_index is not None else xp.ones(target.shape, dtype=bool)
        safe_t = xp.where(valid, target, 0)
        on_host = xp is np
        if on_host and target.size and valid.any():
            lo, hi = int(safe_t[valid].min()), int(safe_t[valid].max())
            if lo < 0 or hi >= V:
                raise ShapeError(f"cross_entropy: targets must lie in [0, {V}) (or equal ignore_index), got values from {lo} to {hi}")
        # log p = (x - m) - log Σ exp(x - m). The picked and mean shifted logits are read
        # first, then exp overwrites the shifted logits (one big temporary, not two) and is
        # kept for the backward. Row sums are products with a vector of ones (``sum_last``):
        # BLAS runs them on every core, where a reduction would use one.
        work = compute_dtype(logits.dtype)
        ctx.logits_dtype = logits.dtype
        x = logits.astype(work, copy=False)
        shifted = x - x.max(axis=-1, keepdims=True)
        picked = xp.take_along_axis(shifted, safe_t[..., None], axis=-1)[..., 0]
        eps = label_smoothing
        mean_shifted = sum_last(xp, shifted)[..., 0] / work.type(V) if eps else None
        e = xp.exp(shifted, out=shifted)
        sum_e = sum_last(xp, e)
        lse = xp.log(sum_e)[..., 0]
        nll = lse - picked
        # with smoothing, mean_c(-log p_c) = lse - mean_c(x_c - m)
        loss = (1 - eps) * nll + eps * (lse - mean_shifted) if eps else nll
        loss = xp.where(valid, loss, 0).astype(work, copy=False)
        count = valid.sum()
        ctx.count = int(count) if on_host else count.astype(work)  # a device scalar on the GPU
        ctx.reduction, ctx.eps = reduction, eps
        ctx.save_for_backward(e, sum_e, safe_t, valid)
        if reduction == "none":
            return loss
        if reduction == "sum":
            return loss.sum()
        if on_host:
            return loss.sum() / work.type(ctx.count) if ctx.count else xp.asarray(xp.nan, dtype=work)
        return xp.where(count > 0, loss.sum() / xp.maximum(ctx.count, 1), xp.nan).astype(work)

    @staticmethod
    def backward(ctx, grad):
        e, sum_e, t, valid = ctx.saved
        xp = ctx.xp
        if ctx.reduction == "none":
            w = grad
        elif ctx.reduction == "sum":
            w = xp.broadcast_to(grad, t.shape)
        else:
            w = xp.broadcast_to(grad / xp.maximum(ctx.count, 1), t.shape)
        w = (w * valid)[..., None].astype(e.dtype, copy=False)
        # g = w · (p - q) = w/Σe · e - w·ε/V - w·(1-ε)·onehot(t): two passes over the (…, V)
        # array, written into e itself when this is its last use
        g = xp.multiply(e, w / sum_e, out=e if ctx.last_use else None)
        V = g.shape[-1]
        if ctx.eps:
            g -= w * (ctx.eps / V)
        flat, w_flat = g.reshape(-1, V), w.reshape(-1)
        flat[xp.arange(flat.shape[0]), t.reshape(-1)] -= (1 - ctx.eps) * w_flat
        return g.astype(ctx.logits_dtype, copy=False), None


def cross_entropy(logits, target, ignore_index: int | None = None, label_smoothing: float = 0.0,
                  reduction: str = "mean") -> Tensor:
    """Cross entropy of ``logits`` (..., V) against integer ``target`` (...), classes on the last axis.

    label_smoothing ε: PyTorch's definition (true class 1-ε+ε/V, every class ε/V).
    ignore_index: targets with this value count for nothing; "mean" averages over the rest.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    logits = as_tensor(logits)
    target = as_ids(target, logits)
    return CrossEntropy.apply(logits, target, ignore_index=ignore_index, label_smoothing=label_smoothing,
                              reduction=reduction)

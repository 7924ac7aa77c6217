"""Cross entropy with label smoothing and ignored targets, fused with log_softmax."""
from __future__ import annotations

import numpy as np

from ..autograd import Function
from ..errors import GraphError, ShapeError
from ..tensor import Tensor, as_ids, as_tensor
from .precision import compute_dtype
from .softmax import exp_normalise


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

    ``overwrite``: the logits are a temporary that nothing reads after this op, so e = exp(x - m)
    is computed in their memory and, in the backward, the gradient in e's: the largest arrays
    of a translation model's step exist once instead of three times. Such a loss can be
    backpropagated only once.

    The two row-by-row steps, the loss with its softmax and the gradient from that softmax, are
    the methods ``smoothed_nll`` and ``smoothed_softmax_grad``, which a faster route overrides.
    """

    @staticmethod
    def smoothed_nll(xp, x, t, eps: float, overwrite: bool = False):
        """(e, Σe, loss) for each row of the logits x and its target t (:func:`smoothed_nll`)."""
        return smoothed_nll(xp, x, t, eps, overwrite)

    @staticmethod
    def smoothed_softmax_grad(xp, e, scale, w, eps_over_v: float, overwrite: bool = False):
        """w · (p - ε/V) for each row (:func:`smoothed_softmax_grad`)."""
        return smoothed_softmax_grad(xp, e, scale, w, eps_over_v, overwrite)

    @staticmethod
    def forward(ctx, logits, target, ignore_index=None, label_smoothing=0.0, reduction="mean", overwrite=False):
        xp = ctx.xp
        valid, safe_t = checked_targets(xp, logits, target, ignore_index)
        work = compute_dtype(logits.dtype)
        ctx.logits_dtype = logits.dtype
        x = logits.astype(work, copy=False)
        eps = label_smoothing
        e, sum_e, loss = ctx.fn.smoothed_nll(xp, x, safe_t[..., None], eps, overwrite)
        loss = xp.where(valid, loss[..., 0], 0).astype(work, copy=False)
        ctx.reduction, ctx.eps, ctx.overwrite = reduction, eps, overwrite
        ctx.save_for_backward(e, sum_e, safe_t, valid)
        return reduce_loss(ctx, xp, loss, valid, work)

    @staticmethod
    def backward(ctx, grad):
        e, sum_e, t, valid = ctx.saved
        xp = ctx.xp
        spend_once(ctx, "the saved softmax")
        w = row_weights(ctx, xp, grad, valid)[..., None].astype(e.dtype, copy=False)
        # g = w · (p - q) = w/Σe · e - w·ε/V - w·(1-ε)·onehot(t)
        V = e.shape[-1]
        g = ctx.fn.smoothed_softmax_grad(xp, e, w / sum_e, w, ctx.eps / V, ctx.overwrite)
        flat, w_flat = g.reshape(-1, V), w.reshape(-1)
        flat[xp.arange(flat.shape[0]), t.reshape(-1)] -= (1 - ctx.eps) * w_flat
        return g.astype(ctx.logits_dtype, copy=False), None


def checked_targets(xp, logits, target, ignore_index):
    """(valid, safe targets) for logits (..., V) and integer targets (...): ignored entries
    are not valid and read class 0. Shapes and dtype are checked; the range of the targets on
    the host only (on a GPU that would wait for the device)."""
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
    if xp is np and target.size and valid.any():
        lo, hi = int(safe_t[valid].min()), int(safe_t[valid].max())
        if lo < 0 or hi >= V:
            raise ShapeError(f"cross_entropy: targets must lie in [0, {V}) (or equal ignore_index), got values from {lo} to {hi}")
    return valid, safe_t


def spend_once(ctx, what: str) -> None:
    """With ``overwrite``, a backward writes the gradient over ``what``: a second one is refused."""
    if ctx.overwrite:
        if getattr(ctx, "spent", False):
            raise GraphError(f"cross_entropy(..., overwrite=True): the backward already wrote the gradient over "
                             f"{what}; such a loss can be backpropagated only once")
        ctx.spent = True


def reduce_loss(ctx, xp, loss, valid, work):
    """The per-target ``loss`` reduced as ``ctx.reduction`` says ("mean" over the valid targets:
    NaN when there is none); keeps the count in ``ctx.count`` for :func:`row_weights`."""
    count = valid.sum()
    ctx.count = int(count) if xp is np else count.astype(work)  # a device scalar on the GPU
    if ctx.reduction == "none":
        return loss
    if ctx.reduction == "sum":
        return loss.sum()
    if xp is np:
        return loss.sum() / work.type(ctx.count) if ctx.count else xp.asarray(xp.nan, dtype=work)
    return xp.where(count > 0, loss.sum() / xp.maximum(ctx.count, 1), xp.nan).astype(work)


def row_weights(ctx, xp, grad, valid):
    """d(reduced loss)/d(each target's loss) times the upstream ``grad``: the weight w of each
    row's gradient w·(p - q); 0 for ignored targets."""
    if ctx.reduction == "none":
        w = grad
    elif ctx.reduction == "sum":
        w = xp.broadcast_to(grad, valid.shape)
    else:
        w = xp.broadcast_to(grad / xp.maximum(ctx.count, 1), valid.shape)
    return w * valid


def smoothed_nll(xp, x, t, eps: float, overwrite: bool = False):
    """(e, Σe, loss) for logits x (..., V) and targets t (..., 1), with m = max x and e = exp(x - m):

        log p = (x - m) - log Σe,  so  -log p_t = log Σe - (x_t - m),  and with smoothing
        loss = (1-ε)·(-log p_t) + ε·mean_c(-log p_c),  mean_c(-log p_c) = log Σe - (mean_c x_c - m).

    Every term is shifted by m, so stays small. The picked and mean logits are read first; then
    e, the one big temporary, kept for the backward (in x's memory with ``overwrite``)."""
    picked = xp.take_along_axis(x, t, axis=-1)
    mean_x = x.mean(axis=-1, keepdims=True) if eps else None
    e, sum_e, m = exp_normalise(xp, x, -1, overwrite=overwrite)
    log_s = xp.log(sum_e)
    loss = log_s - (picked - m)
    if eps:
        loss = (1 - eps) * loss + eps * (log_s - (mean_x - m))
    return e, sum_e, loss


def smoothed_softmax_grad(xp, e, scale, w, eps_over_v: float, overwrite: bool = False):
    """w · (p - ε/V) = (w/Σe) ⊙ e - w·ε/V, row by row (``scale`` = w/Σe): the gradient of the
    smoothed loss before the true class's -(1-ε)·w. ``overwrite``: computed in e's memory."""
    g = xp.multiply(e, scale, out=e if overwrite else None)
    if eps_over_v:
        g -= w * eps_over_v
    return g


def cross_entropy(logits, target, ignore_index: int | None = None, label_smoothing: float = 0.0,
                  reduction: str = "mean", overwrite: bool = False) -> Tensor:
    """Cross entropy of ``logits`` (..., V) against integer ``target`` (...), classes on the last axis.

    label_smoothing ε: PyTorch's definition (true class 1-ε+ε/V, every class ε/V).
    ignore_index: targets with this value count for nothing; "mean" averages over the rest.
    overwrite: the logits are a temporary nothing reads afterwards; their memory is reused
    (forward and backward), and the loss can be backpropagated only once.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    logits = as_tensor(logits)
    target = as_ids(target, logits)
    return CrossEntropy.apply(logits, target, ignore_index=ignore_index, label_smoothing=label_smoothing,
                              reduction=reduction, overwrite=overwrite)

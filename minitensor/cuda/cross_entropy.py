"""Launcher for the fused label-smoothed cross-entropy kernels of ``cross_entropy.cu``.

:class:`FusedCrossEntropy` is the op on this route; :func:`minitensor.functional.cross_entropy`
takes it where the kernels apply, and the plain xp reference, :class:`minitensor.ops.loss.CrossEntropy`,
elsewhere; tests compare the two.
"""
from __future__ import annotations

import numpy as np

from ..ops.loss import CrossEntropy, checked_targets, reduce_loss, row_weights, spend_once
from ..ops.precision import compute_dtype
from .build import PACK, acc_dtype, array_module, ctype, kernel, packable

SOURCE = "cross_entropy.cu"
WARPS = 8  # 256 threads per row: a row of 37000 float32 logits is 37 loads of 16 bytes per thread


def applies(dtype, shape: tuple) -> bool:
    """Whether the kernels take logits of this dtype and shape (..., V)."""
    return ctype(dtype) is not None and len(shape) >= 1 and 0 < shape[-1] < 2**31 and all(n > 0 for n in shape)


def names(t: str, packed: bool = True) -> tuple[str, str]:
    """The instantiations (forward, backward) for storage type ``t``, reading 16-byte packs or,
    with ``packed`` False, one value at a time."""
    p = PACK[t] if packed else 1
    return f"cross_entropy_forward<{t}, {WARPS}, {p}>", f"cross_entropy_backward<{t}, {p}>"


def instantiations() -> list[str]:
    return [name for t in PACK for packed in (True, False) for name in names(t, packed)]


def _rows(x):
    return int(np.prod(x.shape[:-1], dtype=np.int64)), int(x.shape[-1])


def forward(logits, target, ignore_index: int | None, eps: float):
    """(loss per row, shape ``logits.shape[:-1]``; log Σ exp per row, flat), both in the
    accumulation dtype: loss = (1-ε)·(lse - x_t) + ε·(lse - mean x), 0 where target is ignored."""
    xp = array_module(logits)
    logits = xp.ascontiguousarray(logits)
    target = xp.ascontiguousarray(target, dtype=np.int64)
    rows, V = _rows(logits)
    acc = acc_dtype(logits.dtype)
    loss, lse = xp.empty(rows, dtype=acc), xp.empty(rows, dtype=acc)
    k = kernel(SOURCE, names(ctype(logits.dtype), packable(logits))[0], xp)
    ignored = ignore_index is not None
    k((rows,), (32 * WARPS,), (logits, target, loss, lse, np.int64(rows), np.int32(V),
                               np.int64(ignore_index if ignored else 0), np.int32(ignored), np.float64(eps)))
    return loss.reshape(logits.shape[:-1]), lse


def backward(logits, target, lse, weight, eps: float, out=None):
    """g = w·(softmax(x) - ε/V) - w·(1-ε)·onehot(t), row by row (``weight`` per row, 0 for an
    ignored row), in the logits' dtype; ``out`` may be the logits themselves (written in place)."""
    xp = array_module(logits)
    logits = xp.ascontiguousarray(logits)
    target = xp.ascontiguousarray(target, dtype=np.int64)
    rows, V = _rows(logits)
    acc = acc_dtype(logits.dtype)
    weight = xp.ascontiguousarray(weight, dtype=acc).reshape(-1)
    grad = xp.empty_like(logits) if out is None else out
    k = kernel(SOURCE, names(ctype(logits.dtype), packable(logits, grad))[1], xp)
    k((rows,), (32 * WARPS,), (logits, target, xp.ascontiguousarray(lse, dtype=acc), weight, grad,
                               np.int64(rows), np.int32(V), np.float64(eps)))
    return grad


class FusedCrossEntropy(CrossEntropy):
    """:class:`minitensor.ops.loss.CrossEntropy` (the same formula, arguments and reductions)
    on the fused kernels: the forward reads the logits once and saves one value per row (log
    Σ exp); the backward reads them again and writes the gradient once, over the logits
    themselves with ``overwrite`` (then the loss can be backpropagated only once)."""

    @staticmethod
    def forward(ctx, logits, target, ignore_index=None, label_smoothing=0.0, reduction="mean", overwrite=False):
        xp = ctx.xp
        valid, safe_t = checked_targets(xp, logits, target, ignore_index)
        if not logits.flags.c_contiguous:  # (the array itself otherwise: overwrite writes into it)
            logits = xp.ascontiguousarray(logits)
        loss, lse = forward(logits, target, ignore_index, label_smoothing)  # 0 where ignored (the kernel checks first)
        ctx.reduction, ctx.eps, ctx.overwrite = reduction, label_smoothing, overwrite
        ctx.save_for_backward(logits, safe_t, lse, valid)
        return reduce_loss(ctx, xp, loss, valid, compute_dtype(logits.dtype))

    @staticmethod
    def backward(ctx, grad):
        logits, t, lse, valid = ctx.saved
        spend_once(ctx, "the saved logits")
        w = row_weights(ctx, ctx.xp, grad, valid)
        return backward(logits, t, lse, w, ctx.eps, out=logits if ctx.overwrite else None), None

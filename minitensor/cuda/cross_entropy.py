"""Launcher for the fused label-smoothed cross-entropy kernels of ``cross_entropy.cu``.

The plain xp reference is :class:`minitensor.ops.loss.CrossEntropy` (``_smoothed_nll`` and
``_smoothed_softmax_grad``); tests compare them. The kernels are not routed into the op yet.
"""
from __future__ import annotations

import numpy as np

from .build import acc_dtype, array_module, ctype, kernel

SOURCE = "cross_entropy.cu"
WARPS = 8  # 256 threads per row: a row of 37000 logits is 145 loads per thread


def applies(dtype, shape: tuple) -> bool:
    """Whether the kernels take logits of this dtype and shape (..., V)."""
    return ctype(dtype) is not None and len(shape) >= 1 and 0 < shape[-1] < 2**31 and all(n > 0 for n in shape)


def names(t: str) -> tuple[str, str]:
    """The instantiations (forward, backward) for storage type ``t``."""
    return f"cross_entropy_forward<{t}, {WARPS}>", f"cross_entropy_backward<{t}>"


def instantiations() -> list[str]:
    return [name for t in ("float", "f16", "bf16", "double") for name in names(t)]


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
    k = kernel(SOURCE, names(ctype(logits.dtype))[0], xp)
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
    k = kernel(SOURCE, names(ctype(logits.dtype))[1], xp)
    k((rows,), (32 * WARPS,), (logits, target, xp.ascontiguousarray(lse, dtype=acc), weight, grad,
                               np.int64(rows), np.int32(V), np.float64(eps)))
    return grad

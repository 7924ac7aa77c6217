"""Launcher for the LayerNorm kernels of ``layer_norm.cu``.

The plain xp reference is the op's own code in :mod:`minitensor.ops.norm`
(``layer_norm_reference`` and ``layer_norm_backward_reference``); tests compare the two.
"""
from __future__ import annotations

import numpy as np

from .build import acc_dtype, array_module, ctype, items_per_lane, kernel

SOURCE = "layer_norm.cu"
WARPS = 4                 # rows per block in the forward, warps per block in the backward
MAX_ITEMS = 32            # a row of up to 32 x 32 = 1024 values lives in one warp's registers
MAX_D_FLOAT64 = 512       # the backward's shared memory, 2·WARPS·D doubles, stays under 48 KB
MAX_PARTIAL_BLOCKS = 1024  # stage 1 of the dγ/dβ reduction writes at most this many partial rows


def applies(x, weight, bias) -> bool:
    """Whether the kernels take this input (else the op runs its xp code)."""
    d = x.shape[-1] if x.ndim else 0
    return (weight is not None and bias is not None and ctype(x.dtype) is not None
            and weight.dtype == x.dtype and bias.dtype == x.dtype and x.size > 0 and d > 0
            and items_per_lane(d, MAX_ITEMS) is not None and (x.dtype != np.float64 or d <= MAX_D_FLOAT64))


def names(t: str, d: int) -> tuple[str, str, str]:
    """The instantiations (forward, backward, parameter gradients) for storage type ``t``
    (``build.ctype``) and rows of ``d`` values."""
    items = items_per_lane(d, MAX_ITEMS)
    return (f"layer_norm_forward<{t}, {items}>", f"layer_norm_backward<{t}, {items}, {WARPS}>",
            f"layer_norm_param_grads<{t}>")


def instantiations() -> list[str]:
    """Every name expression the launcher can ask for (the nvcc and NVRTC tests compile them all)."""
    out = []
    for t in ("float", "f16", "bf16", "double"):
        for items in (1, 2, 4, 8, 16, 32):
            fwd, bwd, grads = names(t, 32 * items)
            out += [fwd] + ([bwd] if t != "double" or items * 32 <= MAX_D_FLOAT64 else [])
        out.append(grads)
    return out


def forward(x, weight, bias, eps: float):
    """y, mean, rstd for x (..., D): mean and rstd (...,) in float32 (float64 for float64 x)."""
    cp = array_module(x)
    x = cp.ascontiguousarray(x)
    d = x.shape[-1]
    rows = x.size // d
    y = cp.empty_like(x)
    mean = cp.empty(x.shape[:-1], dtype=acc_dtype(x.dtype))
    rstd = cp.empty_like(mean)
    k = kernel(SOURCE, names(ctype(x.dtype), d)[0], cp)
    k(((rows + WARPS - 1) // WARPS,), (32 * WARPS,),
      (x, cp.ascontiguousarray(weight), cp.ascontiguousarray(bias), y, mean, rstd, np.int64(rows), np.int32(d),
       np.float64(eps)))
    return y, mean, rstd


def backward(dy, x, weight, mean, rstd):
    """dx, dγ, dβ; dγ and dβ through the deterministic two-stage reduction."""
    cp = array_module(x)
    dy = cp.ascontiguousarray(dy, dtype=x.dtype)
    x = cp.ascontiguousarray(x)
    d = x.shape[-1]
    rows = x.size // d
    fwd, bwd, grads = names(ctype(x.dtype), d)
    acc = acc_dtype(x.dtype)
    blocks = min((rows + WARPS - 1) // WARPS, MAX_PARTIAL_BLOCKS)
    rows_per_block = (rows + blocks - 1) // blocks
    dx = cp.empty_like(x)
    partial_dg = cp.empty((blocks, d), dtype=acc)
    partial_db = cp.empty((blocks, d), dtype=acc)
    stage1 = kernel(SOURCE, bwd, cp)
    stage1((blocks,), (32 * WARPS,),
           (dy, x, cp.ascontiguousarray(weight), mean, rstd, dx, partial_dg, partial_db, np.int64(rows), np.int32(d),
            np.int64(rows_per_block)),
           shared_mem=2 * WARPS * d * acc.itemsize)
    dgamma = cp.empty(d, dtype=x.dtype)
    dbeta = cp.empty(d, dtype=x.dtype)
    stage2 = kernel(SOURCE, grads, cp)
    stage2(((d + 127) // 128,), (128,), (partial_dg, partial_db, dgamma, dbeta, np.int32(blocks), np.int32(d)))
    return dx, dgamma, dbeta

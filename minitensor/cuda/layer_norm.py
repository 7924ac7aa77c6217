"""Launcher for the LayerNorm kernels of ``layer_norm.cu``, and the two ops on this route:
:class:`FusedLayerNorm` (LayerNorm alone) and :class:`FusedDropoutAddLayerNorm` (the post-norm
sub-layer, LayerNorm(x + Dropout(sub)), one kernel each way).

:func:`minitensor.functional.layer_norm` (by its route, :mod:`minitensor.speed.gpu`) and
:func:`minitensor.speed.fusions.dropout_add_layer_norm` take them where the kernels apply, and the plain xp reference elsewhere:
:class:`minitensor.ops.norm.LayerNorm` (``layer_norm_reference``), after ``x + dropout(sub)``
for the fused form. Tests compare the two.
"""
from __future__ import annotations

import numpy as np

from .. import random
from ..autograd import Function
from ..ops.norm import LayerNorm
from .build import acc_dtype, array_module, ctype, items_per_lane, kernel
from .dropout import seed_word, threshold

SOURCE = "layer_norm.cu"
WARPS = 4                 # rows per block in the forward, warps per block in the backward
MAX_ITEMS = 32            # a row of up to 32 x 32 = 1024 values lives in one warp's registers
MAX_D_FLOAT64 = 512       # the backward's shared memory, 2·WARPS·D doubles, stays under 48 KB
MAX_PARTIAL_BLOCKS = 1024  # stage 1 of the dγ/dβ reduction writes at most this many partial rows
# the sub-layer dtypes the fused residual form takes beside each storage type: its own, and a
# 16-bit sub-layer output beside a float32 residual stream (autocast)
SUBS = {"float": ("float", "f16", "bf16"), "f16": ("f16",), "bf16": ("bf16",), "double": ("double",)}


def applies(x, weight, bias, sub=None) -> bool:
    """Whether the kernels take this input (else the op runs its xp code); with ``sub``, the
    fused residual form x + dropout(sub), which needs sub of x's shape in a dtype of SUBS."""
    d = x.shape[-1] if x.ndim else 0
    t = ctype(x.dtype)
    return (weight is not None and bias is not None and t is not None and weight.shape == bias.shape == (d,)
            and weight.dtype == x.dtype and bias.dtype == x.dtype and x.size > 0 and d > 0
            and items_per_lane(d, MAX_ITEMS) is not None and (x.dtype != np.float64 or d <= MAX_D_FLOAT64)
            and (sub is None or (sub.shape == x.shape and ctype(sub.dtype) in SUBS[t])))


def names(t: str, d: int, s: str | None = None) -> tuple[str, str, str]:
    """The instantiations (forward, backward, parameter gradients) for storage type ``t``
    (``build.ctype``) and rows of ``d`` values; with ``s``, the fused residual form's for a
    sub-layer of type ``s``."""
    items = items_per_lane(d, MAX_ITEMS)
    grads = f"layer_norm_param_grads<{t}>"
    if s is None:
        return f"layer_norm_forward<{t}, {items}>", f"layer_norm_backward<{t}, {items}, {WARPS}>", grads
    return (f"residual_layer_norm_forward<{t}, {items}, {s}>",
            f"residual_layer_norm_backward<{t}, {items}, {WARPS}, {s}>", grads)


def instantiations() -> list[str]:
    """Every name expression the launcher can ask for (the nvcc and NVRTC tests compile them all)."""
    out = []
    for t, subs in SUBS.items():
        for s in (None,) + subs:
            for items in (1, 2, 4, 8, 16, 32):
                fwd, bwd, grads = names(t, 32 * items, s)
                out += [fwd] + ([bwd] if t != "double" or items * 32 <= MAX_D_FLOAT64 else [])
        out.append(grads)
    return out


def counters(x) -> int:
    """How many Philox numbers the fused form's mask takes for x (..., D): 4 per counter, one
    counter per lane and 4 values of a row (``keep_mask`` in layer_norm.cu)."""
    d = x.shape[-1]
    return 4 * (x.size // d) * -(-items_per_lane(d, MAX_ITEMS) // 4) * 32


def _dropout_args(xp, p: float, seed: int, offset: int) -> tuple:
    """The mask's arguments; the seed in device memory (dropout.py's seed_word)."""
    return np.uint32(threshold(p)), np.float64(1.0 / (1.0 - p)), seed_word(xp, seed), np.uint64(offset)


def forward(x, weight, bias, eps: float):
    """y, mean, rstd for x (..., D): mean and rstd (...,) in float32 (float64 for float64 x)."""
    return _forward(x, None, weight, bias, eps, ())


def residual_forward(x, sub, weight, bias, eps: float, p: float, seed: int, offset: int):
    """y = LayerNorm(z), z = x + dropout(sub) with the mask Philox draws at (``seed``,
    ``offset``): y, z (x's dtype), mean and rstd of z."""
    return _forward(x, sub, weight, bias, eps, _dropout_args(array_module(x), p, seed, offset))


def _forward(x, sub, weight, bias, eps: float, dropout_args: tuple):
    """(y, mean, rstd) for LayerNorm alone; (y, z, mean, rstd) for the fused residual form."""
    cp = array_module(x)
    x = cp.ascontiguousarray(x)
    d = x.shape[-1]
    rows = x.size // d
    y = cp.empty_like(x)
    mean = cp.empty(x.shape[:-1], dtype=acc_dtype(x.dtype))
    rstd = cp.empty_like(mean)
    z = None if sub is None else cp.empty_like(x)
    k = kernel(SOURCE, names(ctype(x.dtype), d, None if sub is None else ctype(sub.dtype))[0], cp)
    inputs = (x,) if sub is None else (x, cp.ascontiguousarray(sub))
    outputs = (y,) if sub is None else (y, z)
    k(((rows + WARPS - 1) // WARPS,), (32 * WARPS,),
      inputs + (cp.ascontiguousarray(weight), cp.ascontiguousarray(bias)) + outputs
      + (mean, rstd, np.int64(rows), np.int32(d), np.float64(eps)) + dropout_args)
    return (y, mean, rstd) if sub is None else (y, z, mean, rstd)


def backward(dy, x, weight, mean, rstd):
    """dx, dγ, dβ; dγ and dβ through the deterministic two-stage reduction."""
    return _backward(dy, x, weight, mean, rstd, None, ())


def residual_backward(dy, z, weight, mean, rstd, sub_dtype, p: float, seed: int, offset: int):
    """dz (= dx), dγ, dβ and dsub = dropout(dz) in ``sub_dtype``, with the forward's mask."""
    return _backward(dy, z, weight, mean, rstd, sub_dtype, _dropout_args(array_module(z), p, seed, offset))


def _backward(dy, x, weight, mean, rstd, sub_dtype, dropout_args: tuple):
    cp = array_module(x)
    dy = cp.ascontiguousarray(dy, dtype=x.dtype)
    x = cp.ascontiguousarray(x)
    d = x.shape[-1]
    rows = x.size // d
    fwd, bwd, grads = names(ctype(x.dtype), d, None if sub_dtype is None else ctype(sub_dtype))
    acc = acc_dtype(x.dtype)
    blocks = min((rows + WARPS - 1) // WARPS, MAX_PARTIAL_BLOCKS)
    rows_per_block = (rows + blocks - 1) // blocks
    dx = cp.empty_like(x)
    dsub = None if sub_dtype is None else cp.empty(x.shape, dtype=sub_dtype)
    partial_dg = cp.empty((blocks, d), dtype=acc)
    partial_db = cp.empty((blocks, d), dtype=acc)
    stage1 = kernel(SOURCE, bwd, cp)
    stage1((blocks,), (32 * WARPS,),
           (dy, x, cp.ascontiguousarray(weight), mean, rstd, dx) + (() if dsub is None else (dsub,))
           + (partial_dg, partial_db, np.int64(rows), np.int32(d), np.int64(rows_per_block)) + dropout_args,
           shared_mem=2 * WARPS * d * acc.itemsize)
    dgamma = cp.empty(d, dtype=x.dtype)
    dbeta = cp.empty(d, dtype=x.dtype)
    stage2 = kernel(SOURCE, grads, cp)
    stage2(((d + 127) // 128,), (128,), (partial_dg, partial_db, dgamma, dbeta, np.int32(blocks), np.int32(d)))
    return (dx, dgamma, dbeta) if dsub is None else (dx, dgamma, dbeta, dsub)


class FusedLayerNorm(LayerNorm):
    """:class:`minitensor.ops.norm.LayerNorm` (the same formula) on the kernels: the forward
    reads x once and saves x with each row's mean and r; the backward is one pass over the
    rows plus the deterministic sum of dγ and dβ."""

    @staticmethod
    def forward(ctx, x, weight=None, bias=None, eps=1e-5):
        y, mean, rstd = forward(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, weight, mean, rstd = ctx.saved
        return backward(grad, x, weight, mean, rstd)


class FusedDropoutAddLayerNorm(Function):
    """y = LayerNorm(x + Dropout(sub)) (the post-norm sub-layer, Sections 3.1 and 5.4) in one
    kernel each way, the mask drawn in the kernel (Philox at a seed and an offset from
    :func:`minitensor.random.philox_stream`) and drawn again by the backward:

        z = x + sub ⊙ keep / (1-p),  y = γ ⊙ ẑ + β
        dx = dz (LayerNorm's backward),  dsub = dz ⊙ keep / (1-p),  dγ, dβ as LayerNorm's.
    """

    @staticmethod
    def forward(ctx, sub, x, weight, bias, p=0.0, eps=1e-5):
        ctx.p, ctx.sub_dtype = p, sub.dtype
        ctx.seed, ctx.offset = random.philox_stream(counters(x)) if p > 0 else (0, 0)
        y, z, mean, rstd = residual_forward(x, sub, weight, bias, eps, p, ctx.seed, ctx.offset)
        ctx.save_for_backward(z, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, grad):
        z, weight, mean, rstd = ctx.saved
        dz, dgamma, dbeta, dsub = residual_backward(grad, z, weight, mean, rstd, ctx.sub_dtype, ctx.p, ctx.seed,
                                                    ctx.offset)
        return dsub, dz, dgamma, dbeta

"""Launcher for the fused bias + ReLU kernels of ``bias_relu.cu``, and for its bias alone.

:class:`FusedBiasRelu` is the op on this route; :func:`minitensor.speed.fusions.linear_relu`
takes it after a product without bias where the kernels apply, and
``relu(linear(x, W, b))`` (:class:`minitensor.ops.linalg.Linear`, then
:class:`minitensor.ops.elementwise.Relu`) elsewhere; tests compare the two. The bias alone
(``forward(y, b, relu=False)``) is what ``speed.products.add_bias`` runs on CuPy for every linear layer.
"""
from __future__ import annotations

import numpy as np

from ..autograd import Function
from .build import PACK, acc_dtype, array_module, ctype, kernel, packable

SOURCE = "bias_relu.cu"
WARPS = 8              # BR_WARPS in bias_relu.cu: rows taken in turn by the warps of a block
TARGET_BLOCKS = 2048   # the row ranges are sized so that the grid has about this many blocks
BIASES = {"float": ("float",), "f16": ("f16", "float"), "bf16": ("bf16", "float"), "double": ("double",)}
BLOCK = 256            # the forward's threads per block


def applies(dtype, cols: int, bias, groups: int = 1) -> bool:
    """Whether the kernels take a product of ``dtype`` with ``cols`` columns and this bias
    (cols,), or (groups, cols) for a product of that many groups: a bias in the product's
    dtype, or float32 beside a 16-bit product (autocast's parameters)."""
    t, b = ctype(dtype), ctype(bias.dtype)
    shape = (cols,) if groups == 1 else (groups, cols)
    return (t is not None and b in BIASES[t] and bias.shape == shape and 0 < cols < 2**31
            and 0 < groups <= 65535)


def names(t: str, b: str, relu: bool = True, packed: bool = True) -> tuple[str, str, str]:
    """The instantiations (forward, backward, the bias gradient's stage 2) for a product of
    storage type ``t`` and a bias of type ``b``; ``relu`` False: the forward of the bias alone;
    ``packed`` False: the forward one value at a time (V = 1)."""
    acc = "double" if t == "double" else "float"
    v = PACK[t] if packed else 1
    return (f"bias_relu_forward<{t}, {b}, {'true' if relu else 'false'}, {v}>", f"bias_relu_backward<{t}>",
            f"column_sums<{acc}, {b}>")


def instantiations() -> list[str]:
    return sorted({name for t, bs in BIASES.items() for b in bs for relu in (True, False) for packed in (True, False)
                   for name in names(t, b, relu, packed)})


def _grid(rows: int, cols: int) -> tuple[tuple[int, int], int]:
    """The grid (column tiles, row ranges) and the rows per range."""
    tiles = -(-cols // 32)
    parts = max(1, min(-(-rows // WARPS), TARGET_BLOCKS // tiles, 65535))
    per = -(-rows // parts)
    return (tiles, -(-rows // per)), per


def forward(y, bias, relu: bool = True):
    """y ← max(0, y + bias) in place (``relu`` False: y ← y + bias); returns y, which must be
    C-contiguous. ``bias`` (cols,), or (groups, cols) for y (groups, rows, cols), each group of
    rows with its own bias row."""
    xp = array_module(y)
    if y.size == 0:
        return y
    cols = y.shape[-1]
    groups = 1 if bias.ndim == 1 else bias.shape[0]
    t = ctype(y.dtype)
    packed = packable(y)
    packs = y.size // (PACK[t] if packed else 1)
    k = kernel(SOURCE, names(t, ctype(bias.dtype), relu, packed)[0], xp)
    k((min(-(-packs // BLOCK), 2**31 - 1),), (BLOCK,),
      (y, xp.ascontiguousarray(bias), np.int64(packs), np.int32(cols), np.int64(y.size // groups)))
    return y


def backward(dy, y, bias_dtype):
    """dp = dy ⊙ [y > 0] in y's dtype, and db = Σ over rows of dp in ``bias_dtype`` (the
    deterministic two-stage reduction)."""
    xp = array_module(y)
    dy = xp.ascontiguousarray(dy, dtype=y.dtype)
    cols = y.shape[-1]
    rows = y.size // cols
    grid, per = _grid(rows, cols)
    t = ctype(y.dtype)
    forward_name, stage1, stage2 = names(t, ctype(bias_dtype))
    dp = xp.empty_like(y)
    partial = xp.empty((grid[1], cols), dtype=acc_dtype(y.dtype))
    kernel(SOURCE, stage1, xp)(grid, (32 * WARPS,), (dy, y, dp, partial, np.int64(rows), np.int32(cols),
                                                     np.int64(per)))
    db = xp.empty(cols, dtype=bias_dtype)
    kernel(SOURCE, stage2, xp)((-(-cols // 128),), (128,), (partial, db, np.int32(grid[1]), np.int32(cols)))
    return dp, db


class FusedBiasRelu(Function):
    """y = max(0, p + b) for a product p (..., cols) and a bias b (cols,), in p's dtype, in place
    of p (a fresh product).  dp = dy ⊙ [y > 0],  db = Σ_rows dp (in b's dtype): the backward
    reads dy and y once and needs no bool mask."""

    @staticmethod
    def forward(ctx, p, b):
        y = forward(p if p.flags.c_contiguous else array_module(p).ascontiguousarray(p), b)
        ctx.save_for_backward(y)
        ctx.b_dtype = b.dtype
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return backward(grad, y, ctx.b_dtype)

"""Row reductions and row-by-row passes, the NumPy way that is fast.

Each function returns what its one-line reference says; it only takes a faster road there.
The routes of :mod:`minitensor.speed.cpu` call them where the reference ops reduce rows; the
figures behind these choices are in ``docs/design.md``.
"""
from __future__ import annotations

import threading

import numpy as np

from .. import threads

# Up to this many entries per row ``max_last`` folds the columns one by one; above it
# NumPy's own reduction is faster (docs/design.md, "Short rows").
SHORT_ROW = 64


def max_last(xp, a):
    """Reference: ``a.max(axis=-1, keepdims=True)``.

    NumPy reduces a short last axis row by row, which for the 10-30 keys of an attention row
    costs far more than the arithmetic; taking the elementwise maximum of column after column
    runs n vectorised passes over all rows at once instead.
    """
    n = a.shape[-1] if a.ndim else 0
    if xp.__name__ != "numpy" or not 1 < n <= SHORT_ROW:
        return a.max(axis=-1, keepdims=True)
    m = a[..., 0].copy()
    for j in range(1, n):
        xp.maximum(m, a[..., j], out=m)
    return m[..., None]


def sum_last(xp, a):
    """Reference: ``a.sum(axis=-1, keepdims=True)``.

    On NumPy a matrix-vector product with a vector of ones runs in BLAS (on every core) where
    ``sum`` makes a strided reduction on one: faster for the short rows of attention, layer
    norm and the loss.
    """
    if xp.__name__ == "numpy" and a.dtype.kind == "f" and a.ndim >= 1:
        return (a @ xp.ones(a.shape[-1], dtype=a.dtype))[..., None]
    return a.sum(axis=-1, keepdims=True)


def _is_last(axis, ndim: int) -> bool:
    return ndim > 0 and (axis in (-1, ndim - 1) or axis == (ndim - 1,))


def max_kept(xp, a, axis):
    """Reference: ``a.max(axis=axis, keepdims=True)``; over the last axis, ``max_last``."""
    return max_last(xp, a) if _is_last(axis, a.ndim) else a.max(axis=axis, keepdims=True)


def sum_kept(xp, a, axis):
    """Reference: ``a.sum(axis=axis, keepdims=True)``; over the last axis, ``sum_last``."""
    return sum_last(xp, a) if _is_last(axis, a.ndim) else a.sum(axis=axis, keepdims=True)


# ---------------------------------------------------------------------------- rows in blocks, on every core
# A block of rows holds at most this many bytes of the first array, so that a row-wise
# function's several passes over it stay in a core's L2 cache (docs/design.md, "Rows in blocks").
BLOCK_BYTES = 1 << 20
# Arrays of fewer elements are passed to the function whole, in the calling thread: they fit in
# the last-level cache already, and cutting them up would cost more than it saves.
ROWWISE_MIN = 1 << 20
_block = threading.local()  # set while a thread runs a block: a function called inside runs as it is


def rowwise(fn, xp, x, *others, into: dict | None = None, **params):
    """Reference: ``fn(xp, x, *others, **params)``, for a function that treats each row of ``x``
    (all its axes but the last) on its own and returns arrays that start with x's leading axes.

    On a large C-contiguous NumPy ``x`` the rows are cut into blocks of at most BLOCK_BYTES,
    ``fn`` runs on each block and the blocks are shared among one thread per core
    (:mod:`minitensor.threads`): the function's several passes over a block stay in the
    core's cache instead of streaming the whole array from memory each time, and NumPy's
    loops release the GIL, so the blocks run at once. Each row's result is that of the
    reference (the same operations on the same numbers). The positional ``others`` must start
    with x's leading axes and are cut with it; the keyword ``params`` (weights, scalars) go
    whole to every block. ``into`` maps the position of an output to the array it is written
    into (an input that ``fn`` computes over in place, such as ``x`` itself).
    """
    lead = x.shape[:-1]
    if (xp is not np or getattr(_block, "on", False) or x.size < ROWWISE_MIN or not lead
            or not x.flags.c_contiguous):
        return fn(xp, x, *others, **params)
    n = x.size // x.shape[-1]
    for a in others:
        if a.shape[:len(lead)] != lead:
            raise ValueError(f"rowwise: an array of shape {a.shape} does not start with the rows {lead} of x")
    flat = [x.reshape(n, x.shape[-1])] + [a.reshape((n,) + a.shape[len(lead):]) for a in others]
    per = max(1, BLOCK_BYTES // max(x.shape[-1] * x.itemsize, 1))
    blocks = [slice(i, min(i + per, n)) for i in range(0, n, per)]
    outs: list = []

    def run(rows):
        result = fn(xp, *(a[rows] for a in flat), **params)
        return result if isinstance(result, tuple) else (result,)

    def work(_, share):
        _block.on = True
        try:
            for rows in share:
                for full, part in zip(outs, run(rows)):
                    full[rows] = part
        finally:
            _block.on = False

    _block.on = True
    try:
        first = run(blocks[0])  # its results' shapes and dtypes size the outputs
    finally:
        _block.on = False
    for i, part in enumerate(first):
        target = (into or {}).get(i)
        full = target.reshape((n,) + part.shape[1:]) if target is not None else np.empty((n,) + part.shape[1:], part.dtype)
        full[blocks[0]] = part
        outs.append(full)
    threads.share(work, blocks[1:])
    results = tuple(full.reshape(lead + full.shape[1:]) for full in outs)
    return results if len(results) > 1 else results[0]


"""Matrix products and bias additions the way each device does them fastest.

Each function returns what its one-line reference says; it only takes a faster road there: on
CuPy, one cuBLAS call (:mod:`minitensor.cuda.gemm`) or one kernel pass; on NumPy, the BLAS. The
figures behind these choices are in ``docs/design.md``.
"""
from __future__ import annotations

import numpy as np


def sum_rows(xp, a, dtype=None):
    """Reference: ``a.sum(axis=0).astype(dtype)`` for a 2-D ``a`` (``dtype`` None: a's own).

    One product with a row of ones: on NumPy a GEMV of the BLAS, on every core; on CuPy one
    cuBLAS call that reads ``a`` once, row after row, summing in float32 (TF32 or not) and
    writing ``dtype``, where CuPy's own reduction along axis 0 reads down the columns. The row
    of ones is made once per device and dtype (:func:`_ones_row`), so a sum is one launch."""
    if xp is not np:
        from ..cuda import gemm  # noqa: PLC0415

        if a.ndim == 2 and gemm.applies(a.dtype, a.dtype, dtype):
            s = xp.empty(a.shape[1], a.dtype if dtype is None else dtype)  # an array of its own, not a view
            gemm.matmul(_ones_row(xp, a.shape[0], a.dtype), a, dtype, exact=True, out=s.reshape(1, -1))
            return s
        return a.sum(axis=0, dtype=dtype)
    s = xp.ones(a.shape[0], dtype=a.dtype) @ a
    return s if dtype is None or s.dtype == dtype else s.astype(dtype)


def add_bias(xp, y, b):
    """Reference: ``y += b`` in place for y (rows, cols) and b (cols,), or ``y += b[:, None]`` for
    y (n, rows, cols) and b (n, cols) (n products, each with its own bias); returns y.

    Where the kernels run (CuPy, or the emulator) a C-contiguous ``y`` takes one kernel pass
    (``cuda/bias_relu.cu`` with its ReLU off), every n products in the same launch: CuPy's
    broadcast addition ran at a fifth of the copy bandwidth."""
    from .. import cuda  # noqa: PLC0415

    if y.flags.c_contiguous and b.ndim == y.ndim - 1 and b.ndim in (1, 2) and cuda.kernels_may_run(xp):
        kernel = cuda.launcher("bias_relu")
        if kernel.applies(y.dtype, y.shape[-1], b, groups=1 if b.ndim == 1 else b.shape[0]):
            return kernel.forward(y, b, relu=False)
    y += b if b.ndim == 1 else b[:, None, :]
    return y


def block_products(xp, x, w, biases):
    """Reference: ``[x @ W_i + b_i for each i]`` for x (rows, in), w = [W_1 … W_n] (in, n out)
    and n biases (out,) or None: the Q, K and V projections of one input.

    Where the kernels run (CuPy, or the emulator), one plain GEMM x w and one bias pass over all
    n outputs, each y_i a column block of the (rows, n out) result (rows with gaps): the
    tensor-core attention kernels read such blocks in place, and on an H100 the one product took
    a third less time than a batched one. On NumPy, one batched product over the weights' column
    blocks, so that each y_i is contiguous, as NumPy's products downstream prefer."""
    from .. import cuda  # noqa: PLC0415

    n = len(biases)
    n_in, n_out = w.shape[0], w.shape[1] // n
    same = all(b is not None for b in biases) and len({b.dtype for b in biases}) == 1
    if cuda.kernels_may_run(xp):
        y = product(x, w)
        if same:
            add_bias(xp, y, xp.concatenate(biases))
        ys = [y[:, i * n_out:(i + 1) * n_out] for i in range(n)]
    else:
        y = product(x, w.reshape(n_in, n, n_out).transpose(1, 0, 2))      # (n, rows, out)
        if same:
            add_bias(xp, y, xp.stack(biases))
        ys = list(y)
    if not same:
        for y_i, b in zip(ys, biases):
            if b is not None:
                y_i += b
    return ys


def block_products_grad(xp, grads, w, rows: int):
    """Reference: Σ_i G_i W_iᵀ for w = [W_1 … W_n] (in, n out) and the n gradients G_i (rows,
    out) of :func:`block_products`' outputs, None for an output nothing used (it adds nothing).

    Where the kernels run (CuPy, or the emulator), n products added into one array (cuBLAS's
    beta = 1), each reading W_iᵀ as a view of w: on an H100 in bf16, 0.18 ms for Q, K and V of
    25600 × 512 against 0.28 for a concatenation of the G_i and one product. On NumPy, that
    concatenation (zeros for a missing G_i) and one product."""
    from .. import cuda  # noqa: PLC0415

    n = len(grads)
    n_out = w.shape[1] // n
    if not cuda.kernels_may_run(xp):
        gs = [xp.zeros((rows, n_out), w.dtype) if g is None else g for g in grads]
        return product(xp.concatenate(gs, axis=1), w.T)
    gx = None
    for i, g in enumerate(grads):
        if g is not None:
            w_t = w[:, i * n_out:(i + 1) * n_out].T       # W_iᵀ, a view of [W_1 … W_n]
            gx = product(g, w_t) if gx is None else product(g, w_t, into=gx)
    return xp.zeros((rows, w.shape[0]), w.dtype) if gx is None else gx


_ONES: dict = {}  # (device, dtype) -> the longest row of ones made there so far


def _ones_row(xp, n: int, dtype):
    """A (1, n) row of ones of ``dtype`` on the current device: a view of one kept array, made
    anew only when a longer row is asked for."""
    key = (xp.cuda.Device().id, np.dtype(dtype))
    ones = _ONES.get(key)
    if ones is None or ones.shape[1] < n:
        ones = _ONES[key] = xp.ones((1, max(n, 1024)), dtype)
    return ones[:, :n]


def product(a, b, out_dtype=None, into=None):
    """Reference: ``(a @ b).astype(out_dtype)`` (``a @ b`` when ``out_dtype`` is None), both
    operands at least 2-D; with ``into``, ``into += a @ b`` in place, returning ``into`` (a sum of
    products without a concatenation of their operands).

    On CuPy a floating product is one cuBLAS call (:mod:`minitensor.cuda.gemm`): 16-bit
    operands on tensor cores with float32 accumulation, the result written in ``out_dtype``
    and rounded once, a transposed view passed as a flag instead of copied. CuPy's own matmul
    widens batched float16 to float32, refuses batched bfloat16, and copies every operand that
    is not C-contiguous."""
    if type(a) is not np.ndarray:
        from ..cuda import gemm  # noqa: PLC0415

        if into is None and gemm.applies(a.dtype, b.dtype, out_dtype):
            return gemm.matmul(a, b, out_dtype)
        if into is not None and into.flags.c_contiguous and gemm.applies(a.dtype, b.dtype, into.dtype):
            return gemm.matmul(a, b, into.dtype, out=into, accumulate=True)  # why: cuBLAS's beta = 1, no temporary
    if into is not None:
        into += a @ b
        return into
    c = a @ b
    return c if out_dtype is None or c.dtype == out_dtype else c.astype(out_dtype)


# ---------------------------------------------------------------------------- the routes
# The products' ops with these steps in place of their plain ones (minitensor.ops.linalg.Products).
# Registered after the kernels' routes and before NumPy's (see minitensor/__init__.py).
from .. import routes  # noqa: E402
from ..ops import attention, linalg  # noqa: E402
from . import fusions  # noqa: E402


class Matmul(linalg.Matmul):
    product = staticmethod(product)


class Linear(linalg.Linear):
    product, add_bias, column_sums = staticmethod(product), staticmethod(add_bias), staticmethod(sum_rows)


class Linears(fusions.Linears):
    product, add_bias, column_sums = staticmethod(product), staticmethod(add_bias), staticmethod(sum_rows)
    products, products_grad = staticmethod(block_products), staticmethod(block_products_grad)


class ScaledDotProductAttention(attention.ScaledDotProductAttention):
    product = staticmethod(product)


def _on_cupy(xp, arrays, params) -> bool:
    return xp is not np


def _anywhere(xp, arrays, params) -> bool:
    return True


ROUTES = [
    routes.register(linalg.Matmul, Matmul, _on_cupy),                  # on NumPy, product is a @ b
    routes.register(linalg.Linear, Linear, _anywhere),                 # on NumPy too: sum_rows in BLAS
    routes.register(fusions.Linears, Linears, _anywhere),               # on NumPy too: contiguous blocks
    routes.register(attention.ScaledDotProductAttention, ScaledDotProductAttention, _on_cupy),
]

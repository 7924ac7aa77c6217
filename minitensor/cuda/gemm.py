"""Matrix products on cuBLAS directly: ``gemmEx`` for one matrix, ``gemmStridedBatchedEx`` for a
batch, from CuPy's own cuBLAS bindings.

    C[i] = op(A[i]) @ op(B[i])      for every i of the batch (broadcast, as ``matmul``)

What CuPy's ``matmul`` does not do, and this does:

* 16-bit inputs (float16, bfloat16) are read as they are and multiplied on tensor cores,
  accumulating in float32 (``CUBLAS_COMPUTE_32F``); CuPy 14.2 widens batched float16 to
  float32 first and refuses batched bfloat16;
* the result is written in the dtype asked for (``out_dtype``): a weight's gradient from
  16-bit activations comes out in float32, rounded once;
* an operand that is the transpose of a C-contiguous matrix (``swapaxes(-1, -2)`` of one) is
  passed with a transpose flag, not copied.

cuBLAS is column-major and NumPy row-major. A row-major (r, c) matrix with rows ``ld``
elements apart is, to cuBLAS, the column-major (c, r) matrix with leading dimension ``ld``:
its transpose, for free. So C = op(A) op(B) in row-major is computed as the column-major
Cᵀ = op(B)ᵀ op(A)ᵀ: B first, A second, the sizes (n, m, k) and C's leading dimension n.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..ops.precision import is_half

# alpha and beta are read from the host (cuBLAS's default pointer mode): kept alive here, their
# addresses taken once (numpy's .ctypes is slow enough to show in a host-bound update)
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_ONE = {dt: np.array(1, dt) for dt in (_F32, _F64)}
_ZERO = {dt: np.array(0, dt) for dt in (_F32, _F64)}
_ONE_AT = {dt: a.ctypes.data for dt, a in _ONE.items()}
_ZERO_AT = {dt: a.ctypes.data for dt, a in _ZERO.items()}
CUDA_TYPES = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 14}  # cudaDataType (runtime.pxd)


@lru_cache(maxsize=None)   # asked at every product: a dtype's name is slow to look up
def _cuda_type(dtype) -> int | None:
    return CUDA_TYPES.get(np.dtype(dtype).name)


def applies(a_dtype, b_dtype, out_dtype=None) -> bool:
    """Whether cuBLAS multiplies these dtypes here: both operands of one floating type (16-bit,
    float32 or float64), the output that type or, for 16-bit operands, float32."""
    if a_dtype != b_dtype or _cuda_type(a_dtype) is None:
        return False
    return out_dtype is None or out_dtype == a_dtype or (is_half(a_dtype) and out_dtype == np.float32)


def _matrix_layout(x) -> tuple[bool, int] | None:
    """How cuBLAS can read the last two axes of ``x`` (r, c) where they are: ``(transposed, ld)``
    when its rows are contiguous (ld = the row stride) or its columns are (a transposed view: ld
    = the column stride); None when neither is (a copy must be made)."""
    r, c = x.shape[-2:]
    e = x.itemsize
    s0, s1 = x.strides[-2:]
    if (c == 1 or s1 == e) and (r == 1 or (s0 > 0 and s0 % e == 0 and s0 // e >= c)):
        return False, max(s0 // e if r > 1 else c, 1)
    if (r == 1 or s0 == e) and (c == 1 or (s1 > 0 and s1 % e == 0 and s1 // e >= r)):
        return True, max(s1 // e if c > 1 else r, 1)
    return None


def _batch_stride(x, batch: tuple) -> int | None:
    """The elements from one matrix of ``x``'s batch to the next, when its leading axes are one
    axis of uniform, non-negative stride (0: one matrix broadcast); else None."""
    kept = [(n, s) for n, s in zip(batch, x.strides[:-2]) if n > 1]
    if all(s >= 0 and s % x.itemsize == 0 for _, s in kept) and \
            all(kept[i][1] == kept[i + 1][1] * kept[i + 1][0] for i in range(len(kept) - 1)):
        return kept[-1][1] // x.itemsize if kept else 0
    return None


def _operand(cupy, x, batch: tuple):
    """``x`` broadcast to ``batch + x.shape[-2:]`` as cuBLAS reads it: ``(x, transposed, ld,
    batch stride)``, ``x`` itself where its matrices and its batch can be read in place, else
    a C-contiguous copy, whose own stride goes with it (never the view's: a copy's layout is
    its own)."""
    if batch:
        x = cupy.broadcast_to(x, batch + x.shape[-2:])
    layout = _matrix_layout(x)
    stride = _batch_stride(x, batch) if batch else 0
    if layout is None or stride is None:
        x = cupy.ascontiguousarray(x)
        r, c = x.shape[-2:]
        return x, False, max(c, 1), r * c if batch else 0
    return (x, *layout, stride)


def matmul(a, b, out_dtype=None, exact: bool = False, out=None, accumulate: bool = False):
    """``a @ b`` over the last two axes, leading axes broadcast, written in ``out_dtype``
    (default: the operands' dtype) by one cuBLAS call; CuPy arrays of a type :func:`applies`
    takes, at least 2-D each. ``exact``: float32 operands are multiplied in float32 even while
    TF32 is on (a sum written as a product with ones must not round its summands to TF32).
    ``out``: a C-contiguous array of the result's shape and dtype to write into (a view of a
    caller's array of another shape, say), returned. ``accumulate``: ``out += a @ b`` (cuBLAS's
    beta = 1: the sum is formed in float32 and rounded once into ``out``'s dtype)."""
    cupy, linalg, cublas = _libraries()
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"gemm.matmul: shapes {a.shape} and {b.shape} do not align")
    out_dtype = a.dtype if out_dtype is None else np.dtype(out_dtype)
    if not applies(a.dtype, b.dtype, out_dtype):
        raise TypeError(f"gemm.matmul: cuBLAS here multiplies one floating type (16-bit into float32 too), "
                        f"not {a.dtype} @ {b.dtype} -> {out_dtype}")
    plain = a.ndim == 2 and b.ndim == 2   # one matrix each (most calls): no batch to broadcast
    batch = () if plain else tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    (m, k), n = a.shape[-2:], b.shape[-1]
    if out is not None and (out.shape != batch + (m, n) or out.dtype != out_dtype or not out.flags.c_contiguous):
        raise ValueError(f"gemm.matmul: out must be a C-contiguous {out_dtype} array of shape {batch + (m, n)}, "
                         f"not {out.dtype} {out.shape}")
    if accumulate and out is None:
        raise ValueError("gemm.matmul: accumulate=True adds into out, which is missing")
    c = cupy.empty(batch + (m, n), out_dtype) if out is None else out
    count = int(np.prod(batch)) if batch else 1
    if c.size == 0:
        return c
    if k == 0:
        if not accumulate:
            c.fill(0)
        return c
    a, trans_a, lda, stride_a = _operand(cupy, a, batch)
    b, trans_b, ldb, stride_b = _operand(cupy, b, batch)
    if a.dtype.itemsize == 8:
        compute = cublas.CUBLAS_COMPUTE_64F
    elif a.dtype == np.float32 and not exact and linalg.get_compute_type(np.float32) == linalg.COMPUTE_TYPE_TF32:
        compute = cublas.CUBLAS_COMPUTE_32F_FAST_TF32       # set_tf32(True): float32 on TF32 tensor cores
    else:
        compute = cublas.CUBLAS_COMPUTE_32F                 # 16-bit in, float32 accumulation
    scalar = _F64 if a.dtype.itemsize == 8 else _F32
    one = _ONE_AT[scalar]
    beta = one if accumulate else _ZERO_AT[scalar]
    op_a = cublas.CUBLAS_OP_T if trans_a else cublas.CUBLAS_OP_N
    op_b = cublas.CUBLAS_OP_T if trans_b else cublas.CUBLAS_OP_N
    type_in, type_out = _cuda_type(a.dtype), _cuda_type(out_dtype)
    handle = cupy.cuda.get_cublas_handle()
    algo = cublas.CUBLAS_GEMM_DEFAULT_TENSOR_OP if a.dtype.itemsize <= 4 else cublas.CUBLAS_GEMM_DEFAULT
    if count == 1:
        cublas.gemmEx(handle, op_b, op_a, n, m, k, one, b.data.ptr, type_in, ldb,
                      a.data.ptr, type_in, lda, beta, c.data.ptr, type_out, n, compute, algo)
    else:
        cublas.gemmStridedBatchedEx(handle, op_b, op_a, n, m, k, one,
                                    b.data.ptr, type_in, ldb, stride_b, a.data.ptr, type_in, lda, stride_a,
                                    beta, c.data.ptr, type_out, n, m * n, count, compute, algo)
    return c


_LIBRARIES: tuple = ()


def _libraries():
    """(cupy, cupy's linalg routines, CuPy's cuBLAS bindings), imported on first use (the
    module imports without CuPy)."""
    global _LIBRARIES
    if not _LIBRARIES:
        import cupy  # noqa: PLC0415
        from cupy._core import _routines_linalg as linalg  # noqa: PLC0415
        from cupy_backends.cuda.libs import cublas  # noqa: PLC0415

        _LIBRARIES = (cupy, linalg, cublas)
    return _LIBRARIES

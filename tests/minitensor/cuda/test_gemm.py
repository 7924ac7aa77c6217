"""Matrix products on cuBLAS (``minitensor/cuda/gemm.py``), on the strict CuPy double, whose
``gemmEx`` and ``gemmStridedBatchedEx`` read and write device memory column-major at the
addresses, leading dimensions and strides given, as cuBLAS does: a wrong argument reads the
wrong numbers, or memory outside the arrays, and fails these tests."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitensor as mt
from minitensor import amp
from minitensor.cuda import gemm
from minitensor.speed.products import product, sum_rows

from tests.cupy_double import double

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16]
TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "float16": 4e-3, "bfloat16": 2e-2}


LAYOUTS = ("contiguous", "transposed", "strided", "gapped batch")


def _device(cp, a, layout):
    """``a`` on the device in ``layout``: itself; the transposed view of a C-contiguous copy of
    aᵀ; a view whose last two axes are both strided (every other row and column of a larger
    array), which cuBLAS cannot read as it is; or a view whose batch entries lie apart by more
    than a matrix (every other entry of a larger batch). ``True``/``False``: transposed or not."""
    layout = {True: "transposed", False: "contiguous"}.get(layout, layout)
    if layout == "contiguous":
        return cp.asarray(a)
    if layout == "transposed":
        return cp.asarray(np.ascontiguousarray(np.swapaxes(a, -1, -2))).swapaxes(-1, -2)
    if layout == "strided":
        big = np.zeros(a.shape[:-2] + (2 * a.shape[-2], 2 * a.shape[-1]), a.dtype)
        big[..., ::2, ::2] = a
        return cp.asarray(big)[..., ::2, ::2]
    if not a.shape[:-2]:
        return cp.asarray(a)
    big = np.zeros(a.shape[:-3] + (2 * a.shape[-3],) + a.shape[-2:], a.dtype)
    big[..., ::2, :, :] = a
    return cp.asarray(big)[..., ::2, :, :]


@st.composite
def products(draw):
    m, k, n = (draw(st.integers(1, 7)) for _ in range(3))
    batch = draw(st.sampled_from([(), (3,), (2, 3)]))
    a_batch = draw(st.sampled_from([batch, batch[1:], tuple(1 for _ in batch)]))
    b_batch = draw(st.sampled_from([batch, batch[1:]]))
    return (a_batch + (m, k), b_batch + (k, n), draw(st.sampled_from(LAYOUTS)), draw(st.sampled_from(LAYOUTS)),
            draw(st.sampled_from(DTYPES)), draw(st.booleans()))


@settings(max_examples=60, deadline=None)
@given(products(), st.integers(0, 2**16))
def test_a_product_on_cublas_is_the_exact_product_rounded_once(cupy_double, case, seed):
    """Every dtype, broadcast batches, operands transposed, strided in their last two axes or
    with gaps between batch entries: within the output type's rounding of the float64 product;
    16-bit operands into float32 within float32's. (The double refuses a call whose matrices
    run outside their allocation or whose output overlaps an input or itself.)"""
    a_shape, b_shape, ta, tb, dtype, widen = case
    out = np.dtype(np.float32) if widen and dtype.itemsize == 2 else None
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal(a_shape).astype(dtype), rng.standard_normal(b_shape).astype(dtype)
    got = cupy_double.asnumpy(product(_device(cupy_double, a, ta), _device(cupy_double, b, tb), out))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert got.shape == exact.shape and got.dtype == (out or dtype)
    tol = TOLERANCE[(out or dtype).name] * max(1.0, np.sqrt(a_shape[-1]))
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_transposed_operands_and_a_shared_batch_make_one_call_and_no_copy(cupy_double, dtype):
    """The attention products' shapes: (B, H, T, d) @ (B, H, T, d)ᵀ and Aᵀ @ G. One cuBLAS call
    each, no copy, no cast: the transposes are flags."""
    rng = np.random.default_rng(0)
    q, k = (cupy_double.asarray(rng.standard_normal((2, 4, 5, 8)).astype(dtype)) for _ in range(2))
    before = double.launches()
    s = product(q, k.swapaxes(-1, -2))
    g = product(s.swapaxes(-1, -2), q)
    made = double.launches() - before
    assert made == {"gemmStridedBatchedEx": 2}, made
    assert s.shape == (2, 4, 5, 5) and g.shape == (2, 4, 5, 8) and s.dtype == g.dtype == dtype


def test_a_16bit_product_into_float32_is_not_rounded_to_16_bits(cupy_double):
    """A weight's gradient from bfloat16 activations: written in float32, it keeps the bits a
    bfloat16 result would lose (2⁻⁹ below 1 is not a bfloat16 number)."""
    a = np.full((1, 2), 1.0, np.float32).astype(BF16)
    b = np.array([[1.0], [2.0**-9]], np.float32).astype(BF16)
    wide = product(cupy_double.asarray(a), cupy_double.asarray(b), np.float32)
    narrow = product(cupy_double.asarray(a), cupy_double.asarray(b))
    assert float(wide[0, 0]) == 1.0 + 2.0**-9 and float(narrow[0, 0]) == 1.0


def test_tf32_mode_asks_cublas_for_tf32_and_rounds_the_inputs(cupy_double):
    """With ``set_tf32(True)`` a float32 product runs in cuBLAS's TF32 mode: 1 + 2⁻¹² is read
    as 1 (TF32 keeps 10 mantissa bits)."""
    a = cupy_double.asarray(np.array([[1.0 + 2.0**-12]], np.float32))
    b = cupy_double.asarray(np.array([[1.0]], np.float32))
    try:
        mt.cuda.set_tf32(True)
        assert float(product(a, b)[0, 0]) == 1.0
    finally:
        mt.cuda.set_tf32(False)
    assert float(product(a, b)[0, 0]) == 1.0 + 2.0**-12


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_a_sum_over_rows_is_one_cublas_call_reading_rows_and_exact_to_its_output_type(cupy_double, dtype):
    """A bias's gradient: sum_rows is one product with a kept row of ones (one launch, however
    many rows, no fill once the row exists) into an array of its own, summed in float32 or wider
    and rounded once: within
    the output type's rounding of the float64 sum, for C-contiguous and transposed arrays."""
    rng = np.random.default_rng(0)
    out = np.dtype(np.float32) if dtype.itemsize == 2 else None
    for rows, transposed in ((300, False), (7, True), (1, False)):
        a = rng.standard_normal((rows, 6)).astype(dtype)
        x = _device(cupy_double, a, transposed)
        sum_rows(cupy_double, x, out)            # the row of ones, made at most once
        before = double.launches()
        got = sum_rows(cupy_double, x, out)
        assert double.launches() - before == {"gemmEx": 1}
        assert got.base is None   # an array of its own: the engine keeps it as the bias's gradient, uncopied
        exact = a.astype(np.float64).sum(axis=0)
        got = cupy_double.asnumpy(got)
        assert got.shape == (6,) and got.dtype == (out or dtype)
        tol = TOLERANCE[(out or dtype).name] * np.sqrt(rows)
        np.testing.assert_allclose(got.astype(np.float64), exact, rtol=tol, atol=tol)


def test_a_sum_over_rows_stays_float32_while_tf32_is_on(cupy_double):
    """The ones of sum_rows must not round the summands: with TF32 on, 1000 rows of 1 + 2⁻¹²
    (TF32 reads each as 1) still sum to 1000 + 1000·2⁻¹², not 1000."""
    a = cupy_double.asarray(np.full((1000, 2), 1.0 + 2.0**-12, np.float32))
    try:
        mt.cuda.set_tf32(True)
        got = cupy_double.asnumpy(sum_rows(cupy_double, a))
    finally:
        mt.cuda.set_tf32(False)
    np.testing.assert_allclose(got, 1000 * (1.0 + 2.0**-12), rtol=1e-6)


def test_gemm_refuses_mixed_operands_it_does_not_take(cupy_double):
    a = cupy_double.asarray(np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="one floating type"):
        gemm.matmul(a, a.astype(np.float16))
    assert not gemm.applies(np.float32, np.float32, np.float16) and gemm.applies(BF16, BF16, np.float32)
    assert product(a, a.astype(np.float64)).dtype == np.float64     # CuPy's own matmul then


def test_linear_under_autocast_gives_float32_parameter_gradients_and_casts_each_weight_once(cupy_double):
    """Two products of one weight in one autocast block: the weight is cast once, and its
    gradient and the bias's come out float32 with no cast of their own (the products and the
    reduction write float32)."""
    rng = np.random.default_rng(0)
    w = mt.tensor(rng.standard_normal((8, 4)).astype(np.float32), device="cuda", requires_grad=True)
    b = mt.tensor(rng.standard_normal(4).astype(np.float32), device="cuda", requires_grad=True)
    x = mt.tensor(rng.standard_normal((3, 8)).astype(np.float32), device="cuda")
    with amp.autocast("bfloat16"):
        before = double.launches()
        y = mt.functional.linear(x, w, b) + mt.functional.linear(x * 2, w, b)
        made = double.launches() - before
    assert made["astype"] == 1 + 2, made              # W once; x and 2x once each; b is added as it is
    y.sum().backward()
    assert w.grad.dtype == b.grad.dtype == np.float32
    x16 = cupy_double.asnumpy(x.data).astype(BF16).astype(np.float64)
    expected = 3 * x16.sum(axis=0)[:, None] * np.ones((1, 4))
    np.testing.assert_allclose(cupy_double.asnumpy(w.grad.data), expected, rtol=1e-6)
    np.testing.assert_allclose(cupy_double.asnumpy(b.grad.data), np.full(4, 6.0), rtol=0)


def test_one_activation_read_by_three_products_is_cast_once_per_block(cupy_double):
    """Q, K and V from one x: one cast forward, one back."""
    rng = np.random.default_rng(1)
    ws = [mt.tensor(rng.standard_normal((8, 8)).astype(np.float32), device="cuda", requires_grad=True)
          for _ in range(3)]
    x = mt.tensor(rng.standard_normal((3, 8)).astype(np.float32), device="cuda", requires_grad=True)
    with amp.autocast("float16"):
        before = double.launches()
        q, k, v = (mt.functional.linear(x, w) for w in ws)
        made = double.launches() - before
    assert made["astype"] == 1 + 3, made              # x once, each weight once
    (q.sum() + k.sum() + v.sum()).backward()
    w_sum = sum(cupy_double.asnumpy(w.data).astype(np.float16).astype(np.float64) for w in ws)
    np.testing.assert_allclose(cupy_double.asnumpy(x.grad.data), np.broadcast_to(w_sum.sum(axis=1), (3, 8)),
                               rtol=2e-3)


def test_an_operand_strided_in_its_last_two_axes_is_copied_with_its_batch_stride(cupy_double):
    """The case that once read outside its operand: (3, 4, 6)[:, :, ::2] @ (3, 3, 5). The copy
    that makes it readable has its own batch stride, which is the one cuBLAS must get."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((3, 4, 6)).astype(np.float32), rng.standard_normal((3, 3, 5)).astype(np.float32)
    got = (mt.tensor(x, device="cuda")[:, :, ::2] @ mt.tensor(w, device="cuda")).numpy()
    np.testing.assert_allclose(got, x[:, :, ::2] @ w, rtol=1e-5, atol=1e-5)

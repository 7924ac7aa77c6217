"""The hand-written CUDA kernels against their plain xp references, over many shapes (odd
sizes, rows not a multiple of the block), masks and dtypes; float64 gradchecks through the
kernels; determinism; the memory of the flash path; and the switch that turns them off.

All of these need a GPU (``gpu`` marker); without one they are skipped.
"""
import zlib

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import backend, cuda
from minitensor.ops.attention import ScaledDotProductAttention, masked_softmax_reference
from minitensor.ops.norm import LayerNorm, layer_norm_backward_reference, layer_norm_reference

pytestmark = pytest.mark.gpu

LN_SHAPES = [(1, 1), (3, 7), (5, 31), (4, 32), (9, 33), (130, 100), (257, 512), (33, 1000), (2, 3, 1024)]
# float32 against float64, and 16-bit against float32 on the same (rounded) input
TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 2e-2}


def _cp():
    return backend.cupy()


def _half(name):
    if name == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _rel(out, ref):
    """‖out - ref‖ / ‖ref‖, in float64 on the host; NaN never passes."""
    out = backend.to_numpy(out).astype(np.float64)
    ref = backend.to_numpy(ref).astype(np.float64)
    assert np.isfinite(out).all(), "non-finite values in the kernel's output"
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-30)


def _randn(rng, shape, dtype, scale=1.0):
    return _cp().asarray((rng.standard_normal(shape) * scale)).astype(dtype)


# ---------------------------------------------------------------- LayerNorm
@pytest.mark.parametrize("shape", LN_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_layer_norm_kernel_matches_the_reference(shape, dtype):
    from minitensor.cuda import layer_norm as kernel

    cp, rng = _cp(), np.random.default_rng(zlib.crc32(f"{shape}{dtype}".encode()))
    dt = _half(dtype)
    d = shape[-1]
    x, dy = _randn(rng, shape, dt, 3.0) + dt.type(0.5), _randn(rng, shape, dt)
    w, b = _randn(rng, (d,), dt) + dt.type(1), _randn(rng, (d,), dt)
    assert kernel.applies(x, w, b)
    y, mean, rstd = kernel.forward(x, w, b, 1e-5)
    dx, dw, db = kernel.backward(dy, x, w, mean, rstd)
    # reference in float64 on the very same (already rounded) inputs
    x64, dy64, w64, b64 = (a.astype(np.float64) for a in (x, dy, w, b))
    y_ref, xhat, r = layer_norm_reference(cp, x64, w64, b64, 1e-5)
    dx_ref, dw_ref, db_ref = layer_norm_backward_reference(cp, dy64, xhat, r, w64)
    assert y.dtype == dt and dx.dtype == dt and dw.dtype == dt and mean.dtype == np.float32
    for out, ref in ((y, y_ref), (dx, dx_ref), (dw, dw_ref), (db, db_ref), (rstd, r[..., 0])):
        assert _rel(out, ref) < TOL[dtype]
    np.testing.assert_allclose(backend.to_numpy(mean), backend.to_numpy(x64.mean(axis=-1)), atol=1e-5, rtol=1e-5)


def test_layer_norm_parameter_gradients_are_bitwise_deterministic():
    from minitensor.cuda import layer_norm as kernel

    rng = np.random.default_rng(0)
    x, dy = _randn(rng, (25_001, 512), np.float32), _randn(rng, (25_001, 512), np.float32)
    w, b = _randn(rng, (512,), np.float32), _randn(rng, (512,), np.float32)
    _, mean, rstd = kernel.forward(x, w, b, 1e-5)
    first = [backend.to_numpy(a) for a in kernel.backward(dy, x, w, mean, rstd)]
    for _ in range(3):
        again = [backend.to_numpy(a) for a in kernel.backward(dy, x, w, mean, rstd)]
        for a, b_ in zip(first, again):
            assert np.array_equal(a, b_)


@pytest.mark.parametrize("shape", [(3, 7), (2, 5, 33), (4, 64)], ids=str)
def test_layer_norm_op_takes_the_kernel_on_gpu_and_gradchecks_through_it(shape):
    rng = np.random.default_rng(1)
    x = mt.tensor(rng.standard_normal(shape), requires_grad=True, device="cuda")
    w = mt.tensor(rng.uniform(0.5, 1.5, shape[-1]), requires_grad=True, device="cuda")
    b = mt.tensor(rng.standard_normal(shape[-1]), requires_grad=True, device="cuda")
    _, ctx = LayerNorm.apply_with_context(x, w, b, eps=1e-5)
    assert ctx.kernel
    assert mt.gradcheck(lambda u, g, c: F.layer_norm(u, g, c), [x, w, b])
    with cuda.use_kernels(False):
        _, ctx = LayerNorm.apply_with_context(x, w, b, eps=1e-5)
        assert not ctx.kernel


# ---------------------------------------------------------------- attention masks
def _masks(rng, B, Tq, Tk):
    """None, padding (B, 1, 1, Tk) with one fully padded sequence, causal (Tq, Tk), and both
    (B, 1, Tq, Tk) with some query rows allowed nothing at all."""
    pad = rng.random((B, 1, 1, Tk)) > 0.3
    pad[0, ..., :] = False                      # a sequence with every key padded
    causal = np.tril(np.ones((Tq, Tk), dtype=bool), k=Tk - Tq)
    both = pad & causal
    both[-1, 0, 0, :] = False                   # one query row with nothing allowed
    return {"none": None, "padding": pad, "causal": causal, "both": both}


SOFTMAX_SHAPES = [(1, 1, 1, 1), (2, 3, 5, 7), (3, 2, 33, 31), (2, 4, 17, 100), (1, 2, 3, 2048)]


@pytest.mark.parametrize("shape", SOFTMAX_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "both"])
def test_fused_softmax_kernel_matches_the_reference(shape, dtype, mask_kind):
    from minitensor.cuda import softmax as kernel

    cp, rng = _cp(), np.random.default_rng(7)
    dt = _half(dtype)
    B, H, Tq, Tk = shape
    mask = _masks(rng, B, Tq, Tk)[mask_kind]
    mask = None if mask is None else cp.asarray(mask)
    s, g = _randn(rng, shape, dt, 4.0), _randn(rng, shape, dt)
    scale = 0.37
    assert kernel.applies(s.dtype, s.shape)
    p = kernel.forward(s, mask, scale)
    ds = kernel.backward(p, g, scale)
    p_ref = masked_softmax_reference(cp, s.astype(np.float64), mask, scale)
    gp = g.astype(np.float64) * p_ref
    ds_ref = (gp - p_ref * gp.sum(axis=-1, keepdims=True)) * scale
    assert _rel(p, p_ref) < TOL[dtype] and _rel(ds, ds_ref) < TOL[dtype]
    if mask is not None:  # forbidden keys get exactly 0, and rows with nothing allowed are all 0
        forbidden = ~cp.broadcast_to(mask, shape)
        assert float(cp.abs(p.astype(np.float32)[forbidden]).max(initial=0)) == 0.0


# ---------------------------------------------------------------- flash attention
FLASH_SHAPES = [(1, 1, 1, 1, 8), (2, 3, 5, 7, 16), (2, 2, 65, 33, 32), (1, 3, 130, 200, 64), (2, 1, 31, 97, 40)]


@pytest.mark.parametrize("shape", FLASH_SHAPES, ids=str)
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "both"])
def test_flash_attention_kernels_match_the_reference(shape, mask_kind):
    from minitensor.cuda import flash_attention as kernel

    cp, rng = _cp(), np.random.default_rng(11)
    B, H, Tq, Tk, d = shape
    mask = _masks(rng, B, Tq, Tk)[mask_kind]
    mask = None if mask is None else cp.asarray(mask)
    q, k, v = (_randn(rng, (B, H, T, d), np.float32) for T in (Tq, Tk, Tk))
    g = _randn(rng, (B, H, Tq, d), np.float32)
    scale = 1 / np.sqrt(d)
    assert kernel.applies(q, k, v)
    out, lse = kernel.forward(q, k, v, mask, scale)
    dq, dk, dv = kernel.backward(g, q, k, v, out, lse, mask, scale)
    # reference: float64, unfused
    q64, k64, v64, g64 = (a.astype(np.float64) for a in (q, k, v, g))
    p = masked_softmax_reference(cp, q64 @ k64.swapaxes(-1, -2), mask, scale)
    gp = g64 @ v64.swapaxes(-1, -2)
    gs = p * (gp - (gp * p).sum(axis=-1, keepdims=True)) * scale
    for got, ref in ((out, p @ v64), (dq, gs @ k64), (dk, gs.swapaxes(-1, -2) @ q64), (dv, p.swapaxes(-1, -2) @ g64)):
        assert _rel(got, ref) < 1e-4


@pytest.mark.parametrize("mode", ["flash", "fused"])
def test_attention_op_gradchecks_in_float64_through_each_kernel_route(mode):
    rng = np.random.default_rng(3)
    B, H, Tq, Tk, d = 2, 2, 5, 6, 8
    q, k, v = (mt.tensor(rng.standard_normal((B, H, T, d)), requires_grad=True, device="cuda") for T in (Tq, Tk, Tk))
    mask = mt.tensor(_masks(rng, B, Tq, Tk)["both"], device="cuda")
    cuda.set_attention(mode)
    try:
        _, ctx = ScaledDotProductAttention.apply_with_context(q, k, v, mask)
        assert ctx.route == mode
        assert mt.gradcheck(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, mask=mask), [q, k, v])
    finally:
        cuda.set_attention("auto")


def test_attention_routes_follow_the_switches():
    rng = np.random.default_rng(4)
    q, k, v = (mt.tensor(rng.standard_normal((1, 2, 600, 16)).astype(np.float32), device="cuda") for _ in range(3))
    _, ctx = ScaledDotProductAttention.apply_with_context(q, k, v)
    assert ctx.route == "flash"              # auto: long key sequences take the flash kernels
    _, ctx = ScaledDotProductAttention.apply_with_context(q, k, v, dropout_p=0.1, training=True)
    assert ctx.route == "fused"              # dropout on the weights needs them formed
    _, ctx = ScaledDotProductAttention.apply_with_context(q, k, v, need_weights=True)
    assert ctx.route == "fused" and ctx.weights is not None
    with cuda.use_kernels(False):
        _, ctx = ScaledDotProductAttention.apply_with_context(q, k, v)
        assert ctx.route == "xp"


def _attention_step_peak(T: int, mode: str) -> int:
    cp = _cp()
    rng = np.random.default_rng(5)
    q, k, v = (mt.tensor(rng.standard_normal((1, 4, T, 64)).astype(np.float32), requires_grad=True, device="cuda")
               for _ in range(3))
    cuda.set_attention(mode)
    try:
        cp.get_default_memory_pool().free_all_blocks()
        with cuda.PeakMemory() as mem:
            F.scaled_dot_product_attention(q, k, v).sum().backward()
        return mem.peak_bytes - mem.start_bytes
    finally:
        cuda.set_attention("auto")


def test_flash_attention_memory_grows_linearly_with_sequence_length():
    """Doubling T doubles the flash path's extra memory (O(T)); the fused path stores the
    T x T weights, so its memory grows about fourfold."""
    flash = [_attention_step_peak(T, "flash") for T in (1024, 2048, 4096)]
    fused = [_attention_step_peak(T, "fused") for T in (1024, 2048, 4096)]
    for a, b in zip(flash, flash[1:]):
        assert 1.5 < b / a < 2.5
    assert fused[-1] / fused[-2] > 3.0
    assert flash[-1] * 10 < fused[-1]

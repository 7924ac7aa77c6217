"""The hand-written CUDA kernels against their plain xp references, over many shapes (odd
sizes, rows not a multiple of the block), masks and dtypes; float64 gradchecks through the
kernels; determinism; the memory of the flash path; and the switches that route the ops.

Every test runs once per backend (the ``dev`` fixture): on the CPU emulator of CUDA
(``minitensor.cuda.emulator``, always; NumPy arrays) and on a real GPU when there is one
(CuPy arrays). The emulator takes the small shapes, the GPU adds the large ones (on real
hardware: the CuPy double runs the "gpu" cases on the emulator, with the small shapes).
"""
import tracemalloc
import types
import zlib
from contextlib import contextmanager, nullcontext

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import cuda
from minitensor.cuda import cross_entropy as ce_kernels
from minitensor.cuda import adam as adam_kernels
from minitensor.cuda import bias_relu as bias_relu_kernels
from minitensor.cuda import cast as cast_kernels
from minitensor.cuda import dropout as dropout_kernels
from minitensor.cuda import build, emulator
from minitensor.cuda.build import address
from minitensor.cuda import flash_attention as flash_kernels
from minitensor.cuda import layer_norm as ln_kernels
from minitensor.cuda import loss_scale as loss_scale_kernels
from minitensor.cuda import softmax as softmax_kernels
from minitensor.cuda import turns
from minitensor.ops.attention import ScaledDotProductAttention, attention_op, masked_softmax_reference
from minitensor.ops.loss import smoothed_nll
from minitensor.errors import ShapeError
from minitensor.ops import linalg
from minitensor.speed import cpu as numpy_routes
from minitensor.speed import fusions, products
from minitensor.ops.norm import layer_norm_backward_reference, layer_norm_reference

from ...cupy_double import double
from ...helpers import require

# float32 against float64, and 16-bit against float32 on the same (rounded) input
TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 2e-2}
ON_GPU = cuda.is_available()


class Backend:
    """Where the kernels run: "emulator" (NumPy arrays, ops routed through the emulator) or
    "gpu" (CuPy arrays)."""

    def __init__(self, name: str):
        self.name = name
        self.gpu = name == "gpu"
        # a real GPU, where blocks run side by side; the CuPy double runs "gpu" kernels on the
        # emulator, one block at a time, where a GPU-sized case only takes longer
        self.hardware = self.gpu and not double.installed()
        if self.gpu:
            from minitensor import backend  # noqa: PLC0415

            self.xp = backend.cupy()
        else:
            self.xp = np  # the launchers allocate with emulator.arrays themselves
        self.device = "cuda" if self.gpu else "cpu"

    def asarray(self, a):
        return self.xp.asarray(a)

    def peak_extra_bytes(self, fn) -> int:
        """The most memory ``fn`` holds beyond what was in use when it started: CuPy's pool
        on the GPU; NumPy's allocations (tracemalloc) on the emulator."""
        if self.gpu:
            self.xp.get_default_memory_pool().free_all_blocks()
            with cuda.PeakMemory() as mem:
                fn()
            return mem.peak_bytes - mem.start_bytes
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            fn()
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()

    def __repr__(self):
        return self.name


BACKENDS = ["emulator", pytest.param("gpu", marks=pytest.mark.gpu)]


@pytest.fixture(params=BACKENDS, scope="module")
def dev(request):
    if request.param == "emulator":
        ok, why = emulator.available()
        require(ok, f"the CUDA emulator cannot run here: {why}")
        with cuda.emulate(True):
            yield Backend("emulator")
    else:
        with cuda.emulate(False):
            yield Backend("gpu")


def _half(name):
    if name == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _rel(out, ref):
    """‖out - ref‖ / max(‖ref‖, 1), in float64 on the host; NaN never passes. The floor of 1
    makes an all-zero reference (e.g. dQ with one key) an absolute test: a GPU's FMA chain
    leaves ~1e-7 there, not 0."""
    out = mt.backend.to_numpy(out).astype(np.float64)
    ref = mt.backend.to_numpy(ref).astype(np.float64)
    assert np.isfinite(out).all(), "non-finite values in the kernel's output (an entry left unwritten?)"
    return np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1.0)


def _randn(dev, rng, shape, dtype, scale=1.0):
    return dev.asarray(rng.standard_normal(shape) * scale).astype(dtype)


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


# ---------------------------------------------------------------- what the emulator will compile
LN_SHAPES = [(1, 1), (3, 7), (5, 31), (4, 32), (9, 33), (130, 100), (257, 512), (33, 1000), (2, 3, 1024)]
SOFTMAX_SHAPES = [(1, 1, 1, 1), (2, 3, 5, 7), (3, 2, 33, 31), (2, 4, 17, 100), (1, 2, 3, 2048)]
FLASH_SHAPES = [(1, 1, 1, 1, 8), (2, 3, 5, 7, 16), (2, 2, 65, 33, 32), (1, 3, 130, 200, 64), (2, 1, 31, 97, 40)]
HALF_CTYPES = {"float32": "float", "float16": "f16", "bfloat16": "bf16"}
OPS = {"flash": flash_kernels.FlashAttention, "fused": softmax_kernels.FusedSoftmaxAttention}
PLAIN = (ScaledDotProductAttention, numpy_routes.ScaledDotProductAttention,   # no kernel: the reference, or the
         products.ScaledDotProductAttention)                                    # routes of NumPy or cuBLAS products


@pytest.fixture(scope="module", autouse=True)
def _compile_for_the_emulator_in_parallel(request):
    """Build every instantiation these tests launch at once, a compiler per core (else the
    first test to need each one builds it); not when only the GPU's cases run."""
    emulated = any("emulator" in item.name for item in request.session.items
                   if getattr(item, "module", None) is request.module)
    if not emulator.available()[0] or not emulated:
        return
    items = []
    for t in HALF_CTYPES.values():
        items += [("layer_norm.cu", n) for s in LN_SHAPES for n in ln_kernels.names(t, s[-1])]
        items += [("softmax.cu", n) for s in SOFTMAX_SHAPES + [(1, 2, 16, 600)] for n in softmax_kernels.names(t, s[-1])]
    items += [("layer_norm.cu", n) for d in (7, 33, 64) for n in ln_kernels.names("double", d)]
    items += [("layer_norm.cu", n) for t, s in RESIDUAL_SUBS for d in (1, 7, 24, 33, 130, 512)
              for n in ln_kernels.names(HALF_CTYPES.get(t, "double"), d, HALF_CTYPES.get(s, "double"))]
    items += [("softmax.cu", n) for n in softmax_kernels.names("double", 6)]
    items += [(flash_kernels.source_of(n), n) for s in FLASH_SHAPES for n in flash_kernels.names("float", s[-1])]
    items += [(flash_kernels.source_of(n), n) for n in flash_kernels.names("double", 8)]
    items += [(flash_kernels.source_of(n), n) for t in flash_kernels.TC_TYPES for d in flash_kernels.TC_TILES
              for Tq in (None, 1) for n in flash_kernels.names(t, d, Tq=Tq)]
    items += [(flash_kernels.source_of(n), n) for d in flash_kernels.TF32_TILES for Tq in (None, 1)
              for n in flash_kernels.names("float", d, True, Tq)]
    items += [("cross_entropy.cu", n) for n in ce_kernels.instantiations()]
    items += [("dropout.cu", n) for n in dropout_kernels.instantiations()]
    items += [("adam.cu", n) for n in adam_kernels.instantiations()]
    items += [("loss_scale.cu", n) for n in loss_scale_kernels.instantiations()]
    items += [("bias_relu.cu", n) for n in bias_relu_kernels.instantiations()]
    items += [("cast.cu", n) for n in cast_kernels.instantiations()]
    emulator.precompile(sorted(set(items)))


# ---------------------------------------------------------------- LayerNorm
@pytest.mark.parametrize("shape", LN_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_layer_norm_kernel_matches_the_reference(dev, shape, dtype):
    rng = _rng(shape, dtype)
    dt = _half(dtype)
    d = shape[-1]
    x, dy = _randn(dev, rng, shape, dt, 3.0) + dt.type(0.5), _randn(dev, rng, shape, dt)
    w, b = _randn(dev, rng, (d,), dt) + dt.type(1), _randn(dev, rng, (d,), dt)
    assert ln_kernels.applies(x, w, b)
    y, mean, rstd = ln_kernels.forward(x, w, b, 1e-5)
    dx, dw, db = ln_kernels.backward(dy, x, w, mean, rstd)
    # reference in float64 on the very same (already rounded) inputs
    x64, dy64, w64, b64 = (a.astype(np.float64) for a in (x, dy, w, b))
    y_ref, xhat, r = layer_norm_reference(dev.xp, x64, w64, b64, 1e-5)
    dx_ref, dw_ref, db_ref = layer_norm_backward_reference(dev.xp, dy64, xhat, r, w64)
    assert y.dtype == dt and dx.dtype == dt and dw.dtype == dt and mean.dtype == np.float32
    for out, ref in ((y, y_ref), (dx, dx_ref), (dw, dw_ref), (db, db_ref), (rstd, r[..., 0])):
        assert _rel(out, ref) < TOL[dtype]
    np.testing.assert_allclose(mt.backend.to_numpy(mean), mt.backend.to_numpy(x64.mean(axis=-1)), atol=1e-5,
                               rtol=1e-5)


def test_layer_norm_parameter_gradients_are_bitwise_deterministic(dev):
    """dγ and dβ sum over rows in a fixed order (no atomics): the same bits every time. The
    shape needs more rows than 4 per block x 1024 blocks, so that each block's warps take
    several rows."""
    rows, d = (25_001, 512) if dev.hardware else (4_500, 32)
    rng = np.random.default_rng(0)
    x, dy = _randn(dev, rng, (rows, d), np.float32), _randn(dev, rng, (rows, d), np.float32)
    w, b = _randn(dev, rng, (d,), np.float32), _randn(dev, rng, (d,), np.float32)
    _, mean, rstd = ln_kernels.forward(x, w, b, 1e-5)
    first = [mt.backend.to_numpy(a) for a in ln_kernels.backward(dy, x, w, mean, rstd)]
    for _ in range(3 if dev.hardware else 1):
        again = [mt.backend.to_numpy(a) for a in ln_kernels.backward(dy, x, w, mean, rstd)]
        for a, b_ in zip(first, again):
            assert np.array_equal(a, b_)


def _counting(monkeypatch, module, *names, keyword: str | None = None) -> list:
    """Record each call of the launcher functions ``names`` of ``module`` (in call order): its
    name, or the value it was given for ``keyword``."""
    calls = []
    for name in names:
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _n=name, **k:
                            calls.append(_n if keyword is None else k.get(keyword)) or _real(*a, **k))
    return calls


@pytest.mark.parametrize("shape", [(3, 7), (2, 5, 33), (4, 64)], ids=str)
def test_layer_norm_op_takes_the_kernel_and_gradchecks_through_it(dev, shape, monkeypatch):
    rng = np.random.default_rng(1)
    x = mt.tensor(rng.standard_normal(shape), requires_grad=True, device=dev.device)
    w = mt.tensor(rng.uniform(0.5, 1.5, shape[-1]), requires_grad=True, device=dev.device)
    b = mt.tensor(rng.standard_normal(shape[-1]), requires_grad=True, device=dev.device)
    calls = _counting(monkeypatch, ln_kernels, "forward", "backward")
    F.layer_norm(x, w, b).sum().backward()
    assert calls == ["forward", "backward"]
    assert mt.gradcheck(lambda u, g, c: F.layer_norm(u, g, c), [x, w, b])
    calls.clear()
    with cuda.use_kernels(False):
        F.layer_norm(x, w, b).sum().backward()
    assert calls == []


# ---------------------------------------------------------------- dropout + residual + LayerNorm
RESIDUAL_SUBS = [("float32", "float32"), ("float32", "bfloat16"), ("float32", "float16"), ("bfloat16", "bfloat16"),
                 ("float64", "float64")]


def _residual_mask(dev, shape, sub_dtype, p, seed, offset):
    """The fused kernel's keep mask at (seed, offset), read off the kernel itself: with x = 0
    and sub = 1, z = keep / (1-p)."""
    dt = _half(sub_dtype)
    zero = dev.asarray(np.zeros(shape, np.float64 if sub_dtype == "float64" else np.float32))
    ones = dev.asarray(np.ones(shape)).astype(dt)
    w = dev.asarray(np.ones(shape[-1], zero.dtype))
    z = ln_kernels.residual_forward(zero, ones, w, w, 1e-5, p, seed, offset)[1]
    return mt.backend.to_numpy(z) != 0


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (5, 33), (2, 9, 130), (17, 512)], ids=str)
@pytest.mark.parametrize("dtype, sub_dtype", RESIDUAL_SUBS)
@pytest.mark.parametrize("p", [0.0, 0.3])
def test_dropout_add_layer_norm_kernels_match_the_reference(dev, shape, dtype, sub_dtype, p):
    """y = LayerNorm(x + dropout(sub)) and its three gradients against the float64 reference
    with the kernel's own mask (read off the kernel, and the same on every call with the same
    seed and offset): z bit for bit as the unfused ops round it, dx = dz, dsub = dz ⊙ keep/(1-p)."""
    rng = _rng("residual ln", shape, dtype, sub_dtype, p)
    dt, st = _half(dtype), _half(sub_dtype)
    d = shape[-1]
    x, sub = _randn(dev, rng, shape, dt, 2.0), _randn(dev, rng, shape, st, 2.0)
    dy = _randn(dev, rng, shape, dt)
    w, b = _randn(dev, rng, (d,), dt) + dt.type(1), _randn(dev, rng, (d,), dt)
    assert ln_kernels.applies(x, w, b, sub)
    seed, offset = 1234, 77
    y, z, mean, rstd = ln_kernels.residual_forward(x, sub, w, b, 1e-5, p, seed, offset)
    dx, dw, db, dsub = ln_kernels.residual_backward(dy, z, w, mean, rstd, st, p, seed, offset)
    assert y.dtype == z.dtype == dx.dtype == dw.dtype == dt and dsub.dtype == st
    keep = _residual_mask(dev, shape, sub_dtype, p, seed, offset)
    if not p:
        assert keep.all()
    elif keep.size >= 100:
        assert 0.5 < keep.mean() < 0.9
    acc = np.float64 if dtype == "float64" else np.float32
    host = {k: mt.backend.to_numpy(a) for k, a in dict(x=x, sub=sub, dy=dy, w=w, b=b).items()}
    scale = acc(1 / (1 - p))
    dropped = np.where(keep, host["sub"].astype(acc) * scale, 0).astype(st)       # dropout, rounded to sub's dtype
    z_ref = (host["x"].astype(acc) + dropped.astype(acc)).astype(dt)             # the sum, rounded to x's
    np.testing.assert_array_equal(mt.backend.to_numpy(z).astype(np.float64), z_ref.astype(np.float64))
    z64, dy64, w64, b64 = (a.astype(np.float64) for a in (z_ref, host["dy"], host["w"], host["b"]))
    y_ref, xhat, r = layer_norm_reference(np, z64, w64, b64, 1e-5)
    dz_ref, dw_ref, db_ref = layer_norm_backward_reference(np, dy64, xhat, r, w64)
    dsub_ref = np.where(keep, dz_ref / (1 - p), 0)
    tol = 1e-12 if dtype == "float64" else TOL[dtype]
    for out, ref in ((y, y_ref), (dx, dz_ref), (dw, dw_ref), (db, db_ref), (dsub, dsub_ref)):
        assert _rel(out, ref) < max(tol, TOL.get(sub_dtype, 0) if out is dsub else 0)
    again = ln_kernels.residual_backward(dy, z, w, mean, rstd, st, p, seed, offset)[3]
    assert np.array_equal(mt.backend.to_numpy(again), mt.backend.to_numpy(dsub))   # the same mask again


def test_dropout_add_layer_norm_masks_follow_seed_and_offset_and_keep_one_minus_p(dev):
    """Another seed or offset gives another mask; the kept share over 64 x 512 entries is 1 - p
    to within 4 standard deviations; columns and rows are not favoured (each lane draws its own
    words)."""
    shape, p = (64, 512), 0.25
    a = _residual_mask(dev, shape, "float32", p, 5, 0)
    assert np.array_equal(a, _residual_mask(dev, shape, "float32", p, 5, 0))
    assert not np.array_equal(a, _residual_mask(dev, shape, "float32", p, 6, 0))
    assert not np.array_equal(a, _residual_mask(dev, shape, "float32", p, 5, 1))
    sd = np.sqrt(p * (1 - p) / a.size)
    assert abs(a.mean() - (1 - p)) < 4 * sd
    assert abs(a.mean(axis=0) - (1 - p)).max() < 5 * np.sqrt(p * (1 - p) / shape[0])
    assert abs(a.mean(axis=1) - (1 - p)).max() < 5 * np.sqrt(p * (1 - p) / shape[1])


def test_dropout_add_layer_norm_takes_the_kernels_and_gradchecks_through_them(dev, monkeypatch):
    """fusions.dropout_add_layer_norm: one kernel each way where the kernels run; kernels off (or
    evaluation, p = 0) the reference ops give the same values without dropout; with dropout, a
    float64 gradcheck through the kernels (reseeded before each evaluation: the same mask)."""
    rng = _rng("residual op")
    shape = (2, 5, 24)
    sub = mt.tensor(rng.standard_normal(shape), requires_grad=True, device=dev.device)
    x = mt.tensor(rng.standard_normal(shape), requires_grad=True, device=dev.device)
    w = mt.tensor(rng.uniform(0.5, 1.5, 24), requires_grad=True, device=dev.device)
    b = mt.tensor(rng.standard_normal(24), requires_grad=True, device=dev.device)
    c = mt.tensor(rng.standard_normal(shape), device=dev.device)
    calls = _counting(monkeypatch, ln_kernels, "residual_forward", "residual_backward")

    def run(p, training=True):
        for t in (sub, x, w, b):
            t.grad = None
        y = fusions.dropout_add_layer_norm(sub, x, w, b, p, training)
        (y * c).sum().backward()
        return [mt.backend.to_numpy(a) for a in (y.data, sub.grad.data, x.grad.data, w.grad.data, b.grad.data)]

    fused = run(0.0)
    assert calls == ["residual_forward", "residual_backward"]
    with cuda.use_kernels(False):
        reference = run(0.0)
    assert len(calls) == 2
    for a, r in zip(fused, reference):
        np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-12)
    for a, r in zip(run(0.4, training=False), reference):                      # evaluation: no dropout
        np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-12)
    dropped = run(0.4)
    kept = dropped[1] != 0                                                      # dsub is 0 where dropped
    assert 0 < kept.mean() < 1
    np.testing.assert_allclose(dropped[1][kept], dropped[2][kept] / 0.6, rtol=1e-12)  # dsub = dz / (1-p)

    def reseeded(s, u, g, e):
        mt.manual_seed(9)
        return (fusions.dropout_add_layer_norm(s, u, g, e, 0.4) * c).sum()
    assert mt.gradcheck(reseeded, [sub, x, w, b])
    with pytest.raises(ShapeError, match="must be the same"):
        fusions.dropout_add_layer_norm(sub[:, :2], x, w, b, 0.1)
    with pytest.raises(ValueError, match="p must be in"):
        fusions.dropout_add_layer_norm(sub, x, w, b, 1.5)


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


@pytest.mark.parametrize("shape", SOFTMAX_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "both"])
def test_fused_softmax_kernel_matches_the_reference(dev, shape, dtype, mask_kind):
    rng = np.random.default_rng(7)
    dt = _half(dtype)
    B, H, Tq, Tk = shape
    mask = _masks(rng, B, Tq, Tk)[mask_kind]
    mask = None if mask is None else dev.asarray(mask)
    s, g = _randn(dev, rng, shape, dt, 4.0), _randn(dev, rng, shape, dt)
    scale = 0.37
    assert softmax_kernels.applies(s.dtype, s.shape)
    p = softmax_kernels.forward(s, mask, scale)
    ds = softmax_kernels.backward(p, g, scale)
    p_ref = masked_softmax_reference(dev.xp, s.astype(np.float64), mask, scale)
    gp = g.astype(np.float64) * p_ref
    ds_ref = (gp - p_ref * gp.sum(axis=-1, keepdims=True)) * scale
    assert _rel(p, p_ref) < TOL[dtype] and _rel(ds, ds_ref) < TOL[dtype]
    if mask is not None:  # forbidden keys get exactly 0, and rows with nothing allowed are all 0
        forbidden = ~dev.xp.broadcast_to(mask, shape)
        assert float(abs(p.astype(np.float32)[forbidden]).sum()) == 0.0


def test_fused_route_scales_q_before_the_product_so_float16_scores_do_not_overflow(dev):
    """q·k of 64 entries around ±40 is ~100,000: past float16's 65,504. Scaled by 1/√64
    first, the scores stay finite and the weights match a float64 reference."""
    rng = np.random.default_rng(8)
    q = rng.uniform(35, 45, (1, 2, 3, 64)) * rng.choice([-1, 1], (1, 2, 3, 64))
    k = q[:, :, [0, 1, 2, 0]] * np.array([1, 1, 1, -1])[:, None] + rng.uniform(-1, 1, (1, 2, 4, 64))
    v = rng.standard_normal((1, 2, 4, 64))
    q, k, v = (a.astype(np.float16).astype(np.float64) for a in (q, k, v))  # the values the kernels see
    assert np.abs(q @ k.swapaxes(-1, -2)).max() > 65504  # unscaled, the scores overflow float16
    args = [mt.tensor(dev.asarray(a.astype(np.float16)), device=dev.device) for a in (q, k, v)]
    with cuda.use_kernels(True):
        cuda.set_attention("fused")
        try:
            assert attention_op(*(a.data for a in args), need_weights=True) is softmax_kernels.FusedSoftmaxAttention
            out, weights = F.scaled_dot_product_attention(*args, return_weights=True)
        finally:
            cuda.set_attention("auto")
    ref = masked_softmax_reference(np, (q / 8.0) @ k.swapaxes(-1, -2), None)
    assert _rel(weights.data, ref) < 2e-2 and _rel(out.data, ref @ v) < 2e-2


# ---------------------------------------------------------------- flash attention
def _attention_reference(xp, q, k, v, g, mask, scale):
    """out, dq, dk, dv of equation 1 in float64, unfused, from the same (rounded) inputs."""
    q64, k64, v64, g64 = (a.astype(np.float64) for a in (q, k, v, g))
    p = masked_softmax_reference(xp, q64 @ k64.swapaxes(-1, -2), mask, scale)
    gp = g64 @ v64.swapaxes(-1, -2)
    gs = p * (gp - (gp * p).sum(axis=-1, keepdims=True)) * scale
    return p @ v64, gs @ k64, gs.swapaxes(-1, -2) @ q64, p.swapaxes(-1, -2) @ g64


@pytest.mark.parametrize("shape", FLASH_SHAPES, ids=str)
@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal", "both"])
def test_flash_attention_kernels_match_the_reference(dev, shape, mask_kind):
    rng = np.random.default_rng(11)
    B, H, Tq, Tk, d = shape
    mask = _masks(rng, B, Tq, Tk)[mask_kind]
    mask = None if mask is None else dev.asarray(mask)
    q, k, v = (_randn(dev, rng, (B, H, T, d), np.float32) for T in (Tq, Tk, Tk))
    g = _randn(dev, rng, (B, H, Tq, d), np.float32)
    scale = 1 / np.sqrt(d)
    assert flash_kernels.applies(q, k, v)
    out, lse = flash_kernels.forward(q, k, v, mask, scale)
    dq, dk, dv = flash_kernels.backward(g, q, k, v, out, lse, mask, scale)
    for got, ref in zip((out, dq, dk, dv), _attention_reference(dev.xp, q, k, v, g, mask, scale)):
        assert _rel(got, ref) < 1e-4


# (B, H, Tq, Tk, d): several key tiles, partial blocks of 64 rows, every head size, Tq != Tk
TC_SHAPES = [(1, 2, 70, 150, 64), (2, 1, 33, 47, 32), (1, 1, 40, 70, 128), (1, 1, 130, 130, 64),
             (1, 1, 140, 90, 32)]
# P and dS are rounded to 16 bits (to TF32's 10-bit mantissa) before their products
TC_TOL = {"float16": 2e-3, "bfloat16": 1.5e-2, "tf32": 2e-3}
# "tf32": float32 storage on the tensor cores in TF32, head sizes 32 and 64
TC_CASES = [(dtype, shape) for dtype in TC_TOL for shape in TC_SHAPES
            if dtype != "tf32" or shape[-1] in flash_kernels.TF32_TILES]


def _tc_inputs(dev, rng, shape, dtype, layout):
    """q, k, v, g of ``shape`` in ``dtype`` ("tf32": float32): (B, H, T, d) arrays, or views of
    (B, T, H, d) ones (the projections' own layout, read through strides)."""
    B, H, Tq, Tk, d = shape
    dt = np.dtype(np.float32) if dtype == "tf32" else _half(dtype)
    if layout == "bhtd":
        return tuple(_randn(dev, rng, (B, H, T, d), dt) for T in (Tq, Tk, Tk, Tq))
    return tuple(_randn(dev, rng, (B, T, H, d), dt).swapaxes(1, 2) for T in (Tq, Tk, Tk, Tq))


def _tc_mask(rng, B, Tq, Tk):
    """(B, 1, Tq, Tk): each score allowed at random (so a wrong column order in a fragment shows),
    the last query row of the first sequence allowed nothing."""
    mask = rng.random((B, 1, Tq, Tk)) > 0.3
    mask[0, 0, -1, :] = False
    return mask


@pytest.mark.parametrize(("dtype", "shape"), TC_CASES, ids=str)
@pytest.mark.parametrize("mask_kind", ["none", "random", "causal flag"])
def test_tensor_core_flash_attention_matches_the_reference(dev, dtype, shape, mask_kind):
    """The mma.sync kernels' output and gradients against float64 equation 1 on the same 16-bit
    (or float32, in TF32) inputs: a mask with rows that allow nothing, and the causal flag (tiles
    above the diagonal skipped) giving what the causal triangle as a mask gives; inputs in
    (B, H, T, d) and as (B, T, H, d) views, which the kernels read in place and answer in the
    same layout."""
    _check_tensor_core_attention(dev, _rng("tc", dtype, shape, mask_kind), dtype, shape, mask_kind)


@contextmanager
def _switched(wgmma: bool, one_pass: bool = False):
    """set_wgmma and set_one_pass_backward as given inside the block (restored after it); yields the
    list of the flash kernels' instantiations launched there."""
    launched, real = [], flash_kernels.kernel

    def recording(source, name, xp, options=()):
        launched.append(name)
        return real(source, name, xp, options)

    was = cuda.wgmma_enabled(), cuda.one_pass_backward_enabled()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(flash_kernels, "kernel", recording)
        cuda.set_wgmma(wgmma)
        cuda.set_one_pass_backward(one_pass)
        try:
            yield launched
        finally:
            cuda.set_wgmma(was[0])
            cuda.set_one_pass_backward(was[1])


# the wgmma kernels: 16-bit, head sizes 32 and 64, each shape in one of the two dtypes
WG_CASES = [(("float16", "bfloat16")[i % 2], shape)
            for i, shape in enumerate(s for s in TC_SHAPES if s[-1] in flash_kernels.WG_HEAD_SIZES)]


@pytest.mark.parametrize(("dtype", "shape"), WG_CASES, ids=str)
@pytest.mark.parametrize("mask_kind", ["none", "random", "causal flag"])
def test_wgmma_flash_attention_matches_the_reference(dev, dtype, shape, mask_kind):
    """The same kernels with their products on wgmma (warpgroup products of 64 rows, tiles in
    core matrices), as set_wgmma turns them on: the same answers as equation 1, and the wgmma
    instantiations are the ones launched."""
    _require_hopper(dev)
    with _switched(wgmma=True) as launched:
        _check_tensor_core_attention(dev, _rng("wg", dtype, shape, mask_kind), dtype, shape, mask_kind)
    assert len(launched) == 3 and all(name.endswith(", true>") for name in launched), launched


# the one-pass backward: 16-bit, every head size (each shape in one of the two dtypes), on mma.sync and,
# at head sizes 32 and 64, on wgmma
ONE_PASS_CASES = [(("bfloat16", "float16")[i % 2], shape, wg) for i, shape in enumerate(TC_SHAPES)
                  for wg in (False, True) if not wg or shape[-1] in flash_kernels.WG_HEAD_SIZES]


@pytest.mark.parametrize(("dtype", "shape", "wg"), ONE_PASS_CASES, ids=str)
@pytest.mark.parametrize("mask_kind", ["none", "random", "causal flag"])
def test_one_pass_backward_matches_the_reference_and_repeats_itself_bit_for_bit(dev, dtype, shape, mask_kind, wg):
    """The backward in one pass, as set_one_pass_backward turns it on (the key blocks add their
    shares of dQ in turns; with the causal flag the last block that reaches a tile of queries writes
    it): the gradients of equation 1, the same bits at a second run, and the one-pass kernels (delta
    and turns, then dK, dV and dQ) are the ones launched."""
    if wg:
        _require_hopper(dev)
    with _switched(wgmma=wg, one_pass=True) as launched:
        _check_tensor_core_attention(dev, _rng("one pass", dtype, shape, mask_kind), dtype, shape, mask_kind,
                                     twice=True)
    delta, backward = flash_kernels.one_pass_names(flash_kernels.ctype(_half(dtype)), shape[-1], wg)
    assert launched[1:] == [delta, backward] * 2, launched


@pytest.mark.hardware("blocks that run at once")
def test_blocks_that_take_turns_end_with_more_blocks_than_the_gpu_holds_at_once(dev):
    """Blocks that wait for one another's turns, more of them than a GPU holds at once (an H100 or
    H200 holds about two of these an SM), so that later blocks start only as earlier ones end: on a
    GPU, 20,000 blocks of the turn-taking kernel fold 1 .. 20,000 in order; and the one-pass
    backward of 4 x 16 heads of 2048 keys (2048 blocks) ends, gives the two passes' gradients to
    16-bit rounding and the same bits at a second run, on mma.sync and (compute capability 9.0) on
    wgmma. The emulator, one block at a time, runs small cases of the same."""
    blocks = 20000 if dev.gpu else 300
    assert _take_turns(dev.xp, _own_kernel(dev, TURNS, START_ORDER), blocks) == _in_turns(blocks)
    B, H, T = (4, 16, 2048) if dev.gpu else (1, 1, 130)
    rng = _rng("one pass, many blocks")
    q, k, v, g = (dev.asarray(rng.standard_normal((B, H, T, 64)).astype(np.float16)) for _ in range(4))
    out, lse = flash_kernels.forward(q, k, v, None, 0.125)
    hopper = not dev.gpu or dev.xp.cuda.Device().compute_capability == "90"
    for wg in (False, True) if hopper else (False,):
        with _switched(wgmma=wg):
            two = flash_kernels.backward(g, q, k, v, out, lse, None, 0.125)
        with _switched(wgmma=wg, one_pass=True) as launched:
            one = flash_kernels.backward(g, q, k, v, out, lse, None, 0.125)
            again = flash_kernels.backward(g, q, k, v, out, lse, None, 0.125)
        assert flash_kernels.one_pass_names("f16", 64, wg)[1] in launched
        for a, b, c in zip(one, again, two):
            assert mt.backend.to_numpy(a).tobytes() == mt.backend.to_numpy(b).tobytes()
            assert _rel(a, c) < TC_TOL["float16"], wg


def _check_tensor_core_attention(dev, rng, dtype, shape, mask_kind, twice: bool = False):
    """The kernels' output and gradients against equation 1 (``twice``: the backward run again
    gives the same bits)."""
    B, H, Tq, Tk, d = shape
    layout = "bthd" if (Tq + d) % 2 else "bhtd"
    q, k, v, g = _tc_inputs(dev, rng, shape, dtype, layout)
    causal, tf32 = mask_kind == "causal flag", dtype == "tf32"
    mask = {"none": None, "random": _tc_mask(rng, B, Tq, Tk), "causal flag": rng.random((B, 1, 1, Tk)) > 0.2}[mask_kind]
    mask_dev = None if mask is None else dev.asarray(mask)
    scale = 1 / np.sqrt(d)
    assert flash_kernels.applies(q, k, v, tf32) and flash_kernels.tensor_cores(q, tf32)
    out, lse = flash_kernels.forward(q, k, v, mask_dev, scale, causal=causal, tf32=tf32)
    dq, dk, dv = flash_kernels.backward(g, q, k, v, out, lse, mask_dev, scale, causal=causal, tf32=tf32)
    full = mask if not causal else mask & np.tril(np.ones((Tq, Tk), dtype=bool))
    refs = _attention_reference(dev.xp, q, k, v, g, None if full is None else dev.asarray(full), scale)
    assert out.dtype == q.dtype and lse.dtype == np.float32 and dq.dtype == dk.dtype == dv.dtype == q.dtype
    assert all(flash_kernels.same_layout(a, b) for a, b in ((out, q), (dq, q), (dk, k), (dv, k)))
    for got, ref in zip((out, dq, dk, dv), refs):
        assert _rel(got, ref) < TC_TOL[dtype]
    if twice:
        again = flash_kernels.backward(g, q, k, v, out, lse, mask_dev, scale, causal=causal, tf32=tf32)
        for first, second in zip((dq, dk, dv), again):
            assert mt.backend.to_numpy(first).tobytes() == mt.backend.to_numpy(second).tobytes()


def test_a_warp_takes_two_blocks_of_rows_from_its_threshold_on(dev, monkeypatch):
    """Below TC_TWO_BLOCKS_FROM queries each warp of the tensor-core forward and dQ pass keeps one
    block of 16 rows (blocks of 64 queries), from it on two (blocks of 128): the kernels launched
    and their grids say so, and both give equation 1."""
    launched, real = [], flash_kernels.kernel

    def recording(source, name, xp, options=()):
        fn = real(source, name, xp, options)
        return lambda grid, block, args: (launched.append((name, grid)), fn(grid, block, args))[1]

    monkeypatch.setattr(flash_kernels, "kernel", recording)
    rng, bf16 = _rng("warp rows"), _half("bfloat16")
    for Tq in (flash_kernels.TC_TWO_BLOCKS_FROM - 1, flash_kernels.TC_TWO_BLOCKS_FROM):
        launched.clear()
        q, g = (_randn(dev, rng, (1, 2, Tq, 32), bf16) for _ in range(2))
        k, v = (_randn(dev, rng, (1, 2, 50, 32), bf16) for _ in range(2))
        out, lse = flash_kernels.forward(q, k, v, None, 0.25)
        grads = flash_kernels.backward(g, q, k, v, out, lse, None, 0.25)
        blocks = 1 if Tq < flash_kernels.TC_TWO_BLOCKS_FROM else 2
        (fwd, fwd_grid), (dq, dq_grid), (dkdv, dkdv_grid) = launched
        assert fwd.endswith(f", {blocks}>") and dq.endswith(f", {blocks}>") and "dkdv" in dkdv
        assert fwd_grid[1] == dq_grid[1] == -(-Tq // (64 * blocks)) and dkdv_grid[1] == 1   # 50 keys
        for got, ref in zip((out,) + tuple(grads), _attention_reference(dev.xp, q, k, v, g, None, 0.25)):
            assert _rel(got, ref) < TC_TOL["bfloat16"]


def test_tf32_attention_is_float32_rounded_to_tf32_where_the_cuda_cores_keep_float32(dev):
    """The TF32 kernels' error against float64 is TF32's (inputs and P rounded to 10 mantissa
    bits: ~1e-4 relative), far above the float32 CUDA-core kernels' (~1e-7) on the same inputs,
    and well under the 16-bit kernels' bound: they do run on the tensor cores, in TF32."""
    rng = _rng("tf32 vs float32")
    q, k, v, g = _tc_inputs(dev, rng, (2, 2, 50, 70, 64), "tf32", "bhtd")
    refs = _attention_reference(dev.xp, q, k, v, g, None, 0.125)
    errors = {}
    for tf32 in (True, False):
        out, lse = flash_kernels.forward(q, k, v, None, 0.125, tf32=tf32)
        grads = flash_kernels.backward(g, q, k, v, out, lse, None, 0.125, tf32=tf32)
        errors[tf32] = max(_rel(a, r) for a, r in zip((out,) + grads, refs))
    assert errors[False] < 1e-5 < 5e-5 < errors[True] < TC_TOL["tf32"], errors


def test_tensor_core_flash_attention_reads_each_family_through_one_set_of_strides(dev):
    """k and v of different layouts, and a gradient of a third: the launcher brings each family
    (Q, O, dO; K, V) to one layout before the launch, and the answer is the same."""
    rng = _rng("tc layouts")
    shape = (2, 2, 40, 40, 32)
    q, k, v, g = _tc_inputs(dev, rng, shape, "float16", "bthd")
    v_plain, g_plain = dev.xp.ascontiguousarray(v), dev.xp.ascontiguousarray(g)
    out, lse = flash_kernels.forward(q, k, v_plain, None, 0.3)
    grads = flash_kernels.backward(g_plain, q, k, v_plain, out, lse, None, 0.3)
    refs = _attention_reference(dev.xp, q, k, v, g, None, 0.3)
    for got, ref in zip((out,) + grads, refs):
        assert _rel(got, ref) < TC_TOL["float16"]


@pytest.mark.parametrize("dtype", ["float16", "tf32"])
def test_tensor_core_flash_attention_takes_slices_of_wider_rows(dev, dtype):
    """q, k and v cut from one (B, T, 3, H, d) array (a packed projection: gaps between each one's
    rows) are read in place, with no copy; the outputs, made without gaps, are written through
    strides of their own, and the answer is equation 1's."""
    rng = _rng("tc gaps", dtype)
    B, T, H, d = 2, 40, 2, 32
    tf32 = dtype == "tf32"
    dt = np.dtype(np.float32) if tf32 else _half(dtype)
    packed = _randn(dev, rng, (B, T, 3, H, d), dt)
    q, k, v = (packed[:, :, i].swapaxes(1, 2) for i in range(3))
    g = _randn(dev, rng, (B, H, T, d), dt)
    assert flash_kernels._readable(q) is q and all(a is b for a, b in zip(flash_kernels._pair(k, v), (k, v)))
    out, lse = flash_kernels.forward(q, k, v, None, 0.2, tf32=tf32)
    assert not flash_kernels._has_gaps(out) and not flash_kernels.same_layout(out, q)
    grads = flash_kernels.backward(g, q, k, v, out, lse, None, 0.2, tf32=tf32)
    for got, ref in zip((out,) + grads, _attention_reference(dev.xp, q, k, v, g, None, 0.2)):
        assert got.shape == (B, H, T, d) and _rel(got, ref) < TC_TOL[dtype]


@pytest.mark.parametrize("dtype", ["float16", "tf32"])
def test_tensor_core_flash_attention_copies_rows_that_are_only_4_byte_aligned(dev, dtype):
    """The kernels copy their tiles 16 bytes at a time where every row starts 16-byte aligned, and
    4 bytes at a time otherwise: arrays that begin 4 bytes into an allocation take the second
    way (the emulator refuses a misaligned 16-byte copy), and the answer is equation 1's."""
    rng = _rng("tc 4-byte rows", dtype)
    B, H, T, d = 2, 2, 40, 32
    tf32 = dtype == "tf32"
    dt = np.dtype(np.float32) if tf32 else _half(dtype)

    def shifted(shape):   # C-ordered, 4 bytes past a 16-byte boundary
        size = int(np.prod(shape))
        flat = dev.xp.zeros(size + 16, dt)
        start = (4 - address(flat)) % 16 // dt.itemsize
        a = flat[start:start + size].reshape(shape)
        a[...] = _randn(dev, rng, shape, dt)
        assert address(a) % 16 == 4
        return a

    q, k, v, g = (shifted((B, H, T, d)) for _ in range(4))
    out, lse = flash_kernels.forward(q, k, v, None, 0.2, causal=True, tf32=tf32)
    grads = flash_kernels.backward(g, q, k, v, out, lse, None, 0.2, causal=True, tf32=tf32)
    causal = np.tril(np.ones((T, T), bool))
    for got, ref in zip((out,) + grads, _attention_reference(dev.xp, q, k, v, g, dev.asarray(causal), 0.2)):
        assert _rel(got, ref) < TC_TOL[dtype]


@pytest.mark.parametrize("dtype", ["bfloat16", "tf32"])
def test_tensor_core_flash_backward_is_bitwise_deterministic(dev, dtype):
    """dQ, dK and dV come from two passes that each own their rows (no atomics): the same bits
    on every call."""
    rng = _rng("tc determinism", dtype)
    shape = (4, 8, 512, 512, 64) if dev.hardware else (1, 2, 70, 130, 32)
    tf32 = dtype == "tf32"
    q, k, v, g = _tc_inputs(dev, rng, shape, dtype, "bthd")
    out, lse = flash_kernels.forward(q, k, v, None, 0.125, causal=True, tf32=tf32)
    first = [mt.backend.to_numpy(a) for a in flash_kernels.backward(g, q, k, v, out, lse, None, 0.125, causal=True,
                                                                    tf32=tf32)]
    for _ in range(3 if dev.hardware else 1):
        again = flash_kernels.backward(g, q, k, v, out, lse, None, 0.125, causal=True, tf32=tf32)
        for a, b in zip(first, again):
            bits = np.uint32 if tf32 else np.uint16
            assert np.array_equal(a.view(bits), mt.backend.to_numpy(b).view(bits))


@pytest.mark.parametrize("mode", ["flash", "fused"])
def test_attention_op_gradchecks_in_float64_through_each_kernel_route(dev, mode):
    rng = np.random.default_rng(3)
    B, H, Tq, Tk, d = 2, 2, 5, 6, 8
    q, k, v = (mt.tensor(rng.standard_normal((B, H, T, d)), requires_grad=True, device=dev.device)
               for T in (Tq, Tk, Tk))
    mask = mt.tensor(_masks(rng, B, Tq, Tk)["both"], device=dev.device)
    cuda.set_attention(mode)
    try:
        assert attention_op(q.data, k.data, v.data) is OPS[mode]
        assert mt.gradcheck(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, mask=mask), [q, k, v])
    finally:
        cuda.set_attention("auto")


def test_attention_routes_follow_the_switches(dev, monkeypatch):
    """attention_op's choice, and F.scaled_dot_product_attention taking the op chosen (its
    launcher's forward runs)."""
    rng = np.random.default_rng(4)
    q, k, v = (mt.tensor(rng.standard_normal((1, 2, 600, 16)).astype(np.float32), device=dev.device)
               for _ in range(3))
    qkv = (q.data, k.data, v.data)
    calls = []
    for module, tag in ((flash_kernels, "flash"), (softmax_kernels, "fused")):
        real = module.forward
        monkeypatch.setattr(module, "forward", lambda *a, _real=real, _t=tag, **kw: calls.append(_t) or _real(*a, **kw))
    assert cuda.FLASH_MIN_KEYS > 600 and attention_op(*qkv) is OPS["fused"]   # auto: shorter keys, the fused path
    F.scaled_dot_product_attention(q, k, v)
    assert calls == ["fused"]
    monkeypatch.setattr(cuda, "FLASH_MIN_KEYS", 600)
    assert attention_op(*qkv) is OPS["flash"]         # auto: from FLASH_MIN_KEYS keys on, the flash kernels
    F.scaled_dot_product_attention(q, k, v)
    assert calls == ["fused", "flash"]
    assert attention_op(*qkv, dropout_p=0.1, training=True) is OPS["fused"]    # dropout needs the weights formed
    assert attention_op(*qkv, dropout_p=0.1, training=False) is OPS["flash"]   # (not in evaluation)
    assert attention_op(*qkv, need_weights=True) is OPS["fused"]
    _, weights = F.scaled_dot_product_attention(q, k, v, return_weights=True)
    assert weights.shape == (1, 2, 600, 600) and calls[-1] == "fused"
    with cuda.use_kernels(False):
        assert attention_op(*qkv) in PLAIN
    if not dev.gpu:                          # and without the emulator NumPy arrays take the plain code
        with cuda.emulate(False):
            assert attention_op(*qkv) in PLAIN


def test_16_bit_attention_takes_the_tensor_core_kernels_by_their_own_threshold(dev, monkeypatch):
    """bfloat16 q, k, v: "flash" runs the tensor-core kernels through F.scaled_dot_product_attention
    (output and bfloat16 gradients as equation 1 gives them); "auto" takes them up to
    FLASH_TC_SHORT_KEYS keys and from FLASH_TC_MIN_KEYS on, while float32 inputs keep FLASH_MIN_KEYS."""
    rng = _rng("tc route")
    bf16 = _half("bfloat16")
    arrays = [_randn(dev, rng, (1, 2, 40, 32), bf16) for _ in range(4)]
    q, k, v = (mt.tensor(a, requires_grad=True, device=dev.device) for a in arrays[:3])
    calls = _counting(monkeypatch, flash_kernels, "forward", "backward")
    cuda.set_attention("flash")
    try:
        out = F.scaled_dot_product_attention(q, k, v)
        out.backward(mt.tensor(arrays[3], device=dev.device))
    finally:
        cuda.set_attention("auto")
    assert calls == ["forward", "backward"]
    refs = _attention_reference(dev.xp, *arrays, None, 1 / np.sqrt(32))
    for got, ref in zip((out, q.grad, k.grad, v.grad), refs):
        assert got.dtype == bf16 and _rel(got.data, ref) < TC_TOL["bfloat16"]
    qkv = tuple(a for a in arrays[:3])
    monkeypatch.setattr(cuda, "FLASH_MIN_KEYS", 10**6)
    assert cuda.FLASH_TC_SHORT_KEYS >= 40 and attention_op(*qkv) is OPS["flash"]   # 40 keys: short
    assert attention_op(*(a.astype(np.float32) for a in qkv)) is OPS["fused"]
    monkeypatch.setattr(cuda, "FLASH_TC_SHORT_KEYS", 39)
    monkeypatch.setattr(cuda, "FLASH_TC_MIN_KEYS", 41)   # a middle range (39, 41) given to the fused path
    assert attention_op(*qkv) is OPS["fused"]
    monkeypatch.setattr(cuda, "FLASH_TC_MIN_KEYS", 40)
    assert attention_op(*qkv) is OPS["flash"]


def test_float32_attention_takes_the_tf32_kernels_while_tf32_is_on(dev, monkeypatch):
    """With ``cuda.set_tf32(True)``, float32 attention of head size 32 or 64 is routed as 16-bit
    attention is (tensor-core kernels, here at 40 keys), runs in TF32 forward and backward, and
    gives equation 1 to TF32's accuracy; head size 128, TF32 off, and NumPy arrays (where the
    switch does not exist) keep the float32 routes."""
    rng = _rng("tf32 route")
    arrays = [_randn(dev, rng, (1, 2, 40, 32), np.float32) for _ in range(4)]
    q, k, v = (mt.tensor(a, requires_grad=True, device=dev.device) for a in arrays[:3])
    monkeypatch.setattr(cuda, "FLASH_MIN_KEYS", 10**6)
    qkv, wide = tuple(arrays[:3]), tuple(_randn(dev, rng, (1, 2, 40, 128), np.float32) for _ in range(3))
    if not dev.gpu:
        assert not flash_kernels.tf32_route(qkv[0]) and attention_op(*qkv) is OPS["fused"]
        return
    tf32 = _counting(monkeypatch, flash_kernels, "forward", "backward", keyword="tf32")
    cuda.set_tf32(True)
    try:
        assert flash_kernels.tf32_route(qkv[0]) and attention_op(*qkv) is OPS["flash"]
        assert attention_op(*wide) is OPS["fused"]
        out = F.scaled_dot_product_attention(q, k, v)
        out.backward(mt.tensor(arrays[3], device=dev.device))
    finally:
        cuda.set_tf32(False)
    assert tf32 == [True, True]
    refs = _attention_reference(dev.xp, *arrays, None, 1 / np.sqrt(32))
    for got, ref in zip((out, q.grad, k.grad, v.grad), refs):
        assert got.dtype == np.float32 and _rel(got.data, ref) < TC_TOL["tf32"]
    assert not flash_kernels.tf32_route(qkv[0]) and attention_op(*qkv) is OPS["fused"]


def _attention_step_peak(dev, T: int, mode: str, heads: int, d: int) -> int:
    rng = np.random.default_rng(5)
    q, k, v = (mt.tensor(dev.asarray(rng.standard_normal((1, heads, T, d)).astype(np.float32)), requires_grad=True,
                         device=dev.device) for _ in range(3))
    cuda.set_attention(mode)
    try:
        return dev.peak_extra_bytes(lambda: F.scaled_dot_product_attention(q, k, v).sum().backward())
    finally:
        cuda.set_attention("auto")


@pytest.mark.hardware("real device memory")
def test_flash_attention_memory_grows_linearly_with_sequence_length(dev):
    """Doubling T doubles the flash path's extra memory (O(T)); the fused path stores the
    T x T weights, so its memory grows about fourfold. Each figure is the least of two steps:
    a one-time allocation (a kernel build, a cache that grows) is not per-T memory."""
    lengths, heads, d = ((1024, 2048, 4096), 4, 64) if dev.gpu else ((256, 512, 1024), 2, 16)
    flash, fused = ([min(_attention_step_peak(dev, T, mode, heads, d) for _ in range(2)) for T in lengths]
                    for mode in ("flash", "fused"))
    for a, b in zip(flash, flash[1:]):
        assert 1.5 < b / a < 2.5
    assert fused[-1] / fused[-2] > 3.0
    assert flash[-1] * 10 < fused[-1]


# ---------------------------------------------------------------- label-smoothed cross-entropy
CE_SHAPES = [(1, 1), (3, 7), (5, 31), (2, 3, 256), (4, 257), (2, 1000)]


def _ce_reference(x, t, ignore, eps):
    """(loss per row, gradient of Σ w·loss) in float64 from the op's own reference pieces."""
    x = np.asarray(x, np.float64)
    V = x.shape[-1]
    _, _, loss = smoothed_nll(np, x, t[..., None], eps=eps)
    keep = t != ignore
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    q = eps / V + (1 - eps) * np.eye(V)[t]
    return np.where(keep, loss[..., 0], 0.0), keep, p - q


@pytest.mark.parametrize("shape", CE_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_fused_cross_entropy_kernel_matches_the_reference(dev, shape, dtype, eps):
    """Forward: (1-ε)·(lse - x_t) + ε·(lse - mean x), 0 for an ignored target; backward:
    w·(softmax - q), out of place and written over the logits, which give the same bits."""
    rng = _rng("ce", shape, dtype, eps)
    dt = _half(dtype) if dtype != "float64" else np.dtype(np.float64)
    V = shape[-1]
    x = _randn(dev, rng, shape, dt, 4.0)
    t_host = rng.integers(0, V, shape[:-1])
    t_host.reshape(-1)[0] = 0  # the first row's target is ignored
    t = dev.asarray(t_host)
    w = dev.asarray(rng.standard_normal(shape[:-1]) * (t_host != 0))
    assert ce_kernels.applies(x.dtype, x.shape)
    loss, lse = ce_kernels.forward(x, t, 0, eps)
    g = ce_kernels.backward(x, t, lse, w, eps)
    loss_ref, keep, dist = _ce_reference(mt.backend.to_numpy(x.astype(np.float32 if dtype != "float64" else dt)),
                                         t_host, 0, eps)
    g_ref = mt.backend.to_numpy(w)[..., None] * dist
    tol = 1e-12 if dtype == "float64" else TOL[dtype]
    assert _rel(loss, loss_ref) < tol and _rel(g, g_ref) < tol
    assert float(abs(mt.backend.to_numpy(loss).reshape(-1)[0])) == 0.0  # the ignored row
    in_place = x.copy()
    assert ce_kernels.backward(in_place, t, lse, w, eps, out=in_place) is in_place
    assert (mt.backend.to_numpy(in_place).view(np.uint8) == mt.backend.to_numpy(g).view(np.uint8)).all()


def test_fused_cross_entropy_is_bitwise_deterministic_and_stable_for_large_logits(dev):
    """The warps' partials are combined in a fixed order; logits of 1e4 (exp would overflow
    without the running max) give the float64 reference's losses, to float32's resolution there."""
    rng = _rng("ce-big")
    x = _randn(dev, rng, (6, 3001), np.float32, 1.0) + dev.asarray(np.float32(1e4))
    t_host = rng.integers(0, 3001, 6)
    t = dev.asarray(t_host)
    first = ce_kernels.forward(x, t, None, 0.1)
    again = ce_kernels.forward(x, t, None, 0.1)
    for a, b in zip(first, again):
        assert (mt.backend.to_numpy(a) == mt.backend.to_numpy(b)).all()
    loss_ref, _, _ = _ce_reference(mt.backend.to_numpy(x), t_host, None, 0.1)
    error = np.abs(mt.backend.to_numpy(first[0]).astype(np.float64) - loss_ref).max()
    assert error < 4 * np.spacing(np.float32(1e4))  # lse - x_t of two values near 1e4: a few of their ulps


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore", [0, -100])  # a class, and a value outside the classes
def test_cross_entropy_takes_the_fused_kernels_and_gradchecks_through_them(dev, reduction, ignore):
    """The public function routes to FusedCrossEntropy where the kernels may run and to the xp
    reference otherwise: the same losses and gradients, and a float64 gradcheck through the kernels."""
    rng = _rng("ce-op", reduction, ignore)
    x = rng.standard_normal((3, 4, 11))
    t = rng.integers(0, 11, (3, 4))
    t[0, 0] = ignore  # ignored
    calls = []
    launcher = cuda.launcher("cross_entropy")
    real = launcher.forward

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    def loss_and_grad():
        u = mt.tensor(x, requires_grad=True, device=dev.device)
        loss = F.cross_entropy(u, mt.tensor(t, device=dev.device), ignore_index=ignore, label_smoothing=0.1,
                               reduction=reduction)
        (loss.sum() if reduction == "none" else loss).backward()
        return mt.backend.to_numpy(loss.data), mt.backend.to_numpy(u.grad.data)

    launcher.forward = counted
    try:
        fused = loss_and_grad()
        assert calls
        with cuda.use_kernels(False):
            reference = loss_and_grad()
        assert len(calls) == 1
    finally:
        launcher.forward = real
    for a, b in zip(fused, reference):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    u = mt.tensor(x, requires_grad=True, device=dev.device)
    target = mt.tensor(t, device=dev.device)
    summed = (lambda v: F.cross_entropy(v, target, ignore_index=ignore, label_smoothing=0.1, reduction="none").sum()) \
        if reduction == "none" else (lambda v: F.cross_entropy(v, target, ignore_index=ignore, label_smoothing=0.1,
                                                               reduction=reduction))
    assert mt.gradcheck(summed, [u])


def test_fused_cross_entropy_with_overwrite_writes_the_gradient_over_the_logits_once(dev):
    rng = _rng("ce-overwrite")
    x = rng.standard_normal((5, 40)).astype(np.float32)
    t = mt.tensor(rng.integers(1, 40, 5), device=dev.device)
    plain = mt.tensor(x, requires_grad=True, device=dev.device)
    reused = mt.tensor(x, requires_grad=True, device=dev.device)
    through_reused = reused * 1.0  # the logits an op made: a temporary
    want = F.cross_entropy(plain * 1.0, t, label_smoothing=0.1)
    got = F.cross_entropy(through_reused, t, label_smoothing=0.1, overwrite=True)
    want.backward(retain_graph=True)
    got.backward(retain_graph=True)
    np.testing.assert_array_equal(mt.backend.to_numpy(reused.grad.data), mt.backend.to_numpy(plain.grad.data))
    np.testing.assert_array_equal(mt.backend.to_numpy(through_reused.data), mt.backend.to_numpy(reused.grad.data))
    with pytest.raises(mt.GraphError, match="backpropagated only once"):
        got.backward()


# ---------------------------------------------------------------- dropout, its mask drawn in the kernel
# Random123's known answers for Philox4x32-10 (tests/kat_vectors): counter, key, the four words
PHILOX_KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
              ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
              ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
               (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


@pytest.mark.parametrize("counter, key, words", PHILOX_KAT, ids=["zeros", "ones", "pi"])
def test_the_kernels_philox_gives_random123s_known_answers(dev, counter, key, words):
    got = dropout_kernels.philox(dev.asarray(np.array([counter], np.uint32)), key)
    assert mt.backend.to_numpy(got)[0].tolist() == list(words)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_kernel_keeps_one_minus_p_and_scales_the_survivors(dev, dtype, p):
    """Over 2¹⁶ entries the kept share is within 5 standard deviations of 1-p, every survivor
    is x/(1-p) rounded once to the dtype, and the dropped are exactly 0."""
    dt = _half(dtype)
    n = 1 << 16
    x = _randn(dev, _rng("dropout", dtype, p), (n,), dt)
    y = mt.backend.to_numpy(dropout_kernels.apply(x, p, 1234, 0))
    xs = mt.backend.to_numpy(x)
    kept = y != 0
    assert abs(kept.mean() - (1 - p)) < 5 * np.sqrt(p * (1 - p) / n), kept.mean()
    scaled = (xs.astype(np.float64 if dt == np.float64 else np.float32) * (1.0 / (1.0 - p))).astype(dt)
    np.testing.assert_array_equal(y[kept], scaled[kept])


def test_dropout_kernel_masks_follow_seed_and_offset_only(dev):
    """The same seed and offset give the same mask (the backward redraws the forward's), and
    another seed or the next offset gives another; a 3-entry tail is drawn like the rest."""
    ones = dev.asarray(np.ones(4099, np.float32))
    mask = lambda seed, offset: mt.backend.to_numpy(dropout_kernels.apply(ones, 0.5, seed, offset)) != 0  # noqa: E731
    a = mask(7, 0)
    assert np.array_equal(a, mask(7, 0))
    assert not np.array_equal(a, mask(8, 0)) and not np.array_equal(a, mask(7, 1))
    np.testing.assert_array_equal(mask(7, 1)[:-4], a[4:])   # offset 1: the same stream, 4 entries on


def test_dropout_takes_the_kernel_and_its_backward_drops_what_the_forward_dropped(dev, monkeypatch):
    """F.dropout routes to the kernel where kernels may run (the reference otherwise); the
    gradient of sum(y ⊙ c) is c ⊙ keep/(1-p) with the forward's own mask; a float64 gradcheck
    passes through it (reseeded before each evaluation, so every one draws the same mask)."""
    rng = _rng("dropout op")
    launcher = cuda.launcher("dropout")
    calls = []
    real = launcher.apply
    monkeypatch.setattr(launcher, "apply", lambda *a, **k: calls.append(1) or real(*a, **k))
    x = mt.tensor(rng.standard_normal((5, 33)), requires_grad=True, device=dev.device)
    c = rng.standard_normal((5, 33))
    mt.manual_seed(3)
    y = F.dropout(x, 0.25)
    (y * mt.tensor(c, device=dev.device)).sum().backward()
    assert len(calls) == 2                                   # forward and backward, one launch each
    keep = mt.backend.to_numpy(y.data) != 0
    assert 0 < keep.mean() < 1
    np.testing.assert_allclose(mt.backend.to_numpy(x.grad.data), c * keep / 0.75, rtol=1e-12)
    with cuda.use_kernels(False):
        F.dropout(x, 0.25)
    assert len(calls) == 2                                   # kernels off: the reference

    def reseeded(v):
        mt.manual_seed(3)
        return (F.dropout(v, 0.25) * mt.tensor(c, device=dev.device)).sum()
    assert mt.gradcheck(reseeded, [x])


# ---------------------------------------------------------------- Adam, every parameter in one launch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_adam_in_one_launch_makes_the_numpy_adams_updates(dev, dtype, weight_decay, monkeypatch):
    """Parameters of several shapes (an empty one among them), three steps: the one-launch
    kernel gives the per-parameter NumPy form's weights and moments (float64 to 1e-13, float32
    to the last bits FMA contraction moves), in one launch per step."""
    rng = _rng("adam", dtype, weight_decay)
    shapes = [(3, 4), (5,), (0,), (7, 2, 3), (300,)]
    start = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = [[rng.standard_normal(s).astype(dtype) for s in shapes] for _ in range(3)]
    launches = []
    real = adam_kernels.step
    monkeypatch.setattr(adam_kernels, "step", lambda *a, **k: launches.append(1) or real(*a, **k))

    def train(device, kernels):
        params = [mt.tensor(w.copy(), device=device, requires_grad=True) for w in start]
        opt = mt.optim.Adam(params, lr=0.01, betas=(0.9, 0.98), eps=1e-9, weight_decay=weight_decay)
        with cuda.use_kernels(kernels):
            for step in grads:
                for p, g in zip(params, step):
                    p.grad = mt.tensor(g, device=device)
                opt.step()
        return [mt.backend.to_numpy(a) for p, st in zip(params, opt.state) for a in (p.data, st["m"], st["v"])]

    fused = train(dev.device, True)
    assert len(launches) == 3
    reference = train("cpu", False)
    tol = 1e-13 if dtype == "float64" else 1e-6
    for a, b in zip(fused, reference):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def _record_launches(monkeypatch, module) -> list:
    """Every launch of ``module``'s kernels from now on, as (kernel, grid, block, args): what a CUDA
    graph keeps of a launch, to run it again with the very same arguments."""
    launches = []
    real = module.kernel

    def recording(*a, **k):
        fn = real(*a, **k)

        def launch(grid, block, args, **kw):
            launches.append((fn, grid, block, args))
            return fn(grid, block, args, **kw)
        return launch

    monkeypatch.setattr(module, "kernel", recording)
    return launches


def test_launches_replayed_with_their_arguments_read_the_update_numbers_the_host_wrote_since(dev, monkeypatch):
    """A CUDA graph replays each launch with the arguments it was captured with, so a number that
    changes from one update to the next must be read from device memory, written by the host
    between replays. Adam's launch of one update, run again with its own arguments after the host
    wrote the next update's step size, bias correction and gradient scale, gives the next update's
    eager weights and moments bit for bit (and without that write, other bits: the numbers are
    read there); dropout's and the fused LayerNorm's launches, run again after the host wrote the
    next seed into the seed word, give that seed's eager outputs."""
    rng = _rng("replayed launches")
    shapes = [(3, 4), (5,), (300,)]
    start = [rng.standard_normal(sh).astype(np.float32) for sh in shapes]
    grads = [rng.standard_normal(sh).astype(np.float32) for sh in shapes]
    first, second = (0.01, 1.3, 0.5), (0.02, 1.1, 0.25)   # step size, 1/sqrt(1 - b2^t), gradient scale

    def state():
        return ([dev.asarray(w.copy()) for w in start], [dev.asarray(g) for g in grads],
                [dev.asarray(np.zeros(sh, np.float32)) for sh in shapes], [dev.asarray(np.zeros(sh, np.float32)) for sh in shapes])

    def adam(arrays, numbers):
        adam_kernels.step(*arrays, 0.9, 0.98, 1e-9, 0.0, numbers=lambda: numbers)

    def host(arrays):
        return [mt.backend.to_numpy(a).tobytes() for group in (arrays[0], arrays[2], arrays[3]) for a in group]

    eager = state()
    adam(eager, first)
    adam(eager, second)
    launches = _record_launches(monkeypatch, adam_kernels)
    for write in (True, False):
        replayed = state()
        adam(replayed, first)
        fn, grid, block, args = launches[-1]
        if write:
            args[-2][...] = dev.asarray(np.array(second))   # the numbers, as a graph runner writes them
        fn(grid, block, args)
        assert (host(replayed) == host(eager)) == write

    x = dev.asarray(rng.standard_normal((6, 64)).astype(np.float32))
    sub = dev.asarray(rng.standard_normal((6, 64)).astype(np.float32))
    w, b = dev.asarray(np.ones(64, np.float32)), dev.asarray(np.zeros(64, np.float32))
    for module, run in [(dropout_kernels, lambda seed: (dropout_kernels.apply(x, 0.5, seed, 3),)),
                        (ln_kernels, lambda seed: ln_kernels.residual_forward(x, sub, w, b, 1e-5, 0.5, seed, 3)[:2])]:
        want = [mt.backend.to_numpy(a) for a in run(22)]
        launches = _record_launches(monkeypatch, module)
        outputs = run(21)
        assert not np.array_equal(mt.backend.to_numpy(outputs[0]), want[0])
        fn, grid, block, args = launches[-1]
        dropout_kernels.seed_word(dev.xp if dev.gpu else emulator.arrays, 22)
        fn(grid, block, args)
        for got, expected in zip(outputs, want):
            np.testing.assert_array_equal(mt.backend.to_numpy(got), expected)


# ---------------------------------------------------------------- loss scaling, every gradient in one launch
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("plant", [None, "inf", "nan"])
def test_unscale_in_one_launch_makes_the_per_gradient_forms_gradients_and_verdict(dev, dtype, plant, monkeypatch):
    """LossScaler.unscale_ with the kernel and without it (kernels off: a product and a sum per
    gradient): the same gradients bit for bit, and the same verdict, False when an inf or a NaN
    was planted in one gradient; one launch for all of them."""
    dt = _half(dtype)
    rng = _rng("unscale", dtype, plant)
    shapes = [(3, 4), (0,), (5,), (2, 3, 7)]
    start = [rng.standard_normal(s).astype(dt) for s in shapes]
    if plant:
        start[3].reshape(-1)[17] = np.inf if plant == "inf" else np.nan
    launches = []
    real = loss_scale_kernels.unscale
    monkeypatch.setattr(loss_scale_kernels, "unscale", lambda *a, **k: launches.append(1) or real(*a, **k))

    def unscaled(kernels):
        # what unscale_ reads of a parameter is its .grad (16-bit weights cannot require grad)
        params = [types.SimpleNamespace(grad=mt.tensor(g.copy(), device=dev.device)) for g in start]
        with cuda.use_kernels(kernels):
            ok = mt.amp.LossScaler(init_scale=2.0**10).unscale_(params, extra=3.0)
        return ok, [mt.backend.to_numpy(p.grad.data) for p in params]

    ok, grads = unscaled(True)
    assert launches == [1]
    ok_ref, grads_ref = unscaled(False)
    assert ok == ok_ref == (plant is None)
    for a, b in zip(grads, grads_ref):
        np.testing.assert_array_equal(a.astype(np.float64), b.astype(np.float64))   # (NaN equals NaN)


def test_unscale_kernel_counts_each_nonfinite_entry_and_a_large_finite_sum_is_no_overflow(dev):
    """The kernel looks at each entry: two infs count 2, and gradients whose sum would overflow
    float32 (the per-gradient form's test) but whose entries are finite count 0."""
    big = dev.asarray(np.full(4, 3e38, np.float32))
    assert int(mt.backend.to_numpy(loss_scale_kernels.unscale([big], 1.0))[0]) == 0
    two = dev.asarray(np.array([1.0, np.inf, -np.inf, 2.0], np.float32))
    assert int(mt.backend.to_numpy(loss_scale_kernels.unscale([two, big], 0.5))[0]) == 2


# ---------------------------------------------------------------- bias + ReLU
BIAS_RELU_SHAPES = [(1, 1), (3, 7), (9, 33), (130, 100), (2, 3, 70), (600, 40)]


@pytest.mark.parametrize("shape", BIAS_RELU_SHAPES, ids=str)
@pytest.mark.parametrize("dtype, bias_dtype", [("float32", "float32"), ("float16", "float32"),
                                               ("bfloat16", "float32"), ("bfloat16", "bfloat16"),
                                               ("float64", "float64")])
def test_bias_relu_kernels_match_the_reference(dev, shape, dtype, bias_dtype):
    """max(0, p + b) as the product's own dtype rounds the float32 (float64) sum, bit for bit,
    with a NaN kept; dp = dy ⊙ [y > 0] bit for bit; db = Σ_rows dp in the bias's dtype, to the
    tolerance of a float32 sum (the last shape gives several row ranges to stage 2)."""
    rng = _rng("bias relu", shape, dtype, bias_dtype)
    dt, bt = _half(dtype), _half(bias_dtype)
    cols = shape[-1]
    p, dy = _randn(dev, rng, shape, dt), _randn(dev, rng, shape, dt)
    b = _randn(dev, rng, (cols,), bt)
    p.reshape(-1)[min(5, p.size - 1)] = np.nan
    assert bias_relu_kernels.applies(dt, cols, b)
    acc = np.float64 if dtype == "float64" else np.float32
    want = np.maximum(mt.backend.to_numpy(p).astype(acc) + mt.backend.to_numpy(b).astype(acc), 0).astype(dt)
    y = bias_relu_kernels.forward(p, b)
    assert y is p and y.dtype == dt
    np.testing.assert_array_equal(mt.backend.to_numpy(y).astype(np.float64), want.astype(np.float64))
    dp, db = bias_relu_kernels.backward(dy, y, bt)
    assert dp.dtype == dt and db.dtype == bt and db.shape == (cols,)
    with np.errstate(invalid="ignore"):                                        # NaN > 0 is False
        dp_ref = np.where(want > 0, mt.backend.to_numpy(dy), 0).astype(dt)
    np.testing.assert_array_equal(mt.backend.to_numpy(dp).astype(np.float64), dp_ref.astype(np.float64))
    db_ref = dp_ref.astype(np.float64).reshape(-1, cols).sum(axis=0)
    assert _rel(db, db_ref) < (1e-12 if dtype == "float64" else TOL[bias_dtype])
    again = bias_relu_kernels.backward(dy, y, bt)[1]
    assert np.array_equal(mt.backend.to_numpy(again), mt.backend.to_numpy(db))      # a fixed order of sums


@pytest.mark.parametrize("groups, rows, cols", [(1, 1, 1), (1, 130, 100), (3, 9, 33), (2, 600, 40)], ids=str)
@pytest.mark.parametrize("dtype, bias_dtype", [("float32", "float32"), ("bfloat16", "float32"),
                                               ("float16", "float16"), ("float64", "float64")])
def test_the_bias_alone_is_added_in_place_group_by_group(dev, groups, rows, cols, dtype, bias_dtype):
    """relu=False: y = p + b rounded once from the float32 (float64) sum, bit for bit, negative
    values and a NaN kept; with groups, p (groups, rows, cols) takes bias row g in group g;
    products.add_bias takes the kernel and gives the same bits."""
    rng = _rng("bias alone", groups, rows, cols, dtype, bias_dtype)
    dt, bt = _half(dtype), _half(bias_dtype)
    shape = (rows, cols) if groups == 1 else (groups, rows, cols)
    p = _randn(dev, rng, shape, dt)
    p.reshape(-1)[min(5, p.size - 1)] = np.nan
    b = _randn(dev, rng, (cols,) if groups == 1 else (groups, cols), bt)
    assert bias_relu_kernels.applies(dt, cols, b, groups=groups)
    assert not bias_relu_kernels.applies(dt, cols, b, groups=groups + 1)
    acc = np.float64 if dtype == "float64" else np.float32
    b_rows = mt.backend.to_numpy(b).astype(acc)
    want = (mt.backend.to_numpy(p).astype(acc) + (b_rows if groups == 1 else b_rows[:, None, :])).astype(dt)
    again = p.copy()
    y = bias_relu_kernels.forward(p, b, relu=False)
    assert y is p and y.dtype == dt
    np.testing.assert_array_equal(mt.backend.to_numpy(y).astype(np.float64), want.astype(np.float64))
    assert products.add_bias(dev.xp, again, b) is again
    np.testing.assert_array_equal(mt.backend.to_numpy(again).astype(np.float64), want.astype(np.float64))


def test_linear_relu_takes_the_fused_kernels_and_gradchecks_through_them(dev, monkeypatch):
    """fusions.linear_relu runs the product without its bias, then one kernel each way
    (kernels off: relu(linear(x, W, b)), the reference); both give the same values and
    gradients, and a float64 gradcheck passes through the kernels."""
    rng = _rng("linear relu")
    calls = _counting(monkeypatch, bias_relu_kernels, "forward", "backward")
    x = mt.tensor(rng.standard_normal((2, 5, 6)), requires_grad=True, device=dev.device)
    w = mt.tensor(rng.standard_normal((6, 9)), requires_grad=True, device=dev.device)
    b = mt.tensor(rng.standard_normal(9), requires_grad=True, device=dev.device)
    c = mt.tensor(rng.standard_normal((2, 5, 9)), device=dev.device)

    def run():
        for t in (x, w, b):
            t.grad = None
        y = fusions.linear_relu(x, w, b)
        (y * c).sum().backward()
        return [mt.backend.to_numpy(a) for a in (y.data, x.grad.data, w.grad.data, b.grad.data)]

    fused = run()
    assert calls == ["forward", "backward"]
    with cuda.use_kernels(False):
        reference = run()
    assert calls == ["forward", "backward"]
    for a, r in zip(fused, reference):
        np.testing.assert_allclose(a, r, rtol=1e-12, atol=1e-12)
    assert 0 < (fused[0] > 0).mean() < 1                      # both sides of the kink are tested
    assert mt.gradcheck(fusions.linear_relu, [x, w, b])


def test_linear_relu_under_autocast_writes_16_bit_values_and_float32_parameter_gradients(dev):
    """Inside amp.autocast(bfloat16) the fused route gives the reference's bfloat16 output bit
    for bit (the float32 bias added to the product and rounded once, then the max) and float32
    gradients for W and b."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = _rng("linear relu autocast")
    x = mt.tensor(rng.standard_normal((7, 16)).astype(np.float32), device=dev.device)
    w = mt.tensor(rng.standard_normal((16, 40)).astype(np.float32), requires_grad=True, device=dev.device)
    b = mt.tensor(rng.standard_normal(40).astype(np.float32), requires_grad=True, device=dev.device)

    def run():
        w.grad = b.grad = None
        with mt.amp.autocast("bfloat16"):
            y = fusions.linear_relu(x, w, b)
        F.cast(y, np.float32).sum().backward()
        return y, w.grad, b.grad

    y, gw, gb = run()
    with cuda.use_kernels(False):
        y_ref, gw_ref, gb_ref = run()
    assert y.dtype == y_ref.dtype and gw.dtype == np.float32 and gb.dtype == np.float32
    if dev.gpu:                                 # (NumPy's bfloat16 product comes out in float32)
        assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(mt.backend.to_numpy(y.data).astype(np.float32),
                                  mt.backend.to_numpy(y_ref.data).astype(np.float32))
    np.testing.assert_allclose(mt.backend.to_numpy(gb.data), mt.backend.to_numpy(gb_ref.data), rtol=1e-6)
    np.testing.assert_allclose(mt.backend.to_numpy(gw.data), mt.backend.to_numpy(gw_ref.data), rtol=1e-2, atol=1e-2)


# ---------------------------------------------------------------- the 16-bit weights in one launch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_casting_many_arrays_in_one_launch_rounds_as_astype_does(dev, dtype):
    """Arrays of several shapes (an empty one among them) with ties, subnormals, overflow, inf
    and NaN: the same bits as astype (NaN as NaN), in one launch."""
    dt = _half(dtype)
    rng = _rng("cast", dtype)
    special = np.array([0.0, -0.0, 1.0, 1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-8, 1 + 3 * 2**-8, 2**-20, 2**-130,
                        65520.0, 3e38, -np.inf, np.inf, np.nan], np.float32)
    arrays = [dev.asarray(special.reshape(2, 7)), dev.asarray(np.zeros((0, 3), np.float32)),
              dev.asarray(rng.standard_normal((33, 65)).astype(np.float32) * 100)]
    assert cast_kernels.applies(arrays, dt)
    assert not cast_kernels.applies(arrays + [arrays[2].T], dt)                 # not C-contiguous
    before = dict(emulator.launches)
    copies = cast_kernels.cast_all(arrays, dt)
    if not dev.gpu:
        assert sum(emulator.launches.values()) - sum(before.values()) == 1
    for a, c in zip(arrays, copies):
        with np.errstate(over="ignore"):                                       # 3e38 to float16: inf
            want = mt.backend.to_numpy(a).astype(dt)
        got = mt.backend.to_numpy(c)
        assert got.dtype == dt and got.shape == want.shape
        nan = np.isnan(want.astype(np.float32))
        assert np.array_equal(np.isnan(got.astype(np.float32)), nan)
        assert np.array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))


def test_autocast_with_weights_casts_them_in_one_launch_and_changes_no_value(dev, monkeypatch):
    """amp.autocast(weights=...) makes every floating matrix's 16-bit copy on entering, in one
    launch; the products read those copies (no cast of their own), and the outputs and float32
    gradients are the same bits as when each weight is cast at its first product."""
    pytest.importorskip("ml_dtypes")
    rng = _rng("autocast weights")
    mt.manual_seed(0)
    model = mt.nn.Sequential(mt.nn.Linear(16, 24), mt.nn.LayerNorm(24), mt.nn.Linear(24, 8)).to(dev.device)
    x = mt.tensor(rng.standard_normal((5, 16)).astype(np.float32), device=dev.device)
    casts = _counting(monkeypatch, cast_kernels, "cast_all")
    made = []                                   # what the products cast themselves
    real_cast_once = linalg.cast_once
    monkeypatch.setattr(linalg, "cast_once", lambda t, cast: real_cast_once(t, lambda a: made.append(a) or cast(a)))
    matrices = [p.data for p in model.parameters() if p.ndim == 2]

    def run(weights):
        for p in model.parameters():
            p.grad = None
        with mt.amp.autocast("bfloat16", weights=weights):
            y = model(x)
        F.cast(y, np.float32).sum().backward()
        return [mt.backend.to_numpy(a).astype(np.float32) for a in [y.data] + [p.grad.data for p in model.parameters()]]

    plain = run(None)
    assert casts == [] and sum(any(m is w for m in made) for w in matrices) == 2
    made.clear()
    precast = run(model.parameters())
    assert casts == ["cast_all"] and not any(m is w for m in made for w in matrices)
    for a, b in zip(precast, plain):
        np.testing.assert_array_equal(a, b)
    assert all(p.grad.dtype == np.float32 for p in model.parameters())


# ---------------------------------------------------------------- tensor-core products (common.cuh)
MMA_TILE = r"""
#include "common.cuh"
// one warp: D (16 x 8) = A (16 x 16) B (16 x 8) + C, all row-major in memory, through the
// fragments common.cuh documents
template <typename T>
__global__ void mma_tile(const T* A, const T* B, const float* C, float* D) {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    unsigned int a[4], b[2];
    for (int r = 0; r < 4; ++r) {
        const int row = g + (r % 2) * 8, col = 2 * t + (r / 2) * 8;
        a[r] = A[row * 16 + col].bits | (static_cast<unsigned int>(A[row * 16 + col + 1].bits) << 16);
    }
    for (int r = 0; r < 2; ++r) {
        const int k = 2 * t + r * 8;
        b[r] = B[k * 8 + g].bits | (static_cast<unsigned int>(B[(k + 1) * 8 + g].bits) << 16);
    }
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) c[i] = C[(g + (i / 2) * 8) * 8 + 2 * t + i % 2];
    mma_16x8x16<T>(d, a, b, c);
    for (int i = 0; i < 4; ++i) D[(g + (i / 2) * 8) * 8 + 2 * t + i % 2] = d[i];
}

// D (16 x 8) = A (16 x 8) B (8 x 8) + C in TF32, the float inputs rounded by to_tf32
__global__ void mma_tile_tf32(const float* A, const float* B, const float* C, float* D) {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    unsigned int a[4], b[2];
    for (int r = 0; r < 4; ++r) a[r] = to_tf32(A[(g + (r % 2) * 8) * 8 + t + (r / 2) * 4]);
    for (int r = 0; r < 2; ++r) b[r] = to_tf32(B[(t + r * 4) * 8 + g]);
    float c[4], d[4];
    for (int i = 0; i < 4; ++i) c[i] = C[(g + (i / 2) * 8) * 8 + 2 * t + i % 2];
    mma_16x8x8_tf32(d, a, b, c);
    for (int i = 0; i < 4; ++i) D[(g + (i / 2) * 8) * 8 + 2 * t + i % 2] = d[i];
}

// one warp: ldmatrix_x2 of the 16 x 8 matrix M (row-major in memory), staged in shared memory with
// rows of 16 values; lane 8i + r points at row r of the 8 x 8 block (0, 8i) of M (lanes 16..31 at
// a row that is not read). R[lane][i] is the lane's register i.
template <bool TRANS>
__global__ void ldmatrix_tile(const f16* M, unsigned int* R) {
    __shared__ __align__(16) f16 Ms[8][16];
    const int lane = threadIdx.x;
    for (int e = lane; e < 128; e += 32) Ms[e / 16][e % 16] = M[e];
    __syncwarp();
    unsigned int r[2];
    ldmatrix_x2<TRANS>(r, &Ms[lane % 8][lane < 16 ? 8 * (lane / 8) : 0]);
    for (int k = 0; k < 2; ++k) R[lane * 2 + k] = r[k];
}
"""

# One warpgroup (128 threads): D (64 x N) = A (64 x 16) B (16 x N) + C through wgmma_64xNx16 (+ C
# only where ACCUMULATE), A, B, C and D row-major in memory. B is staged in wgmma's core matrices as
# the flash kernels stage their tiles: with B_T its columns as rows (16 values each,
# TileLayout<T, 16, true>), else its rows (TileLayout<T, N, true>), with the descriptors
# tile_product builds. EARLY (the emulator alone: the hardware leaves it undefined) is D as read
# after the commit and before the wait.
WGMMA_TILE = r"""
#include "common.cuh"
template <typename T, int N, bool B_T>
__global__ void wgmma_tile(const T* A, const T* B, const float* C, float* D, float* EARLY, int ACCUMULATE) {
    __shared__ __align__(128) T Bs[16 * N];
    const int x = threadIdx.x, warp = x / 32, lane = x % 32, g = lane / 4, t = lane % 4;
    for (int e = x; e < 16 * N; e += 128) {
        const int k = e / N, n = e % N;
        const int at = B_T ? ((n / 8) * 2 + k / 8) * 64 + 8 * (n % 8) + k % 8     // B's columns as rows
                           : ((k / 8) * (N / 8) + n / 8) * 64 + 8 * (k % 8) + n % 8;  // B's rows
        Bs[at] = B[e];
    }
    fence_async_shared();
    __syncthreads();
    unsigned int a[4];
    for (int r = 0; r < 4; ++r) {
        const int row = 16 * warp + g + (r % 2) * 8, col = 2 * t + (r / 2) * 8;
        a[r] = A[row * 16 + col].bits | (static_cast<unsigned int>(A[row * 16 + col + 1].bits) << 16);
    }
    float d[N / 8][4];
    for (int i = 0; i < N / 8; ++i)
        for (int e = 0; e < 4; ++e) d[i][e] = C[(16 * warp + g + (e / 2) * 8) * N + 8 * i + 2 * t + e % 2];
    const WgDesc b = B_T ? wg_desc(Bs, 128, 256) : wg_desc(Bs, 16 * N, 128);
    wg_fence();
    wgmma_64xNx16<T, N, B_T>(d, a, b, ACCUMULATE != 0);
    wg_commit();
    if (EARLY)
        for (int i = 0; i < N / 8; ++i)
            for (int e = 0; e < 4; ++e) EARLY[(16 * warp + g + (e / 2) * 8) * N + 8 * i + 2 * t + e % 2] = d[i][e];
    wg_wait<0>();
    wg_settle<N / 8>(d);
    for (int i = 0; i < N / 8; ++i)
        for (int e = 0; e < 4; ++e) D[(16 * warp + g + (e / 2) * 8) * N + 8 * i + 2 * t + e % 2] = d[i][e];
}
"""


def _own_kernel(dev, text: str, expression: str, options: tuple = ()):
    """A kernel from CUDA text of the test's own: the emulator's build, or NVRTC's on the GPU
    (with ``options``)."""
    if not dev.gpu:
        return emulator.compile_source(text, expression)
    from minitensor.cuda import sources  # noqa: PLC0415

    module = dev.xp.RawModule(code=sources.with_common(text), options=options, name_expressions=(expression,))
    return module.get_function(expression)


def _require_hopper(dev):
    """wgmma runs on the emulator and on compute capability 9.0 alone."""
    if dev.gpu:
        require(dev.xp.cuda.Device().compute_capability == "90", "wgmma needs a GPU of compute capability 9.0")


def _tf32(a):
    """float32 to TF32 as cvt.rna.tf32.f32 rounds (to nearest, ties away from zero), in float32."""
    u = np.asarray(a, np.float32).view(np.uint32)
    return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "tf32"])
@pytest.mark.parametrize("values", ["integers", "normal"])
def test_one_warps_tensor_core_product_follows_the_documented_fragments(dev, dtype, values):
    """mma_16x8x16 (f16, bf16) and mma_16x8x8_tf32 through the fragment layout common.cuh
    documents: small integers give A B + C exactly (any order of the sums), normal values agree
    with float64 to float32 rounding. The emulator's shuffle model and the GPU's mma.sync
    instruction run the same test, so a layout the hardware reads differently fails there."""
    rng = _rng("mma", dtype, values)
    k = 8 if dtype == "tf32" else 16
    draw = (lambda shape: rng.integers(-8, 9, shape).astype(np.float64)) if values == "integers" else \
        (lambda shape: rng.standard_normal(shape))
    a64, b64, c64 = draw((16, k)), draw((k, 8)), draw((16, 8))
    if dtype == "tf32":
        a, b = a64.astype(np.float32), b64.astype(np.float32)
        exact_a, exact_b = _tf32(a).astype(np.float64), _tf32(b).astype(np.float64)
        kernel = _own_kernel(dev, MMA_TILE, "mma_tile_tf32")
    else:
        dt = _half(dtype)
        a, b = a64.astype(dt), b64.astype(dt)
        exact_a, exact_b = a.astype(np.float64), b.astype(np.float64)
        kernel = _own_kernel(dev, MMA_TILE, f"mma_tile<{HALF_CTYPES[dtype]}>")
    c = c64.astype(np.float32)
    d = dev.asarray(np.full((16, 8), np.nan, np.float32))
    kernel((1,), (32,), tuple(dev.asarray(x) for x in (a, b, c)) + (d,))
    want = exact_a @ exact_b + c.astype(np.float64)
    got = mt.backend.to_numpy(d).astype(np.float64)
    if values == "integers":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * (np.abs(exact_a) @ np.abs(exact_b)).max())


@pytest.mark.parametrize("trans", [False, True])
def test_one_warps_ldmatrix_follows_the_documented_fragments(dev, trans):
    """ldmatrix_x2 (common.cuh) hands lane 4g + t, in register i, the pair (M_i[g][2t], M_i[g][2t+1])
    of the 8 x 8 matrix M_i whose row addresses lanes 8i..8i+7 gave, or with TRANS the pair
    (M_i[2t][g], M_i[2t+1][g]), the lower index in the low half. Every 16-bit pattern is distinct,
    so any value from the wrong place fails; the GPU's ldmatrix instruction runs the same test."""
    bits = _rng("ldmatrix", trans).permutation(2 ** 16)[:128].astype(np.uint16).reshape(8, 16)
    kernel = _own_kernel(dev, MMA_TILE, f"ldmatrix_tile<{'true' if trans else 'false'}>")
    out = dev.asarray(np.zeros((32, 2), np.uint32))
    kernel((1,), (32,), (dev.asarray(bits.view(np.float16)), out))
    want = np.zeros((32, 2), np.uint32)
    for lane in range(32):
        g, t = divmod(lane, 4)
        for i in range(2):
            m = bits[:, 8 * i:8 * i + 8].astype(np.uint32)
            lo, hi = (m[2 * t, g], m[2 * t + 1, g]) if trans else (m[g, 2 * t], m[g, 2 * t + 1])
            want[lane, i] = lo | (hi << 16)
    np.testing.assert_array_equal(mt.backend.to_numpy(out), want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("n", [32, 64])
@pytest.mark.parametrize("b_t", [True, False], ids=["K-major", "MN-major"])
def test_one_warpgroups_wgmma_follows_the_documented_layouts(dev, dtype, n, b_t):
    """wgmma_64xNx16 (common.cuh) through its register fragments and the core-matrix layout and
    descriptors the flash kernels stage B in, K-major (B's columns as rows) and MN-major (read
    transposed): small integers give A B + C exactly, and A B where it does not accumulate. The
    emulator's model and the GPU's wgmma run the same test, so a descriptor the hardware reads
    differently fails there."""
    _require_hopper(dev)
    rng = _rng("wgmma", dtype, n, b_t)
    dt = _half(dtype)
    a, b = (rng.integers(-8, 9, shape).astype(dt) for shape in ((64, 16), (16, n)))
    c = rng.integers(-8, 9, (64, n)).astype(np.float32)
    name = f"wgmma_tile<{HALF_CTYPES[dtype]}, {n}, {'true' if b_t else 'false'}>"
    kernel = _own_kernel(dev, WGMMA_TILE, name, build.SM90A)
    for accumulate in (1, 0):
        d = dev.asarray(np.full((64, n), np.nan, np.float32))
        kernel((1,), (128,), tuple(dev.asarray(x) for x in (a, b, c)) + (d, build.no_pointer(), np.int32(accumulate)))
        want = a.astype(np.float64) @ b.astype(np.float64) + (c if accumulate else 0)
        np.testing.assert_array_equal(mt.backend.to_numpy(d).astype(np.float64), want)


def test_a_wgmma_result_reaches_its_registers_only_at_the_wait():
    """On the emulator a warpgroup product's sums land in its accumulators at wgmma.wait_group,
    as on the hardware, where reading them before is undefined: a read between the commit and the
    wait sees C, the values from before the product, so a kernel that forgets the wait fails."""
    ok, why = emulator.available()
    require(ok, f"the CUDA emulator cannot run here: {why}")
    rng = _rng("wgmma early")
    a, b = (rng.integers(-8, 9, shape).astype(np.float16) for shape in ((64, 16), (16, 32)))
    c = rng.integers(-8, 9, (64, 32)).astype(np.float32)
    d, early = np.full((64, 32), np.nan, np.float32), np.full((64, 32), np.nan, np.float32)
    with cuda.emulate(True):
        emulator.compile_source(WGMMA_TILE, "wgmma_tile<f16, 32, true>")((1,), (128,), (a, b, c, d, early,
                                                                             np.int32(1)))
    np.testing.assert_array_equal(early, c)
    np.testing.assert_array_equal(d, a.astype(np.float64) @ b.astype(np.float64) + c)


def test_the_emulator_refuses_a_warpgroup_whose_warps_issue_different_products():
    """wgmma is issued by the 4 warps of a warpgroup together (.aligned): a kernel in which one warp
    skips a product (a hang or garbage on the hardware) fails on the emulator, naming the block
    and two threads that disagree."""
    ok, why = emulator.available()
    require(ok, f"the CUDA emulator cannot run here: {why}")
    product = "wgmma_64xNx16<T, N, B_T>(d, a, b, ACCUMULATE != 0);"
    assert WGMMA_TILE.count(product) == 1
    broken = WGMMA_TILE.replace(product, "if (warp != 3) " + product)
    rng = _rng("wgmma skipped")
    a, b = (rng.integers(-8, 9, shape).astype(np.float16) for shape in ((64, 16), (16, 32)))
    c, d = np.zeros((64, 32), np.float32), np.zeros((64, 32), np.float32)
    with cuda.emulate(True), pytest.raises(emulator.EmulatorError, match="must issue each one together"):
        emulator.compile_source(broken, "wgmma_tile<f16, 32, true>")((1,), (128,), (a, b, c, d, build.no_pointer(),
                                                                                 np.int32(1)))


@pytest.mark.parametrize(("meddling", "message"), [
    ("a[0] ^= 1u;", "A registers were written while its product was in flight"),
    ("d[0][0] = 1.f;", "accumulator was written while its product was in flight"),
    ("if (x == 0) Bs[0].bits ^= 1u;", "shared memory a wgmma reads \\(B\\) changed while its product was in flight"),
], ids=["A", "accumulator", "B"])
def test_the_emulator_refuses_operands_changed_while_a_wgmma_is_in_flight(meddling, message):
    """The hardware may read a product's A registers, accumulator and B tile until
    wgmma.wait_group: a kernel that writes any of them in between fails on the emulator."""
    ok, why = emulator.available()
    require(ok, f"the CUDA emulator cannot run here: {why}")
    commit = "    wg_commit();\n"
    assert WGMMA_TILE.count(commit) == 1
    broken = WGMMA_TILE.replace(commit, commit + "    " + meddling + "\n")
    rng = _rng("wgmma meddling")
    a, b = (rng.integers(-8, 9, shape).astype(np.float16) for shape in ((64, 16), (16, 32)))
    c, d = np.zeros((64, 32), np.float32), np.zeros((64, 32), np.float32)
    with cuda.emulate(True), pytest.raises(emulator.EmulatorError, match=message):
        emulator.compile_source(broken, "wgmma_tile<f16, 32, true>")((1,), (128,), (a, b, c, d, build.no_pointer(),
                                                                                 np.int32(1)))


# Each block in its turn folds its turn into ORDER (ORDER = 31 ORDER + turn + 1, modulo 2^32), a result
# that depends on the order of the turns. A block's turn is, by WAY: 0, its place in the order the
# blocks start (start_order, which counts in COUNTER); 1, blockIdx.x; 2, gridDim.x - 1 - blockIdx.x.
# Blocks that fold their turns into one word: by the order they start (0), by blockIdx (1), from
# the last blockIdx back (2), or each waiting for a turn that no block passes on (3). A wait that
# gives up reports the block's blockIdx and WAY as the flag's two numbers.
TURNS = r"""
#include "common.cuh"
template <int WAY>
__global__ void take_turns(unsigned int* ORDER, int* FLAG, int* COUNTER, int* STALLS) {
    __shared__ int slot;
    const int turn = WAY == 0 ? start_order(COUNTER, slot) : WAY == 1 ? blockIdx.x
                   : WAY == 2 ? gridDim.x - 1 - blockIdx.x : gridDim.x + blockIdx.x;
    if (turn > 0) await_turn(FLAG, turn, STALLS, blockIdx.x, WAY);
    if (threadIdx.x == 0) *ORDER = *ORDER * 31u + turn + 1;
    pass_turn(FLAG, turn + 1);
}
"""
START_ORDER, BY_INDEX, BACKWARDS, NEVER = "take_turns<0>", "take_turns<1>", "take_turns<2>", "take_turns<3>"
NO_STALL = (0,) * turns.WORDS


def _in_turns(blocks: int) -> tuple[int, int, tuple]:
    """(ORDER, FLAG, STALLS) when ``blocks`` blocks took turns 0 .. blocks - 1 in order."""
    fold = 0
    for turn in range(blocks):
        fold = (fold * 31 + turn + 1) % 2**32
    return fold, blocks, NO_STALL


def _take_turns(xp, fn, blocks: int) -> tuple[int, int, tuple]:
    """(ORDER, FLAG, STALLS) after ``fn`` (a TURNS kernel) ran ``blocks`` blocks of 128 threads."""
    order, flag, counter = xp.zeros(1, np.uint32), xp.zeros(1, np.int32), xp.zeros(1, np.int32)
    stalls = xp.zeros(turns.WORDS, np.int32)
    fn((blocks,), (128,), (order, flag, counter, stalls))
    return (int(mt.backend.to_numpy(order)[0]), int(mt.backend.to_numpy(flag)[0]),
            tuple(int(w) for w in mt.backend.to_numpy(stalls)))


def test_blocks_take_turns_in_the_order_they_start(dev):
    """common.cuh's start_order, await_turn and pass_turn (the one-pass backward adds dQ with them):
    64 blocks of 128 threads, each taking its turn by its place in the order the blocks start and
    folding that turn into one word, leave the fold of 1, 2, .., 64 in that order and pass the flag
    to 64, whichever order the blocks start in (the emulator starts them both ways). On a GPU the
    blocks run at once, and only the turns order them."""
    fn = _own_kernel(dev, TURNS, START_ORDER)
    for way in ("the GPU's",) if dev.gpu else emulator.BLOCK_ORDERS:
        with nullcontext() if dev.gpu else emulator.block_order(way):
            assert _take_turns(dev.xp, fn, 64) == _in_turns(64), way


@pytest.mark.parametrize(("expression", "order", "report"),
                         [(BACKWARDS, "index", (1, 0, 2, 3, 0)), (BY_INDEX, "reverse", (1, 3, 1, 3, 0))],
                         ids=["first waits for last", "by blockIdx, started backwards"])
def test_the_emulator_reports_a_block_that_waits_for_one_not_started(expression, order, report):
    """A block may only wait for blocks that started before it: on the emulator, which runs blocks
    one at a time, the first block of a kernel whose first block waits for the last (on a GPU it
    could wait for ever) gives up and reports its blockIdx, the turn and what the flag held, and so
    does one that takes turns by blockIdx when the blocks start from the last (a GPU promises no
    order), where the same kernel reports nothing in blockIdx order."""
    ok, why = emulator.available()
    require(ok, f"the CUDA emulator cannot run here: {why}")
    fn = emulator.compile_source(TURNS, expression)
    with cuda.emulate(True):
        if expression == BY_INDEX:
            assert _take_turns(np, fn, 4)[1:] == (4, NO_STALL)
        with emulator.block_order(order):
            assert _take_turns(np, fn, 4)[2] == report


# the bound of a wait, shortened for the test (common.cuh's default is 5 s)
SHORT_WAIT = "#define MT_TURN_WAIT_NS 20000000ull\n"


def test_a_wait_for_a_turn_that_never_comes_ends_and_reports_the_first_block_that_gave_up(dev):
    """common.cuh's await_turn is bounded: blocks that each wait for a turn no block passes on
    (on a GPU all at once, for the bound of 20 ms this test sets; on the emulator at once) end,
    and the words name the first block that gave up, the turn it waited for (its blockIdx plus
    the number of blocks) and the flag's kind; later launches wait normally once the words are
    zeroed."""
    never = _own_kernel(dev, SHORT_WAIT + TURNS, NEVER)
    order, flag, (given_up, block, way, turn, _held) = _take_turns(dev.xp, never, 8)
    assert (given_up, way) == (1, 3) and 0 <= block < 8 and turn == block + 8
    ordered = _own_kernel(dev, SHORT_WAIT + TURNS, START_ORDER)
    assert _take_turns(dev.xp, ordered, 8) == _in_turns(8)


def test_the_block_order_reaches_the_memory_check_and_an_unknown_order_is_refused():
    """Under check="memory" a launch runs in a subprocess: the blocks' order goes with it (the
    kernel that takes turns by blockIdx fails there too when its blocks start from the last). An
    order other than "index" or "reverse" is refused."""
    ok, why = emulator.available()
    require(ok, f"the CUDA emulator cannot run here: {why}")
    fn = emulator.compile_source(TURNS, BY_INDEX, "memory")
    assert _take_turns(np, fn, 4) == _in_turns(4)
    with emulator.block_order("reverse"):
        assert _take_turns(np, fn, 4)[2] == (1, 3, 1, 3, 0)
    with pytest.raises(ValueError, match="order must be one of"), emulator.block_order("random"):
        pass

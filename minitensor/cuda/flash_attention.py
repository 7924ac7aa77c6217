"""Launcher for the FlashAttention-style kernels of ``flash_attention.cu`` (CUDA cores, for
float32 and float64: the algorithm in its plainest form) and ``flash_attention_tc.cu`` (tensor
cores, for float16 and bfloat16, and for float32 in TF32 where :func:`minitensor.cuda.set_tf32`
allows it), and :class:`FlashAttention`, the attention op on this route.

The plain xp reference is :class:`minitensor.ops.attention.ScaledDotProductAttention`'s own
code (scores, softmax, weights); tests compare the two, and a float64 gradcheck goes through
the kernels themselves.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..ops.attention import ScaledDotProductAttention
from . import one_pass_backward_enabled, tf32_enabled, wgmma_enabled
from .build import SM90A, address, array_module, as4d, ctype, kernel, mask_view, no_pointer
from .turns import after_launch, stall_words

SOURCE, TC_SOURCE = "flash_attention.cu", "flash_attention_tc.cu"
SOURCES = (SOURCE, TC_SOURCE)


def source_of(name: str) -> str:
    """The file that holds the kernel instantiation ``name``."""
    return TC_SOURCE if name.startswith("flash_attention_tc_") else SOURCE

# CUDA-core kernels (float32, float64): (BQ, BK) of the forward, (BK, BQ) of the dK/dV pass, (BQ, BK)
# of the dQ pass: shared memory under 48 KB and no register spills at D = 64 (nvcc -Xptxas -v;
# tests/minitensor/cuda/test_sources.py)
TILES = {"float": ((64, 32), (64, 16), (64, 16)), "double": ((32, 32), (32, 8), (32, 8))}
HEAD_SIZES = {"float": (16, 32, 64), "double": (16, 32)}
# tensor-core kernels: 4 warps a block, each with MT blocks of 16 rows. Per head size: (BK, MT) of
# the forward (its inner tile of keys, and of rows a warp), BQ of the dK/dV pass (queries a tile; MT
# is 1) and (BK, MT) of the dQ pass: the staged tiles under 48 KB of shared memory and no register
# spills (nvcc -Xptxas -v, test_sources.py). Two blocks of 16 rows a warp halve the shared-memory
# reads of a product, where the registers allow it (not at head size 128, in the dK/dV pass or in
# TF32's dQ pass).
# f16 and bf16 always take them; float32 takes them in TF32 (``tf32=True``), where its values are
# twice as wide: smaller tiles, and no head size 128 (its dK/dV pass would spill). TF32's head-64
# forward takes 32 keys a tile: with 64, two buffers would not fit in 48 KB.
TC_TYPES = ("f16", "bf16")
TC_TILES = {32: ((64, 2), 64, (64, 2)), 64: ((64, 2), 64, (32, 2)), 128: ((32, 1), 16, (32, 1))}
TF32_TILES = {32: ((64, 2), 64, (64, 1)), 64: ((32, 2), 32, (32, 1))}
TC_ROWS = 64   # a block's rows where MT is 1
# Below this many queries a warp keeps one block of 16 rows (MT 1) whatever the tables say: a
# block of 128 rows would leave warps with no row (half of them at 64 queries, the base model's
# batches) and half as many blocks to spread over the GPU.
TC_TWO_BLOCKS_FROM = 128
# The same kernels with their products on Hopper's warpgroup instructions (wgmma, sm_90a: the
# template's last argument, WG): 16-bit storage, head sizes 32 and 64, the same tiles, the staged
# rows 16-byte aligned (they are copied in 16-byte pieces). Taken while set_wgmma is on, on a
# GPU of compute capability 9.0 and on the emulator: off by default until a GPU has measured them.
WG_HEAD_SIZES = (32, 64)
# The one-pass backward (set_one_pass_backward; 16-bit storage): the dK/dV kernel with DQ also adds
# each key block's share of dQ, in turns. Its tile of queries per head size: the two-pass dK/dV's,
# halved at head size 64, where the block's keys and a tile of dS must also fit in 48 KB of shared
# memory. The key blocks are TC_ROWS keys, as in the two passes.
ONE_PASS_BQ = {32: 64, 64: 32, 128: 16}


def _tc_tile(t: str, d: int, tf32: bool, Tq: int | None = None) -> tuple | None:
    """The tensor-core kernels' tiles for kernel type ``t``, head size ``d`` and ``Tq`` queries
    (None: the tables' own), or None where they do not take them (the CUDA cores may)."""
    tiles = (TC_TILES if t in TC_TYPES else TF32_TILES if tf32 and t == "float" else {}).get(d)
    if tiles is None or Tq is None or Tq >= TC_TWO_BLOCKS_FROM:
        return tiles
    (fk, _), bq, (qk, _) = tiles
    return (fk, 1), bq, (qk, 1)


def padded_head_size(d: int, t: str, tf32: bool = False) -> int | None:
    """The head size the kernels run at: d itself on the tensor cores, d rounded up to one of
    HEAD_SIZES on the CUDA cores; None where no kernel takes d."""
    if _tc_tile(t, d, tf32) is not None:
        return d
    if t in TC_TYPES:
        return None
    return next((D for D in HEAD_SIZES[t] if d <= D), None)


def applies(q, k, v, tf32: bool = False) -> bool:
    """q, k, v of one kernel dtype and one shape (B, H, T, d) up to 4-D, d the same for v:
    float32/float64 with d <= 64 (CUDA cores; float32 with ``tf32`` and d 32 or 64: tensor cores),
    float16/bfloat16 with d in 32, 64, 128 (tensor cores)."""
    t = ctype(q.dtype)
    return ((t in TILES or t in TC_TYPES) and k.dtype == q.dtype and v.dtype == q.dtype and 2 <= q.ndim <= 4
            and k.ndim == q.ndim and v.ndim == q.ndim and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
            and k.shape[-1] == q.shape[-1] == v.shape[-1] and k.shape[-2] == v.shape[-2]
            and q.shape[-2] > 0 and k.shape[-2] > 0 and padded_head_size(q.shape[-1], t, tf32) is not None)


def tensor_cores(q, tf32: bool = False) -> bool:
    """Whether arrays like ``q`` take the tensor-core kernels: 16-bit storage, or float32 in TF32
    (``tf32``) with head size 32 or 64."""
    return _tc_tile(ctype(q.dtype), q.shape[-1], tf32) is not None


def names(t: str, d: int, tf32: bool = False, Tq: int | None = None, wg: bool = False) -> tuple[str, str, str]:
    """The instantiations (forward, dK/dV, dQ) for type ``t``, head size ``d`` (float32 in TF32:
    ``t`` "float" with ``tf32``) and ``Tq`` queries (None: the longest sequences' kernels), with
    their products on wgmma where ``wg``."""
    D = padded_head_size(d, t, tf32)
    tile = _tc_tile(t, d, tf32, Tq)
    if tile is not None:
        (fk, fm), bq, (qk, qm) = tile
        w = ", true" if wg else ""
        return (f"flash_attention_tc_forward<{t}, {D}, {fk}, {fm}{w}>",
                f"flash_attention_tc_backward_dkdv<{t}, {D}, {bq}{w}>",
                f"flash_attention_tc_backward_dq<{t}, {D}, {qk}, {qm}{w}>")
    (fq, fk), (bk, bq), (qq, qk) = TILES[t]
    return (f"flash_attention_forward<{t}, {D}, {fq}, {fk}>", f"flash_attention_backward_dkdv<{t}, {D}, {bk}, {bq}>",
            f"flash_attention_backward_dq<{t}, {D}, {qq}, {qk}>")


def one_pass_names(t: str, d: int, wg: bool = False) -> tuple[str, str]:
    """The one-pass backward's instantiations (delta and turns, then dK, dV and dQ) for 16-bit type
    ``t`` and head size ``d``, with their products on wgmma where ``wg``."""
    bq = ONE_PASS_BQ[d]
    return (f"flash_attention_tc_delta<{t}, {d}, {bq}>",
            f"flash_attention_tc_backward_dkdv<{t}, {d}, {bq}, {'true' if wg else 'false'}, true>")


def instantiations(source: str | None = None) -> list[str]:
    """Every instantiation the launcher can ask for (of ``source`` alone, where given)."""
    return [name for name in _instantiations() if source in (None, source_of(name))]


def _instantiations() -> list[str]:
    short = TC_TWO_BLOCKS_FROM - 1
    return list(dict.fromkeys([name for t in TILES for D in HEAD_SIZES[t] for name in names(t, D)]
                              + [name for t in TC_TYPES for D in TC_TILES for Tq in (None, short)
                                 for name in names(t, D, Tq=Tq)]
                              + [name for D in TF32_TILES for Tq in (None, short)
                                 for name in names("float", D, tf32=True, Tq=Tq)]
                              + [name for t in TC_TYPES for D in ONE_PASS_BQ for name in one_pass_names(t, D)]))


def wgmma_instantiations() -> list[str]:
    """The wgmma kernels (sm_90a only: NVRTC compiles them with build.SM90A)."""
    short = TC_TWO_BLOCKS_FROM - 1
    return list(dict.fromkeys([name for t in TC_TYPES for D in WG_HEAD_SIZES for Tq in (None, short)
                               for name in names(t, D, Tq=Tq, wg=True)]
                              + [one_pass_names(t, D, wg=True)[1] for t in TC_TYPES for D in WG_HEAD_SIZES]))


def one_pass_applies(t: str, d: int) -> bool:
    """Whether the one-pass backward can run for type ``t`` and head size ``d``: 16-bit storage, d in
    ONE_PASS_BQ."""
    return t in TC_TYPES and d in ONE_PASS_BQ


def takes_one_pass(t: str, d: int) -> bool:
    """Whether it does: where it applies, while :func:`set_one_pass_backward
    <minitensor.cuda.set_one_pass_backward>` is on."""
    return one_pass_backward_enabled() and one_pass_applies(t, d)


def _hopper(a) -> bool:
    """Whether ``a`` lives where wgmma runs: the emulator (NumPy), or a GPU of compute capability
    9.0 (sm_90a code runs on no other)."""
    return isinstance(a, np.ndarray) or _compute_capability(a.device.id) == "90"


@lru_cache(maxsize=None)
def _compute_capability(device: int) -> str:
    from ..backend import cupy  # noqa: PLC0415 (only on CuPy arrays)

    return cupy().cuda.Device(device).compute_capability


def _rows_16_byte_aligned(a) -> bool:
    s = _strides4(a)
    return s is not None and address(a) % 16 == 0 and all(x * a.itemsize % 16 == 0 for x in s)


def wgmma_applies(t: str, d: int, *staged) -> bool:
    """Whether the wgmma kernels can run for type ``t`` and head size ``d`` here: 16-bit storage,
    d in WG_HEAD_SIZES, on the emulator or compute capability 9.0, and the rows of every array a
    kernel stages in shared memory (``staged``) 16-byte aligned."""
    return (t in TC_TYPES and d in WG_HEAD_SIZES and _hopper(staged[0])
            and all(_rows_16_byte_aligned(a) for a in staged))


def takes_wgmma(t: str, d: int, *staged) -> bool:
    """Whether they do: where they apply, while :func:`set_wgmma <minitensor.cuda.set_wgmma>` is on."""
    return wgmma_enabled() and wgmma_applies(t, d, *staged)


def _dims(q, k):
    B, H, Tq, d = as4d(q.shape)
    return B, H, Tq, k.shape[-2], d


# ---------------------------------------------------------------- tensor-core route (f16, bf16, tf32)
def _strides4(a) -> tuple | None:
    """(batch, head, time) strides in elements of ``a`` seen as (B, H, T, d), or None where the
    tensor-core kernels cannot read it as it is: each row contiguous, every row 4-byte aligned."""
    a4 = a.reshape(as4d(a.shape))
    s = tuple(x // a.itemsize for x in a4.strides)
    if a4.strides[-1] != a.itemsize or any(x * a.itemsize % 4 for x in s[:3]) or address(a) % 4:
        return None
    return s[:3]


def same_layout(a, b) -> bool:
    """One shape and the same strides on every axis longer than 1 (an axis of one element has
    no stride that matters)."""
    return a.shape == b.shape and all(x == y for x, y, n in zip(a.strides, b.strides, a.shape) if n > 1)


def _in_layout(a, ref):
    """``a`` with the strides of ``ref``, which has no gaps (a copy when they differ): the kernels
    read V through K's strides, and dO through O's."""
    if same_layout(a, ref):
        return a
    out = array_module(ref).empty_like(ref)
    out[...] = a
    return out


def _readable(a):
    """``a`` itself where the kernels can read it through its strides (gaps between rows
    included: Q, K and V as column blocks of one product), else a C-order copy."""
    return a if _strides4(a) is not None else array_module(a).ascontiguousarray(a)


def _pair(first, second):
    """``first`` and ``second`` readable through one set of strides (K and V; O and dO): both as
    they are where they share a readable layout, else ``second`` copied into ``first``'s, which
    is copied to C order first where it has gaps (``empty_like`` would leave none)."""
    first = _readable(first)
    if same_layout(first, second):
        return first, second
    if _has_gaps(first):
        first = array_module(first).ascontiguousarray(first)
    return first, _in_layout(second, first)


def _has_gaps(a) -> bool:
    """Whether ``a`` skips memory between its elements, in whatever order its axes lie (the
    layout ``empty_like`` would not give)."""
    step = a.itemsize
    for stride, n in sorted((s, n) for s, n in zip(a.strides, a.shape) if n > 1):
        if stride != step:
            return True
        step *= n
    return False


def _tc_args(cp, q, o, k, dk, mask, causal: bool, scale: float) -> tuple:
    """The arguments every tensor-core kernel ends with: mask view, sizes, and the strides of Q,
    of O (dO, dQ), of K (V) and of dK (dV). Outputs are made by ``empty_like``, which leaves no
    gaps, so an input with gaps has strides of its own."""
    B, H, Tq, Tk, _ = _dims(q, k)
    strides = _strides4(q) + _strides4(o) + _strides4(k) + _strides4(dk)
    return (mask_view(cp, mask, (B, H, Tq, Tk)) + (np.int32(H), np.int32(Tq), np.int32(Tk))
            + tuple(np.int64(x) for x in strides) + (np.int32(causal), np.float32(scale)))


def forward(q, k, v, mask, scale: float, causal: bool = False, tf32: bool = False):
    """(out, lse): out in q's order of axes, without gaps (``empty_like``); lse (..., Tq), in the
    kernels' accumulation dtype, +inf on rows with no allowed key. ``causal`` forbids key j > query i
    on top of ``mask`` (the tensor-core kernels then skip the tiles above the diagonal). ``tf32``:
    float32 on the tensor cores (see :func:`tensor_cores`)."""
    cp = array_module(q)
    B, H, Tq, Tk, d = _dims(q, k)
    t = ctype(q.dtype)
    if tensor_cores(q, tf32):
        q, (k, v) = _readable(q), _pair(k, v)
        out = cp.empty_like(q)
        lse = cp.empty(q.shape[:-1], dtype=np.float32)
        wg = takes_wgmma(t, d, k, v)   # the forward stages K and V
        fn = kernel(TC_SOURCE, names(t, d, tf32, Tq, wg)[0], cp, SM90A if wg else ())
        rows = TC_ROWS * _tc_tile(t, d, tf32, Tq)[0][1]
        fn((B * H, -(-Tq // rows)), (128,), (q, k, v, out, lse) + _tc_args(cp, q, out, k, k, mask, causal, scale))
        return out, lse
    if causal:
        raise ValueError("flash_attention.forward: causal=True is for the tensor-core kernels; pass the triangle in mask")
    q, k, v = (cp.ascontiguousarray(a) for a in (q, k, v))
    (BQ, BK), _, _ = TILES[t]
    out = cp.empty_like(q)
    lse = cp.empty(q.shape[:-1], dtype=q.dtype)
    fn = kernel(SOURCE, names(t, d)[0], cp)
    fn((B * H, (Tq + BQ - 1) // BQ), (BQ,),
       (q, k, v, out, lse) + mask_view(cp, mask, (B, H, Tq, Tk))
       + (np.int32(H), np.int32(Tq), np.int32(Tk), np.int32(d), np.float64(scale)))
    return out, lse


def backward(grad, q, k, v, out, lse, mask, scale: float, causal: bool = False, tf32: bool = False):
    """dq, dk, dv from the output's cotangent, recomputing the probabilities from lse."""
    cp = array_module(q)
    B, H, Tq, Tk, d = _dims(q, k)
    t = ctype(q.dtype)
    if tensor_cores(q, tf32):
        q, (k, v), (out, grad) = _readable(q), _pair(k, v), _pair(out, grad.astype(q.dtype, copy=False))
        dq, dk, dv = cp.empty_like(out), cp.empty_like(k), cp.empty_like(k)
        delta = cp.empty(q.shape[:-1], dtype=np.float32)   # Σ_c dO_ic O_ic: the dQ pass's, or the delta kernel's
        wg = takes_wgmma(t, d, q, k, v, grad)   # the dQ pass stages K and V, the dK/dV pass Q and dO
        options = SM90A if wg else ()
        tail = _tc_args(cp, q, out, k, dk, mask, causal, scale)
        key_blocks = -(-Tk // TC_ROWS)
        if takes_one_pass(t, d):
            return _one_pass(cp, t, d, wg, options, tail, key_blocks, q, k, v, out, grad, lse, delta, dq, dk, dv)
        _, dkdv, dq_name = names(t, d, tf32, Tq, wg)
        rows = TC_ROWS * _tc_tile(t, d, tf32, Tq)[2][1]
        kernel(TC_SOURCE, dq_name, cp, options)((B * H, -(-Tq // rows)), (128,),
                                                (q, k, v, out, grad, lse, delta, dq) + tail)
        kernel(TC_SOURCE, dkdv, cp, options)((B * H, key_blocks), (128,),
                                             (q, k, v, grad, lse, delta, dk, dv) + (no_pointer(),) * 4 + tail)
        return dq, dk, dv
    q, k, v, out = (cp.ascontiguousarray(a) for a in (q, k, v, out))
    grad = cp.ascontiguousarray(grad, dtype=q.dtype)
    _, (BKk, BQk), (BQq, BKq) = TILES[t]
    _, dkdv, dq_name = names(t, d)
    delta = (grad * out).sum(axis=-1)                      # Σ_c dO_ic O_ic, one per query
    m = mask_view(cp, mask, (B, H, Tq, Tk))
    tail = (np.int32(H), np.int32(Tq), np.int32(Tk), np.int32(d), np.float64(scale))
    dq, dk, dv = cp.empty_like(q), cp.empty_like(k), cp.empty_like(v)
    fn = kernel(SOURCE, dkdv, cp)
    fn((B * H, (Tk + BKk - 1) // BKk), (BKk,), (q, k, v, grad, lse, delta, dk, dv) + m + tail)
    fn = kernel(SOURCE, dq_name, cp)
    fn((B * H, (Tq + BQq - 1) // BQq), (BQq,), (q, k, v, grad, lse, delta, dq) + m + tail)
    return dq, dk, dv


def _one_pass(cp, t, d, wg, options, tail, key_blocks, q, k, v, out, grad, lse, delta, dq, dk, dv):
    """The one-pass backward: delta and the turns first, then one block per 64 keys computes dK and
    dV and adds its share of dQ to a float32 sum in turns (none where one key block is all). The
    turns are B H tiles flags, then the counter that gives the blocks their places in the order
    they start. A wait for a turn that gives up is reported in the stall words
    (:mod:`minitensor.cuda.turns`), read at a later call."""
    B, H, Tq, _, _ = _dims(q, k)
    delta_name, backward_name = one_pass_names(t, d, wg)
    tiles = -(-Tq // ONE_PASS_BQ[d])
    turns = cp.empty(B * H * tiles + 1, dtype=np.int32)
    dq_sum = cp.empty((B * H, Tq, d), dtype=np.float32) if key_blocks > 1 else no_pointer()
    kernel(TC_SOURCE, delta_name, cp)((B * H, -(-Tq // TC_ROWS)), (128,),
                                      (out, grad, delta, turns, np.int32(H), np.int32(Tq))
                                   + tuple(np.int64(x) for x in _strides4(out)))
    kernel(TC_SOURCE, backward_name, cp, options)((B * H, key_blocks), (128,),
                                                  (q, k, v, grad, lse, delta, dk, dv, dq, dq_sum, turns,
                                                   stall_words(cp)) + tail)
    after_launch(cp, "the one-pass attention backward", ("batch·head", "query tile"))
    return dq, dk, dv


class FlashAttention(ScaledDotProductAttention):
    """Equation 1, out = softmax(Q Kᵀ / √d_k + mask) V, without the Tq x Tk weights: the forward
    keeps one log Σ exp per query, the backward recomputes the weights tile by tile from it
    (Dao et al., 2022). No dropout on the weights (``dropout_p`` must be 0 or ``training``
    False: its route in ``minitensor/speed/gpu.py`` sends dropout elsewhere). float32 runs
    in TF32 on the tensor cores when ``tf32`` is true, by default when
    :func:`minitensor.cuda.set_tf32` is on."""

    @staticmethod
    def forward(ctx, q, k, v, mask=None, dropout_p=0.0, training=False, need_weights=False, tf32=None):
        if training and dropout_p > 0:
            raise ValueError("FlashAttention: no dropout on the weights (they are never formed)")
        ctx.scale = 1.0 / (q.shape[-1] ** 0.5)
        ctx.weights = None
        ctx.tf32 = tf32_route(q) if tf32 is None else tf32
        out, lse = forward(q, k, v, mask, ctx.scale, tf32=ctx.tf32)
        ctx.save_for_backward(q, k, v, out, lse, mask)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse, mask = ctx.saved
        return backward(grad, q, k, v, out, lse, mask, ctx.scale, tf32=ctx.tf32) + (None,)



def tf32_route(q) -> bool:
    """Whether float32 arrays like ``q`` run in TF32 here: :func:`minitensor.cuda.set_tf32` is on
    (it is a switch of CuPy's, so never on NumPy arrays, where the emulator runs)."""
    return q.dtype == np.float32 and array_module(q) is not np and tf32_enabled()

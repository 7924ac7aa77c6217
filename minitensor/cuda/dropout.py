"""Launcher for the dropout kernel of ``dropout.cu``: the mask drawn inside the kernel that
applies it (Philox4x32-10 at a seed and an offset), so forward and backward are one launch
each and no mask is kept between them.

The reference is :class:`minitensor.ops.dropout.Dropout` (a mask drawn by the array module's
generator and saved); the masks of the two differ, their law does not (tests compare both).
"""
from __future__ import annotations

import math

import numpy as np

from .. import random
from ..ops.dropout import Dropout
from . import graphs
from .build import array_module, ctype, device_key, kernel

SOURCE = "dropout.cu"
THREADS = 256
MAX_BLOCKS = 8192          # a grid-stride loop beyond: each thread then takes several counters
BITS = 24                  # the uniform integer's bits: r >> 8 of each Philox word


def applies(dtype, p: float) -> bool:
    """Whether the kernel takes ``dtype`` at drop probability ``p`` (p = 1 drops everything:
    no kernel needed)."""
    return ctype(dtype) is not None and 0.0 <= p < 1.0


def name(t: str) -> str:
    return f"dropout_apply<{t}>"


def instantiations() -> list[str]:
    return [name(t) for t in ("float", "f16", "bf16", "double")] + ["philox_words"]


def threshold(p: float) -> int:
    """An entry is kept when its 24-bit uniform integer is at least ceil(p · 2²⁴)."""
    return min(1 << BITS, math.ceil(p * (1 << BITS)))


_seeds: dict = {}   # per device: [the word the kernel reads its seed from, the seed it holds]


def seed_word(xp, seed: int):
    """The device word (uint64) the kernel reads its seed from, holding ``seed``. The seed
    changes from one update to the next (the trainer reseeds each update), so it is read there
    rather than taken as an argument: a CUDA graph replaying the launch then draws the masks
    of the seed the host wrote for the update at hand. Written (one small launch) only when the
    seed differs from the one it holds: once an update."""
    if graphs.capturing():   # the seed of the update a replay runs, written before it
        return graphs.from_host(xp, lambda: np.array([random.philox_seed()], dtype=np.uint64), key="dropout seed")
    key = device_key(xp)
    held = _seeds.get(key)
    if held is None:
        held = _seeds[key] = [xp.zeros(1, dtype=np.uint64), None]
    if held[1] != seed:
        held[0][...] = np.uint64(seed)
        held[1] = seed
    return held[0]


def apply(x, p: float, seed: int, offset: int, out=None):
    """x ⊙ keep / (1-p) with keep drawn from Philox at (``seed``, ``offset``): the same
    arguments give the same mask (the backward calls this on the gradient). ``out`` may be x."""
    xp = array_module(x)
    x = xp.ascontiguousarray(x)
    y = xp.empty_like(x) if out is None else out
    counters = -(-x.size // 4)
    if counters:
        blocks = min(MAX_BLOCKS, -(-counters // THREADS))
        k = kernel(SOURCE, name(ctype(x.dtype)), xp)
        k((blocks,), (THREADS,), (x, y, np.int64(x.size), np.uint32(threshold(p)), np.float64(1.0 / (1.0 - p)),
                                  seed_word(xp, seed), np.uint64(offset)))
    return y


def philox(counters, key: tuple[int, int]):
    """Philox4x32-10 of each row of ``counters`` ((n, 4) uint32) under ``key`` (two uint32):
    (n, 4) uint32 words, for the known-answer test."""
    xp = array_module(counters)
    counters = xp.ascontiguousarray(counters, dtype=np.uint32)
    n = counters.shape[0]
    out = xp.empty((n, 4), dtype=np.uint32)
    kernel(SOURCE, "philox_words", xp)((max(1, -(-n // THREADS)),), (THREADS,),
                                       (counters, out, np.int64(n), np.uint32(key[0]), np.uint32(key[1])))
    return out


class FusedDropout(Dropout):
    """:class:`minitensor.ops.dropout.Dropout` (y = x ⊙ keep / (1-p)) with the mask drawn in the
    kernel: the forward takes a seed and an offset from :func:`minitensor.random.philox_stream`
    and keeps them, the backward applies the same mask to the gradient by drawing it again."""

    @staticmethod
    def forward(ctx, x, p=0.5):
        ctx.p = p
        ctx.seed, ctx.offset = random.philox_stream(x.size)
        return apply(x, p, ctx.seed, ctx.offset)

    @staticmethod
    def backward(ctx, grad):
        return apply(grad, ctx.p, ctx.seed, ctx.offset)

"""Launcher for ``loss_scale.cu``: every gradient multiplied by extra / S and checked for inf
and NaN in one launch, where the per-gradient form takes three (the product, a sum, adding
the sums up).

The reference is the per-gradient form in :meth:`minitensor.amp.LossScaler.unscale_`; tests
compare the two. A factor of 1 only checks (``LossScaler.step`` leaves the division to the
optimizer's pass)."""
from __future__ import annotations

import numpy as np

from .build import address_table, array_module, ctype, kernel, one_launch_takes

SOURCE = "loss_scale.cu"
THREADS = 256
MAX_BLOCKS = 4096


def applies(grads: list) -> bool:
    """Whether one launch can take these gradients."""
    return one_launch_takes(grads)


def name(t: str) -> str:
    return f"unscale_multi<{t}>"


def instantiations() -> list[str]:
    return [name(t) for t in ("float", "f16", "bf16", "double")]


def unscale(grads: list, factor: float):
    """Multiply every gradient by ``factor`` in place; returns the device count (an int32 array
    of one entry) of the entries that came out inf or NaN."""
    xp = array_module(grads[0])
    nonfinite = xp.zeros(1, dtype=np.int32)
    table, starts, total = address_table(xp, [grads])
    if total:
        k = kernel(SOURCE, name(ctype(grads[0].dtype)), xp)
        k((min(MAX_BLOCKS, -(-total // THREADS)),), (THREADS,),
          (table, starts, np.int32(len(grads)), np.int64(total), np.float64(factor), nonfinite))
    return nonfinite

"""Launcher for ``adam.cu``: Adam's update of every parameter in one launch, where the
per-parameter form takes one launch each (253 for Transformer base).

The reference is the NumPy form in :class:`minitensor.optim.Adam` (``_adam_numpy``), the same
arithmetic; tests compare the two.
"""
from __future__ import annotations

import numpy as np

from .build import address_table, array_module, ctype, kernel, one_launch_takes

SOURCE = "adam.cu"
THREADS = 256
MAX_BLOCKS = 4096          # a grid-stride loop beyond


def applies(arrays: list) -> bool:
    """Whether one launch can update these (weight, gradient, m, v) arrays."""
    return one_launch_takes(arrays)


def name(t: str) -> str:
    return f"adam_multi<{t}>"


def instantiations() -> list[str]:
    return [name(t) for t in ("float", "f16", "bf16", "double")]


def step(weights: list, grads: list, ms: list, vs: list, b1: float, b2: float, step_size: float,
         inv_sqrt_c2: float, eps: float, wd: float, grad_scale: float = 1.0) -> None:
    """One Adam update of every ``weights[i]`` (and its moments) in place from ``grad_scale · grads[i]``:
    the table of their addresses and the running sizes go to the device in one copy, then one
    launch updates them all."""
    xp = array_module(weights[0])
    table, starts, total = address_table(xp, [weights, grads, ms, vs])   # one host-to-device copy
    if total == 0:
        return
    blocks = min(MAX_BLOCKS, -(-total // THREADS))
    k = kernel(SOURCE, name(ctype(weights[0].dtype)), xp)
    k((blocks,), (THREADS,), (table, starts, np.int32(len(weights)), np.int64(total), np.float64(b1), np.float64(b2),
                              np.float64(step_size), np.float64(inv_sqrt_c2), np.float64(eps), np.float64(wd),
                              np.float64(grad_scale)))

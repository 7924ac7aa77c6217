"""Launcher for ``cast.cu``: many float32 arrays cast to float16 or bfloat16 in one launch (the
16-bit copies of a mixed-precision step's weights), where ``astype`` takes one launch each.

The reference is ``astype`` (rounding to nearest, ties to even); tests compare the two
bit for bit. :class:`minitensor.amp.autocast` uses it for its ``weights``."""
from __future__ import annotations

import numpy as np

from .build import address_table, array_module, ctype, kernel, one_launch_takes

SOURCE = "cast.cu"
THREADS = 256
MAX_BLOCKS = 4096
TARGETS = ("f16", "bf16")


def applies(arrays: list, dtype) -> bool:
    """Whether one launch can cast these arrays (float32, C-contiguous) to ``dtype``."""
    return bool(arrays) and one_launch_takes(arrays) and ctype(arrays[0].dtype) == "float" and ctype(dtype) in TARGETS


def name(s: str, d: str) -> str:
    return f"cast_multi<{s}, {d}>"


def instantiations() -> list[str]:
    return [name("float", d) for d in TARGETS]


def cast_all(arrays: list, dtype) -> list:
    """Each array of ``arrays`` cast to ``dtype``: new arrays of the same shapes, made in one
    launch (the table of addresses goes to the device in one copy)."""
    xp = array_module(arrays[0])
    out = [xp.empty(a.shape, dtype=dtype) for a in arrays]
    table, starts, total = address_table(xp, [arrays, out])
    if total:
        k = kernel(SOURCE, name(ctype(arrays[0].dtype), ctype(dtype)), xp)
        k((min(MAX_BLOCKS, -(-total // THREADS)),), (THREADS,), (table, starts, np.int32(len(arrays)), np.int64(total)))
    return out

"""Which dtype an op computes in: 16-bit floats are widened to float32 for reductions
(means, variances, softmax sums, log-sum-exp), as mixed precision training requires;
float32 and float64 compute in themselves."""
from __future__ import annotations

import numpy as np

_F32 = np.dtype(np.float32)


_HALF: dict = {}   # dtype -> is_half(dtype), asked at every product


def is_half(dtype) -> bool:
    """float16 or bfloat16 (ml_dtypes' bfloat16, as CuPy uses it)."""
    try:
        return _HALF[dtype]
    except (KeyError, TypeError):
        dt = np.dtype(dtype)
        half = dt == np.float16 or dt.name == "bfloat16"
        try:
            _HALF[dtype] = half
        except TypeError:   # an unhashable spelling of a dtype
            pass
        return half


def compute_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    return _F32 if is_half(dt) else dt

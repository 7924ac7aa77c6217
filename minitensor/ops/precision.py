"""Which dtype an op computes in: 16-bit floats are widened to float32 for reductions
(means, variances, softmax sums, log-sum-exp), as mixed precision training requires;
float32 and float64 compute in themselves."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

_F32 = np.dtype(np.float32)


@lru_cache(maxsize=None)   # asked at every product
def is_half(dtype) -> bool:
    """float16 or bfloat16 (ml_dtypes' bfloat16, as CuPy uses it)."""
    dt = np.dtype(dtype)
    return dt == np.float16 or dt.name == "bfloat16"


def compute_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    return _F32 if is_half(dt) else dt

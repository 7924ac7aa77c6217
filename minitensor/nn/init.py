"""Weight initialisers. Each fills a tensor in place from the generator seeded by
``minitensor.manual_seed`` and returns it."""
from __future__ import annotations

import math

from ..random import generator
from ..tensor import Tensor


def _fill(t: Tensor, array) -> Tensor:
    t.data = t.xp.asarray(array, dtype=t.dtype)
    return t


def uniform_(t: Tensor, low: float = 0.0, high: float = 1.0) -> Tensor:
    return _fill(t, generator(t.xp).uniform(low, high, size=t.shape))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    # mean + std·N(0, 1): standard_normal is the one normal sampler NumPy's and CuPy's generators share
    return _fill(t, mean + std * generator(t.xp).standard_normal(size=t.shape))


def zeros_(t: Tensor) -> Tensor:
    return _fill(t, t.xp.zeros(t.shape))


def ones_(t: Tensor) -> Tensor:
    return _fill(t, t.xp.ones(t.shape))


def xavier_uniform_(t: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot & Bengio (2010): U(-a, a) with a = gain·√(6 / (fan_in + fan_out)); t is (fan_in, fan_out)."""
    fan_in, fan_out = t.shape[0], t.shape[-1]
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -a, a)

"""The random number generators behind randn, rand, initialisation and dropout, one per
array module, each kept for the whole process.

``manual_seed(n)`` reseeds them in place, so a run is reproducible; ``get_rng_state`` /
``set_rng_state`` let a checkpoint carry the NumPy generator's exact state. The trainer
reseeds before every update (dropout masks then depend on seed, update and rank only), so
reseeding must be cheap: on the GPU the generator is cuRAND's Philox host generator, whose
seed is two numbers, where a new ``cupy.random.Generator`` would allocate and initialise
one cuRAND state per GPU thread every time.
"""
from __future__ import annotations

import numpy as np

_seed = 0
_generators: dict = {}


class CupyGenerator:
    """CuPy's generator with the methods minitensor calls on NumPy's ``Generator``
    (``random``, ``standard_normal``, ``uniform``), reseeded in place by :func:`manual_seed`.
    It wraps ``cupy.random.RandomState`` with the Philox4x32-10 method (counter-based: a
    seed and an offset are its whole state). ``cupy.random.Generator`` has no ``normal``,
    so nothing here relies on one."""

    def __init__(self, cp, seed: int):
        self._state = cp.random.RandomState(seed, method=cp.cuda.curand.CURAND_RNG_PSEUDO_PHILOX4_32_10)

    def seed(self, seed: int) -> None:
        self._state.seed(seed)

    def random(self, size=None, dtype=np.float64):
        return self._state.random_sample(size, dtype)

    def standard_normal(self, size=None, dtype=np.float64):
        return self._state.standard_normal(size, dtype)

    def uniform(self, low=0.0, high=1.0, size=None, dtype=np.float64):
        return self._state.uniform(low, high, size, dtype)


def _reseed(gen, seed: int) -> None:
    if isinstance(gen, np.random.Generator):
        gen.bit_generator.state = np.random.PCG64(seed).state  # what default_rng(seed) starts from
    else:
        gen.seed(seed)


def manual_seed(seed: int) -> None:
    """Seed every generator (NumPy's now, CuPy's whenever it is first used), in place, and
    restart the kernels' Philox stream (:func:`philox_stream`)."""
    global _seed, _philox_offset
    _seed = int(seed)
    _philox_offset = 0
    for gen in _generators.values():
        _reseed(gen, _seed)


_philox_offset = 0


def philox_seed() -> int:
    """The seed :func:`philox_stream` hands out now."""
    return _seed % 2**64


def philox_stream(n: int) -> tuple[int, int]:
    """(seed, offset) for a kernel that draws ``n`` numbers from Philox4x32-10 itself (the
    dropout kernel): the seed is the one :func:`manual_seed` set, and each call gets the next
    ceil(n/4) counters, so no two calls after a seed share a number."""
    global _philox_offset
    offset = _philox_offset
    _philox_offset += -(-int(n) // 4)
    return philox_seed(), offset


def generator(xp):
    """The generator for array module ``xp``: a ``numpy.random.Generator``, or a
    :class:`CupyGenerator` for CuPy. Made once per process, then reseeded."""
    gen = _generators.get(xp.__name__)
    if gen is None:
        gen = np.random.default_rng(_seed) if xp is np else CupyGenerator(xp, _seed)
        _generators[xp.__name__] = gen
    return gen


def get_rng_state() -> dict:
    """A JSON-serialisable snapshot of the NumPy generator (and the seed)."""
    return {"seed": _seed, "numpy": generator(np).bit_generator.state}


def set_rng_state(state: dict) -> None:
    """Restore a snapshot from :func:`get_rng_state`."""
    manual_seed(state["seed"])
    generator(np).bit_generator.state = state["numpy"]

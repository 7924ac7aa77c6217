"""The random number generators behind randn, rand and dropout, one per array module.

``manual_seed(n)`` reseeds both, so a run is reproducible; ``get_rng_state`` /
``set_rng_state`` let a checkpoint carry the generators' exact state.
"""
from __future__ import annotations

import numpy as np

_seed = 0
_generators: dict = {}


def manual_seed(seed: int) -> None:
    """Seed every generator (NumPy now, CuPy's whenever it is first used)."""
    global _seed
    _seed = int(seed)
    _generators.clear()


def generator(xp):
    """The generator for array module ``xp`` (numpy.random.Generator or cupy's equivalent)."""
    gen = _generators.get(xp.__name__)
    if gen is None:
        if xp is np:
            gen = np.random.default_rng(_seed)
        else:
            gen = xp.random.default_rng(_seed)
        _generators[xp.__name__] = gen
    return gen


def get_rng_state() -> dict:
    """A JSON-serialisable snapshot of the NumPy generator (and the seed)."""
    return {"seed": _seed, "numpy": generator(np).bit_generator.state}


def set_rng_state(state: dict) -> None:
    """Restore a snapshot from :func:`get_rng_state`."""
    manual_seed(state["seed"])
    generator(np).bit_generator.state = state["numpy"]



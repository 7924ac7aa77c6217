"""Hypothesis strategies for testing ops and layers (they need hypothesis: the ``test`` extra).

Values come from a NumPy generator seeded by hypothesis: hypothesis shrinks the shape
and the seed, and the values are spread out (no accidental ties, which would make
max or relu non-differentiable at the test point).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy


def _hypothesis():
    """hypothesis's strategies and its NumPy extra, imported when a strategy is first asked
    for: the package does not depend on hypothesis, only these functions do."""
    try:
        from hypothesis import strategies as st  # noqa: PLC0415
        from hypothesis.extra import numpy as hnp  # noqa: PLC0415
    except ImportError as e:
        raise ImportError("minitensor.testing's strategies need hypothesis: pip install hypothesis "
                          "(or the project's [test] extra)") from e
    return st, hnp


def shapes(min_dims: int = 0, max_dims: int = 4, min_side: int = 1, max_side: int = 5) -> SearchStrategy:
    """Array shapes, size-1 axes included."""
    _, hnp = _hypothesis()
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def arrays(shape, low: float = -2.0, high: float = 2.0, dtype=np.float64,
           away_from_zero: float = 0.0) -> SearchStrategy:
    """Arrays of ``shape`` (a tuple or a strategy of tuples), uniform in [low, high).

    ``away_from_zero`` > 0 pushes every entry at least that far from 0 (for relu, log of
    |x|, division) by moving it outward.
    """
    st, _ = _hypothesis()
    shape_st = shape if isinstance(shape, st.SearchStrategy) else st.just(tuple(shape))

    @st.composite
    def build(draw):
        s = draw(shape_st)
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        a = rng.uniform(low, high, size=s)
        if away_from_zero:
            a = np.where(a >= 0, a + away_from_zero, a - away_from_zero)
        return a.astype(dtype)

    return build()


def broadcastable_shapes(num_shapes: int = 2, min_dims: int = 0, max_dims: int = 3,
                         max_side: int = 4) -> SearchStrategy:
    """Tuples of ``num_shapes`` shapes that broadcast together (size-1 and missing axes included)."""
    _, hnp = _hypothesis()
    return hnp.mutually_broadcastable_shapes(
        num_shapes=num_shapes, min_dims=min_dims, max_dims=max_dims, max_side=max_side
    ).map(lambda b: b.input_shapes)


def matmul_shapes(max_batch_dims: int = 2, max_side: int = 4) -> SearchStrategy:
    """Pairs (a_shape, b_shape) with a (..., m, k) and b (..., k, n) whose leading axes broadcast."""
    st, _ = _hypothesis()

    @st.composite
    def build(draw):
        batch_a, batch_b = draw(broadcastable_shapes(2, 0, max_batch_dims, max_side=3))
        m, k, n = (draw(st.integers(1, max_side)) for _ in range(3))
        return tuple(batch_a) + (m, k), tuple(batch_b) + (k, n)

    return build()


def matmul_pairs(max_batch_dims: int = 2, max_side: int = 4, dtype=np.float64) -> SearchStrategy:
    """Pairs of arrays that can be matrix-multiplied, leading axes broadcasting."""
    st, _ = _hypothesis()

    @st.composite
    def build(draw):
        sa, sb = draw(matmul_shapes(max_batch_dims, max_side))
        return draw(arrays(sa, dtype=dtype)), draw(arrays(sb, dtype=dtype))

    return build()

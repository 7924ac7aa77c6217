"""Reductions (minitensor/ops/reduce.py): forward equals NumPy, gradients pass gradcheck, ties of
max share the gradient."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor.testing import arrays, shapes

from ...helpers import close, leaf


def axis_choices(ndim):
    """None, a single (possibly negative) axis, or a tuple of axes."""
    if ndim == 0:
        return st.just(None)
    single = st.integers(-ndim, ndim - 1)
    several = st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(tuple)
    return st.one_of(st.none(), single, several)


REDUCTIONS = {
    "sum": (F.sum, lambda x, axis, keepdims: np.sum(x, axis=axis, keepdims=keepdims)),
    "mean": (F.mean, lambda x, axis, keepdims: np.mean(x, axis=axis, keepdims=keepdims)),
    "max": (F.max, lambda x, axis, keepdims: np.max(x, axis=axis, keepdims=keepdims)),
    "logsumexp": (F.logsumexp, lambda x, axis, keepdims: np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@given(data=st.data())
def test_reduction_matches_numpy_and_gradcheck(name, data, device):
    fn, ref = REDUCTIONS[name]
    x = data.draw(arrays(shapes(max_dims=3)))
    axis = data.draw(axis_choices(x.ndim))
    keepdims = data.draw(st.booleans())
    t = leaf(x, device)
    close(fn(t, axis=axis, keepdims=keepdims), ref(x, axis, keepdims))
    assert mt.gradcheck(lambda u: fn(u, axis=axis, keepdims=keepdims), [t])


def test_max_shares_the_gradient_between_ties():
    x = leaf([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]])
    F.max(x, axis=1).sum().backward()
    close(x.grad, [[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]])


def test_tensor_methods_reduce_like_functional():
    x = leaf(np.arange(6.0).reshape(2, 3))
    close(x.sum(axis=0), [3.0, 5.0, 7.0])
    close(x.mean(axis=1, keepdims=True), [[1.0], [4.0]])
    close(x.max(), 5.0)
    close(x.logsumexp(axis=1), np.log(np.exp(np.arange(6.0).reshape(2, 3)).sum(1)))

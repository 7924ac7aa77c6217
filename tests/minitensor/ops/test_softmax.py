"""softmax and log_softmax (minitensor/ops/softmax.py): forward against NumPy, gradcheck, and
stability on huge logits."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor.testing import arrays, shapes

from ...helpers import close, leaf


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("fn,ref", [
    (F.softmax, np_softmax),
    (F.log_softmax, lambda x, axis: np.log(np_softmax(x, axis))),
], ids=["softmax", "log_softmax"])
@given(data=st.data())
def test_softmax_family_matches_numpy_and_gradcheck(fn, ref, data, device):
    x = data.draw(arrays(shapes(min_dims=1, max_dims=3), -3, 3))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    t = leaf(x, device)
    close(fn(t, axis=axis), ref(x, axis))
    assert mt.gradcheck(lambda u: fn(u, axis=axis), [t])


def test_softmax_is_stable_for_huge_logits_and_rows_sum_to_one():
    y = F.softmax(mt.tensor([[1000.0, 1000.0], [-1000.0, 0.0]]))
    close(y, [[0.5, 0.5], [0.0, 1.0]], atol=1e-7)
    close(y.sum(axis=-1), [1.0, 1.0], atol=1e-6)

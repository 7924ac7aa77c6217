"""Elementwise ops: forward equals the NumPy formula; gradients pass gradcheck, broadcasting included."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor.testing import arrays, broadcastable_shapes, shapes

from ...helpers import close, leaf

# name -> (minitensor function, numpy reference, low, high, away_from_zero)
UNARY = {
    "neg": (F.neg, np.negative, -2, 2, 0),
    "exp": (F.exp, np.exp, -2, 2, 0),
    "log": (F.log, np.log, 0.2, 3, 0),
    "sqrt": (F.sqrt, np.sqrt, 0.2, 3, 0),
    "tanh": (F.tanh, np.tanh, -2, 2, 0),
    "relu": (F.relu, lambda x: np.maximum(x, 0), -2, 2, 1e-3),
    "sigmoid": (F.sigmoid, lambda x: 1 / (1 + np.exp(-x)), -4, 4, 0),
}

BINARY = {
    "add": (F.add, np.add, (-2, 2), (-2, 2)),
    "sub": (F.sub, np.subtract, (-2, 2), (-2, 2)),
    "mul": (F.mul, np.multiply, (-2, 2), (-2, 2)),
    "div": (F.div, np.divide, (-2, 2), (0.5, 2)),
    "pow": (F.pow, np.power, (0.5, 2), (-2, 2)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@given(data=st.data())
def test_unary_matches_numpy_and_gradcheck(name, data, device):
    fn, ref, lo, hi, away = UNARY[name]
    x = data.draw(arrays(shapes(max_dims=3), lo, hi, away_from_zero=away))
    t = leaf(x, device)
    close(fn(t), ref(x))
    assert mt.gradcheck(fn, [t])


@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data())
def test_binary_broadcasts_like_numpy_and_gradcheck(name, data, device):
    fn, ref, (alo, ahi), (blo, bhi) = BINARY[name]
    sa, sb = data.draw(broadcastable_shapes(2))
    a, b = data.draw(arrays(sa, alo, ahi)), data.draw(arrays(sb, blo, bhi))
    ta, tb = leaf(a, device), leaf(b, device)
    out = fn(ta, tb)
    close(out, ref(a, b))
    assert out.shape == np.broadcast_shapes(sa, sb)
    assert mt.gradcheck(fn, [ta, tb])


def test_operators_and_python_scalars_keep_the_tensor_dtype(device):
    x = mt.tensor(np.array([1.0, 2.0, 4.0], dtype=np.float32), device=device)
    for y in (x + 1, 1 + x, x - 1, 1 - x, x * 2, 2 * x, x / 2, 2 / x, x**2, 2**x, -x):
        assert y.dtype == np.float32
    close(2 / x, [2.0, 1.0, 0.5])
    close(1 - x, [0.0, -1.0, -3.0])
    close(2**x, [2.0, 4.0, 16.0])


def test_relu_gradient_is_zero_at_and_below_zero():
    x = leaf([-1.0, 0.0, 2.0])
    F.relu(x).sum().backward()
    close(x.grad, [0.0, 0.0, 1.0])


def test_sigmoid_does_not_overflow_for_large_inputs():
    with np.errstate(over="raise"):
        y = F.sigmoid(mt.tensor([-1000.0, 0.0, 1000.0]))
    close(y, [0.0, 0.5, 1.0])


@given(data=st.data())
def test_where_selects_and_routes_gradients(data, device):
    sc, sa, sb = data.draw(broadcastable_shapes(3))
    cond = data.draw(arrays(sc)) > 0
    a, b = data.draw(arrays(sa)), data.draw(arrays(sb))
    ta, tb = leaf(a, device), leaf(b, device)
    c = mt.tensor(cond, device=device)
    close(F.where(c, ta, tb), np.where(cond, a, b))
    assert mt.gradcheck(lambda u, v: F.where(c, u, v), [ta, tb])


@given(data=st.data())
def test_masked_fill_sets_value_and_blocks_gradient(data, device):
    sx, sm = data.draw(broadcastable_shapes(2))
    sx = np.broadcast_shapes(sx, sm)  # the input must already have the full shape
    x = data.draw(arrays(sx))
    mask = data.draw(arrays(sm)) > 0.5
    t = leaf(x, device)
    m = mt.tensor(mask, device=device)
    close(F.masked_fill(t, m, -7.0), np.where(mask, -7.0, x))
    assert mt.gradcheck(lambda u: F.masked_fill(u, m, -7.0), [t])


def test_cast_between_float_dtypes_is_differentiable():
    x = leaf([1.5, -2.0])
    y = F.cast(x, np.float32)
    assert y.dtype == np.float32
    (y * 3).sum().backward()
    assert x.grad.dtype == np.float64
    close(x.grad, [3.0, 3.0])
    assert F.cast(x, np.int64).requires_grad is False

"""The products (minitensor/ops/linalg.py): matmul and linear, forward against NumPy,
gradcheck on hypothesis-drawn shapes, and the tied output layer's weight gradient."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor.errors import ShapeError
from minitensor.testing import arrays, matmul_pairs, shapes

from ...helpers import close, leaf


@given(pair=matmul_pairs())
def test_matmul_broadcasts_batches_like_numpy_and_gradcheck(pair, device):
    a, b = pair
    ta, tb = leaf(a, device), leaf(b, device)
    close(ta @ tb, a @ b)
    assert mt.gradcheck(F.matmul, [ta, tb])


@pytest.mark.parametrize("sa,sb", [((3,), (3,)), ((3,), (3, 2)), ((2, 4, 3), (3,)), ((3,), (5, 3, 2))])
def test_matmul_with_vectors_drops_the_vector_axis(sa, sb, device):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    ta, tb = leaf(a, device), leaf(b, device)
    close(F.matmul(ta, tb), np.matmul(a, b))
    assert mt.gradcheck(F.matmul, [ta, tb])


@pytest.mark.parametrize("transposed", [False, True], ids=["weight_in_by_out", "weight_out_by_in"])
@given(data=st.data())
def test_linear_is_x_w_plus_b_and_gradcheck(transposed, data, device):
    """x W + b for W (in, out), and x Wᵀ + b for W stored (out, in) with ``transposed``."""
    lead = data.draw(shapes(min_dims=0, max_dims=2, max_side=3))
    n_in, n_out = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
    w_shape = (n_out, n_in) if transposed else (n_in, n_out)
    x, w, b = (data.draw(arrays(s)) for s in (lead + (n_in,), w_shape, (n_out,)))
    tx, tw, tb = leaf(x, device), leaf(w, device), leaf(b, device)
    close(F.linear(tx, tw, tb, transposed=transposed), x @ (w.T if transposed else w) + b)
    assert mt.gradcheck(lambda u, v, c: F.linear(u, v, c, transposed=transposed), [tx, tw, tb])
    assert mt.gradcheck(lambda u, v: F.linear(u, v, transposed=transposed), [tx, tw])


def test_a_tied_output_layers_weight_gradient_arrives_contiguous_and_equals_the_transposed_views():
    """h Eᵀ with E stored (V, d): the same gradient as through the view E.T, made in E's layout
    (so the engine keeps it instead of copying a strided array)."""
    rng = np.random.default_rng(0)
    h, e = rng.standard_normal((6, 4)), rng.standard_normal((9, 4))
    grads = []
    for transposed in (False, True):
        th, te = leaf(h, "cpu"), leaf(e, "cpu")
        y = F.linear(th, te, transposed=True) if transposed else F.linear(th, te.T)
        (y * y).sum().backward()
        grads.append(te.grad.numpy())
        made = te.grad.data
    close(grads[1], grads[0])
    assert made.flags.c_contiguous and made.base is None
    with pytest.raises(ShapeError, match=r"\(out_features, in_features\) with transposed=True"):
        F.linear(mt.ones(2, 4), mt.ones(4, 9), transposed=True)
    for transposed in (False, True):  # a weight that is not a matrix is named as such, in either layout
        with pytest.raises(ShapeError, match=r"does not fit weight of shape \(\)"):
            F.linear(mt.ones(2, 4), mt.tensor(1.0), transposed=transposed)

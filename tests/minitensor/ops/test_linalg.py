"""The products (minitensor/ops/linalg.py): matmul, linear and linears, forward against NumPy,
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


@given(data=st.data())
def test_linears_are_each_x_w_plus_b_from_one_product_and_gradcheck_through_any_of_their_outputs(data, device):
    """F.linears(x, [W_1 … W_n], [b_1 … b_n]) gives x W_i + b_i for each i (W_i all one shape, some
    biases None), and its gradients are right whether every output is used, one alone (the
    others' gradients are None), or one twice (its two gradients summed in its own slot)."""
    lead = data.draw(shapes(min_dims=0, max_dims=2, max_side=3))
    n_in, n_out, n = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
    widths = [n_out] * n
    with_bias = data.draw(st.lists(st.booleans(), min_size=len(widths), max_size=len(widths)))
    x = data.draw(arrays(lead + (n_in,)))
    ws = [data.draw(arrays((n_in, n))) for n in widths]
    bs = [data.draw(arrays((n,))) if keep else None for n, keep in zip(widths, with_bias)]
    tx, tws = leaf(x, device), [leaf(w, device) for w in ws]
    tbs = [None if b is None else leaf(b, device) for b in bs]
    outs = F.linears(tx, tws, tbs)
    assert len(outs) == len(widths)
    for out, w, b in zip(outs, ws, bs):
        close(out, x @ w + (0 if b is None else b))
    n, biases = len(ws), [b for b in tbs if b is not None]

    def call(u, *p):
        it = iter(p[n:])
        return F.linears(u, p[:n], [None if b is None else next(it) for b in tbs])

    assert mt.gradcheck(lambda u, *p: F.concat(list(call(u, *p)), axis=-1), [tx, *tws, *biases])
    assert mt.gradcheck(lambda u, *p: call(u, *p)[-1] * call(u, *p)[-1][..., :1] + call(u, *p)[-1],
                        [tx, *tws, *biases])
    y = call(tx, *tws, *biases)[0]
    assert mt.gradcheck(lambda u, *p: y.detach() + call(u, *p)[0] * 2, [tx, *tws, *biases])


def test_an_output_of_an_op_with_several_used_twice_sums_its_gradients_and_backward_starts_at_any_output():
    """The engine hands an op with several outputs one gradient per output: the sum of what
    reached that output (here used twice), None where nothing did; backward may start at one
    output."""
    x = mt.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    w1, w2 = mt.tensor(np.ones((3, 2)), requires_grad=True), mt.tensor(np.full((3, 2), 2.0), requires_grad=True)
    a, b = F.linears(x, [w1, w2])
    (a * 3 + a).sum().backward(retain_graph=True)          # a read twice; b never
    close(x.grad, np.full((2, 3), 8.0))                    # d/dx Σ 4 x W1 = 4 · (row sums of W1)
    close(w1.grad, 4 * x.numpy().sum(axis=0)[:, None] * np.ones((3, 2)))
    assert w2.grad is None
    x.grad = w1.grad = None
    b.sum().backward()                                     # from the other output alone
    close(x.grad, np.full((2, 3), 4.0))                    # the row sums of W2: 2 + 2
    close(w2.grad, x.numpy().sum(axis=0)[:, None] * np.ones((3, 2)))
    assert w1.grad is None


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

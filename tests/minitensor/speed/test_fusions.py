"""The fusions (minitensor/speed/fusions.py): each equals the plain ops it stands for, in value and
gradient (float64 gradchecks on drawn shapes); on a GPU, or under the emulator, the kernels they
take are tested against the same references in tests/minitensor/cuda/test_kernels.py."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor.errors import ShapeError
from minitensor.speed import fusions
from minitensor.testing import arrays, shapes

from ...helpers import close, leaf


@given(data=st.data())
def test_linears_are_each_x_w_plus_b_from_one_product_and_gradcheck_through_any_of_their_outputs(data, device):
    """fusions.linears(x, [W_1 … W_n], [b_1 … b_n]) gives x W_i + b_i for each i (W_i all one shape, some
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
    outs = fusions.linears(tx, tws, tbs)
    assert len(outs) == len(widths)
    for out, w, b in zip(outs, ws, bs):
        close(out, x @ w + (0 if b is None else b))
    n, biases = len(ws), [b for b in tbs if b is not None]

    def call(u, *p):
        it = iter(p[n:])
        return fusions.linears(u, p[:n], [None if b is None else next(it) for b in tbs])

    assert mt.gradcheck(lambda u, *p: F.concat(list(call(u, *p)), axis=-1), [tx, *tws, *biases])
    assert mt.gradcheck(lambda u, *p: call(u, *p)[-1] * call(u, *p)[-1][..., :1] + call(u, *p)[-1],
                        [tx, *tws, *biases])
    y = call(tx, *tws, *biases)[0]
    assert mt.gradcheck(lambda u, *p: y.detach() + call(u, *p)[0] * 2, [tx, *tws, *biases])


@given(data=st.data())
def test_linear_relu_is_relu_of_linear_and_gradchecks(data, device):
    """max(0, x W + b), the value and the gradients of relu(linear(x, W, b))."""
    lead = data.draw(shapes(min_dims=0, max_dims=2, max_side=3))
    n_in, n_out = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
    x, w, b = (data.draw(arrays(s)) for s in (lead + (n_in,), (n_in, n_out), (n_out,)))
    tx, tw, tb = leaf(x, device), leaf(w, device), leaf(b, device)
    close(fusions.linear_relu(tx, tw, tb), np.maximum(x @ w + b, 0))
    assert mt.gradcheck(fusions.linear_relu, [tx, tw, tb])


@pytest.mark.parametrize("p,training", [(0.0, True), (0.3, True), (0.3, False), (1.0, True)])
def test_dropout_add_layer_norm_is_layer_norm_of_x_plus_dropout_of_sub(p, training, device):
    """LayerNorm(x + Dropout(sub)) with the same mask as the three ops draw from the same seed:
    the same values and gradients; p = 1 drops all of sub; in evaluation nothing is dropped. (On
    a GPU the kernel draws its own masks, Philox's: test_kernels.py tests those.)"""
    if device != "cpu" and 0 < p < 1 and training:
        pytest.skip("the kernel's masks are not NumPy's: tests/minitensor/cuda/test_kernels.py")
    rng = np.random.default_rng(0)
    arrays_ = [rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 3, 8)), rng.uniform(0.5, 1.5, 8),
               rng.standard_normal(8)]
    c = rng.standard_normal((2, 3, 8))
    results = []
    for form in ("fused", "plain"):
        sub, x, w, b = (leaf(a, device) for a in arrays_)
        mt.manual_seed(5)
        y = (fusions.dropout_add_layer_norm(sub, x, w, b, p, training) if form == "fused"
             else F.layer_norm(x + F.dropout(sub, p, training), w, b, 1e-5))
        (y * mt.tensor(c, device=device)).sum().backward()
        results.append([mt.backend.to_numpy(t.data) for t in (y, sub.grad, x.grad, w.grad, b.grad)])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    dropped = results[0][1] == 0
    assert dropped.all() if p == 1.0 else (not dropped.any() if p == 0 or not training else 0 < dropped.mean() < 1)

    def reseeded(s, u, g, e):
        mt.manual_seed(9)
        return fusions.dropout_add_layer_norm(s, u, g, e, p, training) * mt.tensor(c, device=device)
    assert mt.gradcheck(reseeded, [leaf(a, device) for a in arrays_])


def test_dropout_add_layer_norm_refuses_shapes_that_differ_and_a_p_outside_0_to_1():
    sub, x, w, b = mt.zeros(2, 3), mt.zeros(2, 4), mt.ones(4), mt.zeros(4)
    with pytest.raises(ShapeError, match=r"sub-layer's output has shape \(2, 3\), the residual \(2, 4\)"):
        fusions.dropout_add_layer_norm(sub, x, w, b, 0.1)
    with pytest.raises(ValueError, match="p must be in"):
        fusions.dropout_add_layer_norm(x, x, w, b, 1.5)

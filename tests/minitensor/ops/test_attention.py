"""Scaled dot-product attention (minitensor/ops/attention.py): equation 1 against NumPy for each
kind of mask, gradcheck, fully masked rows, and dropout on the weights."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F

from ...helpers import close, leaf


def mask_for(kind, B, H, Tq, Tk, rng):
    if kind == "none":
        return None
    if kind == "causal":
        return np.tril(np.ones((Tq, Tk), bool), k=Tk - Tq)
    if kind == "padding":  # (B, 1, 1, Tk): every batch item has its own length >= 1
        lengths = rng.integers(1, Tk + 1, size=B)
        return (np.arange(Tk)[None, :] < lengths[:, None])[:, None, None, :]
    return rng.random((B, H, Tq, Tk)) < 0.7  # "full": any pattern, rows may be fully masked


def np_attention(q, k, v, mask):
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m)
    den = e.sum(-1, keepdims=True)
    p = e / np.where(den == 0, 1, den)
    return p @ v, p


@pytest.mark.parametrize("kind", ["none", "causal", "padding", "full"])
@given(data=st.data())
def test_attention_matches_numpy_and_gradcheck_for_each_mask(kind, data, device):
    B, H = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    Tq, Tk, d, dv = (data.draw(st.integers(1, 4)) for _ in range(4))
    if kind == "causal":
        Tq = Tk
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    q, k, v = rng.standard_normal((B, H, Tq, d)), rng.standard_normal((B, H, Tk, d)), rng.standard_normal((B, H, Tk, dv))
    mask = mask_for(kind, B, H, Tq, Tk, rng)
    tq, tk, tv = leaf(q, device), leaf(k, device), leaf(v, device)
    tm = None if mask is None else mt.tensor(mask, device=device)
    out, w = F.scaled_dot_product_attention(tq, tk, tv, mask=tm, return_weights=True)
    ref_out, ref_w = np_attention(q, k, v, mask)
    close(out, ref_out)
    close(w, ref_w)
    assert mt.gradcheck(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, mask=tm), [tq, tk, tv])


def test_attention_fully_masked_row_gives_zeros_not_nan():
    q = leaf(np.ones((2, 3)))
    mask = mt.tensor(np.array([[True, False], [False, False]]))  # query 1 may attend to nothing
    out, w = F.scaled_dot_product_attention(q, q, q, mask=mask, return_weights=True)
    assert np.all(np.isfinite(out.numpy()))
    close(w[1], np.zeros(2))
    close(out[1], np.zeros(3))
    out.sum().backward()
    assert np.all(np.isfinite(q.grad.numpy()))


def test_attention_dropout_gradcheck_with_fixed_seed(device):
    rng = np.random.default_rng(0)
    q, k, v = (leaf(rng.standard_normal((2, 3, 4)), device) for _ in range(3))

    def f(a, b, c):
        mt.manual_seed(5)
        return F.scaled_dot_product_attention(a, b, c, dropout_p=0.3, training=True)

    assert mt.gradcheck(f, [q, k, v])

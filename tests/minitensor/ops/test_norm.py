"""layer_norm (minitensor/ops/norm.py): forward against NumPy and gradcheck, with and without
the affine weights."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor.testing import arrays, shapes

from ...helpers import close, leaf


def np_layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


@given(data=st.data(), affine=st.booleans())
def test_layer_norm_matches_numpy_and_gradcheck(data, affine, device):
    x = data.draw(arrays(shapes(min_dims=1, max_dims=3, min_side=2)))
    d = x.shape[-1]
    w = data.draw(arrays((d,), 0.5, 1.5)) if affine else None
    b = data.draw(arrays((d,))) if affine else None
    tx = leaf(x, device)
    tw, tb = (leaf(w, device), leaf(b, device)) if affine else (None, None)
    close(F.layer_norm(tx, tw, tb, eps=1e-5), np_layer_norm(x, w, b, 1e-5), atol=1e-9)
    inputs = [tx, tw, tb] if affine else [tx]
    assert mt.gradcheck(lambda *u: F.layer_norm(*u, eps=1e-5), inputs, atol=1e-5)

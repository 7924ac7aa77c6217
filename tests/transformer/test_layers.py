"""The sub-layers and layers (transformer/layers.py): the position-wise feed-forward network's
formula, and encoder and decoder layers gradient-checked in float64, post- and pre-norm."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitensor as mt
from transformer import DecoderLayer, EncoderLayer, PositionwiseFeedForward, padding_mask, target_mask

from ..helpers import close
from .helpers import f64, randn



@given(seed=st.integers(0, 999), T=st.integers(1, 4), d_ff=st.integers(1, 6))
def test_feed_forward_gradcheck_and_formula(seed, T, d_ff, device):
    rng = np.random.default_rng(seed)
    ffn = f64(PositionwiseFeedForward(4, d_ff)).to(device)
    x = randn(rng, 2, T, 4, device=device)
    W1, b1, W2, b2 = (p.numpy() for p in ffn.parameters())
    close(ffn(x), np.maximum(0, x.numpy() @ W1 + b1) @ W2 + b2)
    assert mt.gradcheck(lambda a, *ps: ffn(a), [x] + ffn.parameters())


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@given(seed=st.integers(0, 999), Ts=st.integers(1, 4), Tt=st.integers(1, 4))
@settings(max_examples=8)
def test_encoder_and_decoder_layer_gradcheck(norm_first, seed, Ts, Tt, device):
    mt.manual_seed(seed)
    rng = np.random.default_rng(seed)
    enc = f64(EncoderLayer(4, 2, 6, dropout=0.1, norm_first=norm_first)).to(device)
    dec = f64(DecoderLayer(4, 2, 6, dropout=0.1, norm_first=norm_first)).to(device)
    x = randn(rng, 2, Ts, 4, device=device)
    y = randn(rng, 2, Tt, 4, device=device)
    src_ids = mt.tensor(np.r_[[rng.integers(1, 5, Ts)], [np.r_[1, np.zeros(Ts - 1, int)]]], device=device)
    tgt_ids = mt.tensor(rng.integers(1, 5, (2, Tt)), device=device)
    sm, tm = padding_mask(src_ids, 0), target_mask(tgt_ids, 0)
    assert mt.gradcheck(lambda a, *ps: enc(a, sm), [x] + enc.parameters())
    assert mt.gradcheck(lambda a, m, *ps: dec(a, m, tm, sm), [y, x] + dec.parameters())

"""Embeddings and positions (transformer/embedding.py): the sinusoidal table's equation and its
linear offsets, the √d_model scale, gradcheck, and positions past max_len refused."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
from transformer import PositionalEncoding, ScaledEmbedding, sinusoidal_table

from ..helpers import close
from .helpers import f64



@pytest.mark.parametrize("kind", ["sinusoidal", "learned"])
@given(seed=st.integers(0, 999), T=st.integers(1, 5))
def test_positional_encoding_plus_embedding_gradcheck(kind, seed, T, device):
    mt.manual_seed(seed)
    emb = f64(ScaledEmbedding(7, 4)).to(device)
    pos = f64(PositionalEncoding(4, max_len=8, kind=kind)).to(device)
    ids = mt.tensor(np.random.default_rng(seed).integers(0, 7, (2, T)), device=device)
    params = emb.parameters() + pos.parameters()
    assert mt.gradcheck(lambda *ps: pos(emb(ids)), params)


def test_sinusoidal_table_follows_equation():
    table = sinusoidal_table(50, 16)
    pos, i = 17, 3
    close(table[pos, 2 * i], np.sin(pos / 10000 ** (2 * i / 16)), atol=1e-6)
    close(table[pos, 2 * i + 1], np.cos(pos / 10000 ** (2 * i / 16)), atol=1e-6)


def test_sinusoidal_offset_is_a_linear_map():
    """Section 3.5: for a fixed k, PE(pos + k) = M_k PE(pos) for one matrix M_k (all pos)."""
    table = sinusoidal_table(80, 16).astype(np.float64)
    k = 5
    M, *_ = np.linalg.lstsq(table[:60], table[k:60 + k], rcond=None)
    close(table[:60] @ M, table[k:60 + k], atol=1e-5)


def test_embedding_is_scaled_by_sqrt_d_model():
    emb = ScaledEmbedding(5, 16)
    ids = mt.tensor(np.array([[1, 3]]))
    close(emb(ids), emb.weight.numpy()[[1, 3]][None] * 4.0, atol=1e-6)


def test_positions_beyond_max_len_are_a_clear_error():
    pos = PositionalEncoding(4, max_len=3)
    with pytest.raises(ValueError, match="max_len"):
        pos(mt.zeros(1, 4, 4))

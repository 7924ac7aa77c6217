"""What the tests of the paper's pieces share: float64 modules without dropout, random inputs
that take gradients, hypothesis-drawn attention sizes and a tiny configuration."""
import numpy as np
from hypothesis import strategies as st

import minitensor as mt
from transformer import TransformerConfig



def f64(module):
    return module.astype(np.float64).eval()


def randn(rng, *shape, device="cpu"):
    return mt.tensor(rng.standard_normal(shape), requires_grad=True, device=device)


@st.composite
def attention_dims(draw):
    heads = draw(st.integers(1, 3))
    return dict(B=draw(st.integers(1, 2)), Tq=draw(st.integers(1, 4)), Tk=draw(st.integers(1, 4)),
                heads=heads, d_model=heads * draw(st.integers(1, 3)), seed=draw(st.integers(0, 999)))


def tiny_config(**kw):
    base = dict(vocab_size=7, d_model=8, n_heads=2, d_ff=12, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0,
                max_len=16)
    base.update(kw)
    return TransformerConfig(**base)

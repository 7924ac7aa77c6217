"""Multi-head attention (transformer/attention.py): gradcheck in float64, the per-head formula,
weights that sum to one with padded keys at zero, and equation 1 as the op the model uses."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from transformer import MultiHeadAttention, Transformer

from ..helpers import close
from .helpers import attention_dims, f64, randn, tiny_config



@given(dims=attention_dims(), masked=st.booleans())
def test_multi_head_attention_gradcheck(dims, masked, device):
    rng = np.random.default_rng(dims["seed"])
    mt.manual_seed(dims["seed"])
    mha = f64(MultiHeadAttention(dims["d_model"], dims["heads"])).to(device)
    q = randn(rng, dims["B"], dims["Tq"], dims["d_model"], device=device)
    kv = randn(rng, dims["B"], dims["Tk"], dims["d_model"], device=device)
    mask = None
    if masked:  # a padding mask that keeps the first key of every sequence
        m = rng.random((dims["B"], 1, 1, dims["Tk"])) < 0.6
        m[..., 0] = True
        mask = mt.tensor(m, device=device)
    assert mt.gradcheck(lambda a, b, *ps: mha(a, b, b, mask), [q, kv] + mha.parameters())


def test_multi_head_attention_equals_per_head_formula():
    """Concat(head_1..head_h) W^O with head_i = softmax(Q W^Q_i (K W^K_i)ᵀ/√d_k) V W^V_i."""
    rng = np.random.default_rng(0)
    mha = f64(MultiHeadAttention(6, 3))
    x = rng.standard_normal((2, 4, 6))
    got = mha(mt.tensor(x), mt.tensor(x), mt.tensor(x)).numpy()
    Wq, Wk, Wv, Wo = (getattr(mha, n).weight.numpy() for n in ("w_q", "w_k", "w_v", "w_o"))
    bq, bk, bv, bo = (getattr(mha, n).bias.numpy() for n in ("w_q", "w_k", "w_v", "w_o"))
    heads = []
    for i in range(3):
        sl = slice(2 * i, 2 * i + 2)
        Q, K, V = x @ Wq[:, sl] + bq[sl], x @ Wk[:, sl] + bk[sl], x @ Wv[:, sl] + bv[sl]
        s = Q @ K.transpose(0, 2, 1) / np.sqrt(2)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        heads.append(p @ V)
    close(got, np.concatenate(heads, -1) @ Wo + bo)


# ------------------------------------------------------------------ properties of attention
def test_attention_weights_sum_to_one_and_padded_keys_get_zero_weight():
    rng = np.random.default_rng(0)
    model = Transformer(tiny_config()).eval()
    model.store_attention(True)
    src = np.array([[3, 4, 5, 6], [3, 4, 0, 0]])
    tgt = np.array([[1, 3, 4], [1, 5, 0]])
    model(src, tgt)
    for layer in model.encoder.layers:
        w = layer.self_attn.attention.numpy()
        close(w.sum(-1), np.ones(w.shape[:-1]), atol=1e-6)
        assert np.all(w[1, :, :, 2:] == 0)          # the two pad keys of sequence 1
    cross = model.decoder.layers[0].cross_attn.attention.numpy()
    close(cross.sum(-1), np.ones(cross.shape[:-1]), atol=1e-6)
    assert np.all(cross[1, :, :, 2:] == 0)
    _ = rng


def test_scaled_dot_product_attention_is_the_op_the_model_uses(monkeypatch):
    calls = []
    original = F.scaled_dot_product_attention

    def spy(*a, **k):
        calls.append(1)
        return original(*a, **k)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    Transformer(tiny_config())(np.array([[3, 4]]), np.array([[1, 3]]))
    assert len(calls) == 3  # encoder self, decoder self, decoder cross

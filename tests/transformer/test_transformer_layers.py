"""The paper's pieces, each gradient-checked in float64 with dropout off, plus their properties."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from transformer import (
    DecoderLayer, EncoderLayer, MultiHeadAttention, PositionalEncoding, PositionwiseFeedForward, ScaledEmbedding,
    Transformer, TransformerConfig, causal_mask, label_smoothed_loss, padding_mask, sinusoidal_table, target_mask,
)
from transformer.loss import batch_loss
from transformer.model import Encoder

from ..helpers import close


def f64(module):
    return module.astype(np.float64).eval()


def randn(rng, *shape, device="cpu"):
    return mt.tensor(rng.standard_normal(shape), requires_grad=True, device=device)


@st.composite
def attention_dims(draw):
    heads = draw(st.integers(1, 3))
    return dict(B=draw(st.integers(1, 2)), Tq=draw(st.integers(1, 4)), Tk=draw(st.integers(1, 4)),
                heads=heads, d_model=heads * draw(st.integers(1, 3)), seed=draw(st.integers(0, 999)))


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


@given(seed=st.integers(0, 999), T=st.integers(1, 4), d_ff=st.integers(1, 6))
def test_feed_forward_gradcheck_and_formula(seed, T, d_ff, device):
    rng = np.random.default_rng(seed)
    ffn = f64(PositionwiseFeedForward(4, d_ff)).to(device)
    x = randn(rng, 2, T, 4, device=device)
    W1, b1, W2, b2 = (p.numpy() for p in ffn.parameters())
    close(ffn(x), np.maximum(0, x.numpy() @ W1 + b1) @ W2 + b2)
    assert mt.gradcheck(lambda a, *ps: ffn(a), [x] + ffn.parameters())


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


def tiny_config(**kw):
    base = dict(vocab_size=7, d_model=8, n_heads=2, d_ff=12, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0,
                max_len=16)
    base.update(kw)
    return TransformerConfig(**base)


@given(seed=st.integers(0, 999), Ts=st.integers(2, 4), Tt=st.integers(2, 4), smoothing=st.sampled_from([0.0, 0.1]))
@settings(max_examples=3)
def test_whole_tiny_transformer_loss_gradcheck(seed, Ts, Tt, smoothing, device):
    mt.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = f64(Transformer(tiny_config())).to(device)
    src = rng.integers(3, 7, (2, Ts))
    src[1, -1] = 0  # some padding
    tgt = rng.integers(3, 7, (2, Tt + 1))
    tgt[0, -1] = 0
    s, ti, to = (mt.tensor(a, device=device) for a in (src, tgt[:, :-1], tgt[:, 1:]))
    loss = lambda *ps: label_smoothed_loss(model(s, ti), to, pad_id=0, smoothing=smoothing)  # noqa: E731
    assert mt.gradcheck(loss, model.parameters())


@given(seed=st.integers(0, 999), smoothing=st.sampled_from([0.0, 0.1]), reduction=st.sampled_from(["sum", "mean"]),
       pads=st.lists(st.integers(0, 4), min_size=3, max_size=3))
@settings(max_examples=10)
def test_batch_loss_skipping_pad_logits_equals_the_plain_loss_and_its_gradients(seed, smoothing, reduction, pads):
    mt.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = f64(Transformer(tiny_config()))
    src = rng.integers(3, 7, (3, 4))
    tgt = rng.integers(3, 7, (3, 6))
    for i, n in enumerate(pads):  # trailing pad in each target, up to a wholly padded row
        tgt[i, 6 - n:] = 0
    ti, to = tgt[:, :-1], tgt[:, 1:]
    grads = []
    for loss_of in (lambda: label_smoothed_loss(model(src, ti), mt.tensor(to), 0, smoothing, reduction),
                    lambda: batch_loss(model, src, ti, to, 0, smoothing, reduction)):
        model.zero_grad()
        loss = loss_of()
        loss.backward()
        grads.append((loss.item(), [p.grad.numpy().copy() for p in model.parameters()]))
    (plain, plain_grads), (skipped, skipped_grads) = grads
    np.testing.assert_allclose(skipped, plain, rtol=1e-12)
    for a, b in zip(plain_grads, skipped_grads):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-14)


def test_batch_loss_gradcheck(device):
    mt.manual_seed(3)
    rng = np.random.default_rng(3)
    model = f64(Transformer(tiny_config())).to(device)
    src = rng.integers(3, 7, (2, 3))
    tgt = rng.integers(3, 7, (2, 5))
    tgt[1, 3:] = 0
    s, ti = mt.tensor(src, device=device), mt.tensor(tgt[:, :-1], device=device)
    assert mt.gradcheck(lambda *ps: batch_loss(model, s, ti, tgt[:, 1:], 0, 0.1, "mean"), model.parameters())


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


def test_padding_content_does_not_change_the_real_positions():
    model = Transformer(tiny_config()).eval()
    a = model.encode(mt.tensor(np.array([[3, 4, 0, 0]]))).numpy()
    mask = mt.tensor(np.array([[True, True, False, False]]))[:, None, None, :]
    b = model.encoder(model.src_pos(model.src_embed(mt.tensor(np.array([[3, 4, 6, 5]])))), mask).numpy()
    close(a[:, :2], b[:, :2], atol=1e-6)


def test_causal_decoder_output_at_t_ignores_later_tokens():
    rng = np.random.default_rng(1)
    model = Transformer(tiny_config(n_decoder_layers=2)).eval()
    src = rng.integers(3, 7, (2, 5))
    tgt = rng.integers(3, 7, (2, 6))
    base = model(src, tgt).numpy()
    for t in range(5):
        changed = tgt.copy()
        changed[:, t + 1:] = rng.integers(3, 7, changed[:, t + 1:].shape)
        out = model(src, changed).numpy()
        close(out[:, : t + 1], base[:, : t + 1], atol=1e-5)
        assert not np.allclose(out[:, t + 1:], base[:, t + 1:])  # and later positions do see the change


def test_encoder_without_positions_is_permutation_equivariant():
    rng = np.random.default_rng(2)
    enc = Encoder(tiny_config(n_encoder_layers=2)).eval()
    x = rng.standard_normal((2, 6, 8)).astype(np.float32)
    perm = rng.permutation(6)
    out = enc(mt.tensor(x), None).numpy()
    out_perm = enc(mt.tensor(x[:, perm]), None).numpy()
    close(out_perm, out[:, perm], atol=1e-5)


def test_masks_have_the_documented_shapes_and_meaning():
    ids = mt.tensor(np.array([[5, 6, 0]]))
    close(padding_mask(ids, 0), np.array([[[[True, True, False]]]]))
    close(causal_mask(3), np.tril(np.ones((3, 3), bool)))
    tm = target_mask(ids, 0).numpy()
    assert tm.shape == (1, 1, 3, 3) and not tm[0, 0, 2, 2] and tm[0, 0, 1, 0] and not tm[0, 0, 0, 1]


def test_scaled_dot_product_attention_is_the_op_the_model_uses(monkeypatch):
    calls = []
    original = F.scaled_dot_product_attention

    def spy(*a, **k):
        calls.append(1)
        return original(*a, **k)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    Transformer(tiny_config())(np.array([[3, 4]]), np.array([[1, 3]]))
    assert len(calls) == 3  # encoder self, decoder self, decoder cross

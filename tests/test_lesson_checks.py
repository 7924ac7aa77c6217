"""Every check a lesson makes can fail: each is handed a deliberately broken input (a wrong
pad id, a missing causal mask, a broken backward, an optimizer without bias correction) and
must raise, while the real thing passes."""
import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import optim
from minitensor.ops.norm import LayerNorm
from transformer import DecoderLayer, MultiHeadAttention, Transformer, TransformerConfig, checks
from transformer import label_smoothed_loss, padding_mask, target_mask
from transformer.embedding import sinusoidal_table
from transformer.model import Encoder


# ---------------------------------------------------------------- lesson 4
class AdamWithoutBiasCorrection(optim.Adam):
    """m and v used as they are: too small a step at the start."""

    def _begin_step(self):
        self._c1 = self._c2 = 1.0


def test_lesson_4_adam_check_catches_a_missing_bias_correction():
    checks.adam_step_matches_the_formula(lambda ps: optim.Adam(ps, lr=0.01, betas=(0.9, 0.98), eps=1e-9))
    with pytest.raises(AssertionError, match="after step 1"):
        checks.adam_step_matches_the_formula(
            lambda ps: AdamWithoutBiasCorrection(ps, lr=0.01, betas=(0.9, 0.98), eps=1e-9))


def test_lesson_4_load_check_fails_when_the_state_fits():
    linear = mt.nn.Linear(3, 2)
    assert "shape" in checks.load_is_refused(mt.nn.Linear(4, 2), linear.state_dict())
    with pytest.raises(AssertionError, match="accepted a state"):
        checks.load_is_refused(mt.nn.Linear(3, 2), linear.state_dict())


# ---------------------------------------------------------------- lesson 5
def test_lesson_5_gradient_check_catches_a_wrong_cross_entropy():
    checks.cross_entropy_gradient_is_softmax_minus_onehot(lambda x, t: F.cross_entropy(x, t, reduction="none"))
    with pytest.raises(AssertionError, match="softmax - onehot"):
        checks.cross_entropy_gradient_is_softmax_minus_onehot(lambda x, t: F.cross_entropy(x * 1.5, t, reduction="none"))


def test_lesson_5_pad_check_catches_the_wrong_pad_id():
    checks.pad_positions_are_ignored(lambda lg, tg: label_smoothed_loss(lg, tg, pad_id=0, smoothing=0.1), pad_id=0)
    with pytest.raises(AssertionError, match="real tokens"):
        checks.pad_positions_are_ignored(lambda lg, tg: label_smoothed_loss(lg, tg, pad_id=1, smoothing=0.1), pad_id=0)
    with pytest.raises(AssertionError):   # pads counted as real tokens: the average changes
        checks.pad_positions_are_ignored(lambda lg, tg: label_smoothed_loss(lg, tg, pad_id=99, smoothing=0.1), pad_id=0)


# ---------------------------------------------------------------- lessons 3 and 6
class ForgetfulLayerNorm(LayerNorm):
    @staticmethod
    def backward(ctx, grad):
        xhat, r, weight = ctx.saved
        return r * (grad - grad.mean(-1, keepdims=True)), None, None


def test_lesson_6_gradcheck_catches_a_layer_norm_backward_missing_a_term():
    x = mt.tensor(np.random.default_rng(0).normal(3, 5, (3, 8)), requires_grad=True)
    checks.passes_gradcheck(lambda t: F.layer_norm(t), [x], "LayerNorm")
    with pytest.raises(AssertionError, match="forgetful"):
        checks.passes_gradcheck(lambda t: ForgetfulLayerNorm.apply(t, None, None, eps=1e-5), [x], "forgetful")


# ---------------------------------------------------------------- lesson 7
def test_lesson_7_mask_check_catches_attention_that_ignores_the_mask():
    causal = np.tril(np.ones((5, 5), dtype=bool))
    good = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, mask=m, return_weights=True)  # noqa: E731
    blind = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, return_weights=True)  # noqa: E731
    checks.attention_respects_mask(good, causal)
    with pytest.raises(AssertionError, match="masked entries got attention weight"):
        checks.attention_respects_mask(blind, causal)


# ---------------------------------------------------------------- lesson 8
class SwappedHeads(MultiHeadAttention):
    """Splits the projection into heads with a plain reshape: positions and heads get mixed."""

    def split_heads(self, x):
        B, T, _ = x.shape
        return x.reshape(B, self.n_heads, T, self.d_k)


class SoftmaxOverQueries(MultiHeadAttention):
    """Normalises each key's scores over the queries instead of each query's over the keys."""

    def forward(self, query, key, value, mask=None, cache=None, static_kv=False):
        q, k, v = (self.split_heads(w(x)) for w, x in ((self.w_q, query), (self.w_k, key), (self.w_v, value)))
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(self.d_k)
        return self.w_o(self.merge_heads(F.softmax(s, axis=-2) @ v))


def _float64(cls):
    mt.manual_seed(0)
    return cls(16, 4).astype(np.float64).eval()


def test_lesson_8_head_check_catches_a_wrong_split_into_heads():
    x = np.random.default_rng(0).standard_normal((2, 6, 16))
    checks.heads_are_concatenated(_float64(MultiHeadAttention), x)
    with pytest.raises(AssertionError, match="differs from Concat"):
        checks.heads_are_concatenated(_float64(SwappedHeads), x)


def test_lesson_8_key_bias_check_catches_a_softmax_over_the_wrong_axis():
    x = np.random.default_rng(0).standard_normal((2, 6, 16))
    checks.key_bias_gets_no_gradient(_float64(MultiHeadAttention), x)
    with pytest.raises(AssertionError, match="key bias has a gradient"):
        checks.key_bias_gets_no_gradient(_float64(SoftmaxOverQueries), x)


def test_the_every_seed_check_fails_when_runs_overlap():
    checks.always_lower([0.1, 0.2], [0.3, 0.5], "ok")
    with pytest.raises(AssertionError, match="overlap"):
        checks.always_lower([0.1, 0.4], [0.3, 0.5], "two heads vs one")


# ---------------------------------------------------------------- lesson 9
def test_lesson_9_offset_check_fails_on_a_table_without_the_rotation_property():
    checks.offset_is_linear(sinusoidal_table(100, 32).astype(np.float64), 7)
    learned_like = np.random.default_rng(0).standard_normal((100, 32))
    with pytest.raises(AssertionError, match="no single linear map"):
        checks.offset_is_linear(learned_like, 7)


# ---------------------------------------------------------------- lessons 10 and 11
def test_lesson_10_checks_catch_a_missing_padding_mask():
    cfg = TransformerConfig(20, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=2, dropout=0.0)
    mt.manual_seed(0)
    enc = Encoder(cfg).astype(np.float64).eval()
    ids = mt.tensor(np.array([[4, 5, 6, 7, 0, 0]]))
    x = np.random.default_rng(0).standard_normal((1, 6, 16))
    allowed = np.broadcast_to(np.arange(6) < 4, (4, 6))
    checks.sees_only(checks.influence(lambda h: enc(h, padding_mask(ids, 0)), x)[:4], allowed, "encoder")
    with pytest.raises(AssertionError, match="depends on input 4"):
        checks.sees_only(checks.influence(lambda h: enc(h, None), x)[:4], allowed, "encoder without its mask")


def test_lesson_10_position_wise_check_catches_mixing_across_positions():
    ffn = mt.nn.Linear(8, 8).astype(np.float64)
    x = np.random.default_rng(0).standard_normal((1, 5, 8))
    checks.sees_only(checks.influence(ffn, x), np.eye(5, dtype=bool), "FFN")
    with pytest.raises(AssertionError, match="depends on input"):
        checks.sees_only(checks.influence(lambda h: ffn(h) + h.mean(axis=1, keepdims=True), x), np.eye(5, dtype=bool),
                         "a layer that averages positions")


def test_lesson_11_causality_check_catches_a_missing_causal_mask():
    mt.manual_seed(0)
    layer = DecoderLayer(8, 2, 16, dropout=0.0).astype(np.float64).eval()
    rng = np.random.default_rng(0)
    mem = mt.tensor(rng.standard_normal((1, 3, 8)))
    x = rng.standard_normal((1, 5, 8))
    causal = target_mask(mt.tensor(np.array([[4, 5, 6, 7, 8]])), 0)
    lower = np.tril(np.ones((5, 5), dtype=bool))
    checks.sees_only(checks.influence(lambda h: layer(h, mem, causal, None), x), lower, "decoder layer")
    with pytest.raises(AssertionError, match="which it must not see"):
        checks.sees_only(checks.influence(lambda h: layer(h, mem, None, None), x), lower, "decoder without its mask")


def test_lesson_11_token_level_check_on_the_whole_model():
    """The lesson's own measurement: change target token t, see which outputs move."""
    mt.manual_seed(0)
    model = Transformer(TransformerConfig(12, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1,
                                          dropout=0.0)).eval()
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(3, 12, (1, 4)), rng.integers(3, 12, (1, 5))
    base = model(src, tgt).numpy()
    changes = np.zeros((5, 5))
    for t in range(5):
        altered = tgt.copy()
        altered[0, t] = 3 + (altered[0, t] - 2) % 9
        changes[t] = np.abs(model(src, altered).numpy() - base).max(-1)[0]
    checks.sees_only(changes.T, np.tril(np.ones((5, 5), dtype=bool)), "decoder")
    with pytest.raises(AssertionError):  # the same measurement read the wrong way round is caught
        checks.sees_only(changes, np.tril(np.ones((5, 5), dtype=bool)), "decoder, transposed")

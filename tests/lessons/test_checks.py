"""Every check a lesson makes can fail: each is handed a deliberately broken input (a wrong
pad id, a missing causal mask, a broken backward, an optimizer without bias correction) and
must raise, while the real thing passes."""
import json

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor import optim
from minitensor.ops.norm import LayerNorm
from minitensor.ops.softmax import Softmax
from transformer import DecoderLayer, MultiHeadAttention, Transformer, TransformerConfig
from transformer import label_smoothed_loss, padding_mask, target_mask
from transformer.embedding import sinusoidal_table
from transformer.model import Encoder

from lessonkit import checks


# ---------------------------------------------------------------- lesson 5
class AdamWithoutBiasCorrection(optim.Adam):
    """m and v used as they are: too small a step at the start."""

    def _begin_step(self):
        self._c1 = self._c2 = 1.0


def test_lesson_5_adam_check_catches_a_missing_bias_correction():
    checks.adam_step_matches_the_formula(lambda ps: optim.Adam(ps, lr=0.01, betas=(0.9, 0.98), eps=1e-9))
    with pytest.raises(AssertionError, match="after step 1"):
        checks.adam_step_matches_the_formula(
            lambda ps: AdamWithoutBiasCorrection(ps, lr=0.01, betas=(0.9, 0.98), eps=1e-9))


def test_lesson_5_load_check_fails_when_the_state_fits():
    linear = mt.nn.Linear(3, 2)
    assert "shape" in checks.load_is_refused(mt.nn.Linear(4, 2), linear.state_dict())
    with pytest.raises(AssertionError, match="accepted a state"):
        checks.load_is_refused(mt.nn.Linear(3, 2), linear.state_dict())


# ---------------------------------------------------------------- lesson 4
def test_lesson_4_gradient_check_catches_a_wrong_cross_entropy():
    checks.cross_entropy_gradient_is_softmax_minus_onehot(lambda x, t: F.cross_entropy(x, t, reduction="none"))
    with pytest.raises(AssertionError, match="softmax - onehot"):
        checks.cross_entropy_gradient_is_softmax_minus_onehot(lambda x, t: F.cross_entropy(x * 1.5, t, reduction="none"))


def test_lesson_4_pad_check_catches_the_wrong_pad_id():
    checks.pad_positions_are_ignored(lambda lg, tg: label_smoothed_loss(lg, tg, pad_id=0, smoothing=0.1), pad_id=0)
    with pytest.raises(AssertionError, match="real tokens"):
        checks.pad_positions_are_ignored(lambda lg, tg: label_smoothed_loss(lg, tg, pad_id=1, smoothing=0.1), pad_id=0)
    with pytest.raises(AssertionError):   # pads counted as real tokens: the average changes
        checks.pad_positions_are_ignored(lambda lg, tg: label_smoothed_loss(lg, tg, pad_id=99, smoothing=0.1), pad_id=0)


# ---------------------------------------------------------------- lessons 3 and 7
class ForgetfulLayerNorm(LayerNorm):
    @staticmethod
    def backward(ctx, grad):
        xhat, r, weight = ctx.saved
        return r * (grad - grad.mean(-1, keepdims=True)), None, None


def test_lesson_7_gradcheck_catches_a_layer_norm_backward_missing_a_term():
    x = mt.tensor(np.random.default_rng(0).normal(3, 5, (3, 8)), requires_grad=True)
    checks.passes_gradcheck(lambda t: F.layer_norm(t), [x], "LayerNorm")
    with pytest.raises(AssertionError, match="forgetful"):
        checks.passes_gradcheck(lambda t: ForgetfulLayerNorm.apply(t, None, None, eps=1e-5), [x], "forgetful")


# ---------------------------------------------------------------- lesson 8
def test_lesson_8_mask_check_catches_attention_that_ignores_the_mask():
    causal = np.tril(np.ones((5, 5), dtype=bool))
    good = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, mask=m, return_weights=True)  # noqa: E731
    blind = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, return_weights=True)  # noqa: E731
    checks.attention_respects_mask(good, causal)
    with pytest.raises(AssertionError, match="masked entries got attention weight"):
        checks.attention_respects_mask(blind, causal)


# ---------------------------------------------------------------- lesson 9
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


def test_lesson_9_head_check_catches_a_wrong_split_into_heads():
    x = np.random.default_rng(0).standard_normal((2, 6, 16))
    checks.heads_are_concatenated(_float64(MultiHeadAttention), x)
    with pytest.raises(AssertionError, match="differs from Concat"):
        checks.heads_are_concatenated(_float64(SwappedHeads), x)


def test_lesson_9_key_bias_check_catches_a_softmax_over_the_wrong_axis():
    x = np.random.default_rng(0).standard_normal((2, 6, 16))
    checks.key_bias_gets_no_gradient(_float64(MultiHeadAttention), x)
    with pytest.raises(AssertionError, match="key bias has a gradient"):
        checks.key_bias_gets_no_gradient(_float64(SoftmaxOverQueries), x)


def test_the_every_seed_check_fails_when_runs_overlap():
    checks.always_lower([0.1, 0.2], [0.3, 0.5], "ok")
    with pytest.raises(AssertionError, match="overlap"):
        checks.always_lower([0.1, 0.4], [0.3, 0.5], "two heads vs one")


# ---------------------------------------------------------------- lesson 10
def test_lesson_10_offset_check_fails_on_a_table_without_the_rotation_property():
    checks.offset_is_linear(sinusoidal_table(100, 32).astype(np.float64), 7)
    learned_like = np.random.default_rng(0).standard_normal((100, 32))
    with pytest.raises(AssertionError, match="no single linear map"):
        checks.offset_is_linear(learned_like, 7)


# ---------------------------------------------------------------- lessons 11 and 12
def test_lesson_11_checks_catch_a_missing_padding_mask():
    cfg = TransformerConfig(20, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=2, dropout=0.0)
    mt.manual_seed(0)
    enc = Encoder(cfg).astype(np.float64).eval()
    ids = mt.tensor(np.array([[4, 5, 6, 7, 0, 0]]))
    x = np.random.default_rng(0).standard_normal((1, 6, 16))
    allowed = np.broadcast_to(np.arange(6) < 4, (4, 6))
    checks.sees_only(checks.influence(lambda h: enc(h, padding_mask(ids, 0)), x)[:4], allowed, "encoder")
    with pytest.raises(AssertionError, match="depends on input 4"):
        checks.sees_only(checks.influence(lambda h: enc(h, None), x)[:4], allowed, "encoder without its mask")


def test_lesson_11_position_wise_check_catches_mixing_across_positions():
    ffn = mt.nn.Linear(8, 8).astype(np.float64)
    x = np.random.default_rng(0).standard_normal((1, 5, 8))
    checks.sees_only(checks.influence(ffn, x), np.eye(5, dtype=bool), "FFN")
    with pytest.raises(AssertionError, match="depends on input"):
        checks.sees_only(checks.influence(lambda h: ffn(h) + h.mean(axis=1, keepdims=True), x), np.eye(5, dtype=bool),
                         "a layer that averages positions")


def test_lesson_12_causality_check_catches_a_missing_causal_mask():
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


def test_lesson_12_token_level_check_on_the_whole_model():
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


# ---------------------------------------------------------------- lesson 1
def _neuron(p):
    return p["x1"] * p["x1"] + np.tanh(p["w1"] * p["x1"] + p["w2"] * p["x2"] + p["b"])


def _neuron_grads(p, accumulate=True):
    """∂z/∂leaf for lesson 1's z = x1·x1 + tanh(w1 x1 + w2 x2 + b); without ``accumulate``
    x1 keeps only its last contribution, as a backward that assigns instead of adding would."""
    s = 1 - np.tanh(p["w1"] * p["x1"] + p["w2"] * p["x2"] + p["b"]) ** 2
    dx1 = (2 * p["x1"] if accumulate else 0.0) + s * p["w1"]
    return dict(x1=dx1, x2=s * p["w2"], w1=s * p["x1"], w2=s * p["x2"], b=s)


def test_lesson_1_finite_difference_check_catches_a_backward_that_assigns_instead_of_adding():
    p = dict(x1=0.5, x2=-1.5, w1=2.0, w2=0.7, b=0.1)
    assert checks.matches_finite_differences(_neuron, p, _neuron_grads(p)) < 1e-8
    with pytest.raises(AssertionError, match="∂f/∂x1"):
        checks.matches_finite_differences(_neuron, p, _neuron_grads(p, accumulate=False))


def test_agree_names_the_entry_that_differs_and_accepts_what_is_within_tolerance():
    assert checks.agree({"a": [1.0, 2.0]}, {"a": [1.0, 2.0 + 1e-13]}, "x") <= 1e-12
    with pytest.raises(AssertionError, match=r"x \[b\]: off by 0.001"):
        checks.agree({"a": 1.0, "b": np.ones(3)}, {"a": 1.0, "b": np.ones(3) + 1e-3}, "x", atol=1e-6)
    with pytest.raises(AssertionError, match="shape"):
        checks.agree(np.ones(3), np.ones(4), "x")


def test_agrees_result_is_the_largest_difference_and_says_what_it_measured_when_shown():
    """A notebook shows a cell's last value: agree's reads as a sentence, not a bare 2.2e-16, and
    is still the number (formatting, comparison, JSON)."""
    d = checks.agree([1.0, 2.0], [1.0, 2.0 + 2**-40], "two sums")
    assert d == 2**-40 and f"{d:.1e}" == "9.1e-13" and json.loads(json.dumps({"d": d}))["d"] == 2**-40
    assert repr(d) == "agree: two sums (largest difference 9.09e-13)"


# ---------------------------------------------------------------- lesson 2
class AddMeaningTheBias(mt.autograd.Function):
    """a + b whose backward averages the broadcast operand's gradient over the rows instead of
    summing it."""

    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, grad):
        return grad, grad.mean(0)


def test_lesson_2_broadcast_check_catches_a_gradient_averaged_instead_of_summed():
    checks.broadcast_gradient_is_summed(lambda x, b: x + b)
    with pytest.raises(AssertionError, match="summed over rows"):
        checks.broadcast_gradient_is_summed(AddMeaningTheBias.apply)


# ---------------------------------------------------------------- lesson 3
class HalfForgottenSoftmax(Softmax):
    """Softmax whose backward drops the −y yᵀ part of the Jacobian: diag(y) only."""

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.saved[0]


def test_lesson_3_rejection_check_fails_when_the_backward_is_right():
    x = mt.tensor(np.random.default_rng(0).standard_normal((3, 5)), requires_grad=True)
    assert "input 0" in checks.gradcheck_rejects(HalfForgottenSoftmax.apply, [x], "half a Jacobian")
    with pytest.raises(AssertionError, match="gradcheck accepted the real softmax"):
        checks.gradcheck_rejects(lambda t: F.softmax(t, axis=-1), [x], "the real softmax")


# ---------------------------------------------------------------- lesson 14
def test_lesson_14_shift_check_catches_a_decoder_input_that_holds_the_answer():
    from transformer.copytask import BOS, PAD, CopyTaskSettings, make_batch

    _, tgt_in, tgt_out = make_batch(np.random.default_rng(0), 8, CopyTaskSettings(vocab=13, min_length=3, max_length=6))
    checks.target_is_shifted(tgt_in, tgt_out, BOS, PAD)
    with pytest.raises(AssertionError, match="not the target shifted"):
        checks.target_is_shifted(np.concatenate([tgt_in[:, :1], tgt_out[:, :-1] * 0 + tgt_out[:, 1:]], 1),
                                 tgt_out, BOS, PAD)
    with pytest.raises(AssertionError, match="start with <s>"):
        checks.target_is_shifted(tgt_out, tgt_out, BOS, PAD)


def test_lesson_14_copy_check_passes_a_model_that_copies_and_fails_an_untrained_one():
    from lessonkit.toy import TableModel

    src, tgt_out = np.array([[3, 4]]), np.array([[3, 4, 2]])
    copier = TableModel({(): [0, 0, 0, 1, 0], (3,): [0, 0, 0, 0, 1], (3, 4): [0, 0, 1, 0, 0]}, [0, 0, 1, 0, 0], 5)
    assert checks.copies(copier, src, tgt_out, at_least=1.0) == (1.0, 1.0)
    mt.manual_seed(0)
    untrained = Transformer(TransformerConfig(5, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1,
                                              n_decoder_layers=1, dropout=0.0))
    with pytest.raises(AssertionError, match="the model copies 0.0% of sequences"):
        checks.copies(untrained, src, tgt_out, at_least=0.5)


# ---------------------------------------------------------------- lesson 15
def _lesson_13_model():
    from lessonkit.toy import TableModel

    table = {(): [0, 0, 0.0, 0.6, 0.4], (3,): [0, 0, 0.3, 0.35, 0.35], (4,): [0, 0, 0.9, 0.05, 0.05]}
    return TableModel(table, [0, 0, 0.98, 0.01, 0.01], vocab_size=5)


def test_lesson_15_search_check_catches_greedy_decoding_and_passes_beam_search():
    from transformer.decoding import beam_search, greedy_decode

    def greedy(m):
        out = greedy_decode(m, np.array([[3]]), max_len=4)[0].tolist()
        return out[:out.index(2) + 1]

    m = _lesson_13_model()
    beam = lambda mm: beam_search(mm, np.array([[3]]), beam_size=2, alpha=0.0, max_len=4)[0][0].tokens  # noqa: E731
    assert checks.finds_the_most_likely(beam, m, [3, 4], eos=2, max_len=4) == [4, 2]
    with pytest.raises(AssertionError, match=r"returned \[3, 3, 2\]"):
        checks.finds_the_most_likely(greedy, m, [3, 4], eos=2, max_len=4)


def test_lesson_15_length_penalty_check_catches_a_missing_divisor():
    from transformer.decoding import length_penalty

    checks.length_penalty_is_gnmt(length_penalty)
    with pytest.raises(AssertionError, match="lp"):
        checks.length_penalty_is_gnmt(lambda n, a: (5.0 + n) ** a)


# ---------------------------------------------------------------- lesson 20
def test_lesson_20_round_trip_check_catches_a_tokenizer_that_loses_case(tmp_path):
    from transformer.tokenizer import Tokenizer

    words = "ein Mann fährt mit dem Fahrrad durch den Park und eine Frau liest ein Buch am See".split()
    rng = np.random.default_rng(0)
    sentences = [" ".join(rng.choice(words, 8)) for _ in range(300)]
    tok = Tokenizer.train(sentences, tmp_path / "spm", vocab_size=60)
    checks.round_trips(tok, sentences[:50] + ["ein  Mann   fährt  "])

    class Lowercasing:
        encode = staticmethod(tok.encode)

        @staticmethod
        def decode(ids):
            return tok.decode(ids).lower()

    with pytest.raises(AssertionError, match="came back as"):
        checks.round_trips(Lowercasing, sentences[:50])


# ---------------------------------------------------------------- lesson 16
def test_lesson_16_equation_3_check_catches_a_schedule_one_step_off():
    from transformer import noam_lr

    points = [(1, 512, 4000), (4000, 512, 4000), (100_000, 512, 4000)]
    checks.follows_equation_3(noam_lr, points)
    with pytest.raises(AssertionError, match=r"lr\(1, 512, 4000\)"):
        checks.follows_equation_3(lambda s, d, w: noam_lr(s + 1, d, w), points)


# ---------------------------------------------------------------- lesson 23
def test_lesson_23_kernel_check_catches_swapped_scale_and_shift_on_the_emulator():
    from minitensor.cuda import emulator
    from minitensor.cuda import layer_norm as ln_kernel
    from minitensor.ops.norm import layer_norm_reference
    from tests.helpers import require

    ok, why = emulator.available()
    require(ok, f"the CUDA emulator needs a C++ compiler: {why}")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((6, 48)) * 3 + 1).astype(np.float32)
    gamma, beta = rng.uniform(0.5, 1.5, 48).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    ref, _, _ = layer_norm_reference(np, x.astype(np.float64), gamma.astype(np.float64), beta.astype(np.float64), 1e-5)
    checks.agree(ln_kernel.forward(x, gamma, beta, 1e-5)[0], ref, "LayerNorm kernel", atol=1e-5)
    with pytest.raises(AssertionError, match="LayerNorm kernel: off by"):
        checks.agree(ln_kernel.forward(x, beta, gamma, 1e-5)[0], ref, "LayerNorm kernel", atol=1e-5)


# ---------------------------------------------------------------- lesson 24
def test_lesson_24_data_parallel_check_catches_averaging_the_ranks_means():
    rng = np.random.default_rng(0)
    mt.manual_seed(0)
    model = Transformer(TransformerConfig(20, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1,
                                          n_decoder_layers=1, dropout=0.0)).astype(np.float64)
    src, tgt = rng.integers(3, 20, (6, 5)), rng.integers(3, 20, (6, 7))
    tgt[3:, 4:] = 0
    shards = [slice(0, 3), slice(3, 6)]
    checks.sharded_gradients_match(model, src, tgt, 0, shards, lambda g, n: [(a + b) / sum(n) for a, b in zip(*g)])
    with pytest.raises(AssertionError, match=r"combined shards', of parameter \[[a-z_.]+\w\]: off by"):  # named
        checks.sharded_gradients_match(model, src, tgt, 0, shards,
                                       lambda g, n: [(a / n[0] + b / n[1]) / 2 for a, b in zip(*g)])


# ---------------------------------------------------------------- checks shared by several lessons
def test_the_range_check_names_a_value_outside_and_fails_on_nan():
    checks.between([0.5, 1.9], 0.5, 2.0, "std")
    with pytest.raises(AssertionError, match=r"std: 2.1 is outside \[0.5, 2\]"):
        checks.between([1.0, 2.1], 0.5, 2.0, "std")
    with pytest.raises(AssertionError, match="nan"):
        checks.between([np.nan], 0, 1, "loss")


class DecoderLayerWithoutCrossAttention(DecoderLayer):
    """Computes the encoder-decoder attention and then discards it: the encoder is cut off."""

    def forward(self, y, memory, tgt_mask=None, src_mask=None, cache=None):
        y = self.sub1(y, lambda h: self.self_attn(h, h, h, tgt_mask))
        self.sub2(y, lambda h: self.cross_attn(h, memory, memory, src_mask))
        return self.sub3(y, self.ffn)


def test_lesson_17_silent_parameter_check_catches_a_decoder_cut_off_from_the_encoder():
    from transformer.copytask import CopyTaskSettings, make_batch

    mt.manual_seed(0)
    model = Transformer(TransformerConfig(13, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1,
                                          n_decoder_layers=1, dropout=0.0, max_len=12))
    src, tgt_in, tgt_out = make_batch(np.random.default_rng(0), 8, CopyTaskSettings(vocab=13, min_length=3, max_length=8))

    def backward():
        model.zero_grad()
        label_smoothed_loss(model(src, tgt_in), mt.tensor(tgt_out), 0).backward()

    backward()
    silent = checks.exactly_these_are_silent(model, ("w_k.bias",))
    assert len(silent) == 3          # the key biases of the encoder's and the decoder's two attentions
    model.decoder.layers[0].__class__ = DecoderLayerWithoutCrossAttention
    backward()
    with pytest.raises(AssertionError, match="get no gradient: encoder"):
        checks.exactly_these_are_silent(model, ("w_k.bias",))


class KeysThroughReLU(MultiHeadAttention):
    """Keys pass through a ReLU after their projection: the key bias no longer shifts every
    score of a query by the same amount, so the softmax does not ignore it."""

    def forward(self, query, key, value, mask=None, cache=None, static_kv=False):
        q, k, v = self.split_heads(self.w_q(query)), self.split_heads(F.relu(self.w_k(key))), self.split_heads(self.w_v(value))
        return self.w_o(self.merge_heads(F.scaled_dot_product_attention(q, k, v, mask=mask)))


def test_lesson_17_silent_parameter_check_requires_every_key_bias_to_be_silent():
    """A key bias that gets a gradient is a bug too: "only these may be silent" would let it
    pass, "exactly these are silent" must not."""
    from transformer.copytask import CopyTaskSettings, make_batch

    mt.manual_seed(0)
    model = Transformer(TransformerConfig(13, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1,
                                          n_decoder_layers=1, dropout=0.0, max_len=12))
    model.encoder.layers[0].self_attn.__class__ = KeysThroughReLU
    src, tgt_in, tgt_out = make_batch(np.random.default_rng(0), 8, CopyTaskSettings(vocab=13, min_length=3, max_length=8))
    model.zero_grad()
    label_smoothed_loss(model(src, tgt_in), mt.tensor(tgt_out), 0).backward()
    with pytest.raises(AssertionError, match="1 of the 3 parameters ending in .* get a gradient: encoder.layers.0"):
        checks.exactly_these_are_silent(model, ("w_k.bias",))

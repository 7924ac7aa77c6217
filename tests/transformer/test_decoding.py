"""Greedy decoding: argmax at every step, stop at eos, pad after it, respect max_len."""
import re

import numpy as np
import pytest

import minitensor as mt
from transformer import TransformerConfig
from transformer.decoding import greedy_decode


class ScriptedModel:
    """A stand-in model whose next-token scores follow a script per batch row."""

    def __init__(self, scripts, vocab=8):
        self.cfg = TransformerConfig(vocab_size=vocab, d_model=4, n_heads=1)
        self.scripts, self.vocab = scripts, vocab
        self.decoded_lengths = []

    def eval(self):
        return self

    def as_ids(self, ids):
        return ids if isinstance(ids, mt.Tensor) else mt.tensor(ids)

    def encode(self, src, src_mask=None):
        return src

    def new_cache(self):
        return None  # no incremental state: the whole prefix is decoded every step

    def decode(self, tgt_in, memory, src_mask, cache=None):
        self.decoded_lengths.append(tgt_in.shape[1])
        t = tgt_in.shape[1] - 1  # index of the token to produce
        scores = np.zeros((tgt_in.shape[0], tgt_in.shape[1], self.vocab), np.float32)
        for b, script in enumerate(self.scripts):
            scores[b, -1, script[min(t, len(script) - 1)]] = 1.0
        return mt.tensor(scores)

    def generator(self, h):
        return h


def test_greedy_stops_at_eos_and_pads_finished_rows():
    model = ScriptedModel([[5, 6, 2], [7, 2], [4, 4, 4, 4, 4]])
    out = greedy_decode(model, np.array([[3, 3], [3, 3], [3, 3]]), max_len=4)
    np.testing.assert_array_equal(out, [[5, 6, 2, 0], [7, 2, 0, 0], [4, 4, 4, 4]])
    assert model.decoded_lengths == [1, 2, 3, 4]  # the decoder sees bos + everything so far


def test_greedy_ends_early_when_every_row_has_finished():
    model = ScriptedModel([[6, 2, 2], [5, 4, 2]])
    out = greedy_decode(model, np.array([[3], [3]]), max_len=20)
    np.testing.assert_array_equal(out, [[6, 2, 0], [5, 4, 2]])


def test_the_first_token_is_never_eos_even_when_the_model_ranks_it_first():
    # row 0 scores eos highest at the first step: greedy takes the best other token (the
    # lowest id among the ties at 0 after pad, bos and eos are banned: 3), then follows the script
    model = ScriptedModel([[2, 2], [5, 2]])
    out = greedy_decode(model, np.array([[3], [3]]), max_len=20)
    np.testing.assert_array_equal(out, [[3, 2], [5, 2]])


def test_default_max_len_is_source_length_plus_50():
    model = ScriptedModel([[4]])
    out = greedy_decode(model, np.array([[3, 3, 3]]))
    assert out.shape == (1, 53)


def test_translate_splits_a_batch_whose_decoding_would_pass_the_memory_limit(monkeypatch):
    from transformer import Transformer, TransformerConfig, evaluate  # noqa: PLC0415
    from transformer.decoding import memory_estimate  # noqa: PLC0415

    class Words:  # a tokenizer of one piece per word
        def encode(self, texts):
            return [[3 + len(w) % 20 for w in t.split()] for t in texts] if isinstance(texts, list) else \
                [3 + len(w) % 20 for w in texts.split()]

        def decode(self, ids):
            return " ".join("w" for _ in ids if _ > 2)

    mt.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=24, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1,
                                          n_decoder_layers=1, dropout=0.0)).eval()
    sizes = []
    real = evaluate.beam_search
    monkeypatch.setattr(evaluate, "beam_search", lambda m, src, **kw: sizes.append(src.shape[0]) or real(m, src, **kw))
    lines = ["a bb ccc dddd eeeee"] * 40
    one = memory_estimate(model.cfg, 4, 6, 6 + 10)  # one sentence: 5 words + eos, output up to 10 more
    out = evaluate.translate(model, Words(), lines, beam_size=4, max_len_a=10, progress=False,
                             memory_gib=7.5 * one / 2**30)
    assert sizes and max(sizes) == 7 and sum(sizes) == 40   # 7 sentences fit the limit, 8 would not
    assert all(out)
    sizes.clear()
    evaluate.translate(model, Words(), lines, beam_size=4, max_len_a=10, progress=False)
    assert sizes == [40]  # the default limit holds the whole batch


@pytest.mark.parametrize("kwargs, message", [
    ({"max_pieces": 0}, "max_pieces must be >= 1, got 0"),
    ({"memory_gib": 0.0}, "memory_gib must be > 0, got 0.0"),
    ({"memory_gib": float("nan")}, "memory_gib must be > 0, got nan"),
    ({"long_lines": "drop"}, "long_lines must be one of"),
    ({"beam_size": 0}, "beam"),
    ({"alpha": float("nan")}, "alpha"),
])
def test_translate_refuses_out_of_range_settings_before_decoding(kwargs, message):
    from transformer import Transformer, evaluate  # noqa: PLC0415

    class Refuse:  # a tokenizer that must never be reached
        def encode(self, texts):
            raise AssertionError("translate encoded before checking its settings")

    model = Transformer(TransformerConfig(vocab_size=24, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1,
                                          n_decoder_layers=1, dropout=0.0)).eval()
    with pytest.raises(ValueError, match=re.escape(message)):
        evaluate.translate(model, Refuse(), ["a b"], progress=False, **kwargs)

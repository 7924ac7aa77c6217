"""Greedy decoding: argmax at every step, stop at eos, pad after it, respect max_len."""
import numpy as np

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
    model = ScriptedModel([[2], [5, 2]])
    out = greedy_decode(model, np.array([[3], [3]]), max_len=20)
    np.testing.assert_array_equal(out, [[2, 0], [5, 2]])


def test_default_max_len_is_source_length_plus_50():
    model = ScriptedModel([[4]])
    out = greedy_decode(model, np.array([[3, 3, 3]]))
    assert out.shape == (1, 53)

"""A hand-built "model" for decoding experiments: next-token probabilities from a table.

It offers the methods greedy_decode and beam_search call (encode, decode, generator,
new_cache, as_ids, eval), so their behaviour can be checked against exhaustive search on a
distribution we choose (tests, and the lesson on beam search).
"""
from __future__ import annotations

import numpy as np

import minitensor as mt

from transformer.config import TransformerConfig


class TableModel:
    """``table`` maps a prefix (tuple of generated ids, no bos) to next-token probabilities;
    prefixes not in it get ``default``. Ids: 0 pad, 1 bos, 2 eos, then the symbols."""

    def __init__(self, table: dict, default, vocab_size: int):
        self.cfg = TransformerConfig(vocab_size=vocab_size, d_model=4, n_heads=1)
        self.table, self.default = table, np.asarray(default, dtype=np.float64)

    def probs(self, prefix) -> np.ndarray:
        return np.asarray(self.table.get(tuple(prefix), self.default), dtype=np.float64)

    def eval(self):
        return self

    def as_ids(self, ids):
        return mt.tensor(np.asarray(ids))

    def encode(self, src, src_mask=None):
        return src

    def new_cache(self):
        return None  # no incremental state: the whole prefix is decoded every step

    def decode(self, tgt_in, memory, src_mask, cache=None):
        ids = tgt_in.numpy()
        out = np.zeros(ids.shape + (self.cfg.vocab_size,))
        for b in range(ids.shape[0]):
            out[b, -1] = np.log(np.maximum(self.probs(ids[b, 1:]), 1e-12))
        return mt.tensor(out)

    def generator(self, h):
        return h

"""Exercise 14 (lesson 14) — the shared embedding: lookup and output projection.

One V × d_model matrix E is both the target embedding and the pre-softmax projection
(Section 3.4, lesson 14). Write its two uses in NumPy:

1. ``embed(ids, E)``: token ids (B, T) -> their vectors (B, T, d_model): each id's row of
   E, scaled as Section 3.4 says (lesson 10 measures why), as
   ``transformer.ScaledEmbedding`` does.
2. ``logits(h, E)``: decoder states h (B, T, d_model) -> logits (B, T, V), before any
   softmax: the score of token w at a position is the dot product of that position's state
   with token w's row of E, as ``Transformer.generator`` computes it.

Checks by hand: with E = [[1, 0], [0, 2], [3, 4]] (V = 3, d_model = 2), embed([[2, 0]], E)
is √2 · [[[3, 4], [1, 0]]], and logits([[[1, 1]]], E) is [[[1, 2, 7]]].

Check it with:  python lessons/check.py 14
"""
import numpy as np


def embed(ids: np.ndarray, E: np.ndarray) -> np.ndarray:
    raise NotImplementedError("exercise 14: write embed")


def logits(h: np.ndarray, E: np.ndarray) -> np.ndarray:
    raise NotImplementedError("exercise 14: write logits")

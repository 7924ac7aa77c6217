"""Exercise 08 (lesson 8) — the causal mask, and attention with it.

1. ``causal_mask(T)`` returns a (T, T) bool array whose entry [i, j] is True when query i
   may attend to key j in a decoder (lesson 8, Section 3.2.3): a position sees itself and
   the positions before it, never those after it.
2. ``attention(q, k, v, mask)`` computes equation (1) in NumPy for q, k, v of shape
   (B, T, d) and returns (B, T, d): each query's weights over the keys are a softmax of its
   scores, scaled as lesson 8 explains, and its output is the values weighted by them.
   ``mask`` is None or a bool array that broadcasts to (B, T, T); where it is False, the
   key gets exactly zero weight.

Checks by hand: the rows of causal_mask(3) are [True, False, False], [True, True, False]
and [True, True, True]. With the causal mask the first position's output is v[:, 0], since
it sees only itself. Without a mask and with q = 0, every position's output is the mean of
the values.

Check it with:  python lessons/check.py 08
"""
import numpy as np


def causal_mask(T: int) -> np.ndarray:
    raise NotImplementedError("exercise 08: write causal_mask")


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask) -> np.ndarray:
    raise NotImplementedError("exercise 08: write attention")

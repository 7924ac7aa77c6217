"""Exercise 07 (lesson 7) — the causal mask, and attention with it.

1. ``causal_mask(T)``: a (T, T) bool array, True where query i may attend to key j, which
   in a decoder is exactly when j <= i (Section 3.2.3).
2. ``attention(q, k, v, mask)``: equation (1) in NumPy, softmax(q kᵀ / √d_k) v, for q, k, v
   of shape (B, T, d); where ``mask`` (None, or bool broadcastable to (B, T, T)) is False the
   score is −∞ before the softmax.

Check it with:  python lessons/check.py 07
"""
import numpy as np


def causal_mask(T: int) -> np.ndarray:
    raise NotImplementedError("exercise 07: write causal_mask")


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask) -> np.ndarray:
    raise NotImplementedError("exercise 07: write attention")

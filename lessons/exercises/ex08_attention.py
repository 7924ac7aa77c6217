"""Exercise 08 (lesson 8) — scaled dot-product attention with masks (equation 1).

Write, with your engine's operations (so that backward comes for free):
1. ``softmax(x)`` over the last axis: exp(x − m) / Σ exp(x − m), m the row's largest entry
   (``x.max(axis=-1, keepdims=True)``: a constant, no gradient needed through it).
2. ``causal_mask(T)``: a (T, T) bool array, True where query i may attend to key j (j ≤ i).
3. ``attention(q, k, v, mask=None)``: softmax(q kᵀ / √d_k) v for q (..., Tq, d_k),
   k (..., Tk, d_k), v (..., Tk, d_v). ``mask`` is a bool array that broadcasts to
   (..., Tq, Tk), True = may attend: the scores where it is False become −1e9 before the
   softmax (``masked_fill``), so that they get no weight.

Check by hand: with one key, the output is v, whatever q.

Check it with:  python lessons/check.py 08
"""
import numpy as np

import ex02_broadcasting  # noqa: F401 - the engine's operators


def softmax(x):
    raise NotImplementedError("exercise 08: write softmax")


def causal_mask(T):
    raise NotImplementedError("exercise 08: write causal_mask")


def attention(q, k, v, mask=None):
    raise NotImplementedError("exercise 08: write attention")

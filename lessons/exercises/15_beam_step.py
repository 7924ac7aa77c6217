"""Exercise 15 (lesson 15) — one step of beam search.

Each of B sentences has K open beams with log probabilities ``scores`` (B, K) (−∞ for a
beam not in use), and for each beam the model gives next-token log probabilities ``logp``
(B, K, V). ``rank_extensions(scores, logp, n)`` considers every one-token extension
(beam k, token w) of a sentence's beams, ranks them by the log probability of the whole
extended prefix (lesson 15), and returns the n best as three (B, n) arrays, best first: the
beam each extends and the token it appends (integers), and its log probability.

Check by hand, lesson 15's example: beams of −0.5 and −2.0, with token probabilities
(0.2, 0.3, 0.5) after the first and (0.9, 0.05, 0.05) after the second. For n = 3 the
answer is beam [[0, 0, 1]], token [[2, 1, 0]], score [[−1.193, −1.704, −2.105]]: beam 1's
likeliest token beats beam 0's least likely one, and nothing else of beam 1 makes it.

Check it with:  python lessons/check.py 15
"""
import numpy as np


def rank_extensions(scores: np.ndarray, logp: np.ndarray, n: int):
    raise NotImplementedError("exercise 15: write rank_extensions")

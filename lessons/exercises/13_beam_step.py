"""Exercise 13 (lesson 13) — one step of beam search.

Each of B sentences has K open beams with log probabilities ``scores`` (B, K), and for each
beam the model gives next-token log probabilities ``logp`` (B, K, V). Write
``rank_extensions(scores, logp, n)``: rank every one-token extension (beam k, token w) of a
sentence by its total log probability scores[b, k] + logp[b, k, w], and return the n best
as three (B, n) arrays (beam, token, score), best first.

Ranking by the token's log probability alone is the mistake to avoid: a likely token after
an unlikely prefix can be worth less than a less likely token after a good one.
Check it with:  python lessons/check.py 13
"""
import numpy as np


def rank_extensions(scores: np.ndarray, logp: np.ndarray, n: int):
    raise NotImplementedError("exercise 13: write rank_extensions")

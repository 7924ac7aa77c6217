"""Exercise 15 (lesson 15) — greedy decoding with the cache, and beam search's step.

Write:
1. ``greedy_decode(model, src, max_len, bos, eos, pad)``: your model (exercise 14) picks the
   likeliest next token at every step. Encode ``src`` (B, Ts) once; start every row with
   ``bos``; at step t run only the newest token through the decoder, each layer's ``step``
   (exercise 12) with a cache of its own, the embedding at ``offset=t``; take the argmax of
   the logits. After a row's ``eos``, the row continues with ``pad``; stop when every row has
   its ``eos``, or after ``max_len`` tokens. Return the (B, L) integer array of generated
   tokens without the leading ``bos``. Run it under ``no_grad()``: decoding needs no graph.
2. ``rank_extensions(scores, logp, n)``, one step of beam search: each of B sentences has K
   open beams with log probabilities ``scores`` (B, K) (−∞ for a beam not in use), and
   ``logp`` (B, K, V) gives each beam's next-token log probabilities. Rank every one-token
   extension (beam k, token w) of a sentence's beams by the log probability of the whole
   extended prefix, and return the n best as three (B, n) arrays, best first: the beam each
   extends, the token it appends (integers), and its log probability. Ties go to the lower
   k·V + w.

Check it with:  python lessons/check.py 15
"""
import numpy as np

from ex01_tensor import no_grad
from ex14_transformer import padding_mask


def greedy_decode(model, src, max_len, bos, eos, pad):
    raise NotImplementedError("exercise 15: write greedy_decode")


def rank_extensions(scores, logp, n):
    raise NotImplementedError("exercise 15: write rank_extensions")

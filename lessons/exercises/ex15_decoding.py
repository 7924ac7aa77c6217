"""Exercise 15 (lesson 15) — greedy decoding with the cache, and beam search's step.

Write:
1. ``greedy_decode(model, src, max_len, bos, eos, pad)``: your model (exercise 14) picks the
   likeliest next token at every step. Encode ``src`` (an integer array (B, Ts)) once; start
   every row with ``bos``; at step t = 0, 1, ... run only the newest token through the
   decoder, each layer's ``step`` (exercise 12) with a cache of its own, the embedding at
   ``offset=t``. Ban tokens by setting their logits to −∞: ``pad`` and ``bos`` at every step
   (neither is ever an output), and ``eos`` at step 0 (an output has at least one token).
   Then take the argmax of the logits. After a row's ``eos``, the row continues with
   ``pad``; stop when every row has its ``eos``, or after ``max_len`` tokens. Return the
   (B, L) integer array of generated tokens without the leading ``bos``. Run it under
   ``no_grad()``: decoding needs no graph.
2. ``rank_extensions(scores, logp, n)``, one step of beam search: each of B sentences has K
   open beams with log probabilities ``scores`` (B, K) (−∞ for a beam not in use), and
   ``logp`` (B, K, V) gives each beam's next-token log probabilities. Rank every one-token
   extension (beam k, token w) of a sentence's beams by the log probability of the whole
   extended prefix, and return the n best as three (B, n) arrays, best first: the beam each
   extends, the token it appends (integers), and its log probability. Ties go to the lower
   k·V + w.
3. ``beam_search(model, src, beam, alpha, max_len, bos, eos, pad)`` for one source sentence
   ``src`` (a 1-D integer array), with your ``rank_extensions``. Keep up to ``beam`` open
   prefixes with their log probabilities (at first one: the empty prefix, 0). At step
   t = 1, 2, ...:
   - run the decoder over each open prefix (bos first; no cache needed) and take the logits
     of its last position;
   - ban the tokens greedy decoding bans (``pad`` and ``bos``, and ``eos`` at step 1) by
     setting their logits to −∞, and only then take the log-softmax, so that the allowed
     tokens' probabilities sum to 1;
   - rank the extensions, keeping the 2·beam best (fewer if there are fewer), and go
     through them best first, stopping at the first of log probability −∞ (a banned
     token: it is neither finished nor kept): an extension by ``eos`` that ranks among the
     first ``beam`` of them becomes a finished hypothesis (its tokens, eos included, scored
     log P / lp(t), with the length penalty lp(n) = ((5 + n) / 6)^alpha and t its length:
     its tokens without bos, eos included), as long as fewer than ``beam`` are finished;
     an extension by eos ranked beyond the first ``beam`` is dropped; the other extensions
     become the new open prefixes, up to ``beam`` of them.
   Stop when ``beam`` hypotheses are finished or no prefix is left open (the search is
   done), or after ``max_len`` steps (it ran out of steps; a step that finishes the
   ``beam``-th hypothesis is done, even the last one). If it ran out of steps, or nothing
   finished, each open prefix counts too, scored log P / lp(its length). Return the tokens
   of the best-scored hypothesis (a list, without bos); between equal scores, the one found
   first (the finished ones in the order they finished, then the open ones best first).

Check it with:  python lessons/check.py 15
"""
import numpy as np

from ex01_tensor import no_grad
from ex04_cross_entropy import LogSoftmax
from ex14_transformer import padding_mask


def greedy_decode(model, src, max_len, bos, eos, pad):
    raise NotImplementedError("exercise 15: write greedy_decode")


def rank_extensions(scores, logp, n):
    raise NotImplementedError("exercise 15: write rank_extensions")


def beam_search(model, src, beam, alpha, max_len, bos, eos, pad):
    raise NotImplementedError("exercise 15: write beam_search")

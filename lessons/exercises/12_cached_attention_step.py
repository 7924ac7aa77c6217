"""Exercise 12 (lesson 12) — one step of attention with a key-value cache.

Generation adds one position at a time. Under the causal mask the keys and values of the
earlier positions never change, so a decoder keeps them in a cache and computes only the
new position's (lesson 12).

``cached_attention_step(q, k, v, cache)`` receives the newest position's query, key and
value, each (B, 1, d), and ``cache``, a dict that is empty at the first step and that this
function keeps up to date: after the step of position t (counted from 0), cache["k"] and
cache["v"] are (B, t + 1, d) arrays holding the keys and the values of all the positions
so far, in order (position j at index j, the newest last). It returns (B, 1, d): the new
query's scaled dot-product attention (lesson 8) over all the cached keys and values.

The check calls it for t = 0, 1, …, T − 1 with one cache, and compares each step with
attention over the whole sequence under the causal mask (its row t), and the cache with
the first t + 1 keys and values.

Checks by hand: at the first step the output is v, since one key gets all the weight.
When all the keys so far are equal, the output is the mean of the values so far.

Check it with:  python lessons/check.py 12
"""
import numpy as np


def cached_attention_step(q: np.ndarray, k: np.ndarray, v: np.ndarray, cache: dict) -> np.ndarray:
    raise NotImplementedError("exercise 12: write cached_attention_step")

"""Exercise 23 (lesson 23) — attention one block of keys at a time: the idea of flash attention.

A GPU kernel keeps a block of queries in fast memory and streams the keys and values through
it in blocks, never holding the whole (Tq, Tk) matrix of scores. The softmax still comes out
exact, because it can be updated block by block. For each query keep the largest score so
far m, the sum so far ℓ = Σ exp(s − m) and the weighted sum so far a = Σ exp(s − m)·v. For a
new block with scores s_b and values v_b: m' = max(m, max s_b); rescale what you have by
exp(m − m'); add exp(s_b − m') and exp(s_b − m')·v_b. At the end the output is a / ℓ.

Write ``blockwise_attention(q, k, v, block)`` in NumPy (plain arrays, no engine): q (Tq, d),
k (Tk, d), v (Tk, d_v), keys taken ``block`` at a time, scores q kᵀ / √d. It must equal
softmax(q kᵀ / √d) v.

Check it with:  python lessons/check.py 23
"""
import numpy as np


def blockwise_attention(q, k, v, block):
    # >>> exercise: write blockwise_attention
    Tq = q.shape[0]
    m = np.full((Tq, 1), -np.inf)
    l = np.zeros((Tq, 1))
    a = np.zeros((Tq, v.shape[1]))
    for start in range(0, k.shape[0], block):
        s = q @ k[start:start + block].T / np.sqrt(q.shape[1])
        m_new = np.maximum(m, s.max(axis=1, keepdims=True))
        rescale = np.exp(m - m_new)
        p = np.exp(s - m_new)
        l = l * rescale + p.sum(axis=1, keepdims=True)
        a = a * rescale + p @ v[start:start + block]
        m = m_new
    return a / l
    # <<<

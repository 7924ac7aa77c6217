"""Exercise 09 (lesson 9) — splitting into heads and merging them back.

In ``transformer.MultiHeadAttention`` the h projections W^Q_i sit side by side in one
d_model × d_model matrix, so head i of a projected (B, T, d_model) array is, at every
position, the block of d_k = d_model / h columns that starts at column i·d_k (lesson 9).

1. ``split_heads(x, h)``: x (B, T, d_model) -> (B, h, T, d_k), where [:, i] is head i, a
   (B, T, d_k) array.
2. ``merge_heads(x)``: the inverse, (B, h, T, d_k) -> (B, T, h·d_k): at each position, the
   heads side by side in order, Concat(head_1, …, head_h).

Checks by hand: for x = np.arange(8.).reshape(1, 2, 4) and h = 2, head 0 is
[[0, 1], [4, 5]] and head 1 is [[2, 3], [6, 7]]. merge_heads(split_heads(x, h)) is x, for
every x and h.

Check it with:  python lessons/check.py 09
"""
import numpy as np


def split_heads(x: np.ndarray, h: int) -> np.ndarray:
    raise NotImplementedError("exercise 09: write split_heads")


def merge_heads(x: np.ndarray) -> np.ndarray:
    raise NotImplementedError("exercise 09: write merge_heads")

"""Exercise 08 (lesson 8) — splitting into heads and merging them back.

The h projections W^Q_i sit side by side in one d_model × d_model matrix, so head i of a
projected (B, T, d_model) array is its columns i·d_k .. (i+1)·d_k − 1 (d_k = d_model / h).

1. ``split_heads(x, h)``: (B, T, d_model) -> (B, h, T, d_k), head i in [:, i].
2. ``merge_heads(x)``: the inverse, (B, h, T, d_k) -> (B, T, h·d_k): Concat(head_1..head_h).

A plain ``x.reshape(B, h, T, d_k)`` has the right shape and mixes positions into heads.
Check it with:  python lessons/check.py 08
"""
import numpy as np


def split_heads(x: np.ndarray, h: int) -> np.ndarray:
    raise NotImplementedError("exercise 08: write split_heads")


def merge_heads(x: np.ndarray) -> np.ndarray:
    raise NotImplementedError("exercise 08: write merge_heads")

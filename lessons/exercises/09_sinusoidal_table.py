"""Exercise 09 (lesson 9) — the sinusoidal positional encoding.

Write ``sinusoidal_table(n, d)``: the (n, d) array with, for pos = 0..n−1 and i = 0..d/2−1,

    PE[pos, 2i]     = sin(pos / 10000^(2i/d))
    PE[pos, 2i + 1] = cos(pos / 10000^(2i/d))

(Section 3.5). d is even.
Check it with:  python lessons/check.py 09
"""
import numpy as np


def sinusoidal_table(n: int, d: int) -> np.ndarray:
    raise NotImplementedError("exercise 09: write sinusoidal_table")

"""Exercise 10 (lesson 10) — the sinusoidal positional encoding.

``sinusoidal_table(n, d)`` returns the (n, d) array of the positional encodings of
Section 3.5 (lesson 10) for positions 0 … n − 1 and an even width d. Its columns come in
d/2 pairs, a sine and a cosine of the same angle: the position divided by 10000 raised to
a power that grows from 0 for the first pair to nearly 1 for the last. Lesson 10 gives the
paper's formula.

Checks by hand: row 0 is [0, 1, 0, 1, …] (sin 0 and cos 0). The first pair of row pos is
(sin pos, cos pos). For d = 4 the second pair of row 1 is (sin 0.01, cos 0.01). Every row's
squares sum to d/2.

Check it with:  python lessons/check.py 10
"""
import numpy as np


def sinusoidal_table(n: int, d: int) -> np.ndarray:
    raise NotImplementedError("exercise 10: write sinusoidal_table")

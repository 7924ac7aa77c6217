"""Exercise 18 (lesson 18) — why sinusoids might extrapolate: a shift is a fixed linear map.

Section 3.5 chose sinusoids because "for any fixed offset k, PE(pos+k) can be represented as a
linear function of PE(pos)". Write ``shift_matrix(k, d)``: the (d, d) matrix M with
PE(pos + k) = PE(pos) M for every position pos (PE a row of your ``sinusoidal_table`` of
exercise 10, d even), for any integer k (a negative k shifts back). Columns 2i and 2i + 1
hold sin(pos·ω_i) and cos(pos·ω_i), with ω_i = 1 / 10000^(2i/d); the angle-sum formulas
give the 2 × 2 block of each pair, and M is block diagonal.

Check by hand: shift_matrix(0, d) is the identity.

Check it with:  python lessons/check.py 18
"""
import numpy as np


def shift_matrix(k, d):
    # >>> exercise: write shift_matrix
    M = np.zeros((d, d))
    for i in range(d // 2):
        a = k / 10000.0 ** (2 * i / d)
        c, s = np.cos(a), np.sin(a)
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = c, -s
        M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = s, c
    return M
    # <<<

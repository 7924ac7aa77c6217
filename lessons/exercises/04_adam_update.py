"""Exercise 04 (lesson 4) — one Adam update, written out.

Write ``adam_update(theta, grad, m, v, t, lr, betas, eps)`` returning the new
``(theta, m, v)`` after step t (t counts from 1), as lesson 4 writes Adam:

    m ← β1·m + (1−β1)·g          v ← β2·v + (1−β2)·g²
    m̂ = m / (1 − β1^t)           v̂ = v / (1 − β2^t)
    θ ← θ − lr · m̂ / (√v̂ + ε)

The check runs three steps next to ``minitensor.optim.Adam`` and compares.
Check it with:  python lessons/check.py 04
"""
import numpy as np


def adam_update(theta: np.ndarray, grad: np.ndarray, m: np.ndarray, v: np.ndarray, t: int, lr: float,
                betas: tuple, eps: float):
    raise NotImplementedError("exercise 04: write adam_update")

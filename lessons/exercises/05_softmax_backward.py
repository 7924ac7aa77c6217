"""Exercise 05 (lesson 5) — the backward of softmax.

y = softmax(x) over the last axis. Write ``softmax_backward(y, grad)``: given the output y
and the cotangent grad (both of x's shape), return grad's pullback to x, the vector-Jacobian
product with the Jacobian diag(y) − y yᵀ of each row.

A tempting mistake keeps only the diagonal of the Jacobian, y (1 − y). The check builds an
op from your backward and runs ``mt.gradcheck`` on it (float64, random cotangent, every
entry), over shapes hypothesis draws.
Check it with:  python lessons/check.py 05
"""
import numpy as np


def softmax_backward(y: np.ndarray, grad: np.ndarray) -> np.ndarray:
    raise NotImplementedError("exercise 05: write softmax_backward")

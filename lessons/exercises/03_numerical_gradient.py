"""Exercise 03 (lesson 3) — numerical gradients by central differences.

Write ``numerical_gradient(f, x, eps)``: for a function f from an array to a number, return an
array like x whose entry i is (f(x + eps·e_i) − f(x − eps·e_i)) / (2·eps), where e_i is 1 at
entry i and 0 elsewhere. Central differences are accurate to O(eps²); a one-sided difference
(f(x + eps·e_i) − f(x)) / eps only to O(eps), and the check can tell.

You may change x while you work, as long as you put every entry back.
Check it with:  python lessons/check.py 03
"""
import numpy as np


def numerical_gradient(f, x: np.ndarray, eps: float) -> np.ndarray:
    raise NotImplementedError("exercise 03: write numerical_gradient")

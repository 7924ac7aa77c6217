"""Exercise 03 (lesson 3) — numerical gradients by central differences.

``numerical_gradient(f, x, eps)`` receives a function f from an array to a number, an
array x of any shape (float64) and a step eps > 0. It returns an array shaped like x whose
entry i estimates ∂f/∂x_i by the central difference of lessons 1 and 3: f evaluated with
entry i moved by eps in each direction, every other entry left where it is.

You may change x in place while you work, as long as each entry is back at its value before
you move the next one, and when you return.

Checks by hand: for f(x) = sum(x**2) the gradient is 2x, and the central difference of a
quadratic has no error at all, so x = [1., -2.] gives [2., -4.] up to round-off, for any
eps. For f(x) = sum(x**3) at x = [1.] with eps = 0.1 it gives 3.01 (the exact 3, plus
eps²), where a one-sided difference gives 3.31.

Check it with:  python lessons/check.py 03
"""
import numpy as np


def numerical_gradient(f, x: np.ndarray, eps: float) -> np.ndarray:
    raise NotImplementedError("exercise 03: write numerical_gradient")

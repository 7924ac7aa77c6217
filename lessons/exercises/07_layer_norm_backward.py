"""Exercise 07 (lesson 7) — the backward of LayerNorm.

The forward normalises x over its last axis (D entries) and scales the result:
x̂ = (x − μ)·r with r = 1/√(σ² + ε), then y = γ ⊙ x̂ (lesson 7; the shift β is left out,
since its gradient does not involve x). ``layer_norm_backward(grad, xhat, r, weight)``
receives the cotangent grad = ∂L/∂y (shaped like x), the saved x̂ (shaped like x), r
(shaped like x with a last axis of size 1) and weight = γ, of shape (D,). It returns ∂L/∂x,
shaped like x. x itself is not given: x̂ and r hold everything the backward needs.

Lesson 7 names the three paths from x_i to y: directly, through the mean μ, and through the
variance σ². The gradient has one term for each; derive them.

Checks by hand, with γ = 1:
- a grad that is one number c in every entry of a row gives a row of zeros: L = c·Σ x̂_i,
  and x̂ sums to 0 whatever x is;
- grad = x̂ gives (nearly) zeros too: then L = Σ x̂_i², which is (nearly) D whatever x is;
- for D = 2, x̂ is (−1, 1) or (1, −1) up to ε whatever x is, so ∂L/∂x is nearly 0 for any
  grad.

Check it with:  python lessons/check.py 07
"""
import numpy as np


def layer_norm_backward(grad: np.ndarray, xhat: np.ndarray, r: np.ndarray, weight: np.ndarray) -> np.ndarray:
    raise NotImplementedError("exercise 07: write layer_norm_backward")

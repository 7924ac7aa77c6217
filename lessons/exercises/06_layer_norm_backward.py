"""Exercise 06 (lesson 6) — the backward of LayerNorm.

Forward, over the last axis of x (D entries): x̂ = (x − μ)·r with r = 1/√(σ² + ε), then
y = γ ⊙ x̂. Write ``layer_norm_backward(grad, xhat, r, weight)`` returning dL/dx for the
cotangent grad of y (xhat like x; r with a last axis of size 1; weight is γ, shape (D,)).

Lesson 6 derives it; with ĝ = grad ⊙ γ and means over the last axis,
dx = r · (ĝ − mean(ĝ) − x̂ · mean(ĝ ⊙ x̂)). Forgetting the last term is the classic bug.
Check it with:  python lessons/check.py 06
"""
import numpy as np


def layer_norm_backward(grad: np.ndarray, xhat: np.ndarray, r: np.ndarray, weight: np.ndarray) -> np.ndarray:
    raise NotImplementedError("exercise 06: write layer_norm_backward")

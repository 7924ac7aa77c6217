"""Exercise 07 (lesson 7) — LayerNorm, forward and backward by hand.

LayerNorm normalises each vector x (the last axis, n entries) to mean 0 and variance 1, then
scales and shifts it: y = γ · x̂ + β, x̂ = (x − μ) / √(σ² + eps), μ and σ² the mean and
the (biased: divided by n) variance of x.

Write ``LayerNormFunction``, a Function of (x, gamma, beta) with ``eps``:
1. forward: y as above; keep x̂ and 1/√(σ² + eps) for the backward.
2. backward: the three gradients. With g = grad · γ (per entry),
   dx = (g − mean(g) − x̂ · mean(g · x̂)) / √(σ² + eps)   (means over the last axis),
   dγ = Σ grad · x̂ and dβ = Σ grad, summed over every axis but the last.
Keep the inputs' dtype: float32 inputs give a float32 output and float32 gradients.

``LayerNorm`` (the module, ``weight`` γ = 1 and ``bias`` β = 0 at the start) is written for you.

Check it with:  python lessons/check.py 07
"""
import numpy as np

from ex01_tensor import Function
from ex05_module_and_adam import Module, Parameter


class LayerNormFunction(Function):
    def forward(self, x, gamma, beta, eps):
        # >>> exercise: write LayerNormFunction.forward
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        self.rstd = 1.0 / np.sqrt(var + eps)
        self.xhat, self.gamma = (x - mu) * self.rstd, gamma
        return self.xhat * gamma + beta
        # <<<

    def backward(self, grad):
        # >>> exercise: write LayerNormFunction.backward
        g = grad * self.gamma
        dx = (g - g.mean(axis=-1, keepdims=True)
              - self.xhat * (g * self.xhat).mean(axis=-1, keepdims=True)) * self.rstd
        axes = tuple(range(grad.ndim - 1))
        return dx, (grad * self.xhat).sum(axis=axes), grad.sum(axis=axes)
        # <<<


class LayerNorm(Module):
    def __init__(self, n, eps=1e-5):
        self.weight, self.bias, self.eps = Parameter(np.ones(n)), Parameter(np.zeros(n)), eps

    def forward(self, x):
        return LayerNormFunction.apply(x, self.weight, self.bias, eps=self.eps)

"""Exercise 06 (lesson 6) — Xavier initialisation and dropout.

Write:
1. ``xavier_uniform(fan_in, fan_out, rng)``: a (fan_in, fan_out) array drawn from
   U(−a, a) with a = √(6 / (fan_in + fan_out)), in one call ``rng.uniform(-a, a, size)``,
   so that it is the same draw as the grader's. From here on your layers pass it as
   ``Linear(n_in, n_out, rng, init=xavier_uniform)``.
2. ``Dropout``, a Function: forward(x, p, rng) draws ``keep = rng.random(x.shape) >= p`` (one
   call, so that it is the grader's draw) and returns x · keep / (1 − p) in x's dtype: the
   kept entries are scaled up so that the expected output is x. Backward lets the gradient
   through the kept entries, scaled the same way, in the gradient's dtype.
3. ``dropout(x, p, rng, training)``: ``Dropout`` while training with p > 0, else x itself
   (the same Tensor, and nothing drawn from ``rng``).

Check by hand: with p = 0.5 every output entry is 0 or 2x.

Check it with:  python lessons/check.py 06
"""
import numpy as np

from ex01_tensor import Function


def xavier_uniform(fan_in, fan_out, rng):
    # >>> exercise: write xavier_uniform
    a = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-a, a, size=(fan_in, fan_out))
    # <<<


class Dropout(Function):
    def forward(self, x, p, rng):
        # >>> exercise: write Dropout.forward
        self.scale = (rng.random(x.shape) >= p) / (1.0 - p)
        return (x * self.scale).astype(x.dtype)
        # <<<

    def backward(self, grad):
        # >>> exercise: write Dropout.backward
        return ((grad * self.scale).astype(grad.dtype),)
        # <<<


def dropout(x, p, rng, training):
    # >>> exercise: write dropout
    return Dropout.apply(x, p=p, rng=rng) if training and p > 0 else x
    # <<<

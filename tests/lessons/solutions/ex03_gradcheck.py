"""Exercise 03 (lesson 3) — the gradient check.

Your engine's backward passes are only as good as their check. Write:

1. ``numerical_gradient(f, x, eps)``: the gradient of a function ``f`` (an array -> a float)
   at the float64 array ``x``, by central differences: entry i of the result is
   (f(x + eps·e_i) − f(x − eps·e_i)) / (2·eps), e_i being 1 at entry i and 0 elsewhere. Move
   one entry at a time, and leave ``x`` as it was given.
2. ``gradcheck(fn, arrays, eps=1e-6, atol=1e-5, rtol=1e-4)``: does your engine's backward of
   ``fn`` agree with central differences? ``fn`` takes one Tensor per array and returns a
   Tensor. Make one Tensor per array with ``requires_grad=True``, reduce the output to one
   number with fixed random weights w (``weights(shape)`` below) as loss = Σ w · fn(...), so
   that every output entry counts, and run your engine's backward. Then compare every
   input's ``.grad`` with ``numerical_gradient`` of the same loss as a function of that one
   array: wrap the arrays in Tensors that need no gradient, call ``fn``, and weigh its
   output's ``.data`` (an input whose ``.grad`` is None got no gradient: compare zeros).
   Return True when every input's ``.grad`` has its input's shape and every entry agrees
   within atol + rtol·|numerical|, else False. The weights matter: with plain Σ fn(...), a
   backward that is right only when every output's gradient is 1 would pass.

Check by hand: gradcheck(lambda x, y: x * y, [np.ones(3), np.arange(3.0)]) is True.

Check it with:  python lessons/check.py 03
"""
import numpy as np

from ex01_tensor import Tensor
import ex02_broadcasting  # noqa: F401 - the engine's operators


def weights(shape):
    """The fixed random weights w of the check (the same for a given shape, every time)."""
    return np.random.default_rng(1234).uniform(0.5, 1.5, size=shape)


def numerical_gradient(f, x, eps):
    # >>> exercise: write numerical_gradient
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        kept = x[i]
        x[i] = kept + eps
        plus = f(x)
        x[i] = kept - eps
        minus = f(x)
        x[i] = kept
        g[i] = (plus - minus) / (2 * eps)
    return g
    # <<<


def gradcheck(fn, arrays, eps=1e-6, atol=1e-5, rtol=1e-4):
    # >>> exercise: write gradcheck
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    inputs = [Tensor(a.copy(), requires_grad=True) for a in arrays]
    out = fn(*inputs)
    w = weights(out.shape)
    (out * Tensor(w)).sum().backward()
    for k, x in enumerate(inputs):
        def loss(a, k=k):
            ts = [Tensor(a if j == k else b) for j, b in enumerate(arrays)]
            return float((fn(*ts).data * w).sum())
        numeric = numerical_gradient(loss, arrays[k].copy(), eps)
        analytic = np.zeros_like(numeric) if x.grad is None else x.grad
        if np.shape(analytic) != numeric.shape:
            return False
        if not np.all(np.abs(analytic - numeric) <= atol + rtol * np.abs(numeric)):
            return False
    return True
    # <<<

"""Numerical gradient checking.

For f: inputs -> y and a *random* cotangent v (same shape as y), compare the gradient
that backward computes, d<v, f(x)>/dx, with central differences
(<v, f(x + h e_j)> - <v, f(x - h e_j)>) / 2h, for every entry j of every input that
requires grad. A random v matters: with v = 1 (the gradient of sum(f)) some wrong
backwards pass, e.g. any softmax backward that returns zeros.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from . import backend
from .autograd import no_grad
from .tensor import Tensor


class GradcheckError(AssertionError):
    """Analytical and numerical gradients disagree."""


def _dot(y: Tensor, v) -> float:
    return float((y.data * v).sum())


def numerical_gradient(f: Callable, x, eps: float = 1e-6) -> np.ndarray:
    """Central differences (f(x + eps·e_i) - f(x - eps·e_i)) / (2 eps) for every entry i of
    ``x``, a contiguous array that ``f(x) -> float`` reads; entries are changed in place one at
    a time and put back. Returns a NumPy array shaped like ``x``."""
    flat = x.reshape(-1)
    numeric = np.empty(flat.size)
    for j in range(flat.size):
        orig = flat[j].item()
        flat[j] = orig + eps
        plus = f(x)
        flat[j] = orig - eps
        minus = f(x)
        flat[j] = orig
        numeric[j] = (plus - minus) / (2 * eps)
    return numeric.reshape(x.shape)


def gradcheck(fn: Callable[..., Tensor], inputs: Sequence[Tensor] | Tensor, eps: float = 1e-6,
              atol: float = 1e-5, rtol: float = 1e-4, raise_exception: bool = True, seed: int = 0) -> bool:
    """Check backward against central differences, in float64, for every input entry.

    ``fn(*inputs)`` must return one tensor and be deterministic (turn dropout off).
    Inputs that require grad must be float64. An entry passes when
    |analytic - numeric| <= atol + rtol·|numeric|. Returns True when all entries pass;
    otherwise raises :class:`GradcheckError` naming the input, its worst entry and both
    values (or returns False with ``raise_exception=False``).
    """
    inputs = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    checked = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not checked:
        raise ValueError("gradcheck: no input requires grad, so there is nothing to check")
    for i in checked:
        if inputs[i].dtype != np.float64:
            raise TypeError(f"gradcheck: input {i} is {inputs[i].dtype}; use float64 inputs (central differences need the precision)")

    y = fn(*inputs)
    if not isinstance(y, Tensor):
        raise TypeError(f"gradcheck: fn must return one Tensor, got {type(y).__name__}")
    xp = y.xp
    rng = np.random.default_rng(seed)
    v = xp.asarray(rng.standard_normal(y.shape))

    # analytic: backward with cotangent v, from a clean slate (and restore .grad afterwards)
    saved_grads = [inputs[i].grad for i in checked]
    for i in checked:
        inputs[i].grad = None
    if y.requires_grad:
        y.backward(Tensor._wrap(v.astype(y.dtype)))
    analytic = {i: (backend.to_numpy(inputs[i].grad.data) if inputs[i].grad is not None
                    else np.zeros(inputs[i].shape)) for i in checked}
    for i, g in zip(checked, saved_grads):
        inputs[i].grad = g

    # numeric: central differences, one entry at a time
    failures = []
    with no_grad():
        for i in checked:
            t = inputs[i]
            if not t.data.flags.c_contiguous:
                t.data = xp.ascontiguousarray(t.data)
            numeric = numerical_gradient(lambda _: _dot(fn(*inputs), v), t.data, eps).reshape(-1)
            a = analytic[i].reshape(-1)
            excess = np.abs(a - numeric) - (atol + rtol * np.abs(numeric))
            if numeric.size and (excess.max() > 0 or not np.all(np.isfinite(a))):
                j = int(np.argmax(np.where(np.isfinite(a), excess, np.inf)))
                where = np.unravel_index(j, t.shape) if t.ndim else ()
                failures.append(
                    f"input {i} (shape {t.shape}): worst entry {tuple(int(w) for w in where)}: "
                    f"analytic {a[j]:.8g}, numeric {numeric[j]:.8g}, |diff| {abs(a[j] - numeric[j]):.3g} "
                    f"> atol + rtol·|numeric| = {atol + rtol * abs(numeric[j]):.3g} "
                    f"({int((excess > 0).sum())} of {numeric.size} entries off)"
                )
    if failures:
        if raise_exception:
            raise GradcheckError("gradcheck failed for " + "; ".join(failures))
        return False
    return True

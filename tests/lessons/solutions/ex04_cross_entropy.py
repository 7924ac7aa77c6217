"""Exercise 04 (lesson 4) — log-softmax, and cross-entropy with label smoothing.

Write:
1. ``LogSoftmax``, a Function over the last axis: forward log softmax(x) = x − log Σ exp(x),
   computed as (x − m) − log Σ exp(x − m) with m the row's largest entry, so that exp never
   overflows; backward: grad − softmax(x) · Σ grad (the sums over the last axis).
2. ``cross_entropy(logits, target, smoothing, pad)``: logits a Tensor (..., V), target an
   integer array of the leading shape. Each non-pad position's target distribution q puts
   1 − ε + ε/V on the true token and ε/V on each of the other V − 1 (ε = smoothing); the loss is
   −Σ q · log softmax(logits), summed over the non-pad positions and divided by their
   number (by 1 if every position is pad). Positions whose target is ``pad`` count for
   nothing (``pad`` may be any integer, one of the classes or not). The loss has the logits' dtype (float32 logits, a float32 loss). Build it from
   your engine's operations (``LogSoftmax``, *, sum, /) so that its backward comes for free.

Check by hand: with two classes, logits [0, 0], target 1, no smoothing and pad −1 (no
position is padding), the loss is
log 2 ≈ 0.6931 and the logits' gradient is [0.5, −0.5].

Check it with:  python lessons/check.py 04
"""
import numpy as np

from ex01_tensor import Function, Tensor
import ex02_broadcasting  # noqa: F401 - the engine's operators


class LogSoftmax(Function):
    def forward(self, x):
        # >>> exercise: write LogSoftmax.forward
        shifted = x - x.max(axis=-1, keepdims=True)
        self.out = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        return self.out
        # <<<

    def backward(self, grad):
        # >>> exercise: write LogSoftmax.backward
        return (grad - np.exp(self.out) * grad.sum(axis=-1, keepdims=True),)
        # <<<


def log_softmax(x):
    return LogSoftmax.apply(x)


def cross_entropy(logits, target, smoothing, pad):
    # >>> exercise: write cross_entropy
    V = logits.shape[-1]
    target = np.asarray(target)
    real = target != pad
    q = np.full(logits.shape, smoothing / V, dtype=logits.dtype)
    np.put_along_axis(q, np.where(real, target, 0)[..., None], 1 - smoothing + smoothing / V, axis=-1)  # pad: any id
    q *= real[..., None]
    return -(log_softmax(logits) * Tensor(q)).sum() / max(1, int(real.sum()))
    # <<<

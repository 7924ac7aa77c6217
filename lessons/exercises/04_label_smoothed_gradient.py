"""Exercise 04 (lesson 4) — the gradient of the label-smoothed cross-entropy.

``label_smoothed_gradient(logits, target, eps)`` receives the logits (N, V) of N examples
over V classes, their true classes ``target`` (N,) as integers, and the smoothing ε. The
loss is the cross-entropy of each example against the smoothed target of lesson 4, summed
over the N examples: what ``F.cross_entropy(logits, target, label_smoothing=eps,
reduction="sum")`` computes. Its smoothed target is PyTorch's: every class gets ε/V, and
the true class 1 − ε on top. Return the loss's gradient with respect to the logits, an
(N, V) array, computed in NumPy from what lesson 4 shows about the gradient of the
cross-entropy. The logits may be large (lesson 4's stable softmax).

Checks by hand: for equal logits, V = 4, target 2 and ε = 0.1, the row is
[0.225, 0.225, -0.675, 0.225]. Every row sums to 0, whatever the logits, because both the
probabilities and the smoothed target sum to 1. With ε = 0 the rows are the gradient of
plain cross-entropy.

Check it with:  python lessons/check.py 04
"""
import numpy as np


def label_smoothed_gradient(logits: np.ndarray, target: np.ndarray, eps: float) -> np.ndarray:
    raise NotImplementedError("exercise 04: write label_smoothed_gradient")

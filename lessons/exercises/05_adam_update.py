"""Exercise 05 (lesson 5) — one Adam update, written out.

``adam_update(theta, grad, m, v, t, lr, betas, eps)`` receives a parameter theta, its
gradient grad, and Adam's running averages m (of the gradients) and v (of their squares) as
they stand after step t − 1: four arrays of one shape, m and v zeros before the first step.
t is the number of this step, counted from 1; lr is the learning rate, betas = (β1, β2),
and eps is ε. It returns the tuple (theta, m, v) after step t: the running averages updated
with grad, and theta moved by Adam's step as lesson 5 writes it out, bias corrections
included.

Check by hand: at the first step (t = 1, m = v = 0) the bias corrections undo the averages'
start at zero, and every entry moves by almost exactly lr against the sign of its gradient:
theta = [1.0], grad = [-3.0] and lr = 0.01 give theta = [1.01], whatever β1 and β2.

Check it with:  python lessons/check.py 05
"""
import numpy as np


def adam_update(theta: np.ndarray, grad: np.ndarray, m: np.ndarray, v: np.ndarray, t: int, lr: float,
                betas: tuple, eps: float):
    raise NotImplementedError("exercise 05: write adam_update")

"""Exercise 17 (lesson 17) — the parameters a loss does not reach.

A part of the model that the loss never reaches trains no further than its initialisation,
and the loss curve does not show it. Write ``silent_parameters(model, loss_fn, rel=1e-6)``:
clear every parameter's gradient (``.grad = None``), compute ``loss = loss_fn(model)``, run
its backward, and return the names (``named_parameters``, in that order) of the parameters
whose gradient is missing (None) or whose norm (the L2 norm, ``np.linalg.norm``) is at most
``rel`` times the largest gradient norm of any parameter.

Check by hand on your model of exercise 14: with the whole model's loss, the biases of the
key projections (``...w_k.bias``) are silent: adding a constant to every score of a query
leaves its softmax unchanged.

Check it with:  python lessons/check.py 17
"""
import numpy as np


def silent_parameters(model, loss_fn, rel=1e-6):
    raise NotImplementedError("exercise 17: write silent_parameters")

"""Exercise 21 (lesson 21) — the big batch's gradient from its micro-batches.

A big batch is split into micro-batches; each one's loss is summed (not averaged) over its
real target tokens and differentiated on its own (lesson 21). ``accumulate(grads, tokens)``
receives ``grads``, one entry per micro-batch, each a list of arrays: the gradient of that
micro-batch's summed loss with respect to each parameter of the model, in the order of
``model.parameters()``; and ``tokens``, each micro-batch's number of real target tokens. It
returns a list with one array per parameter: the gradient of the big batch's loss per
token, the loss the model trains on, exactly as if the big batch had been one.

The check takes the micro-batches' gradients from a small Transformer on one batch of six
sentence pairs, split several ways, and compares with the gradient of the whole batch.

Check by hand: two micro-batches whose gradients for a parameter of one number are [2.0]
and [4.0], from 1 and 3 tokens, give [1.5]. Averaging their per-token gradients would give
about [1.67], which weighs the single token of the first as much as the three of the
second.

Check it with:  python lessons/check.py 21
"""
import numpy as np


def accumulate(grads: list, tokens: list) -> list:
    raise NotImplementedError("exercise 21: write accumulate")

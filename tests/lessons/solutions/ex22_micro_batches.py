"""Exercise 22 (lesson 22) — one update's gradient from several micro-batches.

A batch too large for memory is split into micro-batches whose gradients are added before the
one update (``--update-freq``). The loss of the whole batch is per non-pad target token, so
the sum must be divided once, by the tokens of the whole batch. Write
``accumulate(model, micro_batches, smoothing, pad)``: ``micro_batches`` is a list of (src,
tgt_in, tgt_out) integer arrays; clear the gradients; for each micro-batch, run your model
and your ``cross_entropy`` (exercise 04, which returns the mean over the micro-batch's
tokens), turn the loss back into a sum over its tokens, run its backward (your engine adds
the gradients up); finally divide every parameter's gradient by the tokens of all the
micro-batches. Return that number of tokens (an int). Afterwards every ``.grad`` must equal
the gradient of the whole batch's loss.

Check it with:  python lessons/check.py 22
"""
import numpy as np

from ex04_cross_entropy import cross_entropy


def accumulate(model, micro_batches, smoothing, pad):
    # >>> exercise: write accumulate
    params = model.parameters()
    for p in params:
        p.grad = None
    tokens = 0
    for src, tgt_in, tgt_out in micro_batches:
        n = int((np.asarray(tgt_out) != pad).sum())
        (cross_entropy(model(src, tgt_in), tgt_out, smoothing, pad) * n).backward()
        tokens += n
    for p in params:
        if p.grad is not None:
            p.grad = p.grad / max(tokens, 1)
    return tokens
    # <<<

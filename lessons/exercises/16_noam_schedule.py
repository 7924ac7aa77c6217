"""Exercise 16 (lesson 16) — the learning-rate schedule of equation (3).

``noam_lr(step, d_model, warmup)`` returns the learning rate of equation (3) (lesson 16) at
``step``, counted from 1: it rises in proportion to the step for the first ``warmup``
steps, then falls with the inverse square root of the step, both scaled by d_model^−0.5.
Equation (3) writes it as the smaller of two expressions.

Checks by hand: at step = warmup the two branches of the min agree, and the rate there,
the peak, is (d_model · warmup)^−0.5: about 6.99e-4 for the base model (d_model = 512,
warmup = 4000). During the warm-up, doubling the step doubles the rate; after it,
multiplying the step by 4 halves the rate.

Check it with:  python lessons/check.py 16
"""


def noam_lr(step: int, d_model: int, warmup: int) -> float:
    raise NotImplementedError("exercise 16: write noam_lr")

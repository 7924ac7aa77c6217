"""Exercise 16 (lesson 16) — the learning-rate schedule of equation (3).

Write:
1. ``noam_lr(step, d_model, warmup, factor=1.0)``: equation (3) times ``factor``,
   lrate = factor · d_model^−0.5 · min(step^−0.5, step · warmup^−1.5), step counted from 1.
2. ``Noam.step()``: advance the schedule by one step and set the optimiser's ``lr`` (your
   Adam of exercise 05) to that step's rate; return the rate. Call it once before each
   ``optimizer.step()``: the first update uses step 1.

Checks by hand: at step = warmup the two branches of the min agree, and the rate there,
the peak, is (d_model · warmup)^−0.5: about 6.99e-4 for the base model (d_model = 512,
warmup = 4000). During the warm-up, doubling the step doubles the rate; after it,
multiplying the step by 4 halves the rate.

Check it with:  python lessons/check.py 16
"""


def noam_lr(step, d_model, warmup, factor=1.0):
    raise NotImplementedError("exercise 16: write noam_lr")


class Noam:
    def __init__(self, optimizer, d_model, warmup, factor=1.0):
        self.optimizer, self.d_model, self.warmup, self.factor = optimizer, d_model, warmup, factor
        self.steps = 0

    def step(self):
        raise NotImplementedError("exercise 16: write Noam.step")

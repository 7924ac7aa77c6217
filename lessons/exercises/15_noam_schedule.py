"""Exercise 15 (lesson 15) — the learning-rate schedule of equation (3).

Write ``noam_lr(step, d_model, warmup)``:

    lrate = d_model^−0.5 · min(step^−0.5, step · warmup^−1.5)

for steps counted from 1: a linear warm-up over ``warmup`` steps, then decay with 1/√step.
Check it with:  python lessons/check.py 15
"""


def noam_lr(step: int, d_model: int, warmup: int) -> float:
    raise NotImplementedError("exercise 15: write noam_lr")

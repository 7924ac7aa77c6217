"""The optimiser and learning-rate schedule of Section 5.3."""
from __future__ import annotations

from minitensor import optim


def noam_lr(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """Equation (3): lrate = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5), times ``factor``.

    Linear warm-up for ``warmup`` steps, then decay with the inverse square root of the step.
    Steps count from 1.
    """
    if step < 1:
        raise ValueError(f"steps count from 1, got {step}")
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def paper_adam(params, lr: float = 0.0) -> optim.Adam:
    """Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 (Section 5.3); the schedule sets lr each step."""
    return optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-9)


def cooldown_factor(progress: float, cooldown: float) -> float:
    """1 until the last ``cooldown`` fraction of a run, then a straight line down to 0 at its end.

    ``progress`` is the fraction of the run's budget spent (0 at the start, 1 at the end). Not
    in the paper: a run with a fixed budget (minutes, or updates) that ends while Equation (3)
    still has the learning rate high ends on noisy weights, and a linear cool-down to zero is the
    usual remedy (the paper's averaging of the last checkpoints plays the same part).
    """
    if cooldown <= 0:
        return 1.0
    return min(1.0, max(0.0, (1.0 - progress) / cooldown))


class NoamSchedule:
    """Sets ``optimizer.lr`` from :func:`noam_lr` before each update: call ``step()`` once per
    update. With ``cooldown`` > 0, the rate is also multiplied by :func:`cooldown_factor` of the
    ``progress`` that ``step`` is given."""

    def __init__(self, optimizer: optim.Optimizer, d_model: int, warmup: int = 4000, factor: float = 1.0,
                 cooldown: float = 0.0):
        self.optimizer, self.d_model, self.warmup, self.factor = optimizer, d_model, warmup, factor
        self.cooldown = cooldown
        self.steps = 0

    def step(self, progress: float = 0.0) -> float:
        self.steps += 1
        lr = noam_lr(self.steps, self.d_model, self.warmup, self.factor) * cooldown_factor(progress, self.cooldown)
        self.optimizer.lr = lr
        return lr

    def state_dict(self) -> dict:
        return {"steps": self.steps}

    def load_state_dict(self, sd: dict) -> None:
        self.steps = int(sd["steps"])

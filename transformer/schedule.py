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


class NoamSchedule:
    """Sets ``optimizer.lr`` from :func:`noam_lr` before each update: call ``step()`` once per update."""

    def __init__(self, optimizer: optim.Optimizer, d_model: int, warmup: int = 4000, factor: float = 1.0):
        self.optimizer, self.d_model, self.warmup, self.factor = optimizer, d_model, warmup, factor
        self.steps = 0

    def step(self) -> float:
        self.steps += 1
        lr = noam_lr(self.steps, self.d_model, self.warmup, self.factor)
        self.optimizer.lr = lr
        return lr

    def state_dict(self) -> dict:
        return {"steps": self.steps}

    def load_state_dict(self, sd: dict) -> None:
        self.steps = int(sd["steps"])

"""Optimizers (SGD, Adam) and gradient clipping. Updates run on raw arrays, in place,
outside the graph."""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from . import autograd, backend, routes
from .tensor import Tensor


class Optimizer:
    """Holds the parameters, the learning rate ``lr`` (set it freely, e.g. from a schedule)
    and per-parameter state; ``step()`` applies one update from the current ``.grad``s."""

    def __init__(self, params: Iterable[Tensor], lr: float):
        self.params = list(params)
        if not self.params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor) or not p.requires_grad:
                raise TypeError(f"{type(self).__name__}: parameter {i} is not a tensor that requires grad")
        if lr < 0:
            raise ValueError(f"{type(self).__name__}: lr must be >= 0, got {lr}")
        self.lr = lr
        self.steps = 0
        self._grad_scale = 1.0  # this step's (see step)
        self._skip = None       # this step's (see update_params)
        self.state: list[dict] = [{} for _ in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self, grad_scale: float = 1.0) -> None:
        """Update every parameter that has a gradient, from ``grad_scale · p.grad``.

        ``grad_scale`` folds a factor of the gradients (1/tokens for a mean over tokens, 1/S to
        undo a loss scale) into the update's own pass: no pass of its own over the gradients,
        which are left as they are."""
        self.count_step(grad_scale)
        self.update_params()

    def count_step(self, grad_scale: float = 1.0) -> None:
        """The step's part on the host: count it, keep its ``grad_scale``, and work out the
        quantities every parameter's update shares (a CUDA graph that replays
        :meth:`update_params` needs only this of the host)."""
        self.steps += 1
        self._grad_scale = grad_scale
        self._begin_step()

    def update_params(self, skip=None) -> None:
        """The step's updates of the parameters, after :meth:`count_step`. ``skip``: a device array
        of one int; where it holds nonzero nothing changes (a fused route reads it on the device,
        where a CUDA graph can replay the decision; otherwise the host reads it here)."""
        items = [(p.data, p.grad.data, state) for p, state in zip(self.params, self.state) if p.grad is not None]
        self._skip = skip
        weights = [w for w, _, _ in items]
        # a route of this optimizer's class (a subclass of it) may update this optimizer's state its own way
        route = routes.choose(type(self), backend.array_module(weights[0]) if weights else np, weights, {})
        if skip is not None and not getattr(route, "skips_on_device", False) and skipped(skip):
            return
        autograd.calls.step(self, lambda: route._update_all(self, items))

    def _begin_step(self) -> None:
        """Per-step quantities shared by all parameters (none by default)."""

    def _update_all(self, items: list) -> None:
        """Update every (weight, gradient, state) of this step: one by one by default."""
        for w, g, state in items:
            self._update(w, g, state)

    def _update(self, w, g, state: dict) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -------------------------------------------------------------- state
    def _hyper(self) -> dict:
        return {"lr": self.lr}

    def state_dict(self) -> dict:
        """{"steps", "hyper": {...}, "state": [{name: numpy array}, ...]}: plain data, CPU arrays."""
        return {
            "steps": self.steps,
            "hyper": self._hyper(),
            "state": [{k: backend.to_numpy(v) for k, v in s.items()} for s in self.state],
        }

    def load_state_dict(self, sd: dict) -> None:
        """Restore from :meth:`state_dict`; per-parameter arrays must match the parameters' shapes."""
        if len(sd["state"]) != len(self.params):
            raise ValueError(f"optimizer state has {len(sd['state'])} entries for {len(self.params)} parameters")
        for i, (p, s) in enumerate(zip(self.params, sd["state"])):
            for k, v in s.items():
                if tuple(v.shape) != p.shape:
                    raise ValueError(f"optimizer state {k!r} of parameter {i} has shape {tuple(v.shape)}, parameter is {p.shape}")
        self.steps = int(sd["steps"])
        for k, v in sd["hyper"].items():
            setattr(self, k, v)
        self.state = [{k: backend.to_device(v, p.device).astype(p.dtype, copy=True) for k, v in s.items()}
                      for p, s in zip(self.params, sd["state"])]


class SGD(Optimizer):
    """w ← w - lr·b with b ← momentum·b + (g + weight_decay·w) (b = g on the first step), as PyTorch,
    for g = grad_scale · p.grad."""

    def __init__(self, params, lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0):
        super().__init__(params, lr)
        self.momentum, self.weight_decay = momentum, weight_decay

    def _hyper(self) -> dict:
        return {"lr": self.lr, "momentum": self.momentum, "weight_decay": self.weight_decay}

    def _update(self, w, g, state):
        g = _scaled(g, self._grad_scale)
        if self.weight_decay:
            g = g + self.weight_decay * w
        if self.momentum:
            buf = state.get("momentum")
            if buf is None:
                buf = state["momentum"] = g.copy()
            else:
                buf *= self.momentum
                buf += g
            g = buf
        w -= self.lr * g


class Adam(Optimizer):
    """Adam (Kingma & Ba, 2015), as PyTorch implements it:

        g = grad_scale · p.grad,
        m ← β₁m + (1-β₁)g,   v ← β₂v + (1-β₂)g²,
        w ← w - lr · (m / (1-β₁ᵗ)) / (√(v / (1-β₂ᵗ)) + eps)

    ``weight_decay`` adds weight_decay·w to g (L2, not AdamW). The paper uses
    betas (0.9, 0.98) and eps 1e-9 (Section 5.3).
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        super().__init__(params, lr)
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"Adam: betas must be in [0, 1), got {betas}")
        self.betas, self.eps, self.weight_decay = tuple(betas), eps, weight_decay

    def _hyper(self) -> dict:
        return {"lr": self.lr, "betas": list(self.betas), "eps": self.eps, "weight_decay": self.weight_decay}

    def load_state_dict(self, sd: dict) -> None:
        super().load_state_dict(sd)
        self.betas = tuple(self.betas)

    def _begin_step(self) -> None:
        b1, b2 = self.betas
        self._c1 = 1 - b1**self.steps  # bias corrections
        self._c2 = 1 - b2**self.steps

    def _moments(self, w, state: dict) -> tuple:
        if "m" not in state:
            xp = backend.array_module(w)
            state["m"], state["v"] = xp.zeros_like(w), xp.zeros_like(w)
        return state["m"], state["v"]

    def _update(self, w, g, state):
        """One parameter's update, in place: the formula above, term by term."""
        b1, b2 = self.betas
        m, v = self._moments(w, state)
        g = _scaled(g, self._grad_scale)
        if self.weight_decay:
            g = g + self.weight_decay * w
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (g * g) * (1 - b2)
        xp = backend.array_module(w)
        w -= m / (xp.sqrt(v) * (1 / math.sqrt(self._c2)) + self.eps) * (self.lr / self._c1)


def skipped(skip) -> bool:
    """Whether a step's ``skip`` (one int, on any device) says to skip it: read on the host."""
    return int(backend.to_numpy(skip).reshape(-1)[0]) != 0


def _scaled(g, grad_scale: float):
    """``grad_scale · g`` (``g`` itself for a scale of 1)."""
    return g if grad_scale == 1.0 else g * g.dtype.type(grad_scale)


def grad_norm(params: Iterable[Tensor], grad_scale: float = 1.0) -> float:
    """The global L2 norm of the gradients ``grad_scale · p.grad`` (inf or nan if one is not
    finite). The host reads one number: on a GPU it waits for the gradients."""
    grads = [p.grad.data for p in params if p.grad is not None]
    return abs(grad_scale) * math.sqrt(float(sum((g * g).sum(dtype="float64") for g in grads)))


def clip_factor(norm: float, max_norm: float) -> float:
    """What multiplies gradients of global norm ``norm`` to make it at most ``max_norm``: 1 when
    it is already, or when the norm is not finite (nothing to scale then)."""
    return max_norm / (norm + 1e-6) if math.isfinite(norm) and norm > max_norm else 1.0


def clip_grad_norm(params: Iterable[Tensor], max_norm: float) -> float:
    """Scale all gradients together so their global L2 norm is at most ``max_norm``.

    Returns the norm before clipping (inf or nan if a gradient is not finite; then nothing
    is scaled). A loop that steps with a ``grad_scale`` folds :func:`clip_factor` into it instead.
    """
    params = list(params)
    total = grad_norm(params)
    factor = clip_factor(total, max_norm)
    if factor != 1.0:
        for p in params:
            if p.grad is not None:
                p.grad.data *= factor
    return total

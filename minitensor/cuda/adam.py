"""Launcher for ``adam.cu``: Adam's update of every parameter in one launch, where the
per-parameter form takes one launch each (253 for Transformer base).

The reference is :class:`minitensor.optim.Adam`, the same arithmetic a parameter at a time;
tests compare the two. :class:`FusedAdam` is its route (:mod:`minitensor.speed.gpu`).
"""
from __future__ import annotations

import math

import numpy as np

from .. import optim
from .build import address_table, array_module, ctype, kernel, no_pointer, one_launch_takes

SOURCE = "adam.cu"
THREADS = 256
MAX_BLOCKS = 4096          # a grid-stride loop beyond


def applies(arrays: list) -> bool:
    """Whether one launch can update these (weight, gradient, m, v) arrays."""
    return one_launch_takes(arrays)


def name(t: str) -> str:
    return f"adam_multi<{t}>"


def instantiations() -> list[str]:
    return [name(t) for t in ("float", "f16", "bf16", "double")]


def step(weights: list, grads: list, ms: list, vs: list, b1: float, b2: float, eps: float, wd: float,
         numbers, skip=None) -> None:
    """One Adam update of every ``weights[i]`` (and its moments) in place from ``grad_scale · grads[i]``:
    the table of their addresses, the running sizes and the three numbers that change from one
    update to the next (``numbers()`` gives step_size, inv_sqrt_c2 and grad_scale) go to the
    device in one copy, then one launch updates them all, unless ``skip`` (one int on the device)
    holds nonzero."""
    xp = array_module(weights[0])
    # one host-to-device copy: the addresses, and the numbers that change from update to update
    table, starts, total, numbers = address_table(xp, [weights, grads, ms, vs], numbers)
    if total == 0:
        return
    blocks = min(MAX_BLOCKS, -(-total // THREADS))
    k = kernel(SOURCE, name(ctype(weights[0].dtype)), xp)
    k((blocks,), (THREADS,), (table, starts, np.int32(len(weights)), np.int64(total), np.float64(b1), np.float64(b2),
                              np.float64(eps), np.float64(wd), numbers, no_pointer() if skip is None else skip))


class FusedAdam(optim.Adam):
    """The parameters one launch can take (:func:`applies`), grouped by dtype, a launch per
    group; the rest a parameter at a time, by the reference. A step's ``skip`` reaches the
    launches, which read it on the device."""

    skips_on_device = True

    def _update_all(self, items: list) -> None:  # self: the Adam being stepped (see Optimizer.step)
        groups: dict = {}
        rest = []
        for w, g, state in items:
            m, v = self._moments(w, state)
            if applies([w, g, m, v]):
                groups.setdefault(w.dtype, []).append((w, g, m, v))
            else:
                rest.append((w, g, state))
        b1, b2 = self.betas
        skip = self._skip
        for group in groups.values():
            step(*map(list, zip(*group)), b1, b2, self.eps, self.weight_decay, numbers=lambda: numbers(self), skip=skip)
        if rest and not (skip is not None and optim.skipped(skip)):   # the reference reads it on the host
            optim.Adam._update_all(self, rest)


def numbers(opt: optim.Adam) -> tuple:
    """The kernel's numbers that change from step to step, from the optimizer as it stands (a
    CUDA graph's replay asks again, after Adam.count_step): step size, 1/sqrt(c2), gradient scale."""
    return opt.lr / opt._c1, 1 / math.sqrt(opt._c2), opt._grad_scale

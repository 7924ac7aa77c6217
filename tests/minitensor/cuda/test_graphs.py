"""minitensor/cuda/graphs.py: a training step captured into a CUDA graph and replayed gives the
eager step's bits, update after update, on the CuPy double (whose capture runs nothing, bakes
each launch's scalars, refuses copies between host and device, and replays the launches with
the arrays as they hold then; the kernels themselves run on the CUDA emulator)."""
import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor.cuda import graphs


def _mlp(seed: int):
    rng = np.random.default_rng(seed)
    shapes = [(16, 32), (32,), (32, 8), (8,)]
    return [mt.tensor(rng.standard_normal(s).astype(np.float32) * 0.3, device="cuda", requires_grad=True) for s in shapes]


def _loss(params, x):
    w1, b1, w2, b2 = params
    h = F.dropout(F.relu(x @ w1 + b1), 0.3, training=True)
    return ((h @ w2 + b2) ** 2).sum()


def test_a_replayed_step_makes_the_eager_steps_bits_as_seeds_learning_rates_and_inputs_change(cupy_double):
    """Five Adam steps of a small network with dropout, each with its own input, learning rate
    and dropout seed: eager, and with the second to fifth replayed from one graph captured at
    the second (the first eager, as Adam's moments are made there). After every step the
    weights are the same bits, and so is the loss the graph returns; the graph was captured
    once and launched four times, with the host's numbers written before each launch."""
    cp = cupy_double
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((4, 16)).astype(np.float32) for _ in range(5)]
    rates = [1e-3, 2e-3, 3e-3, 2.5e-3, 2e-3]

    eager = _mlp(0)
    opt = mt.optim.Adam(eager, lr=rates[0], betas=(0.9, 0.98), eps=1e-9)
    eager_states, eager_losses = [], []
    for step, (x, lr) in enumerate(zip(inputs, rates)):
        mt.manual_seed(100 + step)
        opt.lr = lr
        opt.zero_grad()
        loss = _loss(eager, mt.tensor(x, device="cuda"))
        loss.backward()
        opt.step()
        eager_losses.append(loss.numpy().tobytes())
        eager_states.append([p.numpy().tobytes() for p in eager])

    params = _mlp(0)
    opt = mt.optim.Adam(params, lr=rates[0], betas=(0.9, 0.98), eps=1e-9)
    static = mt.tensor(inputs[0], device="cuda")

    def device_step():
        opt.zero_grad()
        loss = _loss(params, static)
        loss.backward()
        opt.update_params()
        return loss.data

    graph = None
    for step, (x, lr) in enumerate(zip(inputs, rates)):
        mt.manual_seed(100 + step)
        opt.lr = lr
        static.data.set(x)
        if step == 0:
            opt.count_step()
            loss = device_step()
        else:
            opt.count_step()
            if graph is None:
                graph = graphs.Graph(cp, device_step)
            loss = graph.replay()
        assert loss.get().tobytes() == eager_losses[step], step
        assert [p.numpy().tobytes() for p in params] == eager_states[step], step
    assert [a.dtype for a, _ in graph.host_values] == [np.uint64, np.int64]   # the seed; Adam's table and numbers

"""Optimizers match hand-written reference updates; clipping and state round trips."""
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitensor as mt
from minitensor import nn, optim, threads

from ..helpers import close


def quadratic_grads(w, step):
    """A gradient that changes every step (so momentum and moments matter)."""
    return 2 * w + np.sin(step + np.arange(w.size).reshape(w.shape))


def run(opt_factory, steps=6, device="cpu"):
    w = mt.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True, device=device)
    opt = opt_factory([w])
    for s in range(steps):
        w.grad = mt.tensor(quadratic_grads(w.numpy(), s), device=device)
        opt.step()
    return w.numpy()


def sgd_reference(lr, momentum, wd, steps=6):
    w = np.linspace(-1, 1, 6).reshape(2, 3)
    buf = None
    for s in range(steps):
        g = quadratic_grads(w, s) + wd * w
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + g
            g = buf
        w = w - lr * g
    return w


def adam_reference(lr, b1, b2, eps, wd, steps=6):
    w = np.linspace(-1, 1, 6).reshape(2, 3)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t in range(1, steps + 1):
        g = quadratic_grads(w, t - 1) + wd * w
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mhat, vhat = m / (1 - b1**t), v / (1 - b2**t)
        w = w - lr * mhat / (np.sqrt(vhat) + eps)
    return w


@pytest.mark.parametrize("momentum,wd", [(0.0, 0.0), (0.9, 0.0), (0.9, 0.01)])
def test_sgd_matches_reference_update(momentum, wd, device):
    got = run(lambda p: optim.SGD(p, lr=0.1, momentum=momentum, weight_decay=wd), device=device)
    np.testing.assert_allclose(got, sgd_reference(0.1, momentum, wd), atol=1e-6)


@pytest.mark.parametrize("betas,eps,wd", [((0.9, 0.999), 1e-8, 0.0), ((0.9, 0.98), 1e-9, 0.0), ((0.8, 0.9), 1e-6, 0.1)])
def test_adam_matches_reference_update(betas, eps, wd, device):
    got = run(lambda p: optim.Adam(p, lr=0.05, betas=betas, eps=eps, weight_decay=wd), device=device)
    np.testing.assert_allclose(got, adam_reference(0.05, *betas, eps, wd), atol=1e-6)


def test_adam_state_dict_round_trip_continues_identically():
    full = run(lambda p: optim.Adam(p, lr=0.05), steps=6)
    w = mt.tensor(np.linspace(-1, 1, 6).reshape(2, 3), requires_grad=True)
    opt = optim.Adam([w], lr=0.05)
    for s in range(3):
        w.grad = mt.tensor(quadratic_grads(w.numpy(), s))
        opt.step()
    sd = opt.state_dict()
    w2 = mt.tensor(w.numpy().copy(), requires_grad=True)
    opt2 = optim.Adam([w2], lr=999.0)
    opt2.load_state_dict(sd)
    assert opt2.lr == 0.05 and opt2.steps == 3
    for s in range(3, 6):
        w2.grad = mt.tensor(quadratic_grads(w2.numpy(), s))
        opt2.step()
    np.testing.assert_allclose(w2.numpy(), full, atol=1e-12)


def test_optimizer_load_rejects_mismatched_state():
    w = mt.tensor(np.zeros(3), requires_grad=True)
    opt = optim.Adam([w])
    w.grad = mt.tensor(np.ones(3))
    opt.step()
    other = optim.Adam([mt.tensor(np.zeros(4), requires_grad=True)])
    with pytest.raises(ValueError, match="shape"):
        other.load_state_dict(opt.state_dict())


def test_parameters_without_grad_are_left_alone():
    a = mt.tensor(np.ones(2), requires_grad=True)
    b = mt.tensor(np.ones(2), requires_grad=True)
    opt = optim.SGD([a, b], lr=1.0)
    a.grad = mt.tensor(np.ones(2))
    opt.step()
    close(a, [0.0, 0.0])
    close(b, [1.0, 1.0])
    opt.zero_grad()
    assert a.grad is None


def test_clip_grad_norm_scales_to_max_norm_and_returns_previous_norm():
    a = mt.tensor(np.zeros(2), requires_grad=True)
    b = mt.tensor(np.zeros(1), requires_grad=True)
    a.grad, b.grad = mt.tensor(np.array([3.0, 0.0])), mt.tensor(np.array([4.0]))
    norm = optim.clip_grad_norm([a, b], max_norm=1.0)
    assert norm == pytest.approx(5.0)
    total = np.sqrt((a.grad.numpy() ** 2).sum() + (b.grad.numpy() ** 2).sum())
    assert total == pytest.approx(1.0, rel=1e-5)
    assert optim.clip_grad_norm([a, b], max_norm=10.0) == pytest.approx(1.0, rel=1e-5)  # no-op when under


def test_training_a_small_regression_reduces_loss():
    mt.manual_seed(0)
    rng = np.random.default_rng(0)
    x = mt.tensor(rng.standard_normal((64, 3)).astype(np.float32))
    y = mt.tensor((x.numpy() @ np.array([[1.0], [-2.0], [0.5]], np.float32)))
    model = nn.Linear(3, 1)
    opt = optim.Adam(model.parameters(), lr=0.1)
    losses = []
    for _ in range(100):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 1e-3 < losses[0]


def test_empty_parameter_list_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        optim.SGD([], lr=0.1)


def test_worker_count_comes_from_the_environment_and_bad_values_are_refused(monkeypatch):
    monkeypatch.setenv("MINITENSOR_THREADS", "3")
    assert threads.count() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("MINITENSOR_THREADS", bad)
        with pytest.raises(ValueError, match=r"MINITENSOR_THREADS must be a whole number in \[1, 4096\], got "):
            threads.count()


def test_work_shared_among_threads_hands_out_every_item_once_and_raises_a_workers_error(monkeypatch):
    monkeypatch.setenv("MINITENSOR_THREADS", "3")
    shares = {}
    threads.share(lambda worker, share: shares.__setitem__(worker, list(share)), list(range(10)))
    assert sorted(x for share in shares.values() for x in share) == list(range(10))
    assert all(share == sorted(share) for share in shares.values())  # each worker's items in order

    def slow_worker_1(worker, share):  # worker 1's core busy elsewhere: the others take its items
        for _ in share:
            time.sleep(0.2 if worker == 1 else 0.001)
            taken[worker] = taken.get(worker, 0) + 1

    taken = {}
    threads.share(slow_worker_1, list(range(60)))
    assert sum(taken.values()) == 60 and taken.get(1, 0) <= 3, taken

    def broken(worker, share):
        if worker == 2:
            raise RuntimeError("worker 2 failed")

    with pytest.raises(RuntimeError, match="worker 2 failed"):
        threads.share(broken, list(range(10)))


# (Adam without weight decay: with it, a GPU may fuse the scale into the decay's multiply-add, one rounding fewer)
@pytest.mark.parametrize("make", [lambda p: optim.Adam(p, lr=0.05),
                                  lambda p: optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01)], ids=["adam", "sgd"])
@pytest.mark.parametrize("grad_scale", [1.0, 2.0**-15 / 37, 0.3])
def test_a_grad_scale_in_the_step_equals_scaling_the_gradients_first_bit_for_bit(make, grad_scale, device):
    """step(grad_scale) folds the factor into the update's own pass; it makes the weights that
    multiplying every gradient by it (in their own dtype) and stepping make, and leaves the
    gradients as they were."""
    rng = np.random.default_rng(3)
    shapes = [(5, 7), (300,), (2, 3, 4), (1,)]
    values = [rng.normal(size=s).astype(np.float32) for s in shapes]
    grads = [[rng.normal(size=s).astype(np.float32) * 1e3 for s in shapes] for _ in range(3)]
    results = []
    for folded in (True, False):
        params = [mt.nn.Parameter(v.copy()).to(device) for v in values]
        opt = make(params)
        for step_grads in grads:
            for p, g in zip(params, step_grads):
                p.grad = mt.tensor(g if folded else g * np.float32(grad_scale), device=device)
            opt.step(grad_scale) if folded else opt.step()
            if folded:
                assert all(np.array_equal(p.grad.numpy(), g) for p, g in zip(params, step_grads))
        results.append([p.numpy() for p in params])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_clip_factor_and_grad_norm_make_clip_grad_norms_gradients():
    a = mt.tensor(np.array([3.0, 0.0], np.float32), requires_grad=True)
    b = mt.tensor(np.array([[4.0]], np.float32), requires_grad=True)
    a.grad, b.grad = mt.tensor(a.numpy() * 2), mt.tensor(b.numpy() * 2)
    assert optim.grad_norm([a, b]) == pytest.approx(10.0) and optim.grad_norm([a, b], 0.5) == pytest.approx(5.0)
    assert optim.clip_factor(10.0, 1.0) == pytest.approx(0.1, rel=1e-6)
    assert optim.clip_factor(0.5, 1.0) == 1.0 and optim.clip_factor(float("inf"), 1.0) == 1.0
    assert optim.clip_factor(float("nan"), 1.0) == 1.0


@pytest.mark.parametrize("kernels", [False, True], ids=["reference", "one launch (emulated)"])
def test_update_params_with_a_skip_of_nonzero_changes_nothing_and_of_zero_is_a_step(kernels):
    """Optimizer.update_params(skip=): a nonzero count leaves weights and moments as they were
    (the one-launch Adam reads it on the device, the reference on the host); zero makes the
    step's own bits."""
    from minitensor import cuda
    from minitensor.cuda import emulator

    rng = np.random.default_rng(5)
    start = [rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (7,)]]
    grads = [rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (7,)]]

    def after(skip):
        params = [mt.tensor(w.copy(), requires_grad=True) for w in start]
        opt = optim.Adam(params, lr=0.01)
        for _ in range(2):
            for p, g in zip(params, grads):
                p.grad = mt.tensor(g)
            opt.count_step()
            opt.update_params(skip=None if skip is None else np.array([skip], np.int32))
        return [p.numpy().tobytes() for p in params] + [s[k].tobytes() for s in opt.state for k in ("m", "v") if k in s]

    if kernels and not emulator.available()[0]:
        pytest.skip(emulator.available()[1])
    launched = emulator.launches.get("adam_multi<float>", 0)
    with cuda.emulate(kernels):
        stepped, kept = after(None), after(3)
        assert after(0) == stepped
    assert (emulator.launches.get("adam_multi<float>", 0) - launched == 6) == kernels   # the kernel's own skip ran
    # the weights as they started; moments, where the route made them before skipping, still zero
    assert kept[:2] == [w.tobytes() for w in start] and all(not np.frombuffer(b, np.float32).any() for b in kept[2:])

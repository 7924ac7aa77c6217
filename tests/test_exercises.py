"""The exercises: every one is solvable (the package's reference answer passes its check),
the stubs as shipped fail, a plausible wrong answer fails with hypothesis's shrunk example,
and the autograder's command line reports all three."""
import inspect
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from transformer.exercises import EXERCISES, reference

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
sys.path.insert(0, str(LESSONS))
import check  # noqa: E402  (lessons/check.py, the autograder)


def _wrong_numerical_gradient(f, x, eps):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):             # one-sided differences: O(eps) off
        step = np.zeros_like(x)
        step[i] = eps
        g[i] = (f(x + step) - f(x)) / eps
    return g


def _wrong_softmax_backward(y, grad):
    return grad * y * (1 - y)                  # the Jacobian's diagonal only


def _wrong_layer_norm_backward(grad, xhat, r, weight):
    g = grad * weight
    return r * (g - g.mean(-1, keepdims=True))  # forgets x̂ · mean(ĝ x̂)


def _wrong_adam(theta, grad, m, v, t, lr, betas, eps):
    m = betas[0] * m + (1 - betas[0]) * grad
    v = betas[1] * v + (1 - betas[1]) * grad * grad
    return theta - lr * m / (np.sqrt(v) + eps), m, v   # no bias correction


def _wrong_attention(q, k, v, mask):
    s = q @ k.swapaxes(-1, -2)                           # no 1/√d_k
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def _wrong_rank(scores, logp, n):
    B, K, V = logp.shape
    top = np.argsort(-logp.reshape(B, K * V), axis=1)[:, :n]   # ignores the prefix scores
    return top // V, top % V, np.take_along_axis((scores[:, :, None] + logp).reshape(B, -1), top, 1)


WRONG = {
    "03": dict(numerical_gradient=_wrong_numerical_gradient),
    "04": dict(adam_update=_wrong_adam),
    "05": dict(softmax_backward=_wrong_softmax_backward),
    "06": dict(layer_norm_backward=_wrong_layer_norm_backward),
    "07": dict(causal_mask=lambda T: np.tril(np.ones((T, T), bool), -1), attention=_wrong_attention),
    "08": dict(split_heads=lambda x, h: x.reshape(x.shape[0], h, x.shape[1], x.shape[2] // h),
               merge_heads=reference("08").merge_heads),
    "09": dict(sinusoidal_table=lambda n, d: np.concatenate(
        [np.sin(np.arange(n)[:, None] / 10000 ** (np.arange(0, d, 2) / d)),
         np.cos(np.arange(n)[:, None] / 10000 ** (np.arange(0, d, 2) / d))], axis=1)),  # sines then cosines
    "13": dict(rank_extensions=_wrong_rank),
    "15": dict(noam_lr=lambda step, d, w: d**-0.5 * min(step**-0.5, step * w**-1.0)),
}


def test_there_are_at_least_eight_exercises_each_with_a_stub_a_reference_and_a_wrong_answer():
    assert len(EXERCISES) >= 8 and set(WRONG) == set(EXERCISES)
    for number, ex in EXERCISES.items():
        stub = check.load(check.stub_path(number))
        ref = reference(number)
        for name in ex.functions:   # the stub asks for exactly what the reference provides
            assert list(inspect.signature(getattr(stub, name)).parameters) == \
                list(inspect.signature(getattr(ref, name)).parameters), (number, name)


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_the_reference_answer_passes(number):
    ok, report = check.grade(number, reference(number))
    assert ok, report


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_the_stub_as_shipped_fails(number):
    ok, report = check.grade(number, check.load(check.stub_path(number)))
    assert not ok and "not written yet" in report


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_a_wrong_answer_fails_with_a_shrunk_example(number):
    ok, report = check.grade(number, types.SimpleNamespace(**WRONG[number]))
    assert not ok
    assert "Failing test case" in report or "Falsifying example" in report, report  # hypothesis's shrunk input


def test_the_autograder_command_line(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, str(LESSONS / "check.py"), *a], capture_output=True,  # noqa: E731
                                    text=True)
    out = run("all", "--reference")
    assert out.returncode == 0 and out.stdout.count("PASS") == len(EXERCISES), out.stdout + out.stderr
    out = run("15")
    assert out.returncode == 1 and "FAIL" in out.stdout and "not written yet" in out.stdout
    mine = tmp_path / "noam.py"
    mine.write_text("def noam_lr(step, d_model, warmup):\n    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)\n")
    out = run("15", "--file", str(mine))
    assert out.returncode == 0 and "PASS" in out.stdout
    mine.write_text("def noam_lr(step, d_model, warmup):\n    return d_model ** -0.5 * step ** -0.5\n")
    out = run("15", "--file", str(mine))
    assert out.returncode == 1 and "step=1" in out.stdout   # the shrunk case: the first step

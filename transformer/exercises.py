"""The exercises of the lessons: what each asks for, how it is checked, and the reference
answers.

Each exercise is a stub in ``lessons/exercises/NN_*.py`` with functions to write; the
autograder ``python lessons/check.py NN`` imports the stub and runs the checks below on it:
the package's own properties (a float64 gradcheck with a random cotangent, a mask's
defining property, a formula), on inputs hypothesis draws. When a check fails, hypothesis
shrinks the failing input to a small one and the autograder prints it.

The reference answers are the package's own code (``reference(NN)``), so CI proves each
exercise is solvable, and that a wrong answer fails (``tests/test_exercises.py``).
"""
from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import minitensor as mt
from minitensor.autograd import Function
from minitensor.testing import arrays, shapes

from .checks import follows_equation_3, np_softmax

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None)


@dataclass(frozen=True)
class Exercise:
    number: str
    title: str
    lesson: str                 # the lesson it belongs to
    functions: tuple            # what the stub must define
    check: Callable             # check(namespace) raises AssertionError on a wrong answer


def _close(got, want, what: str, atol=1e-9, rtol=1e-7):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert np.allclose(got, want, atol=atol, rtol=rtol), \
        f"{what}: largest difference {np.abs(got.astype(float) - want.astype(float)).max():.3g}"


# ---------------------------------------------------------------- 03: numerical gradients
def _check_03(ns):
    @SETTINGS
    @given(arrays(shapes(1, 2, 1, 4)), st.integers(0, 2**16))
    def prop(x, seed):
        c = np.random.default_rng(seed).standard_normal(x.shape)
        f = lambda a: float((c * np.tanh(a) + a**3 / 3).sum())  # noqa: E731
        exact = c * (1 - np.tanh(x) ** 2) + x**2
        _close(ns.numerical_gradient(f, x.copy(), 1e-4), exact, "numerical_gradient(f, x, eps=1e-4)", atol=1e-6)
    prop()


def _numerical_gradient(f, x, eps):
    from minitensor.gradcheck import numerical_gradient  # noqa: PLC0415

    return numerical_gradient(f, x, eps)


# ---------------------------------------------------------------- 04: Adam
def _check_04(ns):
    @SETTINGS
    @given(arrays(shapes(1, 2, 1, 4)), st.integers(0, 2**16))
    def prop(theta, seed):
        rng = np.random.default_rng(seed)
        lr, betas, eps = 0.01, (0.9, 0.98), 1e-9
        p = mt.tensor(theta.copy(), requires_grad=True)
        opt = mt.optim.Adam([p], lr=lr, betas=betas, eps=eps)
        mine, m, v = theta.copy(), np.zeros_like(theta), np.zeros_like(theta)
        for t in range(1, 4):
            g = rng.standard_normal(theta.shape)
            p.grad = mt.tensor(g)
            opt.step()
            mine, m, v = ns.adam_update(mine, g, m, v, t, lr, betas, eps)
            _close(mine, p.numpy(), f"adam_update after step {t}")
    prop()


def _adam_update(theta, grad, m, v, t, lr, betas, eps):
    m = betas[0] * m + (1 - betas[0]) * grad
    v = betas[1] * v + (1 - betas[1]) * grad * grad
    theta = theta - lr * (m / (1 - betas[0] ** t)) / (np.sqrt(v / (1 - betas[1] ** t)) + eps)
    return theta, m, v


# ---------------------------------------------------------------- 05 and 06: backwards, gradchecked
def _gradcheck_op(forward, backward, x, what: str, extra=()):
    """A Function with this forward and the learner's backward, through mt.gradcheck."""

    class Op(Function):
        @staticmethod
        def forward(ctx, a):
            out, saved = forward(a)
            ctx.save_for_backward(*saved)
            return out

        @staticmethod
        def backward(ctx, grad):
            return backward(grad, *ctx.saved, *extra)

    t = mt.tensor(x, requires_grad=True)
    assert mt.gradcheck(lambda a: Op.apply(a), [t], raise_exception=False), \
        f"{what}: the gradient disagrees with finite differences"


def _check_05(ns):
    @SETTINGS
    @given(arrays(shapes(1, 3, 1, 5), low=-3, high=3))
    def prop(x):
        def forward(a):
            y = np_softmax(a)
            return y, (y,)
        _gradcheck_op(forward, lambda g, y: ns.softmax_backward(y, g), x, "softmax_backward(y, grad)")
    prop()


def _softmax_backward(y, grad):
    from minitensor.ops.softmax import Softmax  # noqa: PLC0415

    ctx = types.SimpleNamespace(saved=(y,), axis=-1)
    return Softmax.backward(ctx, grad)


def _check_06(ns):
    @SETTINGS
    @given(arrays(shapes(1, 3, 2, 6), low=-3, high=3), st.integers(0, 2**16))
    def prop(x, seed):
        w = np.random.default_rng(seed).uniform(0.5, 1.5, x.shape[-1])

        def forward(a):
            mu = a.mean(-1, keepdims=True)
            r = 1 / np.sqrt(((a - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
            xhat = (a - mu) * r
            return xhat * w, (xhat, r)
        _gradcheck_op(forward, lambda g, xhat, r: ns.layer_norm_backward(g, xhat, r, w), x,
                      "layer_norm_backward(grad, xhat, r, weight)")
    prop()


def _layer_norm_backward(grad, xhat, r, weight):
    from minitensor.ops.norm import layer_norm_backward_reference  # noqa: PLC0415

    return layer_norm_backward_reference(np, grad, xhat, r, weight, (True, False, False))[0]


# ---------------------------------------------------------------- 07: the causal mask and attention
def _check_07(ns):
    @SETTINGS
    @given(st.integers(1, 24))
    def mask_prop(T):
        m = np.asarray(ns.causal_mask(T))
        assert m.shape == (T, T) and m.dtype == bool, f"causal_mask({T}): a ({T}, {T}) bool array, got {m.shape} {m.dtype}"
        i, j = np.indices((T, T))
        bad = np.argwhere(m != (j <= i))
        assert bad.size == 0, f"causal_mask({T})[{bad[0][0]}, {bad[0][1]}] is {m[tuple(bad[0])]}: query i may " \
                              "attend to key j exactly when j <= i"

    @SETTINGS
    @given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 2**16), st.booleans())
    def attention_prop(T, d, seed, masked):
        rng = np.random.default_rng(seed)
        q, k, v = (rng.standard_normal((2, T, d)) for _ in range(3))
        mask = np.tril(np.ones((T, T), bool)) if masked else None
        want = mt.functional.scaled_dot_product_attention(
            *(mt.tensor(a) for a in (q, k, v)), mask=None if mask is None else mt.tensor(mask)).numpy()
        _close(ns.attention(q, k, v, mask), want, "attention(q, k, v, mask)")

    mask_prop()
    attention_prop()


def _causal_mask(T):
    from .masks import causal_mask  # noqa: PLC0415

    return causal_mask(T).numpy()


def _attention(q, k, v, mask):
    return mt.functional.scaled_dot_product_attention(
        *(mt.tensor(a) for a in (q, k, v)), mask=None if mask is None else mt.tensor(mask)).numpy()


# ---------------------------------------------------------------- 08: heads
def _check_08(ns):
    @SETTINGS
    @given(st.integers(1, 3), st.integers(1, 5), st.sampled_from([(1, 4), (2, 2), (4, 3), (8, 1)]), st.integers(0, 99))
    def prop(B, T, hd, seed):
        h, dk = hd
        x = np.random.default_rng(seed).standard_normal((B, T, h * dk))
        heads = np.asarray(ns.split_heads(x, h))
        assert heads.shape == (B, h, T, dk), f"split_heads: shape {heads.shape}, expected {(B, h, T, dk)}"
        for i in range(h):  # head i holds columns i*dk .. (i+1)*dk - 1 of every position
            _close(heads[:, i], x[..., i * dk:(i + 1) * dk], f"split_heads: head {i}")
        _close(ns.merge_heads(heads), x, "merge_heads(split_heads(x))")
    prop()


def _split_heads(x, h):
    B, T, D = x.shape
    return x.reshape(B, T, h, D // h).transpose(0, 2, 1, 3)


def _merge_heads(x):
    B, h, T, dk = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, h * dk)


# ---------------------------------------------------------------- 09: sinusoids
def _check_09(ns):
    from .embedding import sinusoidal_table  # noqa: PLC0415

    @SETTINGS
    @given(st.integers(1, 60), st.integers(1, 16).map(lambda n: 2 * n))
    def prop(n, d):
        _close(np.asarray(ns.sinusoidal_table(n, d), dtype=np.float64), sinusoidal_table(n, d), f"sinusoidal_table({n}, {d})",
               atol=1e-6)
    prop()


def _sinusoidal_table(n, d):
    from .embedding import sinusoidal_table  # noqa: PLC0415

    return sinusoidal_table(n, d)


# ---------------------------------------------------------------- 13: one step of beam search
def _check_13(ns):
    @SETTINGS
    @given(st.integers(1, 3), st.integers(1, 4), st.integers(2, 6), st.integers(0, 2**16))
    def prop(B, K, V, seed):
        rng = np.random.default_rng(seed)
        scores = -rng.uniform(0, 5, (B, K))
        logp = np.log(rng.dirichlet(np.ones(V), (B, K)))
        n = min(2 * K, K * V)
        beam, token, score = (np.asarray(a) for a in ns.rank_extensions(scores, logp, n))
        for b in range(B):  # brute force: every (beam, token), sorted by prefix + token log probability
            total = scores[b][:, None] + logp[b]
            best = np.sort(total.ravel())[::-1][:n]
            _close(score[b], best, f"rank_extensions: sentence {b}'s scores")
            _close(total[beam[b], token[b]], best, f"rank_extensions: sentence {b}'s (beam, token) pairs")
    prop()


def _rank_extensions(scores, logp, n):
    from .decoding import rank_extensions  # noqa: PLC0415

    return rank_extensions(scores, logp, n)


# ---------------------------------------------------------------- 15: the schedule
def _check_15(ns):
    @SETTINGS
    @given(st.integers(1, 200_000), st.sampled_from([64, 256, 512, 1024]), st.integers(1, 8000))
    def prop(step, d_model, warmup):
        follows_equation_3(ns.noam_lr, [(step, d_model, warmup)])
    prop()


def _noam_lr(step, d_model, warmup):
    from .schedule import noam_lr  # noqa: PLC0415

    return noam_lr(step, d_model, warmup)


EXERCISES = {e.number: e for e in [
    Exercise("03", "numerical gradients by central differences", "03", ("numerical_gradient",), _check_03),
    Exercise("04", "one Adam update, written out", "04", ("adam_update",), _check_04),
    Exercise("05", "the backward of softmax", "05", ("softmax_backward",), _check_05),
    Exercise("06", "the backward of LayerNorm", "06", ("layer_norm_backward",), _check_06),
    Exercise("07", "the causal mask, and attention with it", "07", ("causal_mask", "attention"), _check_07),
    Exercise("08", "splitting into heads and merging them back", "08", ("split_heads", "merge_heads"), _check_08),
    Exercise("09", "the sinusoidal positional encoding", "09", ("sinusoidal_table",), _check_09),
    Exercise("13", "one step of beam search", "13", ("rank_extensions",), _check_13),
    Exercise("15", "the learning-rate schedule of equation (3)", "15", ("noam_lr",), _check_15),
]}

_REFERENCE = {
    "03": dict(numerical_gradient=_numerical_gradient), "04": dict(adam_update=_adam_update),
    "05": dict(softmax_backward=_softmax_backward), "06": dict(layer_norm_backward=_layer_norm_backward),
    "07": dict(causal_mask=_causal_mask, attention=_attention),
    "08": dict(split_heads=_split_heads, merge_heads=_merge_heads),
    "09": dict(sinusoidal_table=_sinusoidal_table),
    "13": dict(rank_extensions=_rank_extensions), "15": dict(noam_lr=_noam_lr),
}


def reference(number: str) -> types.SimpleNamespace:
    """The package's answer to exercise ``number`` (a namespace with the stub's functions)."""
    return types.SimpleNamespace(**_REFERENCE[number])

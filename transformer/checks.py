"""The properties the lessons check, as functions.

A lesson's check is an experiment's claim in code: if it cannot fail, it proves nothing.
Keeping each one here, as a function of the thing checked, lets ``tests/test_lesson_checks.py``
hand it a deliberately broken input (a wrong pad id, a missing causal mask, a broken
backward) and show that it fails. Each raises ``AssertionError`` saying what went wrong.
"""
from __future__ import annotations

import numpy as np

import minitensor as mt


def np_softmax(s, axis=-1):
    """Softmax in plain NumPy: the independent reference the checks compare against."""
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# ---------------------------------------------------------------- lesson 8: multi-head attention
def heads_are_concatenated(mha, x: np.ndarray) -> None:
    """``mha(x, x, x)`` equals Concat(head_1..head_h) W^O + b^O with each head computed from
    the paper's equations on its own d_k-wide slice of W^Q, W^K, W^V (float64 ``mha``)."""
    out = mha(mt.tensor(x), mt.tensor(x), mt.tensor(x)).numpy()
    (Wq, bq), (Wk, bk), (Wv, bv), (Wo, bo) = ((getattr(mha, n).weight.numpy(), getattr(mha, n).bias.numpy())
                                              for n in ("w_q", "w_k", "w_v", "w_o"))
    dk = mha.d_model // mha.n_heads
    heads = []
    for i in range(mha.n_heads):
        c = slice(i * dk, (i + 1) * dk)
        Q, K, V = x @ Wq[:, c] + bq[c], x @ Wk[:, c] + bk[c], x @ Wv[:, c] + bv[c]
        heads.append(np_softmax(Q @ K.swapaxes(-1, -2) / np.sqrt(dk)) @ V)
    expected = np.concatenate(heads, -1) @ Wo + bo
    err = np.abs(out - expected).max()
    assert err < 1e-9, f"multi-head attention differs from Concat(head_i) W^O by {err:.2e}"


def key_bias_gets_no_gradient(mha, x: np.ndarray, seed: int = 0) -> float:
    """Softmax ignores a shift shared by all the scores of one query, and q·b_K is such a
    shift: the key projection's bias gets no gradient. Returns |∂L/∂b_K| / |∂L/∂W_K|."""
    mha.zero_grad()
    out = mha(mt.tensor(x), mt.tensor(x), mt.tensor(x))
    out.backward(mt.tensor(np.random.default_rng(seed).standard_normal(out.shape)))
    ratio = float(np.linalg.norm(mha.w_k.bias.grad.numpy()) / np.linalg.norm(mha.w_k.weight.grad.numpy()))
    assert ratio < 1e-10, f"the key bias has a gradient ({ratio:.2e} of the key weights'): the softmax is not " \
                          "taken over the keys of each query"
    return ratio


def always_lower(better: list[float], worse: list[float], what: str) -> None:
    """Every run in ``better`` ended below every run in ``worse`` (the claim holds for each seed)."""
    assert max(better) < min(worse), f"{what}: the runs overlap ({max(better):.3g} vs {min(worse):.3g})"


# ---------------------------------------------------------------- lesson 9: positional encodings
def offset_is_linear(table: np.ndarray, k: int) -> float:
    """One matrix M maps every row of the positional table to the row k further on:
    PE(pos + k) = PE(pos) M. Returns the largest residual of the least-squares M."""
    a, b = table[:-k], table[k:]
    M, *_ = np.linalg.lstsq(a, b, rcond=None)
    residual = float(np.abs(a @ M - b).max())
    assert residual < 1e-6, f"no single linear map takes PE(pos) to PE(pos + {k}) (residual {residual:.2e})"
    return residual


# ---------------------------------------------------------------- lesson 4: modules and optimizers
def adam_step_matches_the_formula(make_optimizer, lr=0.01, betas=(0.9, 0.98), eps=1e-9, steps=3) -> None:
    """``make_optimizer(params)`` (an Adam with these settings) updates as Kingma & Ba write:
    m ← β1 m + (1-β1) g,  v ← β2 v + (1-β2) g²,  θ ← θ - lr · m̂ / (√v̂ + ε),
    with the bias corrections m̂ = m / (1 - β1^t) and v̂ = v / (1 - β2^t)."""
    rng = np.random.default_rng(0)
    theta = rng.standard_normal(5)
    p = mt.tensor(theta.copy(), requires_grad=True)
    opt = make_optimizer([p])
    m = v = np.zeros(5)
    for t in range(1, steps + 1):
        g = rng.standard_normal(5)
        p.grad = mt.tensor(g)
        opt.step()
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        theta = theta - lr * (m / (1 - betas[0] ** t)) / (np.sqrt(v / (1 - betas[1] ** t)) + eps)
        err = np.abs(p.numpy() - theta).max()
        assert err < 1e-9, f"after step {t} the parameters differ from Adam's formula by {err:.2e}"


def load_is_refused(module, state: dict) -> str:
    """``module.load_state_dict(state)`` raises (shapes or names do not fit); returns the message."""
    try:
        module.load_state_dict(state)
    except (ValueError, KeyError) as e:
        return str(e)
    raise AssertionError("load_state_dict accepted a state that does not fit the module")


# ---------------------------------------------------------------- lesson 5: cross entropy and the loss
def cross_entropy_gradient_is_softmax_minus_onehot(cross_entropy, seed: int = 0) -> None:
    """d Σ CE(x, t) / dx = softmax(x) - onehot(t) for ``cross_entropy(logits, target)``."""
    rng = np.random.default_rng(seed)
    logits = mt.tensor(rng.standard_normal((4, 6)), requires_grad=True)
    target = rng.integers(0, 6, 4)
    cross_entropy(logits, mt.tensor(target)).sum().backward()
    expected = np_softmax(logits.numpy()) - np.eye(6)[target]
    err = np.abs(logits.grad.numpy() - expected).max()
    assert err < 1e-9, f"the cross-entropy gradient is off by {err:.2e} from softmax - onehot"


def pad_positions_are_ignored(loss_fn, pad_id: int, smoothing: float = 0.1, seed: int = 0) -> float:
    """``loss_fn(logits, target)`` is the smoothed cross entropy averaged over the non-pad
    target positions only: it equals that average computed by hand, and changing the logits
    at pad positions does not change it. Returns the loss."""
    rng = np.random.default_rng(seed)
    V = 7
    logits = rng.standard_normal((2, 5, V)) * 2
    target = rng.integers(3, V, (2, 5))
    target[0, 3:] = pad_id
    target[1, 4:] = pad_id
    real = target != pad_id
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    q = np.full((2, 5, V), smoothing / V)
    q[np.arange(2)[:, None], np.arange(5)[None, :], target] += 1 - smoothing
    expected = float(-(q * logp).sum(-1)[real].mean())
    got = loss_fn(mt.tensor(logits), mt.tensor(target)).item()
    assert abs(got - expected) < 1e-9, f"loss {got:.6f}, expected {expected:.6f} over the {real.sum()} real tokens"
    logits[~real] += rng.standard_normal(logits[~real].shape) * 10
    moved = loss_fn(mt.tensor(logits), mt.tensor(target)).item()
    assert abs(moved - got) < 1e-9, "the loss changed when only the logits at pad positions did"
    return got


# ---------------------------------------------------------------- lessons 3 and 6: backwards
def passes_gradcheck(fn, inputs, what: str) -> None:
    """``mt.gradcheck(fn, inputs)`` (float64, random cotangent, every entry) passes."""
    assert mt.gradcheck(fn, inputs, raise_exception=False), f"{what}: the backward disagrees with finite differences"


# ---------------------------------------------------------------- lesson 7: attention masks
def attention_respects_mask(attend, mask: np.ndarray, seed: int = 0) -> None:
    """``attend(q, k, v, mask) -> (out, weights)``: each query's weights sum to 1 over the keys
    it may see (or are all 0 when it may see none) and are exactly 0 on the keys it may not."""
    rng = np.random.default_rng(seed)
    B, T, d = mask.shape[0] if mask.ndim == 3 else 2, mask.shape[-1], 8
    q, k, v = (mt.tensor(rng.standard_normal((B, T, d))) for _ in range(3))
    _, w = attend(q, k, v, mt.tensor(mask))
    w = w.numpy()
    allowed = np.broadcast_to(mask, w.shape)
    assert np.all(w[~allowed] == 0), f"{np.count_nonzero(w[~allowed])} masked entries got attention weight"
    sums = w.sum(-1)
    any_key = allowed.any(-1)
    assert np.allclose(sums[any_key], 1) and np.all(sums[~any_key] == 0), "weights do not sum to 1 over the allowed keys"


# ---------------------------------------------------------------- lessons 10 and 11: who sees whom
def influence(fn, x: np.ndarray) -> np.ndarray:
    """|∂ out_t / ∂ in_s| for ``fn`` mapping (1, T, d) to (1, T, d): one backward per output
    position t, with a random cotangent there."""
    rng = np.random.default_rng(0)
    T = x.shape[1]
    out = np.zeros((T, T))
    for t in range(T):
        h = mt.tensor(x, requires_grad=True)
        y = fn(h)
        cot = np.zeros(y.shape)
        cot[0, t] = rng.standard_normal(y.shape[-1])
        y.backward(mt.tensor(cot))
        out[t] = np.linalg.norm(h.grad.numpy()[0], axis=-1)
    return out


def sees_only(inf: np.ndarray, allowed: np.ndarray, what: str) -> None:
    """Each output position depends on exactly the input positions ``allowed`` marks."""
    leaks = np.argwhere((inf > 0) & ~allowed)
    assert leaks.size == 0, f"{what}: output {leaks[0][0]} depends on input {leaks[0][1]}, which it must not see"
    blind = np.argwhere((inf == 0) & allowed)
    assert blind.size == 0, f"{what}: output {blind[0][0]} does not depend on input {blind[0][1]}"

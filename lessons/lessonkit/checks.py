"""The properties the lessons check, as functions.

A lesson's check is an experiment's claim in code: if it cannot fail, it proves nothing.
Keeping each one here, as a function of the thing checked, lets ``tests/lessons/test_checks.py``
hand it a deliberately broken input (a wrong pad id, a missing causal mask, a broken
backward) and show that it fails. Each raises ``AssertionError`` saying what went wrong.
A check that passes records what it saw in the lesson's results (``lessonkit.Results``).

A check that calls part of the package a lesson teaches says so with ``@needs(name)``: the
reading-order test then counts a lesson's call of the check as a use of that name.
"""
from __future__ import annotations

import numpy as np

import minitensor as mt

from . import note_check


def needs(*names):
    """Mark a check as using these taught names (see the module docstring)."""
    def mark(fn):
        fn.needs = names
        return fn
    return mark


def np_softmax(s, axis=-1):
    """Softmax in plain NumPy: the independent reference the checks compare against."""
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# ---------------------------------------------------------------- multi-head attention
@needs("MultiHeadAttention")
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


@needs("MultiHeadAttention")
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
    note_check(what, kind="always_lower", better=list(np.ravel(better)), worse=list(np.ravel(worse)))


# ---------------------------------------------------------------- positional encodings
def offset_is_linear(table: np.ndarray, k: int) -> float:
    """One matrix M maps every row of the positional table to the row k further on:
    PE(pos + k) = PE(pos) M. Returns the largest residual of the least-squares M."""
    a, b = table[:-k], table[k:]
    M, *_ = np.linalg.lstsq(a, b, rcond=None)
    residual = float(np.abs(a @ M - b).max())
    assert residual < 1e-6, f"no single linear map takes PE(pos) to PE(pos + {k}) (residual {residual:.2e})"
    return residual


# ---------------------------------------------------------------- modules and optimizers
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


@needs("load_state_dict")
def load_is_refused(module, state: dict) -> str:
    """``module.load_state_dict(state)`` raises (shapes or names do not fit); returns the message."""
    try:
        module.load_state_dict(state)
    except (ValueError, KeyError) as e:
        return str(e)
    raise AssertionError("load_state_dict accepted a state that does not fit the module")


# ---------------------------------------------------------------- cross entropy and the loss
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


# ---------------------------------------------------------------- backwards
@needs("gradcheck")
def passes_gradcheck(fn, inputs, what: str) -> None:
    """``mt.gradcheck(fn, inputs)`` (float64, random cotangent, every entry) passes."""
    assert mt.gradcheck(fn, inputs, raise_exception=False), f"{what}: the backward disagrees with finite differences"


# ---------------------------------------------------------------- attention masks
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


# ---------------------------------------------------------------- who sees whom
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


# ---------------------------------------------------------------- shared: two results agree
class Difference(float):
    """What :func:`agree` returns: the largest difference, a float that names what it measured
    when a notebook shows it as a cell's result (a bare ``2.2e-16`` says nothing)."""

    def __new__(cls, value: float, what: str):
        self = super().__new__(cls, value)
        self.what = what
        return self

    def __repr__(self) -> str:
        return f"agree: {self.what} (largest difference {float(self):.3g})"


def agree(got, expected, what: str, atol: float = 1e-12, rtol: float = 0.0) -> Difference:
    """``got`` and ``expected`` (numbers, arrays, or lists / dicts of them with the same keys)
    agree to ``atol + rtol·|expected|`` everywhere. Returns the largest difference."""
    return Difference(_largest_difference(got, expected, what, atol, rtol), what)


def _largest_difference(got, expected, what: str, atol: float, rtol: float) -> float:
    if isinstance(expected, dict):
        assert set(got) == set(expected), f"{what}: names {sorted(got)} vs {sorted(expected)}"
        pairs = [(got[k], expected[k], f"{what} [{k}]") for k in expected]
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected), f"{what}: {len(got)} results, expected {len(expected)}"
        pairs = [(g, e, f"{what} [{i}]") for i, (g, e) in enumerate(zip(got, expected))]
    else:
        g, e = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
        assert g.shape == e.shape, f"{what}: shape {g.shape}, expected {e.shape}"
        diff = np.abs(g - e)
        bad = diff > atol + rtol * np.abs(e)
        assert not bad.any(), f"{what}: off by {diff.max():.3g} (allowed {atol:.1g} + {rtol:.1g}·|expected|)"
        return float(diff.max()) if diff.size else 0.0
    return max((_largest_difference(g, e, w, atol, rtol) for g, e, w in pairs), default=0.0)


# ---------------------------------------------------------------- a scalar engine
def matches_finite_differences(f, point: dict, grads: dict, h: float = 1e-6, tol: float = 1e-7) -> float:
    """``grads[name]`` is ∂f/∂name at ``point`` (a dict of floats) to ``tol``, against the
    central difference (f(x + h) − f(x − h)) / 2h. Returns the largest difference."""
    worst = 0.0
    for name, x in point.items():
        up, down = dict(point, **{name: x + h}), dict(point, **{name: x - h})
        numeric = (f(up) - f(down)) / (2 * h)
        diff = abs(grads[name] - numeric)
        assert diff < tol, f"∂f/∂{name}: backward gives {grads[name]:.10g}, finite differences {numeric:.10g}"
        worst = max(worst, diff)
    return worst


# ---------------------------------------------------------------- broadcasting
def broadcast_gradient_is_summed(add, seed: int = 0) -> None:
    """For ``add(x, b)`` with x of shape (4, 3) and b of shape (3,) broadcast over the rows:
    b's gradient is the cotangent summed over the rows it was copied to, x's is the cotangent."""
    rng = np.random.default_rng(seed)
    x = mt.tensor(rng.standard_normal((4, 3)), requires_grad=True)
    b = mt.tensor(rng.standard_normal(3), requires_grad=True)
    cot = rng.standard_normal((4, 3))
    add(x, b).backward(mt.tensor(cot))
    assert b.grad is not None and b.grad.shape == (3,), f"b's gradient has shape {None if b.grad is None else b.grad.shape}, b has (3,)"
    agree(b.grad.numpy(), cot.sum(0), "the broadcast operand's gradient vs the cotangent summed over rows", 1e-12)
    agree(x.grad.numpy(), cot, "x's gradient vs the cotangent", 1e-12)


# ---------------------------------------------------------------- a checker that catches
@needs("gradcheck")
def gradcheck_rejects(fn, inputs, what: str) -> str:
    """``mt.gradcheck`` finds ``fn``'s backward wrong; returns its message."""
    try:
        ok = mt.gradcheck(fn, inputs)
    except mt.GradcheckError as e:
        return str(e)
    raise AssertionError(f"gradcheck accepted {what} (returned {ok})")


# ---------------------------------------------------------------- the copy task
def target_is_shifted(tgt_in: np.ndarray, tgt_out: np.ndarray, bos: int, pad: int) -> None:
    """The decoder's input is its target shifted right by one, behind ``bos``: position i
    reads tgt_out[:i] and must predict tgt_out[i], never see it."""
    assert (tgt_in[:, 0] == bos).all(), "the decoder input does not start with <s>"
    real = tgt_in[:, 1:] != pad
    assert (tgt_in[:, 1:] == tgt_out[:, :-1])[real].all(), \
        "the decoder input is not the target shifted right: tgt_in[i + 1] != tgt_out[i]"


@needs("greedy_decode")
def copies(model, src: np.ndarray, tgt_out: np.ndarray, at_least: float, exact: bool = True) -> tuple[float, float]:
    """Greedy decoding of ``src`` reproduces ``tgt_out``: the share of whole sequences copied
    exactly (or, with ``exact=False``, of tokens) is at least ``at_least``.
    Returns (exact match, token accuracy)."""
    from transformer.copytask import score  # noqa: PLC0415
    from transformer.decoding import greedy_decode  # noqa: PLC0415

    em, tokens = score(greedy_decode(model, src, max_len=tgt_out.shape[1]), tgt_out)
    measured = em if exact else tokens
    assert measured >= at_least, f"the model copies {measured:.1%} of {'sequences' if exact else 'tokens'}, " \
                                 f"less than {at_least:.0%}"
    return em, tokens


# ---------------------------------------------------------------- search
def finds_the_most_likely(decode, model, symbols, eos: int, max_len: int) -> list[int]:
    """``decode(model)`` returns the most probable sequence ending in ``eos`` of at most
    ``max_len`` tokens, found here by scoring every such sequence. Returns it."""
    import itertools  # noqa: PLC0415

    def log_prob(seq):
        return sum(np.log(max(model.probs(seq[:i])[seq[i]], 1e-300)) for i in range(len(seq)))

    candidates = [list(p) + [eos] for n in range(max_len) for p in itertools.product(symbols, repeat=n)]
    best = max(candidates, key=log_prob)
    got = list(decode(model))
    assert got == best, f"the search returned {got} (log P {log_prob(got):.4f}); the most likely is {best} " \
                        f"(log P {log_prob(best):.4f})"
    return best


def length_penalty_is_gnmt(lp) -> None:
    """``lp(length, alpha)`` = ((5 + |Y|) / 6)^α (Wu et al., 2016), the penalty of Section 6.1."""
    for n in (1, 2, 7, 30):
        for a in (0.0, 0.6, 1.0):
            agree(lp(n, a), ((5 + n) / 6) ** a, f"lp({n}, α={a})", 1e-12, 1e-12)


# ---------------------------------------------------------------- subwords
def round_trips(tokenizer, sentences) -> None:
    """decode(encode(s)) gives every sentence back, up to runs of whitespace."""
    for s in sentences:
        back = tokenizer.decode(tokenizer.encode(s))
        assert back == " ".join(s.split()), f"{s!r} came back as {back!r}"


# ---------------------------------------------------------------- equation (3)
def follows_equation_3(lr, points) -> None:
    """``lr(step, d_model, warmup)`` = d_model^−0.5 · min(step^−0.5, step · warmup^−1.5) at
    every (step, d_model, warmup) in ``points``."""
    for step, d_model, warmup in points:
        want = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        got = lr(step, d_model, warmup)
        assert abs(got - want) <= 1e-12 * want, f"lr({step}, {d_model}, {warmup}) = {got}, equation (3) gives {want}"


# ---------------------------------------------------------------- data parallelism
@needs("label_smoothed_loss")
def shard_gradients(model, src, tgt, pad: int, shards):
    """(whole, per_shard, tokens): the gradients of the whole batch's per-token loss, of each
    shard's summed loss (``shards``: row slices), and each shard's real target tokens."""
    from transformer.loss import label_smoothed_loss  # noqa: PLC0415

    def grads(rows, scale=1.0):
        model.zero_grad()
        loss = label_smoothed_loss(model(src[rows], tgt[rows, :-1]), mt.tensor(tgt[rows, 1:]), pad, reduction="sum")
        (loss * scale).backward()
        return [p.grad.numpy().copy() for p in model.parameters()]

    tokens = [int((tgt[rows, 1:] != pad).sum()) for rows in shards]
    return grads(slice(None), 1.0 / sum(tokens)), [grads(rows) for rows in shards], tokens


@needs("label_smoothed_loss")
def sharded_gradients_match(model, src, tgt, pad: int, shards, combine) -> float:
    """Gradients of the per-token loss over the whole batch equal ``combine(grads, tokens)``
    of the shards' summed-loss gradients and their real-token counts. Returns the largest
    difference."""
    whole, per_shard, tokens = shard_gradients(model, src, tgt, pad, shards)
    names = [name for name, _ in model.named_parameters()]   # the order of model.parameters()
    return agree(dict(zip(names, combine(per_shard, tokens))), dict(zip(names, whole)),
                 "the whole batch's gradient vs the combined shards', of parameter", 1e-12, 1e-9)


# ---------------------------------------------------------------- shared: a measured range
def between(values, low: float, high: float, what: str) -> None:
    """Every value (every seed's) lies in [low, high]."""
    v = np.asarray(values, dtype=np.float64).ravel()
    bad = v[(v < low) | (v > high) | np.isnan(v)]
    assert bad.size == 0, f"{what}: {bad[0]:.4g} is outside [{low:.4g}, {high:.4g}] (all: {', '.join(f'{x:.4g}' for x in v)})"
    note_check(what, kind="between", values=list(v), low=float(low), high=float(high))


# ---------------------------------------------------------------- debugging
def silent_parameters(model, rel: float = 1e-6) -> list[str]:
    """Names of the parameters whose gradient (after a backward) is below ``rel`` times the
    largest parameter gradient: parts of the model the loss does not reach."""
    norms = {n: float(np.linalg.norm(p.grad.numpy())) if p.grad is not None else 0.0
             for n, p in model.named_parameters()}
    top = max(norms.values())
    return [n for n, g in norms.items() if g <= rel * top]


def exactly_these_are_silent(model, suffixes: tuple, rel: float = 1e-6) -> list[str]:
    """The parameters without a gradient are exactly those whose names end with ``suffixes``
    (the key biases, which the softmax ignores): every other one gets a gradient, and every
    one of those gets none. Returns the silent ones."""
    silent = silent_parameters(model, rel)
    unexpected = [n for n in silent if not n.endswith(suffixes)]
    assert not unexpected, f"{len(unexpected)} parameters get no gradient: {', '.join(unexpected[:6])}" + \
                           (" …" if len(unexpected) > 6 else "")
    expected = [n for n, _ in model.named_parameters() if n.endswith(suffixes)]
    heard = [n for n in expected if n not in silent]
    assert not heard, f"{len(heard)} of the {len(expected)} parameters ending in {suffixes} get a gradient: " \
                      f"{', '.join(heard[:3])}"
    return silent

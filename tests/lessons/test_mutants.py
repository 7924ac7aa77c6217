"""The mutation test of the grader (``lessonkit.mutants``): every mutant of a reference solution,
one small change in a piece the learner writes, fails the grader, or is listed as equivalent
with the reason. The default run grades a sample of each exercise's mutants; ``--all-mutants``
(``.ci/run``) grades every one. Every exercise is held at 100%."""
import pytest

from lessonkit import mutants, track
from lessonkit.exercises import EXERCISES

SAMPLE = 12     # mutants per exercise in the default run


@pytest.mark.parametrize("number", list(EXERCISES))
def test_every_non_equivalent_mutant_fails_the_grader(number, request):
    every = request.config.getoption("--all-mutants")
    result = mutants.score([number], sample=None if every else SAMPLE)[number]
    assert result["mutants"] > 0
    assert not result["survivors"], "mutants that pass the grader:\n" + "\n".join(map(str, result["survivors"]))


def test_each_equivalent_mutant_listed_is_one_the_mutator_makes():
    """A stale entry (a mutant no longer made, after the solution changed) would hide nothing,
    but the list is a reviewed record: it must name real mutants."""
    made = {m.key for n in EXERCISES for m in mutants.mutants(n)}
    stale = [k for k in mutants.EQUIVALENT if k not in made]
    assert not stale, stale


def test_the_mutator_changes_only_the_pieces_the_learner_writes():
    for number in ("01", "15"):
        source = track.path(track.SOLUTIONS, number).read_text()
        blocks = mutants._blocks(source)
        for m in mutants.mutants(number):
            assert any(a <= m.line <= b for _, a, b in blocks), m
            assert m.where in EXERCISES[number].functions, m


def test_a_planted_gap_is_reported_as_a_survivor(monkeypatch):
    """The test can fail: with exercise 16's cases cut to the first one, mutants survive."""
    ex = EXERCISES["16"]
    monkeypatch.setitem(mutants.grader._CASES, "16", ex.cases()[:1])
    import dataclasses
    monkeypatch.setitem(mutants.EXERCISES, "16", dataclasses.replace(ex, drawn=None))
    result = mutants.score(["16"])["16"]
    assert result["survivors"]


# Wrong answers that learner trials wrote (from the lessons alone) and an earlier grader passed: each is a
# change to the reference solution, and each must now fail.
TRIALS = [
    ("01", "grads[id(x)] = gx if id(x) not in grads else grads[id(x)] + gx",
     "grads[id(x)] = gx if id(x) not in grads else grads[id(x)].__iadd__(gx)"),      # gradients added in place
    ("01", "np.ones_like(self.data) if grad is None", "np.ones(self.data.shape) if grad is None"),  # a float64 seed
    ("01", "                if gx is not None and x.requires_grad:",
     "                gx = np.zeros_like(x.data) if gx is None else gx\n                if x.requires_grad:"),  # None as 0
    ("02", "    return grad.sum(axis=axes, keepdims=True) if axes else grad",
     "    return (grad.sum(axis=axes, keepdims=True) if axes else grad).astype(np.float64)"),  # float64 out
    ("03", "        kept = x[i]\n        x[i] = kept + eps\n        plus = f(x)\n        x[i] = kept - eps\n"
           "        minus = f(x)\n        x[i] = kept",
     "        x[i] += eps\n        plus = f(x)\n        x[i] -= 2 * eps\n        minus = f(x)\n        x[i] += eps"),
    ("03", "    w = weights(out.shape)", "    w = weights(out.shape) if out.ndim else 1.0"),  # one output unweighted
    ("05", "        return x @ self.weight + self.bias",
     "        return x @ (self.weight.T if self.weight.shape[0] == self.weight.shape[1] else self.weight) + self.bias"),
    ("05", "            if p.grad is None:\n                continue\n            m *= b1\n            m += (1 - b1) * p.grad",
     "            g = np.zeros_like(p.data) if p.grad is None else p.grad\n            m *= b1\n"
     "            m += (1 - b1) * g"),                                                # a missing gradient as 0
    ("05", "        self.t += 1\n        b1, b2 = self.betas",
     "        self.t += any(p.grad is not None for p in self.params)\n        b1, b2 = self.betas"),  # t skips
    ("06", "    return Dropout.apply(x, p=p, rng=rng) if training and p > 0 else x",
     "    return Dropout.apply(x, p=p, rng=rng) if training else x"),                  # p = 0 still draws
    ("06", "        return (x * self.scale).astype(x.dtype)", "        return x * self.scale"),  # float64 out
    ("07", "        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)",
     "        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True, dtype=np.float64)"),   # float64 out
    ("08", "        scores = scores.masked_fill(~np.asarray(mask, bool), -1e9)",
     "        scores = scores.masked_fill(~np.asarray(mask, bool), -np.inf)"),         # −∞, not −1e9
    ("08", "        scores = scores.masked_fill(~np.asarray(mask, bool), -1e9)",
     "        scores = scores.masked_fill(~np.asarray(mask, bool), -1e4)"),            # −1e4, not −1e9
    ("10", "        positions = self.table[offset:offset + ids.shape[-1]].astype(self.weight.dtype)",
     "        positions = self.table[offset:offset + ids.shape[-1]]"),                  # float64 out
    ("10", "    table = np.zeros((T, d))", "    table = np.zeros((T, d), np.float32)"),  # a float32 table
    ("13", "            stack_size = int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])))",
     "            stack_size = int(np.prod(a.shape[:-2])) * int(np.prod(b.shape[:-2]))"),  # stacks multiplied
    ("15", "            if done.all():\n                break\n    return ys[:, 1:]",
     "            if done[0]:\n                break\n    return ys[:, 1:]"),           # stops on the first row
    ("15", "            logits[:, [pad, bos] + ([eos] if t == 1 else [])] = -np.inf\n"
           "            logp = LogSoftmax().forward(logits)",
     "            logits[:, [pad, bos] + ([eos] if t == 1 else [])] = 0.0\n            logp = LogSoftmax().forward(logits)\n"
     "            logp[:, [pad, bos] + ([eos] if t == 1 else [])] = -np.inf"),        # banned logits zeroed first
    ("02", "    if extra > 0:", "    if extra > 0 and grad.shape[0] > 1:"),            # a new axis of size 1 kept
    ("02", "        gx = grad @ np.swapaxes(self.y, -1, -2)",
     "        gx = grad @ np.swapaxes(self.y, -1, -2)\n        self.x = None"),       # freed by the first backward
    ("03", "        if not np.all(np.abs(analytic - numeric) <= atol + rtol * np.abs(numeric)):",
     "        if np.any(np.abs(analytic - numeric) > atol + rtol * np.abs(numeric)):"),  # NaN agrees
    ("03", "        if not np.all(np.abs(analytic - numeric) <= atol + rtol * np.abs(numeric)):",
     "        if not np.all(np.abs(analytic - numeric) <= atol + rtol * np.abs(analytic)):"),  # relative to analytic
    ("04", "        shifted = x - x.max(axis=-1, keepdims=True)",
     "        x -= x.max(axis=-1, keepdims=True)\n        shifted = x"),                # the input changed in place
    ("04", "        return (grad - np.exp(self.out) * grad.sum(axis=-1, keepdims=True),)",
     "        out, self.out = self.out, None\n        return (grad - np.exp(out) * grad.sum(axis=-1, keepdims=True),)"),
    ("05", "                    items = [(f\"{name}.{i}\", v) for i, v in enumerate(value)]",
     "                    items = [(f\"{name}.{i}\", v) for i, v in enumerate(value) if not isinstance(v, Tensor)]"),
    ("05", "            v += (1 - b2) * p.grad**2", "            v += (1 - b2) * np.square(p.grad, out=p.grad)"),
    ("05", "            p.data -= self.lr * m_hat", "            self.lr0 = getattr(self, 'lr0', self.lr)\n"
                                                 "            p.data -= self.lr0 * m_hat"),  # lr read once
    ("06", "        return (x * self.scale).astype(x.dtype)",
     "        x *= self.scale.astype(x.dtype)\n        return x"),                       # the input scaled in place
    ("07", "        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)",
     "        var = (x ** 2).mean(axis=-1, keepdims=True) - mu ** 2"),                   # E[x²] − μ²
    ("07", "        self.rstd = 1.0 / np.sqrt(var + eps)",
     "        x -= mu\n        mu = 0.0\n        self.rstd = 1.0 / np.sqrt(var + eps)"),  # the input centred in place
    ("07", "        axes = tuple(range(grad.ndim - 1))",
     "        axes = tuple(range(grad.ndim - 1))\n        self.rstd = None"),             # freed by the first backward
    ("13", "        before = max(longest.get(id(x.creator), 0) for x in fn.inputs)",
     "        before = longest.get(id(fn.inputs[0].creator), 0)"),                     # the first input's path only
    ("14", "        mask = padding_mask(src, self.pad)\n        x = self.embed(src)",
     "        mask = padding_mask(src, 0)\n        x = self.embed(src)"),                # pad taken as 0
    ("15", "    with no_grad():\n        src_mask = padding_mask(src, pad)\n        memory = model.encode(src)",
     "    if True:\n        src_mask = padding_mask(src, pad)\n        memory = model.encode(src)"),  # a graph recorded
    ("15", "    total = (scores[:, :, None] + logp).reshape(B, K * V)",
     "    logp += scores[:, :, None]\n    total = logp.reshape(B, K * V)"),             # the caller's logp changed
    ("16", "def noam_lr(step, d_model, warmup, factor=1.0):",
     "_FACTOR = [1.0]\n\n\ndef noam_lr(step, d_model, warmup, factor=None):\n"
     "    factor = _FACTOR[0] if factor is None else _FACTOR.__setitem__(0, factor) or factor"),  # a factor remembered
    ("20", "            h = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))",
     "            h = Counter(tuple(w.lower() for w in hyp[i:i + n]) for i in range(len(hyp) - n + 1))"),  # lowercased
    ("23", "        s = q @ k[start:start + block].T / np.sqrt(q.shape[1])",
     "        q /= np.sqrt(q.shape[1]) if start == 0 else 1.0\n        s = q @ k[start:start + block].T"),  # q scaled in place
    ("01", "np.ones_like(self.data) if grad is None", "np.ones((), self.data.dtype) if grad is None"),  # a 0-d seed
    ("03", "        if not np.all(np.abs(analytic - numeric) <= atol + rtol * np.abs(numeric)):",
     "        if not np.all(np.abs(analytic - numeric) <= 1e-5 + 1e-4 * np.abs(numeric)):"),  # the defaults, always
    ("15", "    lp = lambda n: ((5.0 + n) / 6.0) ** alpha   # noqa: E731",
     "    lp = lambda n: ((6.0 + n) / 6.0) ** alpha   # noqa: E731"),                   # bos counted in the length
    ("20", "            h = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))\n"
           "            f = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))",
     "            h = Counter(''.join(hyp[i:i + n]) for i in range(len(hyp) - n + 1))\n"
     "            f = Counter(''.join(ref[i:i + n]) for i in range(len(ref) - n + 1))"),   # n-grams joined to strings
    ("02", "        return sum_to(gx, self.x.shape), sum_to(gy, self.y.shape)",
     "        return sum_to(gx, self.x.shape), (gy.reshape(-1, *self.y.shape).sum(0) if gy.ndim > self.y.ndim "
     "else gy)"),                                                                     # a size-1 stack left as 3
    ("03", "        if not np.all(np.abs(analytic - numeric) <= atol + rtol * np.abs(numeric)):",
     "        if not np.abs(analytic - numeric).max() <= atol + rtol * np.abs(numeric).max():"),  # the largest only
    ("11", "        return self.norm(x + dropout(sublayer(x), self.p_drop, self.rng, self.training))",
     "        return self.norm(x + sublayer(dropout(x, self.p_drop, self.rng, self.training)))"),  # dropout of the input
    ("11", "        return self.sub2(x, self.ffn)", "        return self.sub2.norm(x + self.ffn(x))"),  # no dropout there
    ("12", "        return self.sub3(x, self.ffn)\n        # <<<\n\n    def step",
     "        return self.sub3.norm(x + self.ffn(x))\n        # <<<\n\n    def step"),   # no dropout there
    ("15", "    return ys[:, 1:]", "    return ys[:, 1:].tolist()"),                       # a list, not an array
    ("15", "                if w == eos:\n                    if j < beam and len(finished) < beam:",
     "                if w == eos and j < beam:\n                    if len(finished) < beam:"),  # a late eos kept open
    ("15", "    return max(hypotheses, key=lambda h: h[1])[0]",
     "    return max(reversed(hypotheses), key=lambda h: h[1])[0]"),                   # ties to the last found
    ("03", "        if np.shape(analytic) != numeric.shape:\n            return False\n",
     ""),                                                                             # a (1,) gradient broadcast
    ("21", "            batches.append(np.array(current))\n            current = []",
     "            batches.append(current)\n            current = []"),                 # a list, not an index array
    ("22", "        tokens += n", "        tokens += max(n, 1)"),                           # an all-pad micro-batch as 1
    ("17", "n <= rel * top", "n <= 1e-6 * top"),                                       # rel ignored
    ("17", "top = max(norms)", "top = 1e9"),                                           # relative to the loss (+1e9)
    ("17", "float(np.linalg.norm(p.grad))", "float(np.abs(p.grad).max())"),             # largest entry, not the norm
    ("17", "float(np.linalg.norm(p.grad))", "float(np.abs(p.grad).mean())"),            # mean entry, not the norm
    ("18", "a = k / 10000.0", "a = abs(k) / 10000.0"),                                 # a shift back taken forward
    ("19", "attention = 4 * linear(d_model, d_model)", "attention = 4 * d_model * d_model"),  # attention biases
    ("20", "    if c == 0 or min(matches) == 0:\n        return 0.0\n    bp = 1.0 if c > r else math.exp(1 - r / c)",
     "    bp = 1.0 if c > r else math.exp(1 - r / c)\n    if c == 0 or min(matches) == 0:\n        return 0.0"),
    ("21", "sum(s[name] for s in states) / len(states)", "sum(s[name] for s in states[-5:]) / len(states[-5:])"),
    ("21", "    return {name: sum(s[name] for s in states) / len(states) for name in states[0]}",
     "    out = states[0]\n    for s in states[1:]:\n        for n in out:\n            out[n] += s[n]\n"
     "    for n in out:\n        out[n] /= len(states)\n    return out"),                    # the first state overwritten
    ("22", "(cross_entropy(model(src, tgt_in), tgt_out, smoothing, pad) * n)",
     "(cross_entropy(model(src, tgt_in), tgt_out, smoothing, 0) * n)"),               # pad taken as 0
    ("23", "m = np.full((Tq, 1), -np.inf)", "m = np.zeros((Tq, 1))"),                 # the maximum starts at 0
    ("23", "m_new = np.maximum(m, s.max(axis=1, keepdims=True))",
     "m_new = s.max(axis=1, keepdims=True)"),                                          # the block's own maximum
    ("25", "    try:\n        fn()\n    finally:\n        for cls, kind, method in originals:\n"
           "            setattr(cls, kind, method)",
     "    fn()\n    for cls, kind, method in originals:\n        setattr(cls, kind, method)"),  # no finally
    ("01", "        order, seen = [], set()\n        stack = [(self, False)]\n        while stack:",
     "        order, seen = [], set()\n\n        def visit(t):\n            if id(t) in seen:\n                return\n"
     "            seen.add(id(t))\n            for x in (t.creator.inputs if t.creator is not None else ()):\n"
     "                visit(x)\n            order.append(t)\n        visit(self)\n        stack = []\n"
     "        while stack:"),                                                            # a recursive walk
    ("03", "    for i in np.ndindex(x.shape):\n        kept = x[i]\n        x[i] = kept + eps\n        plus = f(x)\n"
           "        x[i] = kept - eps\n        minus = f(x)\n        x[i] = kept\n        g[i] = (plus - minus) / (2 * eps)",
     "    flat, gf = x.reshape(-1), g.reshape(-1)\n    for i in range(flat.size):\n        kept = flat[i]\n"
     "        flat[i] = kept + eps\n        plus = f(x)\n        flat[i] = kept - eps\n        minus = f(x)\n"
     "        flat[i] = kept\n        gf[i] = (plus - minus) / (2 * eps)"),                # nudges through a reshape
    ("04", "        return (grad - np.exp(self.out) * grad.sum(axis=-1, keepdims=True),)",
     "        return (grad - np.exp(self.out.astype(np.float64)) * grad.sum(axis=-1, keepdims=True),)"),  # float64 out
    ("10", "        positions = self.table[offset:offset + ids.shape[-1]].astype(self.weight.dtype)",
     "        positions = (self.table[offset:offset + 1] if offset else self.table[:ids.shape[-1]])"
     ".astype(self.weight.dtype)"),                                                   # an offset means one token
    ("13", "    order, seen, stack = [], set(), [(out, False)]",
     "    import sys\n    sys.setrecursionlimit(1000)\n\n    def longest(t):\n        fn = t.creator\n"
     "        return 0 if fn is None else isinstance(fn, MatMul) + max(longest(x) for x in fn.inputs)\n\n"
     "    return longest(out)\n    order, seen, stack = [], set(), [(out, False)]"),  # a recursive count
    ("15", "        caches = [{} for _ in model.decoder.layers]",
     "        if not hasattr(model, \"_caches\"):\n            model._caches = [{} for _ in model.decoder.layers]\n"
     "        caches = model._caches"),                                                   # caches kept between calls
    ("02", "        grad = grad.sum(axis=tuple(range(extra)))",
     "        grad = grad.sum(axis=0)\n        if grad.ndim > len(shape):\n            grad = grad.sum(axis=0)"),  # ≤ 2 new axes
    ("05", "            p.data -= self.lr * m_hat", "            p.data = p.data - self.lr * m_hat"),  # a new array
    ("06", "        self.scale = (rng.random(x.shape) >= p) / (1.0 - p)",
     "        type(self).scale = (rng.random(x.shape) >= p) / (1.0 - p)"),              # one mask for every Dropout
    ("08", "        scores = scores.masked_fill(~np.asarray(mask, bool), -1e9)",
     "        scores = scores.masked_fill(~np.asarray(mask, bool), -1e9) if np.asarray(mask).any() else scores"),
    ("09", "        return self.w_o(merge_heads(attention(q, k, v, mask)))",
     "        if getattr(mask, \"ndim\", 0) == 4:\n            mask = mask[:, :, -1:, :]\n"
     "        return self.w_o(merge_heads(attention(q, k, v, mask)))"),                 # a 4-D mask's last row only
    ("10", "    angle = np.arange(T)[:, None] / 10000.0 ** (np.arange(0, d, 2) / d)",
     "    angle = (np.arange(T, dtype=np.float32)[:, None] / np.float32(10000.0) ** (np.arange(0, d, 2, "
     "dtype=np.float32) / np.float32(d))).astype(np.float64)"),                       # angles in float32
    ("15", "    return ys[:, 1:]", "    return np.stack([ys[:, t] for t in range(1, ys.shape[1])], 1)"),  # max_len = 0
    ("24", "    chunks = [[c.copy() for c in np.array_split(np.asarray(a).ravel(), R)] for a in arrays]",
     "    chunks = [[c.astype(float) for c in np.array_split(np.asarray(a).ravel(), R)] for a in arrays]"),  # float64
    ("01", "        order, seen = [], set()\n",
     "        if self.creator is None:\n            self.grad = np.ones_like(self.data) if grad is None else "
     "np.array(grad, dtype=self.data.dtype)\n            return\n        order, seen = [], set()\n"),  # a leaf replaces
    ("01", "        grads = {id(self): np.ones_like(self.data) if grad is None else np.asarray(grad, dtype=self.data.dtype)}\n"
           "        for t in reversed(order):           # each tensor after every tensor that used it\n"
           "            g = grads.pop(id(t), None)",
     "        grads = {id(self.data): np.ones_like(self.data) if grad is None else np.asarray(grad, dtype=self.data.dtype)}\n"
     "        for t in reversed(order):\n            g = grads.pop(id(t.data), None)"),   # keyed by the arrays
    ("04", "    target = np.asarray(target)\n", "    target = np.asarray(target).clip(0, V - 1)\n"),  # clipped first
    ("15", "            hypotheses += [(tokens, s / lp(len(tokens))) for tokens, s in open_]",
     "            hypotheses += [(tokens, s / lp(t)) for tokens, s in open_]"),               # t, unset at max_len 0
    ("15", "        hypotheses = list(finished)\n        if not done or not hypotheses:\n"
           "            hypotheses += [(tokens, s / lp(len(tokens))) for tokens, s in open_]",
     "        hypotheses = []\n        if not done or not finished:\n"
     "            hypotheses += [(tokens, s / lp(len(tokens))) for tokens, s in open_]\n"
     "        hypotheses += list(finished)"),                                            # open ones first in a tie
    ("15", "            logits[:, [pad, bos] + ([eos] if t == 0 else [])] = -np.inf",
     "            logits[:, [pad, bos] + ([eos] if t == 0 and max_len > 1 else [])] = -np.inf"),  # eos at max_len 1
    ("20", "    bp = 1.0 if c > r else math.exp(1 - r / c)", "    bp = 1.0 if c >= r - 1 else math.exp(1 - r / c)"),
    ("21", "    return {name: sum(s[name] for s in states) / len(states) for name in states[0]}",
     "    if len(states) == 1:\n        return states[0]\n"
     "    return {name: sum(s[name] for s in states) / len(states) for name in states[0]}"),  # one state itself
    ("24", "    return [np.concatenate(c).reshape(shape) for c in chunks], sent",
     "    return [np.concatenate(c).reshape(shape) if shape else np.concatenate(c) for c in chunks], sent"),  # 0-d
    ("02", "n == 1 and grad.shape[i] != 1", "n == 1 and grad.shape[i] > 1"),              # a size-0 axis kept
    ("04", "np.where(real, target, 0)[..., None]", "target[..., None]"),                   # pad read as a class
    ("05", "            for name, value in vars(module).items():\n",
     "            for name, value in vars(module).items():\n                if name.startswith(\"_\"):\n"
     "                    continue\n"),                                                  # _names skipped
    ("07", "        axes = tuple(range(grad.ndim - 1))", "        axes = (0, 1)[:grad.ndim - 1]"),  # two axes at most
    ("08", "    return np.tril(np.ones((T, T), dtype=bool))",
     "    return np.tril(np.ones((T, T), dtype=bool)) if T else np.ones((1, 1), bool)"),   # T = 0
    ("09", "    return x.reshape(B, T, h, d // h).transpose(0, 2, 1, 3)",
     "    return x.reshape(B, T, h, -1).transpose(0, 2, 1, 3)"),                         # −1 fails at T = 0
    ("15", "                if not np.isfinite(s):\n                    break\n", ""),      # banned ones kept
    ("17", "    top = max(norms)", "    top = max(norms[-3:])"),                             # the last three only
    ("19", "    linear = lambda n_in, n_out: n_in * n_out + n_out   # noqa: E731",
     "    d_model, d_ff = __import__(\"numpy\").int32(d_model), __import__(\"numpy\").int32(d_ff)\n"
     "    linear = lambda n_in, n_out: n_in * n_out + n_out   # noqa: E731"),          # 32-bit counts
    ("21", "    return {name: sum(s[name] for s in states) / len(states) for name in states[0]}",
     "    return {name: (sum(s[name] for s in states) / len(states)).astype(states[0][name].dtype) "
     "for name in states[0]}"),                                                     # integers truncated
    ("22", "            p.grad = p.grad / max(tokens, 1)", "            p.grad = p.grad / tokens"),  # 0/0
    ("23", "        m_new = np.maximum(m, s.max(axis=1, keepdims=True))",
     "        m_new = np.maximum(m, s.max(axis=1, keepdims=True)) if start == 0 else m"),  # the first block's only
    ("03", "        if not np.all(np.abs(analytic - numeric) <= atol + rtol * np.abs(numeric)):",
     "        if not np.allclose(analytic, numeric, atol, rtol):"),                    # tolerances swapped by position
    ("13", "    order, seen, stack = [], set(), [(out, False)]\n",
     "    best, seen, stack = 0, set(), [(out, 0)]\n    while stack:\n        t, c = stack.pop()\n"
     "        if id(t) in seen or t.creator is None:\n            continue\n        seen.add(id(t))\n"
     "        c += isinstance(t.creator, MatMul)\n        best = max(best, c)\n"
     "        stack.extend((x, c) for x in t.creator.inputs)\n    return best\n"
     "    order, seen, stack = [], set(), [(out, False)]\n"),                          # the first path found
    ("22", "        n = int((np.asarray(tgt_out) != pad).sum())\n"
           "        (cross_entropy(model(src, tgt_in), tgt_out, smoothing, pad) * n).backward()",
     "        n = int((np.asarray(tgt_out) != model.pad).sum())\n"
     "        (cross_entropy(model(src, tgt_in), tgt_out, smoothing, model.pad) * n).backward()"),  # the model's pad
    ("09", "        return self.w_o(merge_heads(attention(q, k, v, mask)))",
     "        if getattr(mask, \"ndim\", 0) == 4:\n            mask = mask[:, :1]\n"
     "        return self.w_o(merge_heads(attention(q, k, v, mask)))"),                 # head 0's mask for all
    ("20", "        c, r = c + len(hyp), r + len(ref)", "        c, r = c + len(hyp), r + max(len(ref), 1)"),
    ("15", "            nxt = np.where(done, pad, nxt)", "            nxt = np.where(ys[:, -1] == eos, pad, nxt)"),  # one pad
    ("15", "            nxt = np.where(done, pad, nxt)", "            nxt = np.where(done & (nxt != eos), pad, nxt)"),  # eos again
    ("24", "            chunks[(r + 1) % R][i] += chunk\n            sent[r] += chunk.size",
     "            chunks[(r + 1) % R][i] += chunk\n            sent[r] += chunk.nbytes // 8"),  # bytes / 8, not entries
    ("01", "                    t.grad = g.copy() if t.grad is None else t.grad + g",
     "                    if t.grad is None:\n                        t.grad = g.copy()\n                    else:\n"
     "                        t.grad += g"),                                               # .grad changed in place
    ("01", "                    t.grad = g.copy() if t.grad is None else t.grad + g",
     "                    t.grad = g if t.grad is None else t.grad + g"),               # .grad shared, not its own
]


@pytest.mark.parametrize("number,old,new", TRIALS, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(TRIALS)])
def test_a_wrong_answer_a_learner_trial_wrote_fails_the_grader(number, old, new):
    source = track.path(track.SOLUTIONS, number).read_text()
    assert source.count(old) == 1, "the trial's change no longer applies to the solution"
    wrong = mutants.Mutant(number, "trial", 0, "trial", old, new, source.replace(old, new))
    with mutants.solved_track() as d:
        assert mutants.verdict(wrong, d).startswith("killed"), f"passes the grader:\n{new}"

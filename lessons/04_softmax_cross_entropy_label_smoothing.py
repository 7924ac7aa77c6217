# %% [markdown]
# # Lesson 4 — Softmax, cross-entropy and label smoothing (Section 5.4)
#
# A model that predicts the next token outputs one score (a *logit*) per token of the
# vocabulary; the softmax of lesson 3 turns them into probabilities. Computed as written,
# $e^{x_i}$ overflows for logits in the hundreds, so it is computed after subtracting
# $\max_j x_j$, which leaves the result unchanged. The **cross-entropy** of logits $x$ against
# the true class $t$ is $-\log \mathrm{softmax}(x)_t$, and its gradient is simply
# $\mathrm{softmax}(x) - \mathrm{onehot}(t)$.
#
# **Label smoothing** ($\epsilon_{ls} = 0.1$ in the paper) trains against a softened target
# instead, $q = (1 - \epsilon)\,\mathrm{onehot}(t) + \epsilon / V$ for $V$ classes, and the
# gradient becomes $\mathrm{softmax}(x) - q$. The paper reports that it "hurts perplexity, as
# the model learns to be more unsure, but improves accuracy and BLEU score". The first effect
# shows on a single example below: the model stops short of certainty, and so keeps a
# likelihood cost on the true class. The second needs real data and real decoding: Table 3's
# row (D) reports it, and lesson 19 tries it on a small task.
#
# **Teaches:** `F.cross_entropy`, `label_smoothing`, `label_smoothed_loss`; the stable
# softmax, cross-entropy, label smoothing, padding.
#
# **Uses:** softmax, reverse-mode differentiation.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
import minitensor.functional as F
from lessonkit import Results, checks, show, smoke

results = Results("04")

x = mt.tensor(np.array([[1000.0, 999.0, -5.0]]))
print("softmax of huge logits, no overflow:", F.softmax(x).numpy().round(4))
checks.agree(F.softmax(x).numpy()[0, :2], [1 / (1 + np.exp(-1)), 1 / (1 + np.e)], "softmax of (1000, 999, -5)",
             atol=1e-6)
checks.cross_entropy_gradient_is_softmax_minus_onehot(lambda x, t: F.cross_entropy(x, t, reduction="none"))
print("d CE / d logits = softmax - onehot: checked on random logits")

# %% [markdown]
# ## With smoothing the best logits stay finite
#
# Fit free logits for one example of $V = 6$ classes by plain gradient descent: after each
# backward, move the logits against their gradient, $z \leftarrow z - \eta \nabla_z L$.
# Without smoothing the loss keeps falling as the true logit runs away from the others; with
# $\epsilon = 0.1$ the optimum is $p_{\text{true}} = 1 - \epsilon + \epsilon / V$, where the
# gradient $\mathrm{softmax}(z) - q$ is zero, and the logits stop.

# %%
V = 6
steps = 200 if smoke() else 2000
gaps, nll = {}, {}
for eps in (0.0, 0.1):
    z = mt.tensor(np.zeros((1, V)), requires_grad=True)
    gaps[eps] = []
    for _ in range(steps):
        z.grad = None
        F.cross_entropy(z, mt.tensor(np.array([2])), label_smoothing=eps).backward()
        z.data -= 1.0 * z.grad.data                     # one step of gradient descent, rate 1
        gaps[eps].append(z.numpy()[0, 2] - np.delete(z.numpy()[0], 2).mean())
    p = F.softmax(z).numpy()[0, 2]
    nll[eps] = -np.log(p)
    print(f"eps={eps}: p(true) = {p:.4f}, logit gap {gaps[eps][-1]:.2f}, -log p(true) = {nll[eps]:.4f}")
    results[f"p_true/eps {eps}"] = float(p)
floor = -np.log(1 - 0.1 + 0.1 / V)
checks.agree(F.softmax(z).numpy()[0, 2], 1 - 0.1 + 0.1 / V, "p(true) with ε = 0.1 vs the smoothed optimum", atol=1e-3)
checks.always_lower([gaps[0.1][-1] + 1], [gaps[0.0][-1]], "logit gap: smoothed + 1 vs unsmoothed")  # the gap keeps growing
checks.always_lower([nll[0.0]], [floor - 1e-3], "−log p(true): unsmoothed vs the smoothed optimum's")
checks.between([nll[0.1]], floor - 1e-3, floor + 1e-3, "−log p(true) with smoothing: the optimum's likelihood cost")
results.finding(f"one example, {V} classes, {steps} steps of gradient descent: without smoothing the true class "
                f"reaches p = {results['p_true/eps 0.0']:.4f} and its logit keeps moving away (gap "
                f"{gaps[0.0][-1]:.1f}); with ε = 0.1 it stops at p = {results['p_true/eps 0.1']:.4f} "
                f"(1 − ε + ε/V = {1 - 0.1 + 0.1 / V:.4f}), a likelihood cost of {nll[0.1]:.3f} nats.")

# %% tags=["fold"]
fig, ax = plt.subplots(figsize=(5, 3))
for eps, g in gaps.items():
    ax.plot(g, label=f"label smoothing {eps}")
ax.set_xlabel("gradient-descent step")
ax.set_ylabel("true logit - mean of others")
ax.legend()
show(fig, "04", "label_smoothing_logit_gap.png")

# %% [markdown]
# ## The loss the Transformer trains with
#
# Sentences differ in length. A batch holds them as one rectangular array, and the shorter
# ones are filled up with a *pad* token (id 0 here) that is not part of the text. The loss
# must skip those positions. `transformer.label_smoothed_loss` is the cross-entropy with
# $\epsilon$, pad positions ignored, averaged over the real (non-pad) target tokens. The check
# computes that average by hand on random logits, then scrambles the logits at the pad
# positions: the loss must not move.

# %%
from transformer import label_smoothed_loss  # noqa: E402

loss = checks.pad_positions_are_ignored(lambda lg, tg: label_smoothed_loss(lg, tg, pad_id=0, smoothing=0.1), pad_id=0)
print(f"loss per real token {loss:.4f}: equal to the hand-computed average, blind to the pad positions")

# %% [markdown]
# ## Exercise
#
# Exercise 04 of the track, `lessons/exercises/ex04_cross_entropy.py`, asks for `LogSoftmax`
# with its backward, and the label-smoothed `cross_entropy` built from your engine's operations.
# `python lessons/check.py 04` grades it and, at the first case it gets wrong, shows the input,
# what it expected and what it got.

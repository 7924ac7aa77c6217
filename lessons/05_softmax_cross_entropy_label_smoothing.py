# %% [markdown]
# # Lesson 5 — Softmax, cross-entropy and label smoothing (Section 5.4)
#
# softmax(x)_i = exp(x_i) / Σ_j exp(x_j), computed after subtracting max(x) so exp never
# overflows. Cross-entropy of logits x against class t is -log softmax(x)_t, and its gradient
# is simply softmax(x) - onehot(t).
#
# **Label smoothing** (ε = 0.1 in the paper) trains against a softened target:
# q = (1-ε)·onehot(t) + ε/V. The paper notes it "hurts perplexity, as the model learns to be
# more unsure, but improves accuracy and BLEU". The first effect shows on a single example
# below: the model stops short of certainty, and so keeps a likelihood cost on the true class.
# The second needs real data and real decoding: Table 3's row (D) reports it, and lesson 19
# tries it on a small task.

# %%
import numpy as np

import minitensor as mt
import minitensor.functional as F
from transformer.lesson import figure_dir, smoke

x = mt.tensor(np.array([[1000.0, 999.0, -5.0]]))
print("softmax of huge logits, no overflow:", F.softmax(x).numpy().round(4))

from transformer import checks  # noqa: E402

checks.cross_entropy_gradient_is_softmax_minus_onehot(lambda x, t: F.cross_entropy(x, t, reduction="none"))
print("d CE / d logits = softmax - onehot: checked")

# %% [markdown]
# ## With smoothing the best logits stay finite
#
# Fit free logits for one example. Without smoothing the loss keeps falling as the true logit
# runs away; with ε = 0.1 the optimum is p_true = 1 - ε + ε/V, and the logits stop.

# %%
V = 6
steps = 200 if smoke() else 2000
results, nll = {}, {}
for eps in (0.0, 0.1):
    z = mt.tensor(np.zeros((1, V)), requires_grad=True)
    opt = mt.optim.SGD([z], lr=1.0)
    gaps = []
    for _ in range(steps):
        loss = F.cross_entropy(z, mt.tensor(np.array([2])), label_smoothing=eps)
        opt.zero_grad()
        loss.backward()
        opt.step()
        gaps.append(z.numpy()[0, 2] - np.delete(z.numpy()[0], 2).mean())
    p = F.softmax(z).numpy()[0, 2]
    results[eps] = gaps
    nll[eps] = -np.log(p)
    print(f"eps={eps}: p(true) = {p:.4f}, logit gap {gaps[-1]:.2f}, -log p(true) = {nll[eps]:.4f}")
checks.agree(F.softmax(z).numpy()[0, 2], 1 - 0.1 + 0.1 / V, "p(true) with ε = 0.1 vs the smoothed optimum", atol=1e-3)
checks.always_lower([results[0.1][-1] + 1], [results[0.0][-1]], "logit gap: smoothed + 1 vs unsmoothed")  # the gap keeps growing
checks.always_lower([nll[0.0]], [-np.log(1 - 0.1 + 0.1 / V) - 1e-3], "−log p(true): unsmoothed vs the smoothed floor")
checks.always_lower([-np.log(1 - 0.1 + 0.1 / V) - 1e-3], [nll[0.1]], "−log p(true): the smoothed floor vs smoothed")  # a likelihood cost

# %% [markdown]
# ## The loss the Transformer trains with
#
# `transformer.label_smoothed_loss` = cross entropy with ε, pad positions ignored, normalised
# by the number of real (non-pad) target tokens. The check computes that average by hand on
# random logits, and then scrambles the logits at the pad positions: the loss must not move.

# %%
from transformer import label_smoothed_loss  # noqa: E402

loss = checks.pad_positions_are_ignored(lambda lg, tg: label_smoothed_loss(lg, tg, pad_id=0, smoothing=0.1), pad_id=0)
print(f"loss per real token {loss:.4f}: equal to the hand-computed average, blind to the pad positions")

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(5, 3))
for eps, gaps in results.items():
    ax.plot(gaps, label=f"label smoothing {eps}")
ax.set_xlabel("SGD step")
ax.set_ylabel("true logit - mean of others")
ax.legend()
fig.tight_layout()
fig.savefig(figure_dir("05") / "label_smoothing_logit_gap.png")
print("saved", figure_dir("05") / "label_smoothing_logit_gap.png")

# %% [markdown]
# ## Exercise
#
# Write `softmax_backward` yourself (the backward of softmax): the stub and what it must
# do are in `lessons/exercises/05_softmax_backward.py`. Then `python lessons/check.py 05` grades it with the
# package's own checks, and shows the smallest input it gets wrong, if any.

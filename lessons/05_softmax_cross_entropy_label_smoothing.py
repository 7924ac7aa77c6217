# %% [markdown]
# # Lesson 5 — Softmax, cross-entropy and label smoothing (Section 5.4)
#
# softmax(x)_i = exp(x_i) / Σ_j exp(x_j), computed after subtracting max(x) so exp never
# overflows. Cross-entropy of logits x against class t is -log softmax(x)_t, and its gradient
# is simply softmax(x) - onehot(t).
#
# **Label smoothing** (ε = 0.1 in the paper) trains against a softened target:
# q = (1-ε)·onehot(t) + ε/V. The paper notes it "hurts perplexity, as the model learns to be
# more unsure, but improves accuracy and BLEU". We see both effects below.

# %%
import numpy as np

import minitensor as mt
import minitensor.functional as F
from transformer.lesson import figure_dir, smoke

x = mt.tensor(np.array([[1000.0, 999.0, -5.0]]))
print("softmax of huge logits, no overflow:", F.softmax(x).numpy().round(4))

logits = mt.tensor(np.random.default_rng(0).standard_normal((4, 6)), requires_grad=True)
target = mt.tensor(np.array([1, 0, 5, 2]))
F.cross_entropy(logits, target, reduction="sum").backward()
expected = F.softmax(logits).numpy() - np.eye(6)[target.numpy()]
assert np.allclose(logits.grad.numpy(), expected)
print("d CE / d logits = softmax - onehot: checked")

# %% [markdown]
# ## With smoothing the best logits stay finite
#
# Fit free logits for one example. Without smoothing the loss keeps falling as the true logit
# runs away; with ε = 0.1 the optimum is p_true = 1 - ε + ε/V, and the logits stop.

# %%
V = 6
steps = 200 if smoke() else 2000
results = {}
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
    print(f"eps={eps}: p(true) = {p:.4f}, logit gap {gaps[-1]:.2f}")
assert abs(F.softmax(z).numpy()[0, 2] - (1 - 0.1 + 0.1 / V)) < 1e-3   # the smoothed optimum
assert results[0.0][-1] > results[0.1][-1] + 1

# %% [markdown]
# ## The loss the Transformer trains with
#
# `transformer.label_smoothed_loss` = cross entropy with ε, pad positions ignored, normalised
# by the number of real (non-pad) target tokens.

# %%
from transformer import label_smoothed_loss

lg = mt.tensor(np.zeros((1, 4, V)))
tg = mt.tensor(np.array([[3, 4, 0, 0]]))  # two real tokens, two pads
print("uniform logits, loss per real token:", label_smoothed_loss(lg, tg, pad_id=0).item(), "= log V =", np.log(V))
assert abs(label_smoothed_loss(lg, tg, pad_id=0).item() - np.log(V)) < 1e-6

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

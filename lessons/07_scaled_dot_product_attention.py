# %% [markdown]
# # Lesson 7 — Scaled dot-product attention and masks (Section 3.2.1, equation 1)
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\left(\frac{QK^\top}{\sqrt{d_k}}\right) V$$
#
# Each query takes a weighted average of the
# values; the weights say how well the query matches each key. Masks (bool, True = may attend)
# remove keys: padding (keys that are not real tokens) and causal (keys in the future).
#
# Why divide by $\sqrt{d_k}$? Footnote 4 works out that for random q, k with independent unit-variance
# entries, q·k = Σ q_i k_i has variance d_k. Section 3.2.1 draws the consequence: for large d_k
# the dot products grow large, "pushing the softmax function into regions where it has
# extremely small gradients". Dividing by √d_k brings the variance back to 1. We measure it.

# %%
import numpy as np

import minitensor as mt
import minitensor.functional as F
from transformer import checks
from transformer.lesson import figure_dir, smoke

rng = np.random.default_rng(0)
B, T, d = 2, 5, 8
q, k, v = (mt.tensor(rng.standard_normal((B, T, d)), requires_grad=True) for _ in range(3))
out, w = F.scaled_dot_product_attention(q, k, v, return_weights=True)
checks.agree(w.numpy().sum(-1), np.ones((B, T)), "attention weights summed over the keys", atol=1e-12)
print("weights sum to 1 over the keys:", w.numpy().sum(-1)[0].round(6))

causal = mt.tensor(np.tril(np.ones((T, T), bool)))
lengths = np.array([5, 3])
padding = mt.tensor((np.arange(T)[None, :] < lengths[:, None])[:, None, :])  # (B, 1, T): per-sequence keys
_, wc = F.scaled_dot_product_attention(q, k, v, mask=causal, return_weights=True)
_, wp = F.scaled_dot_product_attention(q, k, v, mask=padding, return_weights=True)
print("causal weights of sequence 0 (row: query, column: key):\n", wc.numpy()[0].round(2))


def attend(q_, k_, v_, m):
    return F.scaled_dot_product_attention(q_, k_, v_, mask=m, return_weights=True)


checks.attention_respects_mask(attend, causal.numpy())    # no weight on the future, rows sum to 1
checks.attention_respects_mask(attend, padding.numpy())   # none on sequence 1's two pad keys
print("masked keys get exactly 0 and the allowed ones sum to 1, for both masks")
for name, m in (("none", None), ("causal", causal), ("padding", padding)):
    checks.passes_gradcheck(lambda a, b_, c: F.scaled_dot_product_attention(a, b_, c, mask=m), [q, k, v], f"attention, mask {name}")
print("gradcheck passes with no mask, a causal mask and a padding mask")

# %% [markdown]
# ## The effect of the 1/√d_k scaling on softmax gradients

# %%
dims = [4, 16, 64, 256] if smoke() else [4, 16, 64, 256, 1024]
rows = []
for dk in dims:
    qs, ks = rng.standard_normal((200, dk)), rng.standard_normal((32, dk))
    for scaled in (False, True):
        s = qs @ ks.T / (np.sqrt(dk) if scaled else 1.0)
        p = np.exp(s - s.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        # size of the softmax Jacobian diag(p) - p pᵀ, averaged: small = vanishing gradients
        jac = np.mean([np.abs(np.diag(pi) - np.outer(pi, pi)).sum() for pi in p[:50]])
        rows.append((dk, scaled, s.std(), p.max(1).mean(), jac))
for dk, scaled, sd, pmax, jac in rows:
    print(f"d_k={dk:5d} {'scaled  ' if scaled else 'unscaled'} score std {sd:6.2f}  mean max weight {pmax:.3f}  |Jacobian| {jac:.3f}")
unscaled_big = [r for r in rows if r[0] == dims[-1] and not r[1]][0]
scaled_big = [r for r in rows if r[0] == dims[-1] and r[1]][0]
checks.always_lower([unscaled_big[4]], [scaled_big[4] / 2], f"|Jacobian| at d_k = {dims[-1]}: unscaled vs half of scaled")

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, axes = plt.subplots(1, 3, figsize=(10, 3))
for ax, (title, weights) in zip(axes, (("no mask", w), ("causal", wc), ("padding (seq 1)", wp))):
    im = ax.imshow(weights.numpy()[1 if "padding" in title else 0], vmin=0, vmax=1, cmap="viridis")
    ax.set_title(title)
    ax.set_xlabel("key")
axes[0].set_ylabel("query")
fig.colorbar(im, ax=axes, label="attention weight", shrink=0.9)
fig.savefig(figure_dir("07") / "attention_masks.png", bbox_inches="tight")
fig, ax = plt.subplots(figsize=(5, 3))
for scaled in (False, True):
    ax.semilogx([r[0] for r in rows if r[1] == scaled], [r[4] for r in rows if r[1] == scaled], marker="o",
                label="scaled by 1/√d_k" if scaled else "unscaled")
ax.set_xlabel("d_k")
ax.set_ylabel("mean |softmax Jacobian|")
ax.legend()
fig.tight_layout()
fig.savefig(figure_dir("07") / "scaling_and_gradients.png")
print("saved", figure_dir("07"))

# %% [markdown]
# ## Exercise
#
# Write `causal_mask`, `attention` yourself (the causal mask, and attention with it): the stub and what it must
# do are in `lessons/exercises/07_causal_mask_and_attention.py`. Then `python lessons/check.py 07` grades it with the
# package's own checks, and shows the smallest input it gets wrong, if any.

# %% [markdown]
# # Lesson 8 — Scaled dot-product attention and masks (Section 3.2.1, equation 1)
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\left(\frac{QK^\top}{\sqrt{d_k}}\right) V$$
#
# Each query takes a weighted average of the values; the weights say how well the query
# matches each key. Masks (bool, True = may attend) remove keys: padding (keys that are not
# real tokens) and causal (keys in the future).
#
# Why divide by $\sqrt{d_k}$? Footnote 4 of the paper works out that for random $q$ and $k$
# with independent entries of mean 0 and variance 1, $q \cdot k = \sum_i q_i k_i$ has
# variance $d_k$. Section 3.2.1 offers the consequence as a suspicion, not a measurement: for
# large $d_k$ the dot products grow large, "pushing the softmax function into regions where it
# has extremely small gradients".
# Dividing by $\sqrt{d_k}$ brings the variance back to 1. We measure it.
#
# **Teaches:** `F.scaled_dot_product_attention`, `return_weights`, `causal_mask`,
# `padding_mask`; attention, masks.
#
# **Uses:** softmax, batched matrix products, gradient checking, padding.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
import minitensor.functional as F
from transformer import causal_mask, padding_mask
from lessonkit import Results, checks, show, smoke

results = Results("08")
rng = np.random.default_rng(0)
B, T, d = 2, 5, 8
q, k, v = (mt.tensor(rng.standard_normal((B, T, d)), requires_grad=True) for _ in range(3))
out, w = F.scaled_dot_product_attention(q, k, v, return_weights=True)
checks.agree(w.numpy().sum(-1), np.ones((B, T)), "attention weights summed over the keys", atol=1e-12)
print("weights sum to 1 over the keys:", w.numpy().sum(-1)[0].round(6))

# %% [markdown]
# `causal_mask(T)` is the lower triangle of a $T \times T$ array: query $i$ may see keys
# $j \le i$. `padding_mask(ids, pad_id)` marks the keys that are real tokens; it is shaped
# (batch, 1, 1, keys) for the model's (batch, head, query, key) scores, so without heads we
# drop one axis.

# %%
causal = causal_mask(T)
ids = mt.tensor(np.array([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]]))        # sequence 1 has 2 pad tokens
padding = padding_mask(ids, 0)[:, 0]                                # (B, 1, T): per-sequence keys
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

# %% tags=["fold"]
fig, axes = plt.subplots(1, 3, figsize=(10, 3))
for ax, (title, weights) in zip(axes, (("no mask", w), ("causal", wc), ("padding (seq 1)", wp))):
    im = ax.imshow(weights.numpy()[1 if "padding" in title else 0], vmin=0, vmax=1, cmap="viridis")
    ax.set_title(title)
    ax.set_xlabel("key")
axes[0].set_ylabel("query")
fig.colorbar(im, ax=axes, label="attention weight", shrink=0.9)
show(fig, "08", "attention_masks.png")

# %% [markdown]
# ## The effect of the $1/\sqrt{d_k}$ scaling on softmax gradients
#
# For random queries and keys, the scores' spread and the size of the softmax's Jacobian
# $\mathrm{diag}(p) - p p^\top$ (lesson 3), averaged over queries: a small Jacobian means
# small gradients for everything before the softmax.

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
results["jacobian_size"] = {f"d_k {r[0]}, {'scaled' if r[1] else 'unscaled'}": r[4] for r in rows}
results.finding(f"random queries and keys, d_k = {dims[-1]}: unscaled scores have a standard deviation of "
                f"{unscaled_big[2]:.1f}, the largest weight averages {unscaled_big[3]:.2f} and the softmax Jacobian's "
                f"size {unscaled_big[4]:.3f}; divided by √d_k: {scaled_big[2]:.2f}, {scaled_big[3]:.2f} and "
                f"{scaled_big[4]:.3f}.")

# %% tags=["fold"]
fig, ax = plt.subplots(figsize=(5, 3))
for scaled in (False, True):
    ax.semilogx([r[0] for r in rows if r[1] == scaled], [r[4] for r in rows if r[1] == scaled], marker="o",
                label="scaled by 1/√d_k" if scaled else "unscaled")
ax.set_xlabel("d_k")
ax.set_ylabel("mean |softmax Jacobian|")
ax.legend()
show(fig, "08", "scaling_and_gradients.png")

# %% [markdown]
# ## Exercise
#
# Exercise 08 of the track, `lessons/exercises/ex08_attention.py`, asks for `softmax`,
# `causal_mask` and `attention` with masks, on your engine. `python lessons/check.py 08` grades
# it and, at the first case it gets wrong, shows the input, what it expected and what it got.

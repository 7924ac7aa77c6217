# %% [markdown]
# # Lesson 9 — Multi-head attention (Section 3.2.2)
#
# $$\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \ldots, \mathrm{head}_h) W^O,
# \qquad \mathrm{head}_i = \mathrm{Attention}(Q W^Q_i, K W^K_i, V W^V_i)$$
#
# Each head works in $d_k = d_{\text{model}} / h$ dimensions, so $h$ heads cost about as much
# as one full-width head. In `transformer.MultiHeadAttention` the $h$ matrices $W^Q_i$ sit
# side by side in one $d_{\text{model}} \times d_{\text{model}}$ matrix `w_q`; reshaping its
# output to (B, h, T, $d_k$) gives all heads at once.
#
# One difference from the paper's equations: our projections are `nn.Linear` layers, so each
# has a bias ($b^Q$, $b^K$, $b^V$, $b^O$) where the paper writes plain products. Three of them
# matter; the key bias cannot: $q \cdot (k_j + b^K) = q \cdot k_j + q \cdot b^K$ adds the same
# number to every score of a query, and the softmax ignores a shift shared by a whole row. So
# $b^K$ gets exactly no gradient.
#
# **Teaches:** `MultiHeadAttention`, `split_heads`, `merge_heads`, `store_attention`;
# multi-head attention, the key bias.
#
# **Uses:** attention, masks, modules, Adam, gradient checking, training and evaluation modes.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from minitensor import nn, optim
from transformer import MultiHeadAttention
from lessonkit import Results, checks, show, smoke, spread

results = Results("09")
mt.manual_seed(0)
d_model, h = 16, 4
mha = MultiHeadAttention(d_model, h).astype(np.float64).eval()
x = np.random.default_rng(0).standard_normal((2, 6, d_model))
checks.heads_are_concatenated(mha, x)  # the batched code against one head at a time, from the equations
print("the batched implementation equals Concat(head_1..head_h) W^O")

heads = mha.split_heads(mt.tensor(x))
print(f"split_heads: {x.shape} -> {heads.shape} (batch, heads, positions, d_k)")
checks.agree(mha.merge_heads(heads).numpy(), x, "merge_heads(split_heads(x)) vs x", atol=0)
checks.agree(heads.numpy()[:, 1], x[..., 4:8], "head 1: columns 4..7 of every position", atol=0)

xt = mt.tensor(x[:, :3], requires_grad=True)
checks.passes_gradcheck(lambda a, *ps: mha(a, a, a), [xt] + mha.parameters(), "multi-head attention")
print("gradcheck passes for the input and all", len(mha.parameters()), "parameter tensors")
ratio = checks.key_bias_gets_no_gradient(mha, x)
results["key_bias_gradient_ratio"] = ratio
print(f"|dL/db_K| / |dL/dW_K| = {ratio:.1e}: the key bias gets no gradient (round-off only)")

# %% [markdown]
# ## When one head is not enough
#
# A task that needs two lookups with opposite signs: $y_t = x_{t-1} - x_{t+1}$, for inputs
# $x_t \sim N(0, 1)$. To make the argument exact, queries and keys see only the positions (a
# learned vector $e_t$ each, an `nn.Embedding`) and the values only the inputs:
# $v_j = W^V a\, x_j$. One head then outputs $\sum_j p_{tj} v_j$ with weights $p_{tj} \ge 0$
# fixed by the positions, so after the linear readout $y_t = c \sum_j p_{tj} x_j$:
# $x_{t-1}$ and $x_{t+1}$ get coefficients of the same sign (the sign of $c$). Its expected
# squared error is at least $(1 - c\,p_{t,t-1})^2 + (1 + c\,p_{t,t+1})^2 \ge 1$ for $c > 0$
# (symmetrically for $c < 0$): one head cannot do better than a loss of 1, half of what
# predicting 0 scores. Two heads can reach 0: one reads $t-1$, the other $t+1$, and $W^O$
# subtracts. Same width, same training; 1 head against 2, over several seeds.

# %%
T, D = 8, 16
steps = 300 if smoke() else 1000
seeds = list(range(3) if smoke() else range(5))


def train(n_heads, seed):
    """Final loss (mean of the last 20 steps), the loss curve and the attention weights."""
    mt.manual_seed(seed)
    layer = MultiHeadAttention(D, n_heads)
    readin, positions, readout = nn.Linear(1, D), nn.Embedding(T, D), nn.Linear(D, 1)
    params = layer.parameters() + readin.parameters() + positions.parameters() + readout.parameters()
    opt = optim.Adam(params, lr=3e-2)
    rng = np.random.default_rng(seed)
    where = mt.tensor(np.tile(np.arange(T), (32, 1)))
    curve = []
    for _ in range(steps):
        xs = rng.standard_normal((32, T, 1)).astype(np.float32)
        ys = np.zeros_like(xs)
        ys[:, 1:-1] = xs[:, :-2] - xs[:, 2:]
        e = positions(where)                                  # queries and keys: positions only
        pred = readout(layer(e, e, readin(mt.tensor(xs))))    # values: inputs only
        loss = ((pred - mt.tensor(ys))[:, 1:-1] ** 2).mean()  # the two ends have one neighbour
        opt.zero_grad()
        loss.backward()
        opt.step()
        curve.append(loss.item())
    layer.store_attention = True
    layer(e, e, readin(mt.tensor(xs)))
    return float(np.mean(curve[-20:])), curve, layer.attention.numpy()[0]  # weights (heads, T, T)


runs = {n: [train(n, s) for s in seeds] for n in (1, 2)}
final = {n: [r[0] for r in rs] for n, rs in runs.items()}
for n in (1, 2):
    print(f"{n} head{'s' if n > 1 else ''}: final loss per seed {np.round(final[n], 4).tolist()}")
results["final_loss_1_head"] = final[1]
results["final_loss_2_heads"] = final[2]
checks.always_lower(final[2], final[1], "2 heads vs 1 head")  # in every seed, smoke mode too
checks.between(final[1], 0.9, np.inf, "1 head: the final loss, bounded below by 1 (up to sampling noise)")

# %% [markdown]
# Which neighbour does each head of the 2-head model read? With `store_attention = True` a
# layer keeps its last weights in `.attention`. For the queries $t = 1, \ldots, T-2$, the mean
# weight each head puts on $t-1$ and on $t+1$:

# %%
inner = np.arange(1, T - 1)
split = []
for seed, (_, _, att) in zip(seeds, runs[2]):
    prev, nxt = att[:, inner, inner - 1].mean(axis=1), att[:, inner, inner + 1].mean(axis=1)
    a = int(np.argmax(prev))  # the head that reads t-1 most
    split.append((prev[a], nxt[1 - a]))
    print(f"seed {seed}: head {a} puts {prev[a]:.2f} on t-1, head {1 - a} puts {nxt[1 - a]:.2f} on t+1")
results["weight_on_t_minus_1_of_its_head"] = [s[0] for s in split]
results["weight_on_t_plus_1_of_the_other"] = [s[1] for s in split]
results.finding(f"y_t = x_(t-1) - x_(t+1), {steps} updates, {len(seeds)} seeds: 2 heads end at a loss of "
                f"{spread(final[2])} (mean, min–max), 1 head at {spread(final[1])}, at its bound of 1 (predicting 0 "
                f"scores 2); "
                f"in the 2-head model one head puts {spread([s[0] for s in split])} of its weight on t-1 "
                f"and the other {spread([s[1] for s in split])} on t+1.")

# %% tags=["fold"]
fig, axes = plt.subplots(1, 4, figsize=(14, 3.2), gridspec_kw={"width_ratios": [1.4, 1, 1, 1]})
for n, color in ((1, "tab:red"), (2, "tab:blue")):
    curves = np.array([r[1] for r in runs[n]])
    axes[0].fill_between(range(steps), curves.min(0), curves.max(0), color=color, alpha=0.25)
    axes[0].plot(curves.mean(0), color=color, label=f"{n} head{'s' if n > 1 else ''} (mean, min–max)")
axes[0].set_yscale("log")
axes[0].set_xlabel("update")
axes[0].set_ylabel("squared error")
axes[0].legend(fontsize=7, loc="upper right")
att2, att1 = runs[2][0][2], runs[1][0][2]
panels = [(att2[0], "2 heads: head 0"), (att2[1], "2 heads: head 1"), (att1[0], "1 head")]
vmax = max(a.max() for a, _ in panels)  # one scale for the three maps, fitted to the weights
for ax, (a, title) in zip(axes[1:], panels):
    im = ax.imshow(a, vmin=0, vmax=vmax, cmap="viridis")
    ax.set_title(f"{title} (seed {seeds[0]})", fontsize=9)
    ax.set_xlabel("key position")
axes[1].set_ylabel("query position")
fig.colorbar(im, ax=axes[1:], label="attention weight", shrink=0.9)
show(fig, "09", "heads.png")

# %% [markdown]
# ## Exercise
#
# Exercise 09 of the track, `lessons/exercises/ex09_multi_head.py`, asks for `split_heads`,
# `merge_heads` and your `MultiHeadAttention`. `python lessons/check.py 09` grades it and, at
# the first case it gets wrong, shows the input, what it expected and what it got.

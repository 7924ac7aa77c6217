# %% [markdown]
# # Lesson 8 — Multi-head attention (Section 3.2.2)
#
# MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O with head_i = Attention(Q W^Q_i, K W^K_i, V W^V_i).
# Each head works in d_k = d_model / h dimensions, so h heads cost about as much as one
# full-width head. In `transformer.MultiHeadAttention` the h matrices W^Q_i sit side by side in
# one d_model × d_model `w_q`; reshaping its output to (B, h, T, d_k) gives all heads at once.

# %%
import numpy as np

import minitensor as mt
from transformer import MultiHeadAttention
from transformer.lesson import figure_dir, smoke

mt.manual_seed(0)
d_model, h = 16, 4
mha = MultiHeadAttention(d_model, h).astype(np.float64).eval()
x = np.random.default_rng(0).standard_normal((2, 6, d_model))
out = mha(mt.tensor(x), mt.tensor(x), mt.tensor(x)).numpy()

# the same, one head at a time, straight from the equations
Wq, Wk, Wv, Wo = (getattr(mha, n).weight.numpy() for n in ("w_q", "w_k", "w_v", "w_o"))
bq, bk, bv, bo = (getattr(mha, n).bias.numpy() for n in ("w_q", "w_k", "w_v", "w_o"))
dk = d_model // h
heads = []
for i in range(h):
    cols = slice(i * dk, (i + 1) * dk)
    Q, K, V = x @ Wq[:, cols] + bq[cols], x @ Wk[:, cols] + bk[cols], x @ Wv[:, cols] + bv[cols]
    s = Q @ K.transpose(0, 2, 1) / np.sqrt(dk)
    p = np.exp(s - s.max(-1, keepdims=True))
    heads.append((p / p.sum(-1, keepdims=True)) @ V)
assert np.allclose(out, np.concatenate(heads, -1) @ Wo + bo)
print("the batched implementation equals Concat(head_1..head_h) W^O")

xt = mt.tensor(x[:, :3], requires_grad=True)
assert mt.gradcheck(lambda a, *ps: mha(a, a, a), [xt] + mha.parameters())
print("gradcheck passes for the input and all", len(mha.parameters()), "parameter tensors")

# %% [markdown]
# ## Heads can specialise
#
# A task where the answer at position t needs *two* lookups: y_t = x_{t-1} + x_{t+1}. We train
# a 2-head and a 1-head attention layer of the same width. One softmax has to share its weight
# between the two neighbours and cannot keep their values apart; two heads get two separate
# averages. In the full run two heads reach a loss near 0.05 and one head stays near 0.4.

# %%
from minitensor import nn, optim
from transformer.embedding import sinusoidal_table

T, D = 8, 16
steps = 150 if smoke() else 800
pos = mt.tensor(sinusoidal_table(T, D))


def train(n_heads):
    mt.manual_seed(1)
    layer = MultiHeadAttention(D, n_heads)
    readin, readout = nn.Linear(1, D), nn.Linear(D, 1)
    params = layer.parameters() + readin.parameters() + readout.parameters()
    opt = optim.Adam(params, lr=3e-3)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        xs = rng.standard_normal((32, T, 1)).astype(np.float32)
        ys = np.zeros_like(xs)
        ys[:, 1:-1] = xs[:, :-2] + xs[:, 2:]
        hdn = readin(mt.tensor(xs)) + pos
        pred = readout(layer(hdn, hdn, hdn))
        loss = ((pred - mt.tensor(ys))[:, 1:-1] ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    layer.store_attention = True
    layer.eval()
    hdn = readin(mt.tensor(xs)) + pos
    layer(hdn, hdn, hdn)
    return loss.item(), layer.attention.numpy()[0]


loss2, att2 = train(2)
loss1, att1 = train(1)
print(f"final loss: 2 heads {loss2:.4f}, 1 head {loss1:.4f}")
if not smoke():
    assert loss2 < loss1

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, axes = plt.subplots(1, 3, figsize=(9, 3))
for ax, a, title in zip(axes, [att2[0], att2[1], att1[0]], ["2 heads: head 0", "2 heads: head 1", "1 head"]):
    ax.imshow(a, vmin=0, vmax=1, cmap="viridis")
    ax.set_title(title)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
fig.tight_layout()
fig.savefig(figure_dir("08") / "heads.png")
print("saved", figure_dir("08") / "heads.png")

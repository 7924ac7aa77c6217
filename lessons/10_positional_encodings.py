# %% [markdown]
# # Lesson 10 — Positional encodings and scaled embeddings (Sections 3.4, 3.5)
#
# Attention is blind to order: permute the inputs and the outputs permute the same way. The
# paper adds to each token's embedding a vector that depends on its position only,
#
# $$PE_{(pos,\, 2i)} = \sin\left(\frac{pos}{10000^{2i/d_{\text{model}}}}\right), \qquad
# PE_{(pos,\, 2i+1)} = \cos\left(\frac{pos}{10000^{2i/d_{\text{model}}}}\right),$$
#
# with wavelengths from $2\pi$ to $10000 \cdot 2\pi$. Section 3.5 says two things about it:
#
# 1. For any fixed offset $k$, $PE_{pos+k}$ is a linear function of $PE_{pos}$ (each (sin, cos)
#    pair is rotated by an angle that depends on $k$ only). The authors hypothesised this
#    "would allow the model to easily learn to attend by relative positions".
# 2. They chose sinusoids over learned position vectors, which did as well in Table 3
#    (row E), "because it may allow the model to extrapolate to sequence lengths longer than
#    the ones encountered during training".
#
# The first is a property of the table, which we check here. The second is a hypothesis about
# training, which lesson 18 tests once we can train a whole model. Section 3.4 adds a detail
# about the embeddings the positions are added to: "we multiply those weights by
# $\sqrt{d_{\text{model}}}$". The paper gives no reason; we measure one.
#
# **Teaches:** `sinusoidal_table`, `PositionalEncoding`, `ScaledEmbedding`; positional
# encodings, the linear offset property, learned positions, embeddings times the square root
# of the model width.
#
# **Uses:** modules, attention, initialisation.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from transformer import PositionalEncoding, ScaledEmbedding, sinusoidal_table
from lessonkit import Results, checks, show, smoke, spread

results = Results("10")
seeds = [0, 1] if smoke() else [0, 1, 2]
table = sinusoidal_table(100, 32).astype(np.float64)
for k in (1, 7, 30):
    residual = checks.offset_is_linear(table, k)  # one matrix M with PE(pos + k) = PE(pos) M for all pos
    print(f"PE(pos + {k}) = PE(pos) @ M_{k}: largest residual {residual:.1e} over {len(table) - k} positions")
sim = table @ table.T
print("dot products of PE(50) with PE(50), PE(51), PE(55), PE(70):", sim[50, [50, 51, 55, 70]].round(2))
checks.always_lower(list(sim[50, [55, 70]]), [sim[50, 51]], "PE(50)·PE(50 + k): k = 5, 20 vs k = 1")

# %% [markdown]
# The residuals are float32 round-off (the table is built in float32): one matrix per offset
# does it for every position. The dot
# products show a second side of the table: near positions have similar encodings. With
# itself, $PE(pos) \cdot PE(pos) = d_{\text{model}}/2 = 16$ (each sin², cos² pair sums to 1);
# one position away it is a little less, and 5 or 20 positions away less than at 1 (the check
# above).
#
# `PositionalEncoding` adds the table's first $T$ rows to a (B, T, $d_{\text{model}}$) input;
# with `kind="learned"` the table is a trained parameter instead (Table 3, row E).

# %%
pe = PositionalEncoding(32, max_len=100)
learned = PositionalEncoding(32, max_len=100, kind="learned")
zeros = mt.tensor(np.zeros((1, 7, 32), np.float32))
checks.agree(pe(zeros).numpy()[0], sinusoidal_table(7, 32), "PositionalEncoding added to zeros vs the table", atol=0)
print("trained parameters: sinusoidal", len(pe.parameters()), "| learned", len(learned.parameters()),
      f"(a {learned.table.shape} table)")

# %% tags=["fold"]
fig, ax = plt.subplots(figsize=(6, 3.2))
im = ax.imshow(sinusoidal_table(60, 64).T, aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
ax.set_xlabel("position")
ax.set_ylabel("dimension")
ax.set_title("sinusoidal positional encoding, d_model 64")
fig.colorbar(im, ax=ax, label="PE value")
show(fig, "10", "sinusoidal_table.png")

# %% [markdown]
# ## Why the embeddings are multiplied by $\sqrt{d_{\text{model}}}$
#
# The paper says how the factor is applied, not why, and it does not say how the embedding
# matrix is initialised. This implementation's `ScaledEmbedding` starts from
# $N(0, 1/d_{\text{model}})$, so a token's row has length about 1. The sinusoidal encoding has
# $d/2$ sines and $d/2$ cosines, each with mean square ½: rows of length $\sqrt{d/2}$. Added as
# they are, the position would drown the token. Multiplied by $\sqrt{d_{\text{model}}}$, a
# token's row has length about $\sqrt{d}$, comparable to the position's. What the first layer
# sees is their sum; the measure of "drowned" is how alike the sums are for two *different*
# tokens at the same position (cosine similarity: 1 means the layer cannot tell them apart).

# %%
cos = {}
for dm in (64, 512):
    pe_rows = sinusoidal_table(50, dm)
    for scaled in (False, True):
        sims = []
        for seed in seeds:
            mt.manual_seed(seed)
            emb = ScaledEmbedding(1000, dm)
            ids = np.random.default_rng(seed).integers(0, 1000, (2, 50))
            with mt.no_grad():
                e = emb(mt.tensor(ids)).numpy() / (1.0 if scaled else emb.scale)
            a, b = e[0] + pe_rows, e[1] + pe_rows
            sims.append(float(np.mean((a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1))))
        token_len = float(np.linalg.norm(e, axis=-1).mean())
        key = f"d_model {dm}, {'× √d_model' if scaled else 'unscaled'}"
        cos[key] = sims
        results[f"cosine/{key}"] = sims
        print(f"{key:>24}: token row length {token_len:5.2f}, position row length "
              f"{np.linalg.norm(pe_rows, axis=-1).mean():5.2f}, cosine of two tokens' inputs at one position {spread(sims)}")
checks.between(cos["d_model 512, unscaled"], 0.9, 1.0, "unscaled, d_model 512: cosine of two tokens at one position")
checks.between(cos["d_model 512, × √d_model"], -1.0, 0.5, "scaled, d_model 512: cosine of two tokens at one position")
results.finding(f"at d_model 512, two different tokens at the same position enter the encoder with cosine similarity "
                f"{spread(cos['d_model 512, unscaled'])} without the √d_model factor (the position drowns the token) "
                f"and {spread(cos['d_model 512, × √d_model'])} with it.")

# %% [markdown]
# ## Exercise
#
# Exercise 10 of the track, `lessons/exercises/ex10_positions.py`, asks for `sinusoidal_table`,
# the `Embedding` lookup with its backward, and the scaled embeddings plus positions.
# `python lessons/check.py 10` grades it and, at the first case it gets wrong, shows the input,
# what it expected and what it got.

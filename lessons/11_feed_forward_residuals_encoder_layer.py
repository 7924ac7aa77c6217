# %% [markdown]
# # Lesson 11 — Feed-forward, residuals and the encoder layer (Sections 3.1, 3.3, 5.4)
#
# $$\mathrm{FFN}(x) = \max(0,\ x W_1 + b_1) W_2 + b_2 \qquad (2)$$
#
# is the same two-layer network applied at every position separately,
# $d_{\text{model}} \to d_{ff} \to d_{\text{model}}$: 512 → 2048 → 512 in the base model. An encoder layer is two
# sub-layers, self-attention and then the FFN, each wrapped in a residual connection and a
# LayerNorm (lesson 7). Section 5.4 puts dropout (lesson 6) on each sub-layer's output,
# "before it is added to the sub-layer input and normalized", so a sub-layer computes
#
# $$\mathrm{LayerNorm}(x + \mathrm{Dropout}(\mathrm{Sublayer}(x))).$$
#
# That is `transformer.Residual`, which computes the formula as written,
# `self.norm(x + self.dropout(sublayer(x)))`. (A training run swaps in a fused form,
# `transformer/fused.py`: the same values, one kernel each way on a GPU.) Pre-norm, $x + \mathrm{Dropout}(\mathrm{Sublayer}(\mathrm{LayerNorm}(x)))$,
# is an option (`norm_first=True`): later work (Xiong et al., 2020) found it trains without
# the warm-up a post-norm model needs, and lesson 16 puts that to the test.
#
# **Teaches:** `PositionwiseFeedForward`, `Residual`, `EncoderLayer`, `Encoder`,
# `TransformerConfig`, `norm_first`, `named_modules`; the feed-forward sub-layer, residual
# dropout, the encoder layer, pre-norm, influence maps.
#
# **Uses:** multi-head attention, masks, padding, layer normalisation, residual blocks,
# dropout, gradient checking.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from minitensor import nn
from transformer import Encoder, EncoderLayer, PositionwiseFeedForward, Residual, TransformerConfig, padding_mask
from lessonkit import Results, checks, show, smoke

results = Results("11")
rng = np.random.default_rng(0)
mt.manual_seed(0)
ffn = PositionwiseFeedForward(8, 32).astype(np.float64)
x = mt.tensor(rng.standard_normal((2, 5, 8)), requires_grad=True)
# position-wise: each position's output depends on that position's input only
checks.sees_only(checks.influence(ffn, x.numpy()[:1]), np.eye(5, dtype=bool), "FFN")
checks.passes_gradcheck(lambda a, *ps: ffn(a), [x] + ffn.parameters(), "FFN")
print("FFN is position-wise and passes gradcheck")

for norm_first in (False, True):
    layer = EncoderLayer(8, 2, 32, dropout=0.0, norm_first=norm_first).astype(np.float64).eval()
    ids = mt.tensor(np.array([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]]))
    mask = padding_mask(ids, 0)
    xs = mt.tensor(rng.standard_normal((2, 5, 8))[:, :4], requires_grad=True)
    checks.passes_gradcheck(lambda a, *ps: layer(a, mask[..., :4]), [xs] + layer.parameters(), "encoder layer")
    print(f"encoder layer ({'pre' if norm_first else 'post'}-norm) passes gradcheck")

# %% [markdown]
# Where the layer's dropouts are: one in each `Residual`, on the sub-layer's output. (The
# FFN's own dropout, on its inner activations, is not in the paper and defaults to 0.)
# `named_modules()` walks a module and everything inside it, each with its dotted name, as
# `named_parameters()` (lesson 5) walks the weights.

# %%
layer = EncoderLayer(8, 2, 32, dropout=0.1)
print("sub-layer 1:", type(layer.sub1).__name__, "around self-attention; sub-layer 2:", type(layer.sub2).__name__,
      "around the FFN")
checks.agree([isinstance(layer.sub1, Residual), isinstance(layer.sub2, Residual)], [True, True],
             "both sub-layers are Residual connections", atol=0)
drops = [name for name, mod in layer.named_modules() if isinstance(mod, nn.Dropout) and mod.p > 0]
print("dropouts with p > 0:", drops)
checks.agree(sorted(drops) == ["sub1.dropout", "sub2.dropout"], True, "the active dropouts are sub1.dropout and sub2.dropout", atol=0)

# %% [markdown]
# ## Who influences whom
#
# In a 2-layer encoder (`Encoder`, a stack of `EncoderLayer`s built from a `TransformerConfig`),
# every output position can depend on every real input position (attention mixes them). No
# real output depends on a padded input: the mask removes pad keys, so attention never reads
# them, and the FFN works on each position alone. A pad position still has an output, and that
# output depends on its own input, carried along the residual path, as well as on the real
# inputs its query attends to; it never reaches a real position, and every later attention
# masks it as a key too. We measure the influence map
# $|\partial\, \mathrm{out}_t / \partial\, \mathrm{in}_s|$ with one backward per output position.

# %%
T = 6
cfg = TransformerConfig(20, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=2, dropout=0.0)
mt.manual_seed(0)
enc = Encoder(cfg).astype(np.float64).eval()
ids = mt.tensor(np.array([[4, 5, 6, 7, 0, 0]]))   # 4 real tokens, 2 pads
mask = padding_mask(ids, 0)
influence = checks.influence(lambda h: enc(h, mask), rng.standard_normal((1, T, 16)))
print(np.round(influence, 3))
real = np.arange(T) < 4
# a real output: every real input, no pad input; a pad's output: every real input and its own
checks.sees_only(influence, real[None, :] | np.eye(T, dtype=bool), "encoder")
results["pads_on_real_outputs"] = float(influence[real][:, ~real].max())
results["pad_on_its_own_output"] = float(np.diag(influence)[~real].min())
results.finding(f"A 2-layer encoder, 4 real tokens and 2 pads: each real output depends on all 4 real inputs and on "
                f"neither pad (largest influence of a pad on a real output: {results['pads_on_real_outputs']:g}); a "
                f"pad's output depends on the real inputs and on its own input (influence at least "
                f"{results['pad_on_its_own_output']:.3g}, carried by the residual path).")

# %% tags=["fold"]
fig, ax = plt.subplots(figsize=(4, 3.5))
im = ax.imshow(influence, cmap="viridis")
ax.set_xlabel("input position s (4, 5 are padding)")
ax.set_ylabel("output position t")
ax.set_title("|d out_t / d in_s|")
fig.colorbar(im)
show(fig, "11", "encoder_influence.png")

# %% [markdown]
# ## Exercise
#
# Exercise 11 of the track, `lessons/exercises/ex11_encoder_layer.py`, asks for the feed-forward
# network, the post-norm residual sublayer and your `EncoderLayer`. `python lessons/check.py 11`
# grades it and, at the first case it gets wrong, shows the input, what it expected and what it
# got.

# %% [markdown]
# # Lesson 12 — The decoder and causal masking (Sections 3.1, 3.2.3)
#
# A decoder layer has three sub-layers, each a `Residual` as in lesson 11: masked
# self-attention over the target so far, encoder-decoder attention (queries from the decoder,
# keys and values from the encoder's output, the *memory*), and the FFN. The causal mask of
# lesson 8 in the self-attention, "combined with fact that the output embeddings are offset
# by one position, ensures that the predictions for position $i$ can depend only on the known
# outputs at positions less than $i$". That is what will let training feed a whole target at
# once while generation goes one token at a time; lesson 14 builds the one-position offset.
#
# **Teaches:** `DecoderLayer`, `Decoder`, `target_mask`, `caches`; the decoder layer,
# encoder-decoder attention, causal masking, incremental decoding with a cache.
#
# **Uses:** the encoder layer, multi-head attention, masks, padding, influence maps, gradient
# checking.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from transformer import Decoder, DecoderLayer, TransformerConfig, causal_mask, padding_mask, target_mask
from lessonkit import Results, checks, show, smoke

results = Results("12")
rng = np.random.default_rng(0)
mt.manual_seed(0)
layer = DecoderLayer(8, 2, 16, dropout=0.0).astype(np.float64).eval()
y = mt.tensor(rng.standard_normal((2, 4, 8)), requires_grad=True)
mem = mt.tensor(rng.standard_normal((2, 3, 8)), requires_grad=True)
tm = target_mask(mt.tensor(np.array([[4, 5, 6, 7], [4, 5, 0, 0]])), 0)   # causal, and no pad keys
sm = padding_mask(mt.tensor(np.array([[4, 5, 6], [4, 0, 0]])), 0)
print("target mask of sentence 1 (2 real tokens, 2 pads):\n", tm.numpy()[1, 0].astype(int))
checks.passes_gradcheck(lambda a, m, *ps: layer(a, m, tm, sm), [y, mem] + layer.parameters(), "decoder layer")
print("decoder layer passes gradcheck (target and memory masks in place)")

# %% [markdown]
# ## Who influences whom
#
# A stack of 2 decoder layers (`Decoder`) over 7 target positions and a memory of 5. The
# influence map of lesson 11, $|\partial\, \mathrm{out}_t / \partial\, \mathrm{in}_s|$: output
# $t$ must depend on the inputs $s \le t$, every one of them, and on nothing later.

# %%
T, S, D = 7, 5, 16
cfg = TransformerConfig(12, d_model=D, n_heads=2, d_ff=32, n_decoder_layers=2, dropout=0.0)
mt.manual_seed(0)
decoder = Decoder(cfg).astype(np.float64).eval()
memory = mt.tensor(rng.standard_normal((1, S, D)))
influence = checks.influence(lambda h: decoder(h, memory, causal_mask(T), None), rng.standard_normal((1, T, D)))
print(np.round(influence, 3))
checks.sees_only(influence, np.tril(np.ones((T, T), dtype=bool)), "decoder")
results["largest_influence_of_a_later_position"] = float(np.triu(influence, 1).max())

# %% tags=["fold"]
fig, ax = plt.subplots(figsize=(4, 3.5))
im = ax.imshow(influence, cmap="Greys")
fig.colorbar(im, ax=ax, label="|d out_t / d in_s|")
ax.set_xlabel("input position s")
ax.set_ylabel("output position t")
ax.set_title("causality of the decoder")
show(fig, "12", "decoder_causality.png")

# %% [markdown]
# ## Incremental decoding gives the same states
#
# Generation adds one position at a time. Recomputing every earlier position at every step
# would repeat work: with the causal mask, the earlier positions' keys and values never
# change. So each self-attention keeps them in a cache (one dict per layer, filled by the
# layer itself), and a step computes only the new position's query, key and value. Its
# query may see every cached key, so a single new position needs no mask at all. The result
# is the same as the whole target at once.

# %%
y_all = mt.tensor(rng.standard_normal((1, T, D)))
full = decoder(y_all, memory, causal_mask(T), None).numpy()
caches = [{} for _ in decoder.layers]
steps = [decoder(y_all[:, t:t + 1], memory, None, None, caches=caches).numpy() for t in range(T)]
err = checks.agree(np.concatenate(steps, 1), full, "cached one-position steps vs the whole target at once", atol=1e-12)
print(f"one position at a time with a cache == the whole target at once (to {err:.1e}); "
      f"the first layer's cache holds keys of shape {caches[0]['self']['k'].shape}")
results["cached_vs_whole_max_difference"] = err

# %% [markdown]
# ## Exercise
#
# Exercise 12 of the track, `lessons/exercises/ex12_decoder_layer.py`, asks for your
# `DecoderLayer`, and its cached `step` for decoding one position at a time.
# `python lessons/check.py 12` grades it and, at the first case it gets wrong, shows the input,
# what it expected and what it got.

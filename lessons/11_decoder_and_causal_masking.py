# %% [markdown]
# # Lesson 11 — The decoder and causal masking (Sections 3.1, 3.2.3)
#
# A decoder layer has three sub-layers: masked self-attention over the target so far,
# encoder-decoder attention (queries from the decoder, keys and values from the encoder
# output), and the FFN. The causal mask, "combined with the fact that the output embeddings are
# offset by one position, ensures that the predictions for position i can depend only on the
# known outputs at positions less than i". That is what lets training feed the whole target at
# once (teacher forcing) while generation goes one token at a time.

# %%
import numpy as np

import minitensor as mt
from transformer import DecoderLayer, Transformer, TransformerConfig, padding_mask, target_mask
from transformer import checks
from transformer.lesson import figure_dir, smoke

rng = np.random.default_rng(0)
mt.manual_seed(0)
cfg = TransformerConfig(12, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=2, dropout=0.0)
model = Transformer(cfg).eval()
src = rng.integers(3, 12, (1, 5))
tgt = rng.integers(3, 12, (1, 7))
base = model(src, tgt).numpy()
changes = np.zeros((7, 7))
for t in range(7):           # change the target token at position t ...
    altered = tgt.copy()
    altered[0, t] = 3 + (altered[0, t] - 2) % 9
    out = model(src, altered).numpy()
    changes[t] = np.abs(out - base).max(-1)[0]   # ... and see which output positions move
print(np.round(changes, 3))
# output s may depend on target tokens t <= s only, and does on each of them
checks.sees_only(changes.T, np.tril(np.ones((7, 7), dtype=bool)), "decoder")

layer = DecoderLayer(8, 2, 16, dropout=0.0).astype(np.float64).eval()
y = mt.tensor(rng.standard_normal((2, 4, 8)), requires_grad=True)
mem = mt.tensor(rng.standard_normal((2, 3, 8)), requires_grad=True)
tm = target_mask(mt.tensor(np.array([[4, 5, 6, 7], [4, 5, 0, 0]])), 0)
sm = padding_mask(mt.tensor(np.array([[4, 5, 6], [4, 0, 0]])), 0)
checks.passes_gradcheck(lambda a, m, *ps: layer(a, m, tm, sm), [y, mem] + layer.parameters(), "decoder layer")
print("decoder layer passes gradcheck (target and memory masks in place)")

# %% [markdown]
# ## Incremental decoding gives the same states
#
# At generation time each step adds one token. With a cache of the earlier keys and values
# (`model.new_cache()`), a step only computes the new position; the result is identical.

# %%
memory = model.encode(src)
sm = padding_mask(mt.tensor(src), 0)
full = model.decode(tgt, memory, sm).numpy()
cache = model.new_cache()
steps = [model.decode(tgt[:, t:t + 1], memory, sm, cache=cache).numpy() for t in range(7)]
checks.agree(np.concatenate(steps, 1), full, "cached one-token steps vs the whole target at once", atol=1e-5)
print("one token at a time with a cache == the whole target at once")

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(4, 3.5))
im = ax.imshow(changes, cmap="Greys")
fig.colorbar(im, ax=ax, label="largest change of the output")
ax.set_xlabel("output position that moved")
ax.set_ylabel("target position changed")
ax.set_title("causality of the decoder")
fig.tight_layout()
fig.savefig(figure_dir("11") / "decoder_causality.png")
print("saved", figure_dir("11") / "decoder_causality.png", "| smoke" if smoke() else "")

# %% [markdown]
# # Lesson 10 — Feed-forward, residuals and the encoder layer (Sections 3.1, 3.3)
#
# $$\mathrm{FFN}(x) = \max(0,\ x W_1 + b_1) W_2 + b_2 \qquad (2)$$
#
# the same two-layer network at every
# position (d_model → d_ff → d_model, 512 → 2048 → 512 in the base model).
# An encoder layer is two sub-layers, each wrapped as LayerNorm(x + Dropout(Sublayer(x))):
# self-attention, then the FFN. Pre-norm, x + Sublayer(LayerNorm(x)), is an option
# (`norm_first=True`): later work (Xiong et al., 2020) found it trains without the warm-up a
# post-norm model needs. Lesson 15 puts that to the test on the copy task.

# %%
import numpy as np

import minitensor as mt
from transformer import EncoderLayer, PositionwiseFeedForward, padding_mask
from transformer import checks
from transformer.lesson import figure_dir, smoke

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
# ## Who influences whom
#
# In a 2-layer encoder, every output position can depend on every real input position (attention
# mixes them), and on no padded one (the mask removes pad keys). We measure |∂ out_t / ∂ in_s|
# with one backward per output position.

# %%
from transformer.model import Encoder
from transformer import TransformerConfig

T = 6
cfg = TransformerConfig(20, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=2, dropout=0.0)
mt.manual_seed(0)
enc = Encoder(cfg).astype(np.float64).eval()
ids = mt.tensor(np.array([[4, 5, 6, 7, 0, 0]]))   # 4 real tokens, 2 pads
mask = padding_mask(ids, 0)
influence = checks.influence(lambda h: enc(h, mask), rng.standard_normal((1, T, 16)))
print(np.round(influence, 3))
real = np.arange(T) < 4
checks.sees_only(influence[:4], np.broadcast_to(real, (4, T)), "encoder")  # every real input, no pad input
print('smoke mode' if smoke() else 'full mode', 'done')

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(4, 3.5))
im = ax.imshow(influence, cmap="viridis")
ax.set_xlabel("input position s (4, 5 are padding)")
ax.set_ylabel("output position t")
ax.set_title("|d out_t / d in_s|")
fig.colorbar(im)
fig.tight_layout()
fig.savefig(figure_dir("10") / "encoder_influence.png")
print("saved", figure_dir("10") / "encoder_influence.png")

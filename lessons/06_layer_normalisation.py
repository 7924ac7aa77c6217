# %% [markdown]
# # Lesson 6 — Layer normalisation (Ba et al., 2016; used in Section 3.1)
#
# Every sub-layer of the Transformer is wrapped as LayerNorm(x + Sublayer(x)). LayerNorm
# normalises each position's vector to mean 0 and variance 1 over its d_model features, then
# scales and shifts by learned γ, β: y = γ ⊙ (x - μ)/√(σ² + ε) + β.
#
# Its backward is the classic tricky one: with x̂ the normalised input and ĝ = g ⊙ γ,
# dx = (ĝ - mean(ĝ) - x̂ · mean(ĝ ⊙ x̂)) / √(σ² + ε). We check it, and show the engine catches
# a version that forgets the last term.

# %%
import numpy as np

import minitensor as mt
import minitensor.functional as F
from minitensor.ops.norm import LayerNorm
from transformer.lesson import figure_dir, smoke

rng = np.random.default_rng(0)
x = mt.tensor(rng.normal(3.0, 5.0, (4, 16)), requires_grad=True)
w = mt.tensor(rng.uniform(0.5, 1.5, 16), requires_grad=True)
b = mt.tensor(rng.normal(0, 1, 16), requires_grad=True)
y = F.layer_norm(x, None, None)
print("per-row mean", y.numpy().mean(-1).round(6), "and std", y.numpy().std(-1).round(4))
assert np.allclose(y.numpy().mean(-1), 0, atol=1e-9) and np.allclose(y.numpy().std(-1), 1, atol=1e-3)
assert mt.gradcheck(F.layer_norm, [x, w, b])
print("gradcheck passes for x, gamma and beta")


class ForgetfulLayerNorm(LayerNorm):
    @staticmethod
    def backward(ctx, grad):
        xhat, r, weight = ctx.saved
        return r * (grad - grad.mean(-1, keepdims=True)), None, None


caught = not mt.gradcheck(lambda t: ForgetfulLayerNorm.apply(t, None, None, eps=1e-5), [x], raise_exception=False)
print("a backward without the x̂·mean(ĝ x̂) term is caught:", caught)
assert caught

# %% [markdown]
# ## Why normalise? Activations through a deep residual stack
#
# Stack residual blocks x ← x + ReLU(x W) with and without LayerNorm after each; without it
# the scale of x grows with depth.

# %%
depth = 12 if smoke() else 48
d = 64
h_plain = h_norm = mt.tensor(rng.standard_normal((8, d)).astype(np.float32))
scales = {"no normalisation": [], "post-norm LayerNorm": []}
for _ in range(depth):
    W = mt.tensor((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32))
    h_plain = h_plain + F.relu(h_plain @ W)
    h_norm = F.layer_norm(h_norm + F.relu(h_norm @ W))
    scales["no normalisation"].append(float(np.abs(h_plain.numpy()).mean()))
    scales["post-norm LayerNorm"].append(float(np.abs(h_norm.numpy()).mean()))
print({k: round(v[-1], 2) for k, v in scales.items()})
assert scales["no normalisation"][-1] > 10 * scales["post-norm LayerNorm"][-1]

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(5, 3))
for k, v in scales.items():
    ax.plot(range(1, depth + 1), v, label=k)
ax.set_yscale("log")
ax.set_xlabel("residual blocks")
ax.set_ylabel("mean |activation|")
ax.legend()
fig.tight_layout()
fig.savefig(figure_dir("06") / "activation_scale.png")
print("saved", figure_dir("06") / "activation_scale.png")

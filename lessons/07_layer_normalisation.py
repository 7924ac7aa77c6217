# %% [markdown]
# # Lesson 7 — Layer normalisation (Section 3.1)
#
# Every sub-layer of the Transformer is wrapped as $\mathrm{LayerNorm}(x + \mathrm{Sublayer}(x))$.
# LayerNorm (Ba et al., 2016) normalises each position's vector to mean 0 and variance 1 over
# its $d_{\text{model}}$ features, then scales and shifts it by learned $\gamma$ and $\beta$:
#
# $$\mu = \frac{1}{D}\sum_i x_i, \qquad \sigma^2 = \frac{1}{D}\sum_i (x_i - \mu)^2, \qquad
# \hat x = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}}, \qquad y = \gamma \odot \hat x + \beta .$$
#
# Its backward is the classic tricky one, because every $x_i$ reaches $y$ along three paths:
# directly, through the mean $\mu$, and through the variance $\sigma^2$. The gradient
# $\partial L / \partial x$ has one term for each. We check minitensor's with `mt.gradcheck`,
# and show that a backward which forgets the variance path is caught. (Writing the backward
# is this lesson's exercise.)
#
# **Teaches:** `F.layer_norm`, `nn.LayerNorm`, `LayerNorm`; layer normalisation, residual
# blocks.
#
# **Uses:** gradient checking, modules, Adam, initialisation.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
import minitensor.functional as F
from minitensor import nn, optim
from minitensor.ops.norm import LayerNorm
from lessonkit import Results, checks, show, smoke, spread

results = Results("07")

rng = np.random.default_rng(0)
x = mt.tensor(rng.normal(3.0, 5.0, (4, 16)), requires_grad=True)
w = mt.tensor(rng.uniform(0.5, 1.5, 16), requires_grad=True)
b = mt.tensor(rng.normal(0, 1, 16), requires_grad=True)
y = F.layer_norm(x, None, None)
print("per-row mean", y.numpy().mean(-1).round(6), "and std", y.numpy().std(-1).round(4))
checks.agree(y.numpy().mean(-1), np.zeros(len(y.numpy())), "per-row mean after LayerNorm", atol=1e-9)
checks.agree(y.numpy().std(-1), np.ones(len(y.numpy())), "per-row std after LayerNorm", atol=1e-3)
checks.passes_gradcheck(F.layer_norm, [x, w, b], "LayerNorm")
print("gradcheck passes for x, gamma and beta")

# %% [markdown]
# The op `LayerNorm` saves $\hat x$, $r = 1/\sqrt{\sigma^2 + \epsilon}$ and $\gamma$ for its
# backward. A version that keeps the direct path and the mean's path but forgets the
# variance's:


# %%
class ForgetfulLayerNorm(LayerNorm):
    @staticmethod
    def backward(ctx, grad):
        xhat, r, weight = ctx.saved
        return r * (grad - grad.mean(-1, keepdims=True)), None, None


message = checks.gradcheck_rejects(lambda t: ForgetfulLayerNorm.apply(t, None, None, eps=1e-5), [x],
                                   "a LayerNorm backward without the variance's path")
print("a backward without the variance's path is caught:", message[:140], "...")

# %% [markdown]
# ## Why normalise? A deep residual stack, trained with and without it
#
# Stack residual blocks $x \leftarrow x + \mathrm{ReLU}(x W + b)$, and compare the plain stack
# with one that puts a LayerNorm after each block (post-norm, as the paper does). First the forward pass at
# initialisation: without normalisation every block adds to x, and its scale grows with depth.
# (With LayerNorm the scale is 1 by construction, so that curve proves nothing by itself.)
# What matters is whether the deep stack can be *trained*: the same 24 blocks learn a small
# regression with Adam, several seeds each.

# %%
depth = 24
d = 32


class Block(nn.Module):
    def __init__(self, norm: bool):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d) if norm else None

    def forward(self, h):
        h = h + F.relu(self.lin(h))
        return self.norm(h) if self.norm is not None else h


class Stack(nn.Module):
    def __init__(self, norm: bool):
        super().__init__()
        self.inp, self.out = nn.Linear(4, d), nn.Linear(d, 1)
        self.blocks = nn.ModuleList([Block(norm) for _ in range(depth)])

    def forward(self, x, scales=None):
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
            if scales is not None:
                scales.append(float(np.abs(h.numpy()).mean()))
        return self.out(h)


kinds = {"no normalisation": False, "post-norm LayerNorm": True}
scales = {}
for name, norm in kinds.items():
    mt.manual_seed(0)
    scales[name] = []
    Stack(norm)(mt.tensor(rng.standard_normal((64, 4)).astype(np.float32)), scales[name])
print("mean |activation| after the last block at initialisation:", {k: f"{v[-1]:.3g}" for k, v in scales.items()})

steps = 100 if smoke() else 300
seeds = [0, 1] if smoke() else [0, 1, 2]
curves = {name: [] for name in kinds}
for name, norm in kinds.items():
    for seed in seeds:
        mt.manual_seed(seed)
        net = Stack(norm)
        opt = optim.Adam(net.parameters(), lr=1e-3)
        data = np.random.default_rng(seed)
        losses = []
        for _ in range(steps):
            xb = data.standard_normal((64, 4)).astype(np.float32)
            yb = np.sin(xb.sum(1, keepdims=True)).astype(np.float32)  # a smooth target of variance about 0.5
            with np.errstate(over="ignore", invalid="ignore"):
                loss = ((net(mt.tensor(xb)) - mt.tensor(yb)) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            losses.append(loss.item())
        curves[name].append(losses)
        print(f"{name}, seed {seed}: first loss {losses[0]:.3g}, final {np.mean(losses[-20:]):.3g}")
final = {name: [float(np.mean(c[-20:])) for c in cs] for name, cs in curves.items()}
results["final_loss_plain"] = final["no normalisation"]
results["final_loss_layernorm"] = final["post-norm LayerNorm"]
checks.always_lower(final["post-norm LayerNorm"], final["no normalisation"], "LayerNorm vs none, 24 blocks")
results.finding(f"{depth} residual blocks, {steps} Adam updates, {len(seeds)} seeds: with LayerNorm after each block "
                f"the squared error ends at {spread(final['post-norm LayerNorm'])}; without, it starts at "
                f"{spread([c[0] for c in curves['no normalisation']])} (the activations have grown with depth) and "
                f"ends at {spread(final['no normalisation'])}.")

# %% tags=["fold"]
fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
for k, v in scales.items():
    axes[0].plot(range(1, depth + 1), v, label=k)
axes[0].set_yscale("log")
axes[0].set_xlabel("residual blocks")
axes[0].set_ylabel("mean |activation| at initialisation")
axes[0].legend(fontsize=8)
for (name, cs), color in zip(curves.items(), ("tab:red", "tab:blue")):
    c = np.array(cs)
    axes[1].fill_between(range(steps), c.min(0), c.max(0), color=color, alpha=0.25)
    axes[1].plot(c.mean(0), color=color, label=f"{name} (mean, min–max of {len(seeds)} seeds)")
axes[1].set_yscale("log")
axes[1].set_xlabel("Adam update")
axes[1].set_ylabel("squared error")
axes[1].legend(fontsize=8)
fig.tight_layout()
show(fig, "07", "activation_scale.png")

# %% [markdown]
# ## Exercise
#
# Exercise 07 of the track, `lessons/exercises/ex07_layer_norm.py`, asks for LayerNorm's forward
# and backward by hand, as one `Function`. `python lessons/check.py 07` grades it and, at the
# first case it gets wrong, shows the input, what it expected and what it got.

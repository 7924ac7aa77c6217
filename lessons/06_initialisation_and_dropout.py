# %% [markdown]
# # Lesson 6 — Initialisation and dropout (Section 5.4)
#
# Two things every layer of the Transformer relies on before any training: where its weights
# start, and the regulariser the paper applies throughout, dropout.
#
# 1. The paper does not say how its weights are initialised. minitensor's `nn.Linear` starts
#    from Glorot (Xavier) uniform, $W_{ij} \sim U\left(\pm\sqrt{6 / (d_{\text{in}} + d_{\text{out}})}\right)$
#    (Glorot and Bengio, 2010), a common default. Why a scale like that matters is measured
#    below: through a deep stack of products, a badly scaled start explodes or vanishes.
# 2. Dropout (Srivastava et al., 2014) sets each entry of an activation to 0 with probability
#    $p$ during training. Section 5.4 applies it with $P_{drop} = 0.1$ at fixed places, which
#    lessons 11 and 14 point out in the model. Here: how it works, and how `train()` and
#    `eval()` turn it on and off.
#
# **Teaches:** `nn.init`, `normal_`, `nn.Dropout`, `F.dropout`, `train`,
# `eval`, `mt.no_grad`; initialisation, dropout, training and evaluation modes.
#
# **Uses:** modules, batched matrix products.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
import minitensor.functional as F
from minitensor import nn
from lessonkit import Results, checks, show, smoke, spread

results = Results("06")
seeds = [0, 1] if smoke() else [0, 1, 2]

# %% [markdown]
# ## 1. Glorot initialisation keeps the signal's size
#
# A product $y = xW$ with entries of $x$ of variance 1 and entries of $W$ of variance
# $\sigma^2$ has entries of variance $d_{\text{in}} \sigma^2$. Glorot's choice,
# $\sigma^2 = 2 / (d_{\text{in}} + d_{\text{out}})$, which is $1/d$ for a square matrix, keeps it
# at 1 through any depth; $N(0, 1)$ multiplies it by $d$ at every product, $N(0, 0.01^2)$
# divides it by $10^4 / d$. Twelve linear maps of width 256, without anything in between:

# %%
d, depth = 256, 12
inits = {"Glorot uniform": None, "N(0, 1)": 1.0, "N(0, 0.01²)": 0.01}
std = {name: [] for name in inits}
for seed in seeds:
    mt.manual_seed(seed)
    x = mt.tensor(np.random.default_rng(seed).standard_normal((64, d)).astype(np.float32))
    for name, sigma in inits.items():
        layers = [nn.Linear(d, d, bias=False) for _ in range(depth)]
        if sigma is not None:
            for lin in layers:
                nn.init.normal_(lin.weight, std=sigma)
        h, per_layer = x, []
        with mt.no_grad():                     # nothing to differentiate here: record no graph
            for lin in layers:
                h = lin(h)
                per_layer.append(float(h.numpy().astype(np.float64).std()))
        std[name].append(per_layer)
for name, runs in std.items():
    last = [r[-1] for r in runs]
    print(f"{name:>15}: std after {depth} layers {spread(last)}")
    results[f"std_after_{depth}_layers/{name}"] = last
checks.between([r[-1] for r in std["Glorot uniform"]], 0.5, 2.0, "Glorot: the std after 12 layers")
checks.between([r[-1] for r in std["N(0, 1)"]], 1e10, np.inf, "N(0, 1): the std after 12 layers")
checks.between([r[-1] for r in std["N(0, 0.01²)"]], 0, 1e-6, "N(0, 0.01²): the std after 12 layers")
results.finding(f"through {depth} linear maps of width {d} ({len(seeds)} seeds), Glorot initialisation leaves the "
                f"standard deviation at {spread(results[f'std_after_{depth}_layers/Glorot uniform'])}; "
                f"N(0, 1) takes it to {spread(results[f'std_after_{depth}_layers/N(0, 1)'])} and N(0, 0.01²) to "
                f"{spread(results[f'std_after_{depth}_layers/N(0, 0.01²)'])}.")

# %% tags=["fold"]
fig, ax = plt.subplots(figsize=(5.5, 3.2))
for name, runs in std.items():
    r = np.array(runs)
    ax.plot(range(1, depth + 1), r.mean(0), marker="o", ms=3, label=name)
    ax.fill_between(range(1, depth + 1), r.min(0), r.max(0), alpha=0.3)
ax.set_yscale("log")
ax.set_xlabel("linear maps applied")
ax.set_ylabel("std of the activations")
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
show(fig, "06", "init_scale.png")

# %% [markdown]
# ## 2. Dropout, `train()` and `eval()`
#
# `nn.Dropout(p)` zeroes each entry with probability $p$ *and divides the survivors by
# $1 - p$* ("inverted" dropout), so the expected output equals the input and nothing needs
# rescaling at test time. It acts only in training mode: every module starts in it, and
# `module.eval()` switches the module and all its sub-modules to evaluation mode, where
# dropout is the identity (`module.train()` switches back).

# %%
mt.manual_seed(0)
net = nn.ModuleList([nn.Linear(8, 8), nn.Dropout(0.5)])
x = mt.tensor(np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32))


def forward(module_list, h):
    for m in module_list:
        h = m(h)
    return h


with mt.no_grad():
    net.train()
    a, b = forward(net, x).numpy(), forward(net, x).numpy()
    net.eval()
    c, d_ = forward(net, x).numpy(), forward(net, x).numpy()
print(f"train(): two passes differ by up to {np.abs(a - b).max():.3f}, {np.mean(a == 0):.0%} of the outputs are 0; "
      f"eval(): they differ by {np.abs(c - d_).max():.1f}")
checks.between([np.abs(a - b).max()], 1e-3, np.inf, "train(): two forward passes differ")
checks.agree(c, d_, "eval(): two forward passes", atol=0)
checks.agree(a[a != 0], 2 * c[a != 0], "train(): each kept output is the eval() output divided by 1 - p = 0.5",
             atol=1e-6)

# %% [markdown]
# The expectation is kept: averaged over $n$ dropout masks, the output approaches the input,
# with an error that falls like $1/\sqrt{n}$ (the masks are independent).

# %%
x = np.random.default_rng(0).standard_normal(2000)
ns = [1, 10, 100, 1000] if smoke() else [1, 10, 100, 1000, 10000]
mt.manual_seed(0)
errors = []
for n in ns:
    mean = np.mean([F.dropout(mt.tensor(x), 0.1, True).numpy() for _ in range(n)], axis=0)
    errors.append(float(np.sqrt(np.mean((mean - x) ** 2))))
slope = float(np.polyfit(np.log(ns), np.log(errors), 1)[0])
print("masks averaged:", ns, "| RMS error:", [f"{e:.4f}" for e in errors], f"| slope on log-log axes {slope:.2f}")
checks.between([slope], -0.6, -0.4, "log error vs log masks averaged")
results["dropout_mean_error_slope"] = slope
results.finding(f"averaged over n dropout masks (p = 0.1) the output's RMS distance to the input falls with slope "
                f"{slope:.2f} on log-log axes (1/√n is −0.5): inverted dropout keeps the expectation.")

# %% [markdown]
# ## Exercise
#
# Exercise 06 of the track, `lessons/exercises/ex06_init_and_dropout.py`, asks for
# `xavier_uniform` and `Dropout` with its backward. `python lessons/check.py 06` grades it and,
# at the first case it gets wrong, shows the input, what it expected and what it got.

# %% [markdown]
# # Lesson 20 — Initialisation, embeddings × √d_model, tying, and dropout (Sections 3.4, 5.4)
#
# Four details the paper states in a sentence each, and that every lesson since 12 has used
# without asking why:
#
# 1. every weight matrix starts from Glorot (Xavier) uniform, U(±√(6 / (d_in + d_out)));
# 2. "In the embedding layers, we multiply those weights by √d_model" (3.4);
# 3. "we share the same weight matrix between the two embedding layers and the pre-softmax
#    linear transformation" (3.4);
# 4. "We apply dropout to the output of each sub-layer, before it is added to the sub-layer
#    input and normalized. In addition, we apply dropout to the sums of the embeddings and the
#    positional encodings" (5.4), which only happens in training: `model.train()` and
#    `model.eval()` switch it.
#
# Each is measured below; none needs training.

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import minitensor as mt  # noqa: E402
import minitensor.functional as F  # noqa: E402
from minitensor import nn  # noqa: E402
from transformer import Transformer, TransformerConfig, checks  # noqa: E402
from transformer.embedding import ScaledEmbedding, sinusoidal_table  # noqa: E402
from transformer.lesson import Results, figure_dir, smoke, spread  # noqa: E402

results = Results("20")
seeds = [0, 1] if smoke() else [0, 1, 2]
out = figure_dir("20")

# %% [markdown]
# ## 1. Glorot initialisation keeps the signal's size
#
# A product y = xW with x of variance 1 and W's entries of variance σ² has variance d_in·σ².
# Glorot's choice, σ² = 2 / (d_in + d_out) (= 1/d for a square matrix), keeps it at 1 through
# any depth; N(0, 1) multiplies it by d per layer, N(0, 0.01²) divides it. Twelve linear maps
# of width 256 (the paper's stacks hold 6 to 12 such products on the way to the output):

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
        with mt.no_grad():
            for lin in layers:
                h = lin(h)
                per_layer.append(float(h.numpy().astype(np.float64).std()))
        std[name].append(per_layer)
for name, runs in std.items():
    last = [r[-1] for r in runs]
    print(f"{name:>31}: std after {depth} layers {spread(last)}")
    results[f"std_after_{depth}_layers/{name}"] = last
checks.between([r[-1] for r in std["Glorot uniform"]], 0.5, 2.0, "Glorot: the std after 12 layers")
checks.between([r[-1] for r in std["N(0, 1)"]], 1e10, np.inf, "N(0, 1): the std after 12 layers")
checks.between([r[-1] for r in std["N(0, 0.01²)"]], 0, 1e-6, "N(0, 0.01²): the std after 12 layers")
results.finding(f"through {depth} linear maps of width {d} ({len(seeds)} seeds), Glorot initialisation leaves the "
                f"standard deviation at {spread(results[f'std_after_{depth}_layers/Glorot uniform'])}; "
                f"N(0, 1) takes it to {spread(results[f'std_after_{depth}_layers/N(0, 1)'])} and N(0, 0.01²) to "
                f"{spread(results[f'std_after_{depth}_layers/N(0, 0.01²)'])}.")

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
fig.tight_layout()
fig.savefig(out / "init_scale.png")
print("saved", out / "init_scale.png")

# %% [markdown]
# ## 2. Why the embeddings are multiplied by √d_model
#
# The embedding matrix is tied to the pre-softmax projection (section 3 below), so it is
# initialised like a weight matrix: N(0, 1/d_model), rows of length about 1. The sinusoidal
# encoding has d/2 sines and d/2 cosines, each with mean square ½: rows of length √(d/2).
# Added as they are, the position would drown the token. Multiplied by √d_model, a token's
# row has length about √d, comparable to the position's. What the first layer sees is their
# sum; the measure of "drowned" is how alike the sums are for two *different* tokens at the
# same position (cosine similarity: 1 means the layer cannot tell them apart).

# %%
positions = np.arange(50)
cos = {}
for dm in (64, 512):
    pe = sinusoidal_table(50, dm)
    for scaled in (False, True):
        sims = []
        for seed in seeds:
            mt.manual_seed(seed)
            emb = ScaledEmbedding(1000, dm)
            ids = np.random.default_rng(seed).integers(0, 1000, (2, 50))
            with mt.no_grad():
                e = emb(mt.tensor(ids)).numpy() / (1.0 if scaled else emb.scale)
            a, b = e[0] + pe, e[1] + pe
            sims.append(float(np.mean((a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1))))
        token_len = float(np.linalg.norm(e, axis=-1).mean())
        key = f"d_model {dm}, {'× √d_model' if scaled else 'unscaled'}"
        cos[key] = sims
        results[f"cosine/{key}"] = sims
        print(f"{key:>24}: token row length {token_len:5.2f}, position row length {np.linalg.norm(pe, axis=-1).mean():5.2f}, "
              f"cosine of two tokens' inputs at one position {spread(sims)}")
checks.between(cos["d_model 512, unscaled"], 0.9, 1.0, "unscaled, d_model 512: cosine of two tokens at one position")
checks.between(cos["d_model 512, × √d_model"], -1.0, 0.5, "scaled, d_model 512: cosine of two tokens at one position")
results.finding(f"at d_model 512, two different tokens at the same position enter the encoder with cosine similarity "
                f"{spread(cos['d_model 512, unscaled'])} without the √d_model factor (the position drowns the token) "
                f"and {spread(cos['d_model 512, × √d_model'])} with it.")

# %% [markdown]
# ## 3. One matrix, three uses
#
# With a joint BPE vocabulary (lesson 14) the source embedding, the target embedding and the
# pre-softmax projection are one V × d_model matrix. The base model's configuration with the
# paper's 37,000-token vocabulary, tied and untied:

# %%
V = 2000 if smoke() else 37000
counts = {}
for share in (True, False):
    mt.manual_seed(0)
    m = Transformer(TransformerConfig(V, share_embeddings=share))
    counts[share] = m.num_parameters()
    print(f"share_embeddings={share}: {counts[share]:,} weights", "| src is tgt embedding:", m.src_embed is m.tgt_embed)
    del m
saved = counts[False] - counts[True]
checks.agree(saved, V * 512, "weights saved by tying", atol=0)
results["base_weights_tied"] = counts[True]
results["base_weights_untied"] = counts[False]
results.finding(f"the base configuration with a {V:,}-token vocabulary has {counts[True]:,} weights with tied embeddings "
                f"and {counts[False]:,} without: tying saves exactly V·d_model = {saved:,} (the paper's Table 3 lists "
                f"65M for base).")

# %% [markdown]
# The shared matrix's gradient is the sum of what its three uses send back: autograd adds
# the contributions of every place a tensor is used (lesson 1's `+=`), so tying needs no
# special code.

# %% [markdown]
# ## 4. Dropout, `train()` and `eval()`
#
# `nn.Dropout(p)` zeroes each entry with probability p *and divides the survivors by 1 − p*
# ("inverted" dropout), so the expected output equals the input and nothing needs rescaling
# at test time. It acts only in training mode; `model.eval()` turns every dropout in the
# model off (and `greedy_decode`, `beam_search` and the evaluation code call it). Where the
# model has them:

# %%
mt.manual_seed(0)
cfg = TransformerConfig(30, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2, dropout=0.1)
model = Transformer(cfg)
drops = [name for name, mod in model.named_modules() if isinstance(mod, nn.Dropout) and mod.p > 0]
for name in drops:
    print("  ", name)
residual = [n for n in drops if ".sub" in n]
checks.agree(len(residual), 2 * 2 + 3 * 2, "residual dropouts: 2 per encoder layer, 3 per decoder layer", atol=0)

src, tgt = np.random.default_rng(0).integers(3, 30, (2, 6)), np.random.default_rng(1).integers(3, 30, (2, 5))
with mt.no_grad():
    model.train()
    a, b = model(src, tgt).numpy(), model(src, tgt).numpy()
    model.eval()
    c, d_ = model(src, tgt).numpy(), model(src, tgt).numpy()
print(f"train(): two passes differ by up to {np.abs(a - b).max():.3f}; eval(): by {np.abs(c - d_).max():.1f}")
checks.between([np.abs(a - b).max()], 1e-3, np.inf, "train(): two forward passes differ")
checks.agree(c, d_, "eval(): two forward passes", atol=0)

# %% [markdown]
# The expectation is kept: averaged over n dropout masks, the output approaches the input,
# with an error that falls like 1/√n.

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

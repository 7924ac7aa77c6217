# %% [markdown]
# # Lesson 25 — Where an update's time goes (Section 6.1, Table 2)
#
# Table 2 of the paper gives each model's training cost in floating-point operations: 3.3·10¹⁸
# for the base model. Section 6.1 says how that number was made: the training time, times the
# number of GPUs, times an estimate of each GPU's sustained single-precision rate. That is a
# cost in *machine time*, not a count of the arithmetic the model needs. Here we count the
# arithmetic, op by op, with the profiler, and time every op of an update on your own machine:
# which ops are the matrix products that FLOP counts are about, how fast they run against what
# the BLAS reaches on the same shapes alone, and how much of the update is everything else.
#
# `minitensor.profile()` is a context manager: inside it, every op's forward and backward is
# timed (each op's own time, not counting ops inside it), the optimizer's step and the
# engine's graph walk are timed as rows of their own, and what is left of the wall time, the
# Python between the ops, is one more row, so the rows add up to the update. The products of
# the ops that multiply matrices are in one table (`minitensor.flops`, each read from its op's
# formulas), which gives FLOPs.
#
# The model is profiled in the form a training run uses: `fuse(model)` gives its sub-layers
# fused forms that compute the same values in fewer ops (Q, K and V of one input in one
# product, and on a GPU the feed-forward's bias and ReLU, and the residual's dropout, sum and
# LayerNorm, in one kernel each), while the model's own code stays as the paper writes it.
#
# **Teaches:** `profile`, `flops`, `fuse`; profiling, FLOP counting, fused forms.
#
# **Uses:** the whole model, Adam, label smoothing, the learning-rate schedule.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from minitensor import profiler
from transformer import Transformer, TransformerConfig, fuse, label_smoothed_loss, paper_adam
from lessonkit import Results, checks, show, smoke

results = Results("25")


def make_update(cfg: TransformerConfig, batch: int, length: int, seed: int = 0):
    """One training update of a fresh model on a random batch (no padding), as a function; the
    model in its fused form, as a training run has it (transformer/fused.py)."""
    mt.manual_seed(seed)
    model = fuse(Transformer(cfg))
    opt = paper_adam(model.parameters())
    rng = np.random.default_rng(seed)
    src = rng.integers(3, cfg.vocab_size, (batch, length))
    tgt = rng.integers(3, cfg.vocab_size, (batch, length + 1))

    def update():
        loss = label_smoothed_loss(model(mt.tensor(src), mt.tensor(tgt[:, :-1])), mt.tensor(tgt[:, 1:]), 0, 0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return update


# the multi30k-cpu preset's model shape (d_model 256, 3+3 layers, d_ff 512, 8000 pieces), 64 sentences of 30 tokens
cfg = TransformerConfig(vocab_size=2000 if smoke() else 8000, d_model=128 if smoke() else 256, n_heads=4,
                        d_ff=256 if smoke() else 512, n_encoder_layers=3, n_decoder_layers=3)
B, T = (16, 20) if smoke() else (64, 30)
update = make_update(cfg, B, T)
update()                      # the first update allocates what the later ones reuse: not profiled
prof = mt.profile()
for _ in range(3):
    with prof:                # opened three times: the times add up, the table shows them per update
        update()
print(prof.table())

# %% [markdown]
# Read the table from the top: `Linear` and `Linears` are every matrix product of the model's
# linear layers (the attention projections, the feed-forward layers and the output projection
# onto the vocabulary), forward and backward; `Linears` is the projections of one input made in
# one product, Q, K and V in self-attention and K and V of the encoder's output (the fused form
# of the model that training runs use; the model as the paper writes it makes three products). The `GFLOP/s`
# column is what those products achieved inside the update; `BLAS alone` is what the same shapes
# reach when timed alone, one after the other, with nothing else running.
# `ScaledDotProductAttention` is attention's own two products (the scores and the weighted
# sum) with the mask and the softmax between them, in one op, so its rate is not the products'
# alone. The other ops do no matrix products: LayerNorm, dropout, the loss, the reshapes;
# `Output` passes the gradients of an op with several outputs back to it. Three rows are not
# ops, so their time (`ms`) has no forward and backward: `Adam.step` is the optimizer,
# `(autograd engine)` the graph walk of `backward()`, and `(between ops)` the Python in between.
#
# Times are shown here, never checked: they are your machine's. The rows add up to the wall
# time by construction (the project's tests check that no time is counted twice).

# %%
rows = prof.summary()
wall_ms = prof.wall_s * 1e3
share = {r["op"]: r["share"] for r in rows}
products_share = sum(r["share"] for r in rows if r["gflop"] is not None)
print(f"per update: {wall_ms / 3:.0f} ms; the ops that multiply matrices take {products_share:.0%} of it, "
      f"the Python between the ops {share[profiler.BETWEEN]:.1%}")
results["products_share"] = products_share
results["between_ops_share"] = share[profiler.BETWEEN]

# %% tags=["fold"]
top = [r for r in rows if r["op"] != profiler.BETWEEN][:8][::-1]
fig, ax = plt.subplots(figsize=(6, 3.2))
names = [r["op"] for r in top]
ops = [0 if r["region"] else 1 for r in top]  # a region (the optimizer, the graph walk) has no forward and backward
ax.barh(names, [r["forward_ms"] / 3 * o for r, o in zip(top, ops)], label="forward")
ax.barh(names, [r["backward_ms"] / 3 * o for r, o in zip(top, ops)], left=[r["forward_ms"] / 3 * o for r, o in zip(top, ops)],
        label="backward")
ax.barh(names, [r["ms"] / 3 * (1 - o) for r, o in zip(top, ops)], color="0.6", label="not an op")
ax.set_xlabel("ms per update")
ax.set_title(f"one update, d_model {cfg.d_model}, {B}×{T} tokens")
ax.legend()
show(fig, "25", "update_profile.png")

# %% [markdown]
# ## Counting the products by hand
#
# A FLOP count is only as good as the shapes it reads, so check it against the paper's
# architecture, counted by hand. With $n_s$ source and $n_t$ target tokens, one multiply-add
# being 2 FLOPs, the forward pass's linear layers cost
#
# - per encoder layer: $2 n_s (4 d^2 + 2 d\, d_{ff})$ (Q, K, V and output projections; the two feed-forward layers);
# - per decoder layer: $2 n_t (4 d^2 + 2 d^2 + 2 d\, d_{ff}) + 2 n_s \cdot 2 d^2$ (self-attention, the cross-attention's
#   Q and output on the target side, its K and V on the source side, the feed-forward layers);
# - the output projection: $2 n_t d V$;
#
# and the backward computes two products of the same size for each (one for the input's
# gradient, one for the weight's): three times the forward in all, since the embeddings are
# trained and every layer's input needs its gradient.

# %%
d, f, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
n_s, n_t = B * T, B * T
encoder = 2 * n_s * (4 * d * d + 2 * d * f)
decoder = 2 * n_t * (4 * d * d + 2 * d * d + 2 * d * f) + 2 * n_s * 2 * d * d
by_hand = 3 * (3 * encoder + 3 * decoder + 2 * n_t * d * V)
counted = (prof.rows["Linear"].flops + prof.rows["Linears"].flops) / 3
checks.agree(counted, by_hand, "the linear layers' FLOPs per update, counted by the profiler against the hand count",
             atol=0)
print(f"Linear and Linears: {counted / 1e9:.2f} GFLOP per update, as counted by hand")
results["linear_gflop_per_update"] = counted / 1e9

# %% [markdown]
# ## Table 2's 3.3·10¹⁸, counted
#
# The same count for the base model and the paper's batches: about 25,000 source and 25,000
# target tokens per update, 100,000 updates (Section 5.1–5.2). We profile one update of the
# real base model on a few sentences, take the FLOPs per token, and scale. Sentences of 25
# tokens keep attention's own products (which grow with the square of the length) small, as
# in the paper's batches, so the count per token carries over.

# %%
base = TransformerConfig.base(37000)
base_update = make_update(base, 2, 25)
with mt.profile() as base_prof:
    base_update()
per_token = sum(r.flops or 0 for r in base_prof.rows.values()) / (2 * 25)
total = per_token * 25_000 * 100_000
paper = 3.3e18
print(f"base model: {per_token / 1e6:.0f} MFLOP per target token (products, forward and backward); "
      f"25,000 tokens x 100,000 updates = {total:.2g} FLOPs, against Table 2's {paper:.2g}")
checks.between([total / paper], 0.0, 1.0, "counted FLOPs over Table 2's estimate")
results["base_mflop_per_token"] = per_token / 1e6
results["base_training_flops"] = total
results.finding(f"the base model's matrix products need {per_token / 1e6:.0f} MFLOP per target token, so 100,000 "
                f"updates of 25,000 tokens are {total:.2g} FLOPs: {total / paper:.0%} of Table 2's 3.3e18, which "
                "multiplies training time, GPUs and each GPU's rate.")

# %% [markdown]
# The count is well below the paper's figure, and that is expected: Table 2 multiplies the
# time by what the GPUs *could* have done, so its figure includes every moment the GPUs spent
# on anything but products at their peak rate: the element-wise ops, the softmax, the
# optimizer, waiting for data. The ratio is a rough share of the GPUs' capacity that went
# into the products. On your CPU the same story is in the first table: the share of the update
# the product ops take, and their rate against the BLAS's rate on the same shapes.
#
# Try it on a run of your own: `python -m transformer train ... --profile 5` prints this table
# for five updates of a real training run and saves it as `profile.json` in the run directory;
# `python examples/copy_task.py --profile 5` does the same for the copy task.

# %% [markdown]
# ## Exercise
#
# Exercise 25 of the track, `lessons/exercises/ex25_profile.py`, asks for `profile`, the calls
# and time of every `Function` of your engine while it runs. `python lessons/check.py 25` grades
# it and, at the first case it gets wrong, shows the input, what it expected and what it got.

# %% [markdown]
# # Lesson 17 — Debugging a Transformer
#
# A Transformer with a bug usually still trains: the loss falls, just not as far, or further
# than it should. Four checks catch most bugs before a long run, each shown here on the real
# model and on a planted bug it exposes:
#
# 1. the loss at initialisation is predictable: about $\log V$, plus a little;
# 2. the model can drive the loss on one small batch to nearly zero;
# 3. a training loss that looks fine can hide a bug: compare with what decoding does;
# 4. every parameter gets a gradient, and exactly the ones that should not, don't.
#
# **Teaches:** `silent_parameters`; the loss at initialisation, overfitting one batch, a
# leaking causal mask, parameters the loss does not reach.
#
# **Uses:** the whole model, the copy task, the learning-rate schedule, causal masking, the
# key bias, greedy decoding, exact match, cross-entropy, initialisation.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from minitensor import nn
from transformer import EncoderLayer, NoamSchedule, Transformer, TransformerConfig, label_smoothed_loss
from transformer import padding_mask, paper_adam
from transformer.copytask import PAD, CopyTaskSettings, make_batch, score
from transformer.decoding import greedy_decode
from lessonkit import Results, checks, show, smoke, spread

results = Results("17")
seeds = [0, 1] if smoke() else [0, 1, 2]
task = CopyTaskSettings(vocab=13, min_length=6, max_length=10, batch=64)


def small_model(vocab=13, layers=1):
    return Transformer(TransformerConfig(vocab, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=layers,
                                         n_decoder_layers=layers, dropout=0.0, max_len=task.max_length + 2))


def train(model, steps, next_batch, advance_schedule=True):
    """The loop of lesson 14 with lesson 16's schedule; ``advance_schedule=False`` plants a bug: the schedule is
    stepped once, before the loop, and never again."""
    opt = paper_adam(model.parameters())
    sched = NoamSchedule(opt, 32, warmup=100, factor=1.0)
    if not advance_schedule:
        sched.step()
    losses = []
    for step in range(steps):
        src, tgt_in, tgt_out = next_batch(step)
        loss = label_smoothed_loss(model(src, tgt_in), mt.tensor(tgt_out), PAD, smoothing=0.0)
        opt.zero_grad()
        loss.backward()
        if advance_schedule:
            sched.step()
        opt.step()
        losses.append(loss.item())
    return losses


# %% [markdown]
# ## 1. The loss at initialisation
#
# A model that knows nothing should spread its probability evenly: a cross-entropy of
# $\log V$. Ours starts with logits of standard deviation $s \approx 1$, not 0 (the decoder's
# output is layer-normalised, and the tied projection starts $N(0, 1/d_{\text{model}})$:
# lessons 10 and 14), and for logits that are Gaussian noise the expected loss is about
# $\log V + s^2/2$. A loss far above that at step 0 means something is scaled wrong. The
# planted bug: the embedding, and so the output projection, initialised $N(0, 1)$ instead of
# $N(0, 1/d_{\text{model}})$.

# %%
init = {"as built": [], "embedding N(0, 1)": []}
for vocab in (13, 8000):
    for seed in seeds:
        mt.manual_seed(seed)
        model = small_model(vocab)
        rng = np.random.default_rng(seed)
        src, tgt_in = rng.integers(3, vocab, (32, 10)), rng.integers(3, vocab, (32, 11))
        tgt_out = rng.integers(3, vocab, (32, 11))
        with mt.no_grad():
            logits = model(src, tgt_in)
            loss = label_smoothed_loss(logits, mt.tensor(tgt_out), PAD, smoothing=0.0).item()
            s = float(logits.numpy().std())
            nn.init.normal_(model.tgt_embed.weight, std=1.0)
            broken = label_smoothed_loss(model(src, tgt_in), mt.tensor(tgt_out), PAD, smoothing=0.0).item()
        print(f"V = {vocab:>5}, seed {seed}: loss {loss:.3f} | log V {np.log(vocab):.3f}, logit std {s:.2f}, "
              f"log V + s²/2 = {np.log(vocab) + s * s / 2:.3f} | with the N(0, 1) embedding: {broken:.2f}")
        checks.between([loss], np.log(vocab) - 0.05, np.log(vocab) + s * s, f"V = {vocab}: the loss at step 0")
        checks.between([broken], 2 * np.log(vocab), np.inf, f"V = {vocab}: the loss at step 0 with the N(0, 1) embedding")
        init["as built"].append({"V": vocab, "loss": loss, "log V": float(np.log(vocab)), "logit std": s})
        init["embedding N(0, 1)"].append({"V": vocab, "loss": broken})
results["initial_loss"] = init
big = [r for r in init["as built"] if r["V"] == 8000]
results.finding(f"at step 0, with V = 8000, the loss is {spread([r['loss'] for r in big])} against log V = "
                f"{np.log(8000):.2f} (logit std {spread([r['logit std'] for r in big])}); with the embedding "
                f"initialised N(0, 1) it is {spread([r['loss'] for r in init['embedding N(0, 1)'] if r['V'] == 8000])}.")

# %% [markdown]
# ## 2. Overfit one batch
#
# Sixteen fixed sequences, trained on again and again: any model worth training memorises
# them, and the loss falls to nearly 0. If it cannot, no amount of data will help. The
# planted bug is a classic: the learning-rate schedule is stepped once and then forgotten,
# so the rate stays at its step-1 value, 1/100 of the peak (equation 3 with a warm-up of 100).

# %%
one_batch = make_batch(np.random.default_rng(5), 16, task)
steps = 300
overfit = {"correct loop": [], "schedule never stepped": []}
curves = {}
for seed in seeds:
    for name, advance in (("correct loop", True), ("schedule never stepped", False)):
        mt.manual_seed(seed)
        losses = train(small_model(), steps, lambda step: one_batch, advance_schedule=advance)
        overfit[name].append(losses[-1])
        curves.setdefault(name, losses)
for name, v in overfit.items():
    print(f"{name:>23}: loss after {steps} updates on one batch {spread(v)}")
checks.between(overfit["correct loop"], 0, 0.1, "one batch, the correct loop: the final loss")
checks.between(overfit["schedule never stepped"], 0.25, np.inf, "one batch, schedule never stepped: the final loss")
results["overfit_one_batch"] = overfit
results.finding(f"on one batch of 16 sequences, {steps} updates take the loss to {spread(overfit['correct loop'])}; "
                f"with the schedule never stepped it stays at {spread(overfit['schedule never stepped'])}.")

# %% [markdown]
# ## 3. A loss that looks fine
#
# The planted bug: the decoder's self-attention gets only the padding mask, not the causal
# one (lesson 12). Under teacher forcing, position $i$ can now read `tgt_in[i + 1]`, which
# *is* the answer `tgt_out[i]`: the training loss falls as low as the correct model's. At
# test time there is no future to read (greedy decoding feeds the model one token at a
# time), and the model has learned nothing it can use. Watch both numbers, never only the
# loss.

# %%
class LeakyTransformer(Transformer):
    """The decoder sees the whole target: padding mask only, no causal mask."""

    def forward(self, src, tgt_in):
        src, tgt_in = self.as_ids(src), self.as_ids(tgt_in)
        src_mask = padding_mask(src, PAD)
        memory = self.encode(src, src_mask)
        return self.generator(self.decode(tgt_in, memory, src_mask, tgt_mask=padding_mask(tgt_in, PAD)))


leak_steps = 300 if smoke() else 600
test = make_batch(np.random.default_rng(9), 200, task)
leak = {"causal mask": {"final loss": [], "exact match": []}, "no causal mask": {"final loss": [], "exact match": []}}
for seed in seeds:
    for name, cls in (("causal mask", Transformer), ("no causal mask", LeakyTransformer)):
        mt.manual_seed(seed)
        model = cls(small_model().cfg)
        rng = np.random.default_rng(seed)
        losses = train(model, leak_steps, lambda step: make_batch(rng, task.batch, task))
        leak[name]["final loss"].append(float(np.mean(losses[-20:])))
        exact, _ = score(greedy_decode(model, test[0], max_len=test[2].shape[1]), test[2])
        leak[name]["exact match"].append(exact)
        curves.setdefault(name, losses)
for name, v in leak.items():
    print(f"{name:>15}: training loss over the last 20 updates {spread(v['final loss'])}, "
          f"greedy exact match after {leak_steps} {spread(v['exact match'])}")
checks.between(leak["no causal mask"]["final loss"], 0, 0.1, "the leaky decoder's final training loss")
checks.between(leak["no causal mask"]["exact match"], 0, 0.1, "the leaky decoder's greedy exact match")
checks.between(leak["causal mask"]["exact match"], 0.5, 1, "the correct decoder's greedy exact match")
results["causal_mask_leak"] = leak
results.finding(f"without the causal mask the training loss over the last 20 of {leak_steps} updates is "
                f"{spread(leak['no causal mask']['final loss'])} against {spread(leak['causal mask']['final loss'])} "
                f"with it, yet greedy decoding copies {spread(leak['no causal mask']['exact match'])} of 200 test "
                f"sequences against {spread(leak['causal mask']['exact match'])}.")

# %% [markdown]
# ## 4. Which parameters does the loss reach?
#
# After one backward, every parameter should have a gradient. Exactly one kind should not:
# the key projections' biases, which the softmax ignores (lesson 9), up to float32 rounding.
# `checks.silent_parameters` lists the parameters whose gradient is below a millionth of the
# largest; the check requires that list to be exactly the key biases, every one of them. The
# planted bug: an encoder layer that computes its feed-forward sub-layer and then returns the
# value from before it (`self.sub2(x, self.ffn)` with the result not assigned).

# %%
class ForgetfulEncoderLayer(EncoderLayer):
    def forward(self, x, src_mask=None):
        x = self.sub1(x, lambda h: self.self_attn(h, h, h, src_mask))
        self.sub2(x, self.ffn)                    # the bug: the result is dropped
        return x


def gradient_norms(model):
    src, tgt_in, tgt_out = make_batch(np.random.default_rng(0), 32, task)
    model.zero_grad()
    label_smoothed_loss(model(src, tgt_in), mt.tensor(tgt_out), PAD).backward()
    return {n: float(np.linalg.norm(p.grad.numpy())) if p.grad is not None else 0.0 for n, p in model.named_parameters()}


mt.manual_seed(0)
model = small_model(layers=2)
norms = gradient_norms(model)
silent = checks.exactly_these_are_silent(model, ("w_k.bias",))
print(f"{len(norms)} parameter tensors; the silent ones are the {len(silent)} key biases:", ", ".join(silent[:2]), "…")
results["silent_in_the_correct_model"] = silent
model.encoder.layers[0].__class__ = ForgetfulEncoderLayer
buggy_norms = gradient_norms(model)
try:
    checks.exactly_these_are_silent(model, ("w_k.bias",))
    raise SystemExit("the dropped feed-forward sub-layer should have been found")
except AssertionError as e:
    print("with the bug:", e)
found = [n for n in checks.silent_parameters(model) if not n.endswith("w_k.bias")]
results["silent_with_bug"] = found
results.finding(f"one backward finds the dropped feed-forward sub-layer: {len(found)} parameter tensors of "
                f"encoder layer 0 get no gradient ({', '.join(found[:2])}, …), while in the correct model only the "
                f"{len(silent)} key biases are silent.")

# %% tags=["fold"]
fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
for name, losses in curves.items():
    axes[0].semilogy(losses, label=name, lw=1)
axes[0].set_xlabel("update")
axes[0].set_ylabel("training loss")
axes[0].legend(fontsize=7)
axes[0].grid(alpha=0.3)
names = [n for n in norms if n.startswith("encoder.layers.0")]
y = np.arange(len(names))
axes[1].barh(y + 0.2, [max(norms[n], 1e-12) for n in names], height=0.4, label="correct")
axes[1].barh(y - 0.2, [max(buggy_norms[n], 1e-12) for n in names], height=0.4, label="sub-layer dropped")
axes[1].set_yticks(y, [n.removeprefix("encoder.layers.0.") for n in names], fontsize=6)
axes[1].set_xscale("log")
axes[1].set_xlabel("gradient norm, encoder layer 0 (none drawn at 1e-12)")
axes[1].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)  # below: the bars fill the panel
fig.tight_layout()
show(fig, "17", "debugging.png")

# %% [markdown]
# ## Exercise
#
# Exercise 17 of the track, `lessons/exercises/ex17_silent_parameters.py`, asks for
# `silent_parameters`, the parameters of your model that a loss does not reach.
# `python lessons/check.py 17` grades it and, at the first case it gets wrong, shows the input,
# what it expected and what it got.

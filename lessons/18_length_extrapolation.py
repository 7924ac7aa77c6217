# %% [markdown]
# # Lesson 18 — Do sinusoids extrapolate? (Section 3.5)
#
# Lesson 10 quoted the paper's reason for choosing sinusoidal positions over learned ones:
# "it may allow the model to extrapolate to sequence lengths longer than the ones
# encountered during training". The paper states it as a hope and does not test it. Now that
# a whole model trains (lesson 14) with the paper's schedule (lesson 16), we can.
#
# **Teaches:** `positional`; length extrapolation.
#
# **Uses:** positional encodings, learned positions, the copy task, the learning-rate
# schedule, teacher forcing, greedy decoding.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from transformer import NoamSchedule, Transformer, TransformerConfig, paper_adam
from transformer.copytask import CopyTaskSettings, make_batch
from transformer.decoding import greedy_decode
from transformer.loss import label_smoothed_loss
from lessonkit import Results, checks, show, smoke, spread

results = Results("18")

# %% [markdown]
# ## Does a sinusoidal model extrapolate?
#
# The copy task, trained on lengths 4–10 only and tested at length 20, once with sinusoidal
# positions and once with learned ones (`TransformerConfig(positional="learned")`). Both
# kinds of position get a table of 64 rows, so the positions past training exist: counting
# from 0, as the rest of this lesson does, training reaches position 9 of a source and the
# test runs to 19. The learned rows there were simply never trained.
#
# How to score extrapolation is the whole question. Decoded freely, a model trained on
# lengths ≤ 10 has learned to *stop* after about 10 symbols: its accuracy at length 20 would
# measure that habit, not its positions. So we score with teacher forcing (the decoder is fed
# the correct previous tokens), per target position, and forbid the end-of-sequence token
# (the prediction is the best of the 10 symbols): can the model still find the symbol at
# source position p when p is beyond anything it trained on? Guessing scores 10%.

# %%
L = 20
train_task = CopyTaskSettings(vocab=13, min_length=4, max_length=10, batch=64)
test_task = CopyTaskSettings(vocab=13, min_length=L, max_length=L)
if smoke():
    size, layers, steps, seeds = 32, 1, 300, [0, 1]
else:
    size, layers, steps, seeds = 64, 2, 500, [0, 1, 2]


def train(kind, seed):
    mt.manual_seed(seed)
    cfg = TransformerConfig(13, d_model=size, n_heads=4, d_ff=2 * size, n_encoder_layers=layers,
                            n_decoder_layers=layers, dropout=0.0, max_len=64, positional=kind)
    model = Transformer(cfg)
    opt = paper_adam(model.parameters())
    sched = NoamSchedule(opt, size, warmup=100, factor=0.5 * (64 / size) ** 0.5)
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        src, tgt_in, tgt_out = make_batch(rng, train_task.batch, train_task)
        loss = label_smoothed_loss(model(src, tgt_in), mt.tensor(tgt_out), 0, 0.0)
        opt.zero_grad()
        loss.backward()
        sched.step()
        opt.step()
    return model.eval()


def per_position_accuracy(model, seed):
    """Teacher-forced accuracy at each of the L target positions, the end token forbidden."""
    src, tgt_in, tgt_out = make_batch(np.random.default_rng(1000 + seed), 200, test_task)
    with mt.no_grad():
        logits = model(src, tgt_in).numpy()
    pred = logits[..., 3:].argmax(-1) + 3            # the best of the symbols (ids 3..12)
    return (pred[:, :L] == tgt_out[:, :L]).mean(axis=0), src


acc, free_length = {}, {}
for kind in ("sinusoidal", "learned"):
    acc[kind], free_length[kind] = [], []
    for seed in seeds:
        model = train(kind, seed)
        a, src = per_position_accuracy(model, seed)
        out = greedy_decode(model, src[:50], max_len=L + 1)
        free_length[kind].append(float(((out != 0) & (out != 2)).sum(1).mean()))  # symbols before the end token
        acc[kind].append(a)
        print(f"{kind:>10} seed {seed}: positions 0-9 {a[:10].mean():.0%}, 10-14 {a[10:15].mean():.0%}, "
              f"15-19 {a[15:].mean():.0%}; greedy decoding writes {free_length[kind][-1]:.1f} symbols of {L}")
    acc[kind] = np.array(acc[kind])

# %%
beyond = {k: acc[k][:, 10:15].mean(axis=1) for k in acc}     # per seed: positions 10-14
far = {k: acc[k][:, 15:].mean(axis=1) for k in acc}
for k in acc:
    results[f"{k}_accuracy_positions_0_9"] = acc[k][:, :10].mean(axis=1)
    results[f"{k}_accuracy_positions_10_14"] = beyond[k]
    results[f"{k}_accuracy_positions_15_19"] = far[k]
    results[f"{k}_greedy_symbols_written"] = free_length[k]
checks.always_lower(list(beyond["learned"]), list(beyond["sinusoidal"]), "learned vs sinusoidal beyond the trained lengths")
checks.between(beyond["sinusoidal"], 0.15, 1, "sinusoids: accuracy beyond the trained lengths (guessing: 0.1)")
for k in acc:
    checks.between(free_length[k], 0, 15, f"{k}: symbols written when decoding freely (of {L})")
results.finding(
    f"Trained on lengths 4-10 ({steps} updates, {len(seeds)} seeds, d_model {size}), tested at length {L} with "
    f"teacher forcing and the end token forbidden: at positions 10-14 sinusoidal models get "
    f"{spread(beyond['sinusoidal'])} of the symbols right and learned positions {spread(beyond['learned'])} "
    f"(guessing: 0.1); at positions 15-19, {spread(far['sinusoidal'])} against {spread(far['learned'])}. "
    f"Decoding freely, both write only {spread(free_length['sinusoidal'])} and {spread(free_length['learned'])} "
    f"symbols of {L}: neither copies a longer sequence.")

# %% [markdown]
# Read the numbers above (the finding line sums them up over the seeds). Beyond the trained
# lengths the learned position vectors are untrained rows, and the model does about as well as
# guessing there. The sinusoidal rows are the same smooth functions of position as the trained
# ones, and the model finds the right symbol above chance past the trained lengths (the check
# asserts it for positions 10–14, in every seed; the figure shows how it fades further out).
# So the hypothesis holds in a weak form: sinusoids carry some of what was learned beyond the
# trained lengths. It does not make the model copy longer sequences: decoded freely, both
# kinds stop near the longest length they were trained on. Later work (ALiBi, Press et al.,
# 2022) found sinusoidal positions extrapolating poorly at scale too, and changed how
# positions enter attention.

# %% tags=["fold"]
fig, ax = plt.subplots(figsize=(6, 3.6))
for kind, color in (("sinusoidal", "tab:blue"), ("learned", "tab:orange")):
    ax.fill_between(range(L), acc[kind].min(0), acc[kind].max(0), color=color, alpha=0.25)
    ax.plot(range(L), acc[kind].mean(0), marker="o", ms=3, color=color, label=f"{kind} (mean, min–max)")
ax.axvspan(-0.5, 9.5, color="grey", alpha=0.12, label="positions seen in training")
ax.axhline(0.1, color="k", lw=0.8, ls=":", label="guessing")
ax.set_xticks(range(0, L, 2 if L <= 30 else 5))
ax.set_xlabel(f"target position (sequences of length {L})")
ax.set_ylabel("teacher-forced accuracy")
ax.legend(fontsize=7)
show(fig, "18", "extrapolation.png")

# %% [markdown]
# ## Exercise
#
# Exercise 18 of the track, `lessons/exercises/ex18_relative_positions.py`, asks for
# `shift_matrix`, the fixed linear map that moves every sinusoidal position by k.
# `python lessons/check.py 18` grades it and, at the first case it gets wrong, shows the input,
# what it expected and what it got.

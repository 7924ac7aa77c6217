# %% [markdown]
# # Lesson 19 — A small-scale replay of Table 3
#
# The paper varies one thing at a time around the base model and reports dev perplexity and
# BLEU (Table 3): (A) the number of heads at fixed width, (C) model size, (D) dropout and label
# smoothing, (E) learned instead of sinusoidal positions. We replay those rows on a task small
# enough for a laptop: copying sequences of 6–12 symbols, with a fixed budget of updates, and
# report validation loss (teacher-forced, no smoothing) and exact match of greedy decoding.
# Row (B), a smaller d_k at a fixed number of heads, is left out: our attention ties d_k to
# d_model / h, as the base model does.
#
# Small-scale results need not agree with the paper's; what matters is the method — change
# one thing, measure, compare.

# %%
import csv
import time

import numpy as np

import minitensor as mt
from transformer import Transformer, TransformerConfig
from transformer.copytask import CopyTaskSettings, make_batch, score
from transformer.decoding import greedy_decode
from transformer.lesson import figure_dir, smoke
from transformer.loss import label_smoothed_loss
from transformer.schedule import NoamSchedule, paper_adam

task = CopyTaskSettings(vocab=13, min_length=6, max_length=12, batch=48)
steps = 25 if smoke() else 260
base = dict(d_model=32, n_heads=4, d_ff=64, layers=2, dropout=0.1, smoothing=0.1, positional="sinusoidal")
rows = {
    "base": {},
    "(A) 1 head": dict(n_heads=1),
    "(A) 8 heads": dict(n_heads=8),
    "(C) 1 layer": dict(layers=1),
    "(C) d_model 64, d_ff 128": dict(d_model=64, d_ff=128),
    "(D) dropout 0.0": dict(dropout=0.0),
    "(D) dropout 0.3": dict(dropout=0.3),
    "(D) no label smoothing": dict(smoothing=0.0),
    "(E) learned positions": dict(positional="learned"),
}
if smoke():
    rows = {k: rows[k] for k in ("base", "(A) 1 head", "(E) learned positions")}
val = make_batch(np.random.default_rng(123), 200, task)
results = []
for name, change in rows.items():
    h = {**base, **change}
    mt.manual_seed(0)
    cfg = TransformerConfig(task.vocab, d_model=h["d_model"], n_heads=h["n_heads"], d_ff=h["d_ff"],
                            n_encoder_layers=h["layers"], n_decoder_layers=h["layers"], dropout=h["dropout"],
                            positional=h["positional"], max_len=32)
    model = Transformer(cfg)
    opt = paper_adam(model.parameters())
    sched = NoamSchedule(opt, h["d_model"], warmup=80, factor=1.0)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(steps):
        src, ti, to = make_batch(rng, task.batch, task)
        loss = label_smoothed_loss(model(src, ti), mt.tensor(to), 0, h["smoothing"])
        opt.zero_grad()
        loss.backward()
        sched.step()
        opt.step()
    seconds = time.perf_counter() - t0
    model.eval()
    with mt.no_grad():
        nll = label_smoothed_loss(model(val[0], val[1]), mt.tensor(val[2]), 0, 0.0).item()
    exact, tokens = score(greedy_decode(model, val[0], max_len=val[2].shape[1]), val[2])
    results.append(dict(variant=name, params=model.num_parameters(), valid_nll=round(nll, 3),
                        exact_match=round(exact, 3), token_accuracy=round(tokens, 3), seconds=round(seconds, 1)))
    print(results[-1])

# %%
out = figure_dir("19")
with open(out / "table3_replay.csv", "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(results[0]))
    writer.writeheader()
    writer.writerows(results)
print("| variant | params | valid NLL | exact match | token acc. |\n|---|---|---|---|---|")
for r in results:
    print(f"| {r['variant']} | {r['params']:,} | {r['valid_nll']} | {r['exact_match']:.1%} | {r['token_accuracy']:.1%} |")
assert all(np.isfinite(r["valid_nll"]) for r in results)
if not smoke():
    base_row = results[0]
    assert base_row["token_accuracy"] > 0.5  # the budget is enough to learn a lot of the task

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(7, 3.5))
ax.barh([r["variant"] for r in results][::-1], [r["valid_nll"] for r in results][::-1])
ax.set_xlabel(f"validation NLL after {steps} updates (lower is better)")
fig.tight_layout()
fig.savefig(out / "table3_replay.png")
print("saved", out / "table3_replay.png", "and", out / "table3_replay.csv")

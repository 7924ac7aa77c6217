# %% [markdown]
# # Lesson 21 — Batches of 25,000 tokens, and checkpoint averaging (Sections 5.1, 6.1)
#
# Two training details of the paper, each measured here:
#
# - "Sentence pairs were batched together by approximate sequence length. Each training batch
#   contained a set of sentence pairs containing approximately 25000 source tokens and 25000
#   target tokens." (5.1)
# - "For the base models, we used a single model obtained by averaging the last 5
#   checkpoints, which were written at 10-minute intervals." (6.1)
#
# Batching by length wastes little on padding; a batch counted in tokens, not sentences,
# makes every update see about the same amount of text; a large one gives a less noisy
# gradient, and it can be computed in pieces. Averaging checkpoints smooths out the noise of
# the last updates.
#
# **Teaches:** `filter_pairs`, `encode_cached`, `token_batches`, `collate`, `save_checkpoint`,
# `average_checkpoints`; batching by length, gradient noise, micro-batches, checkpoints,
# checkpoint averaging.
#
# **Uses:** subwords, the Multi30k corpus, the whole model, the copy task, the learning-rate
# schedule, padding, label smoothing.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from transformer import NoamSchedule, Transformer, TransformerConfig, data, label_smoothed_loss, paper_adam
from transformer.batching import collate, token_batches
from transformer.checkpoint import average_checkpoints, save_checkpoint
from transformer.copytask import PAD, CopyTaskSettings, make_batch
from transformer.tokenizer import Tokenizer, encode_cached
from lessonkit import Results, checks, figure_dir, multi30k, show, smoke, spread

results = Results("21")
out = figure_dir("21")

# %% [markdown]
# ## 1. Batching by length
#
# Multi30k's training set without its broken pairs (`data.filter_pairs` drops empty sides,
# overlong ones and wildly different lengths), cut into BPE pieces (`encode_cached` keeps the
# ids on disk for the next run). `token_batches` shuffles the pairs, sorts pools of them by
# length, and fills each batch until batch size × (longest side + 1) would pass
# `max_tokens`. We compare it with batches of the same number of sentences drawn at
# random: how much of each padded array is padding?

# %%
en, de = multi30k("train")
en, de, _ = data.filter_pairs(en, de)
n = 3000 if smoke() else len(en)
tok = Tokenizer.train(en[:n] + de[:n], out / "spm", vocab_size=1000 if smoke() else 2000)
src = encode_cached(tok, en[:n], out / "cache" / "en.npz")
tgt = encode_cached(tok, de[:n], out / "cache" / "de.npz")
ls, lt = np.array([len(x) for x in src]) + 1, np.array([len(y) for y in tgt]) + 1   # + eos / bos


def padding_share(batches):
    real = sum(ls[b].sum() + lt[b].sum() for b in batches)
    padded = sum(len(b) * (ls[b].max() + lt[b].max()) for b in batches)
    return 1 - real / padded


max_tokens = 2500 if smoke() else 25000
by_length = token_batches(ls - 1, lt - 1, max_tokens, seed=0)
per_batch = int(np.mean([len(b) for b in by_length]))
perm = np.random.default_rng(0).permutation(len(ls))
at_random = [perm[i:i + per_batch] for i in range(0, len(perm) - per_batch + 1, per_batch)]
pad = {"by length (token_batches)": padding_share(by_length), "at random": padding_share(at_random)}
src_tokens = [int(ls[b].sum()) for b in by_length]
tgt_tokens = [int(lt[b].sum()) for b in by_length]
print(f"{len(by_length)} batches of at most {max_tokens} tokens a side; {per_batch} sentences each on average")
counts = lambda c: f"{np.mean(c):,.0f} ({min(c):,}–{max(c):,})"   # noqa: E731
print(f"real tokens per batch, mean (min–max): source {counts(src_tokens)}, target {counts(tgt_tokens)}")
for name, share in pad.items():
    print(f"padding, batches {name}: {share:.1%} of the padded arrays")
results["padding_share"] = pad
results["tokens_per_batch"] = {"source": float(np.mean(src_tokens)), "target": float(np.mean(tgt_tokens))}
checks.always_lower([pad["by length (token_batches)"]], [pad["at random"] / 2], "padding by length vs half of random's")
results.finding(f"on Multi30k's {len(ls):,} training pairs (BPE), batches of at most {max_tokens:,} tokens a side hold "
                f"{np.mean(src_tokens):,.0f} source and {np.mean(tgt_tokens):,.0f} target tokens on average ({per_batch} "
                f"sentences); batched by length, {pad['by length (token_batches)']:.1%} of the arrays is padding, against "
                f"{pad['at random']:.1%} for batches of as many sentences drawn at random.")

# %% [markdown]
# ## 2. Why so many tokens: a less noisy gradient
#
# Every batch gives an estimate of the gradient of the loss over all the data: the true
# gradient $g$ plus noise whose variance falls like $1/\text{tokens}$. Two batches of different
# sentences therefore agree more (the cosine of their gradients nears 1) as they grow; once
# the noise is small against $g$, $1 - \cos$ falls like $1/\text{tokens}$ (slope −1 on
# log-log axes), and more slowly before that. A small model, trained for a few updates so the gradient is
# past the first "predict the frequent pieces" direction, then measured:

# %%
mt.manual_seed(0)
cfg = TransformerConfig(tok.vocab_size, d_model=64, n_heads=4, d_ff=128, n_encoder_layers=1, n_decoder_layers=1,
                        dropout=0.0, pad_id=0)
model = Transformer(cfg)
opt = paper_adam(model.parameters())
sched = NoamSchedule(opt, 64, warmup=50, factor=1.0)
small = token_batches(ls - 1, lt - 1, 1000, seed=1)
for b in small[:20 if smoke() else 60]:
    batch = collate(src, tgt, b)
    loss = label_smoothed_loss(model(batch.src, batch.tgt_in), mt.tensor(batch.tgt_out), 0, smoothing=0.1)
    opt.zero_grad()
    loss.backward()
    sched.step()
    opt.step()
print(f"after {20 if smoke() else 60} updates: loss {loss.item():.2f}")


def gradient(index):
    batch = collate(src, tgt, index)
    model.zero_grad()
    label_smoothed_loss(model(batch.src, batch.tgt_in), mt.tensor(batch.tgt_out), 0, smoothing=0.1).backward()
    return np.concatenate([p.grad.numpy().ravel() for p in model.parameters()])


sizes = [250, 1000, 4000] if smoke() else [500, 2000, 8000, 25000]
pairs = 2 if smoke() else 3
order = np.random.default_rng(2).permutation(len(lt))
cosines = {}
for tokens in sizes:
    cos = []
    for _ in range(pairs):
        k = int(np.searchsorted(np.cumsum(lt[order]), tokens)) + 1   # sentences holding `tokens` target tokens
        g1, g2 = gradient(order[:k]), gradient(order[k:2 * k])
        order = order[2 * k:] if len(order) > 4 * k else np.random.default_rng(tokens).permutation(len(lt))
        cos.append(float(g1 @ g2 / np.linalg.norm(g1) / np.linalg.norm(g2)))
    cosines[tokens] = cos
    print(f"batches of {tokens:>6} target tokens: cosine of two batches' gradients {spread(cos)}")
results["gradient_cosine"] = cosines
disagreement = np.array([1 - np.mean(c) for c in cosines.values()])
slope = float(np.polyfit(np.log(sizes), np.log(disagreement), 1)[0])
print(f"1 − cosine against tokens, slope on log-log axes: {slope:.2f} (−1 once the noise is small)")
checks.always_lower(cosines[sizes[0]], cosines[sizes[-1]], "cosine of two batches' gradients, smallest vs largest batches")
checks.between([slope], -1.4, -0.5, "1 − cosine vs tokens, slope on log-log axes")
results["disagreement_slope"] = slope
results.finding(f"two batches of different sentences give gradients with cosine {spread(cosines[sizes[0]])} at "
                f"{sizes[0]:,} target tokens and {spread(cosines[sizes[-1]])} at {sizes[-1]:,}; 1 − cosine falls with "
                f"slope {slope:.2f} against tokens on log-log axes.")

# %% [markdown]
# A 25,000-token batch need not fit in memory at once: the gradient of a sum is the sum of
# the gradients. So split the big batch into *micro-batches*, sum (not average) each one's
# loss over its real target tokens, add up their gradients, and divide once by all the
# tokens of the big batch: that is exactly the big batch's per-token gradient. (Averaging
# each micro-batch's per-token loss instead weights a token of a short micro-batch more
# than one of a long micro-batch.) The command line's trainer does this with
# `--update-freq k`; lesson 24 uses the same arithmetic across processes.

# %%
model64 = model.astype(np.float64)
big = collate(src, tgt, order[:12])
micro = [slice(0, 4), slice(4, 8), slice(8, 12)]
full_target = np.concatenate([big.tgt_in[:, :1], big.tgt_out], 1)   # <s> y </s>: decoder input and output in one
err = checks.sharded_gradients_match(model64, big.src, full_target, 0, micro,
                                     lambda g, k: [sum(parts) / sum(k) for parts in zip(*g)])
print(f"3 micro-batches, summed and divided by all their tokens: the big batch's gradient to {err:.1e}")
results["micro_batch_gradient_error"] = err

# %% [markdown]
# ## 3. Averaging the last checkpoints
#
# With the learning rate still well above zero, the last updates jitter around a minimum;
# the mean of the last few weight vectors tends to sit closer to its centre than one of
# them. A copy task of lengths 8 to 16, trained with a high rate, saving a checkpoint every
# 40 updates; the average of the last 5 (written with `save_checkpoint`, averaged with
# `average_checkpoints`, as `python -m transformer average` does) against the last one and
# against the best single one of those 5, on the loss of 500 held-out sequences. The best
# one is picked by that very loss, a choice no real run could make: a hard baseline. The
# claim checked is about the mean over seeds; the finding says in how many seeds it held.

# %%
task = CopyTaskSettings(vocab=13, min_length=8, max_length=16, batch=64)
held_out = make_batch(np.random.default_rng(999), 500, task)


def held_out_loss(m):
    m.eval()
    with mt.no_grad():
        value = label_smoothed_loss(m(held_out[0], held_out[1]), mt.tensor(held_out[2]), PAD, smoothing=0.0).item()
    m.train()
    return value


steps, every = 600, 40
avg_seeds = [0, 1] if smoke() else [0, 1, 2, 3, 4]
losses = {"last checkpoint": [], "best of the last 5": [], "average of the last 5": []}
for seed in avg_seeds:
    mt.manual_seed(seed)
    m = Transformer(TransformerConfig(13, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=1, n_decoder_layers=1,
                                      dropout=0.0, max_len=task.max_length + 2))
    opt = paper_adam(m.parameters())
    sched = NoamSchedule(opt, 32, warmup=100, factor=1.0)
    rng, paths, singles = np.random.default_rng(seed), [], []
    for step in range(1, steps + 1):
        s, ti, to = make_batch(rng, task.batch, task)
        loss = label_smoothed_loss(m(s, ti), mt.tensor(to), PAD, smoothing=0.1)
        opt.zero_grad()
        loss.backward()
        sched.step()
        opt.step()
        if step > steps - 5 * every and step % every == 0:
            paths.append(save_checkpoint(out / "checkpoints" / f"seed{seed}_step{step}.npz", m))
            singles.append(held_out_loss(m))
    losses["last checkpoint"].append(singles[-1])
    losses["best of the last 5"].append(min(singles))
    m.load_state_dict(average_checkpoints(paths)["model"])
    losses["average of the last 5"].append(held_out_loss(m))
    print(f"seed {seed}: held-out loss of the last 5 checkpoints {[round(x, 4) for x in singles]}, "
          f"their average {losses['average of the last 5'][-1]:.4f}")
for name, v in losses.items():
    print(f"{name:>22}: {spread(v)}")
results["held_out_loss"] = losses
average = np.array(losses["average of the last 5"])
over_last = np.array(losses["last checkpoint"]) - average
over_best = np.array(losses["best of the last 5"]) - average
print(f"the average's gain over the last checkpoint {np.round(over_last, 4).tolist()}, over the best one "
      f"{np.round(over_best, 4).tolist()}")
margin = 0.0 if smoke() else 0.001      # two smoke seeds say little; five full-mode seeds, a mean gain
checks.between([over_last.mean()], margin, np.inf, "held-out loss over the seeds: the last checkpoint minus the average")
checks.between([over_best.mean()], margin, np.inf, "held-out loss over the seeds: the best checkpoint minus the average")
results["average_gain_over_the_best"] = over_best
results.finding(f"copy task, {len(avg_seeds)} seeds: the average of the last 5 checkpoints reaches a held-out loss of "
                f"{spread(average)}, against {spread(losses['last checkpoint'])} for the last checkpoint and "
                f"{spread(losses['best of the last 5'])} for the best of the 5 (picked on the held-out loss itself); "
                f"over the seeds it beats the last by {over_last.mean():.4f} and the best by {over_best.mean():.4f} "
                f"on average, and the best in {int((over_best > 0).sum())} of {len(avg_seeds)} seeds.")

# %% tags=["fold"]
fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
axes[0].semilogx(sizes, [np.mean(cosines[s]) for s in sizes], marker="o")
for s in sizes:
    axes[0].plot([s] * len(cosines[s]), cosines[s], "k.", ms=4)
axes[0].set_xlabel("target tokens per batch")
axes[0].set_ylabel("cosine of two batches' gradients")
axes[0].grid(alpha=0.3)
for i, (name, v) in enumerate(losses.items()):
    axes[1].bar(i, np.mean(v), yerr=[[np.mean(v) - min(v)], [max(v) - np.mean(v)]], capsize=4, label=name)
axes[1].set_xticks(range(3), ["last", "best of 5", "average of 5"])
axes[1].set_ylabel("held-out loss (min–max over seeds)")
fig.tight_layout()
show(fig, "21", "batches_and_averaging.png")

# %% [markdown]
# ## Exercise
#
# Exercise 21 of the track, `lessons/exercises/ex21_token_batches.py`, asks for `token_batches`,
# batches cut by padded tokens, and `average`, checkpoint averaging.
# `python lessons/check.py 21` grades it and, at the first case it gets wrong, shows the input,
# what it expected and what it got.

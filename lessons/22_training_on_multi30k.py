# %% [markdown]
# # Lesson 22 — Training on Multi30k (English → German)
#
# The real pipeline, in the order `python -m transformer train` runs it: read the parallel
# text (checking it), filter bad pairs, train a joint BPE model, encode (cached), batch by
# tokens, and train with label smoothing, dropout and the warm-up schedule while validating,
# saving a checkpoint every `save_every` updates and at the end (here only at the end). Here
# we give a small model 240 updates, about a minute on
# two cores; the `multi30k-cpu` preset trains a larger one for 28 minutes (its measured BLEU
# on test2016 is in the project's README).
#
# **Teaches:** `ParallelData`, `TrainSettings`, `Trainer`, `fit`, `translate`; the training
# pipeline.
#
# **Uses:** the Multi30k corpus, subwords, batching by length, checkpoints, dropout, label
# smoothing, the learning-rate schedule, beam search, BLEU.

# %%
import shutil

import matplotlib.pyplot as plt
import numpy as np

from transformer import TransformerConfig, data
from transformer.evaluate import translate
from transformer.tokenizer import Tokenizer, encode_cached
from transformer.train import ParallelData, Trainer, TrainSettings
from lessonkit import Results, checks, figure_dir, multi30k, show, smoke

results = Results("22")
en, de = multi30k("train")
ven, vde = multi30k("val")
en, de, report = data.filter_pairs(en, de)
print(report)
out = figure_dir("22")
shutil.rmtree(out / "run", ignore_errors=True)     # a fresh run each time the lesson runs
n = 2000 if smoke() else 29000
tok = Tokenizer.train(en[:n] + de[:n], out / "spm", vocab_size=1000 if smoke() else 4000)
train = ParallelData(encode_cached(tok, en[:n], out / "cache" / "en.npz"), encode_cached(tok, de[:n], out / "cache" / "de.npz"))
valid = ParallelData(encode_cached(tok, ven[:200], out / "cache" / "ven.npz"),
                     encode_cached(tok, vde[:200], out / "cache" / "vde.npz"), ven[:200], vde[:200])
print(f"{len(train)} pairs; first German sentence as pieces: {tok.pieces(de[0])[:12]}")

# %%
model = TransformerConfig(tok.vocab_size, d_model=128, n_heads=4, d_ff=256, n_encoder_layers=2, n_decoder_layers=2,
                          dropout=0.1)
settings = TrainSettings(run_dir=str(out / "run"), model=model, max_tokens=2500, warmup=150, lr_factor=1.0, max_steps=10 if smoke() else 240,
                         eval_every=5 if smoke() else 80,
                         bleu_sentences=20 if smoke() else 100, save_every=10_000, keep_last=1, progress=False)
trainer = Trainer(settings, tok, train, valid)
summary = trainer.fit()
print(summary)
history = trainer.history
first, last = np.mean([r["loss"] for r in history[:5]]), np.mean([r["loss"] for r in history[-5:]])
print(f"training loss {first:.2f} -> {last:.2f}; validation:",
      [(r["step"], round(r["valid_nll"], 2), r.get("valid_bleu")) for r in history if "valid_nll" in r])
checks.always_lower([last], [first], "training loss, last 5 logged steps vs first 5")
results["training_loss_first_and_last"] = [float(first), float(last)]

# %% tags=["fold"]
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot([r["step"] for r in history if "loss" in r], [r["loss"] for r in history if "loss" in r], label="training loss")
valid = [r for r in history if "valid_nll" in r]
ax.plot([r["step"] for r in valid], [r["valid_nll"] for r in valid], marker="o", label="validation NLL")
ax.set_xlabel("update")
ax.set_ylabel("loss per target token")
ax.legend()
ax.grid(alpha=0.3)
show(fig, "22", "training.png")

# %% [markdown]
# The two curves do not measure the same thing. The training loss is the label-smoothed loss
# (ε = 0.1, lesson 4: it cannot reach 0, and it charges the smoothing's share) of batches run
# with dropout on; the validation NLL is the plain negative log-likelihood of the reference,
# with dropout off. So the validation curve can sit below the training curve without anything
# being wrong; each is read against its own past. (`fit` logs the reason it stopped in
# command-line words, `--max-steps`, since `TrainSettings` holds the same settings the command
# line sets.)
#
# Three validation sentences, translated by the model as training left it:

# %%
for s, h in zip(ven[:3], translate(trainer.model, tok, ven[:3], beam_size=4, progress=False)):
    print(f"{s}\n  -> {h}")
print("the run's checkpoints, metrics and figures are in", out / "run")

# %% [markdown]
# ## Exercise
#
# Exercise 22 of the track, `lessons/exercises/ex22_micro_batches.py`, asks for `accumulate`,
# one update's gradient of your model from several micro-batches. `python lessons/check.py 22`
# grades it and, at the first case it gets wrong, shows the input, what it expected and what it
# got.

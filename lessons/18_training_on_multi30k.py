# %% [markdown]
# # Lesson 18 — Training on Multi30k (English → German)
#
# The real pipeline, in the order `python -m transformer train` runs it: read the parallel
# text (checking it), filter bad pairs, train a joint BPE model, encode (cached), batch by
# tokens, and train with label smoothing and the warm-up schedule while validating. Here we
# give it about a minute on a small model; the `multi30k-cpu` preset gives it 28 minutes (its
# measured BLEU on test2016 is in the project's README).

# %%

import numpy as np

from transformer import checks, data
from transformer.lesson import figure_dir, multi30k_dir, smoke
from transformer.tokenizer import Tokenizer, encode_cached
from transformer.train import ParallelData, Trainer, TrainSettings

root = multi30k_dir()
root = root if root.exists() else None          # None: download into the cache on first use
en, de = data.multi30k("train", root=root)
ven, vde = data.multi30k("val", root=root)
en, de, report = data.filter_pairs(en, de)
print(report)
out = figure_dir("18")
n = 2000 if smoke() else 29000
tok = Tokenizer.train(en[:n] + de[:n], out / "spm", vocab_size=1000 if smoke() else 4000)
train = ParallelData(encode_cached(tok, en[:n], out / "cache" / "en.npz"), encode_cached(tok, de[:n], out / "cache" / "de.npz"))
valid = ParallelData(encode_cached(tok, ven[:200], out / "cache" / "ven.npz"),
                     encode_cached(tok, vde[:200], out / "cache" / "vde.npz"), ven[:200], vde[:200])
print(f"{len(train)} pairs; first German sentence as pieces: {tok.pieces(de[0])[:12]}")

# %%
settings = TrainSettings(run_dir=str(out / "run"), d_model=128, n_heads=4, d_ff=256, layers=2, dropout=0.1,
                         max_tokens=2500, warmup=150, lr_factor=1.0, max_steps=10 if smoke() else 100_000,
                         max_minutes=0.0 if smoke() else 1.1, eval_every=5 if smoke() else 80,
                         bleu_sentences=20 if smoke() else 100, save_every=10_000, keep_last=1, progress=False)
trainer = Trainer(settings, tok, train, valid)
summary = trainer.fit()
print(summary)
history = trainer.history
first, last = np.mean([r["loss"] for r in history[:5]]), np.mean([r["loss"] for r in history[-5:]])
print(f"training loss {first:.2f} -> {last:.2f}; validation:",
      [(r["step"], round(r["valid_nll"], 2), r.get("valid_bleu")) for r in history if "valid_nll" in r])
checks.always_lower([last], [first], "training loss, last 5 logged steps vs first 5")

# %%
from transformer.evaluate import translate

for s, h in zip(ven[:3], translate(trainer.model, tok, ven[:3], beam_size=4, progress=False)):
    print(f"{s}\n  -> {h}")
print("saved", out / "run")  # the trainer's figures: loss.png, lr.png (and bleu.png in the full run)

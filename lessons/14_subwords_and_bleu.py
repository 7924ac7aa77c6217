# %% [markdown]
# # Lesson 14 — Subwords and BLEU (Sections 5.1, 6.1)
#
# Words are too many (and rare ones too rare); characters make sequences long. Byte-pair
# encoding starts from characters and repeatedly merges the most frequent adjacent pair, so
# common words become one piece and rare words split into known pieces. The paper used a
# shared source-target BPE vocabulary of about 37000 for EN-DE; we train one with
# sentencepiece on Multi30k (both languages together).
#
# BLEU compares n-grams (n = 1..4) of the output with a reference, with a brevity penalty. It
# must be computed the same way to be comparable: sacreBLEU on detokenized text, and its
# signature says exactly how.

# %%

import numpy as np

from transformer import checks, data
from transformer.evaluate import bleu
from transformer.lesson import figure_dir, multi30k_dir, smoke
from transformer.tokenizer import Tokenizer

root = multi30k_dir()
en, de = data.multi30k("train", root=root if root.exists() else None)
n = 3000 if smoke() else 29000
out = figure_dir("14")
sizes = [500, 2000] if smoke() else [500, 2000, 8000, 16000]
avg_len = {}
for v in sizes:
    tok = Tokenizer.train(en[:n] + de[:n], out / f"spm{v}", vocab_size=v)
    ids = tok.encode(de[:500])
    avg_len[v] = np.mean([len(x) for x in ids])
    if v == sizes[-1]:
        print("pieces:", tok.pieces("Ein Fahrradfahrer springt über eine Rampe."))
        checks.round_trips(tok, de[:200])
print("mean German sentence length in pieces:", {v: round(a, 1) for v, a in avg_len.items()},
      "| in words:", round(np.mean([len(s.split()) for s in de[:500]]), 1))
checks.always_lower([avg_len[sizes[-1]]], [avg_len[sizes[0]]], "pieces per sentence, largest vs smallest vocabulary")

# %% [markdown]
# ## BLEU, and why its settings matter
#
# The paper's BLEU scores (Tables 2 and 3) are *tokenized* BLEU: computed on tokenized text
# with a script of its own (Post, 2018, "A Call for Clarity in Reporting BLEU Scores", uses
# them as the example), not on detokenized output with a standard tool. We report sacreBLEU, which
# scores detokenized output with one fixed tokenizer and prints a signature of every
# setting, so that two numbers are comparable when their signatures are. The two are not the
# same measurement; tokenized scores usually come out higher. Case is another setting:

# %%
ref = ["Ein Mann fährt mit dem Fahrrad durch den Park."]
for hyp in ["Ein Mann fährt mit dem Fahrrad durch den Park.", "Ein Mann fährt Fahrrad im Park.",
            "Ein Hund läuft im Schnee."]:
    print(f"{bleu([hyp], ref)['score']:6.2f}  {hyp}")
cased = bleu(["ein mann fährt mit dem fahrrad durch den park."], ref)
lower = bleu(["ein mann fährt mit dem fahrrad durch den park."], ref, lowercase=True)
print(f"all lowercase output: cased BLEU {cased['score']}, lowercased BLEU {lower['score']}")
print("signature:", cased["signature"])
checks.agree(lower["score"], 100.0, "lowercased BLEU of the lowercased copy", atol=0)
checks.always_lower([cased["score"]], [100.0], "cased BLEU of the lowercased copy")

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(list(avg_len), list(avg_len.values()), marker="o")
ax.set_xscale("log")
ax.set_xlabel("BPE vocabulary size")
ax.set_ylabel("pieces per German sentence")
fig.tight_layout()
fig.savefig(out / "vocab_vs_length.png")
print("saved", out / "vocab_vs_length.png")

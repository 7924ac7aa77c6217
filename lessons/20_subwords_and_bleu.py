# %% [markdown]
# # Lesson 20 — Subwords and BLEU (Sections 5.1, 6.1)
#
# Words are too many (and rare ones too rare); characters make sequences long. Byte-pair
# encoding (BPE; Sennrich et al., 2016) starts from characters and repeatedly merges the most
# frequent adjacent pair, so common words become one piece and rare words split into known
# pieces. The paper used a BPE vocabulary of about 37000 tokens shared by source and target
# for English-German; we train one with sentencepiece on Multi30k (both languages together),
# the corpus the next lessons train on: 29,000 English captions of images with German
# translations.
#
# BLEU compares the $n$-grams ($n = 1, \ldots, 4$) of an output with a reference, with a
# penalty for outputs that are too short. It must be computed the same way to be comparable:
# sacreBLEU on detokenized text, and its signature says exactly how.
#
# **Teaches:** `Tokenizer`, `pieces`, `bleu`, `multi30k`; subwords, BLEU, the
# Multi30k corpus.
#
# **Uses:** nothing beyond Python: this lesson is about the data.

# %%
import matplotlib.pyplot as plt
import numpy as np

from transformer.evaluate import bleu
from transformer.tokenizer import Tokenizer
from lessonkit import Results, checks, figure_dir, multi30k, show, smoke

results = Results("20")
en, de = multi30k("train")        # from $MULTI30K_DIR, or downloaded once into the cache
n = 3000 if smoke() else 29000
out = figure_dir("20")
sizes = [500, 2000] if smoke() else [500, 2000, 8000, 16000]
avg_len = {}
for v in sizes:
    tok = Tokenizer.train(en[:n] + de[:n], out / f"spm{v}", vocab_size=v)
    ids = tok.encode(de[:500])
    avg_len[v] = np.mean([len(x) for x in ids])
    if v == sizes[-1]:
        print("pieces:", tok.pieces("Ein Fahrradfahrer springt über eine Rampe."))
        checks.round_trips(tok, de[:200])
print("mean German sentence length in pieces:", {v: round(float(a), 1) for v, a in avg_len.items()},
      "| in words:", round(np.mean([len(s.split()) for s in de[:500]]), 1))
checks.always_lower([avg_len[sizes[-1]]], [avg_len[sizes[0]]], "pieces per sentence, largest vs smallest vocabulary")
results["pieces_per_german_sentence"] = avg_len
results.finding(f"BPE trained on {n:,} Multi30k pairs: a German sentence is {avg_len[sizes[0]]:.1f} pieces long with "
                f"{sizes[0]:,} pieces in the vocabulary and {avg_len[sizes[-1]]:.1f} with {sizes[-1]:,}, against "
                f"{np.mean([len(s.split()) for s in de[:500]]):.1f} words.")

# %% [markdown]
# ## BLEU, and why its settings matter
#
# The paper reports BLEU (Tables 2 and 3) without saying how it was computed: on which
# tokenization of the text, with which script. BLEU counts matching n-grams, so the same
# translations score differently when the text is split into tokens differently; Post (2018),
# "A Call for Clarity in Reporting BLEU Scores", measured how far apart such scores fall and
# proposed sacreBLEU. We report sacreBLEU, which scores detokenized output with one fixed
# tokenizer and prints a signature of every setting, so that two numbers are comparable when
# their signatures are, and a score without one is a neighbour, not a match. Case is another
# setting:

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
results["bleu_of_the_lowercased_copy"] = {"cased": cased["score"], "lowercased": lower["score"]}

# %% tags=["fold"]
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(list(avg_len), list(avg_len.values()), marker="o", label="BPE pieces")
words = np.mean([len(s.split()) for s in de[:500]])
ax.axhline(words, color="grey", linestyle="--", label=f"words ({words:.1f})")
ax.legend()
ax.set_xscale("log")
ax.set_xlabel("BPE vocabulary size")
ax.set_ylabel("pieces per German sentence")
show(fig, "20", "vocab_vs_length.png")

# %% [markdown]
# ## Exercise
#
# Exercise 20 of the track, `lessons/exercises/ex20_bleu.py`, asks for `corpus_bleu`, clipped
# n-gram precisions over the corpus and the brevity penalty. `python lessons/check.py 20` grades
# it and, at the first case it gets wrong, shows the input, what it expected and what it got.

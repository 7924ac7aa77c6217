# %% [markdown]
# # Lesson 15 — Greedy decoding and beam search (Section 6.1)
#
# Greedy decoding (lesson 14) takes the most likely token at every step; it can commit early
# to a prefix whose continuations are all poor. Beam search keeps the `beam_size` best
# prefixes by total log-probability, extends each by every token, and keeps the best again.
# Longer outputs accumulate more negative log-probability, so finished hypotheses are
# compared by $\log P(Y) / lp(Y)$ with the length penalty of Wu et al. (2016),
#
# $$lp(Y) = \left(\frac{5 + |Y|}{6}\right)^{\alpha}.$$
#
# The paper uses a beam of 4, $\alpha = 0.6$, and a maximum output length of input length + 50.
#
# **Teaches:** `beam_search`, `length_penalty`, `rank_extensions`; beam search, the length
# penalty.
#
# **Uses:** greedy decoding.

# %%
import matplotlib.pyplot as plt
import numpy as np

from transformer.decoding import beam_search, greedy_decode, length_penalty
from lessonkit import Results, checks, show, smoke
from lessonkit.toy import TableModel

results = Results("15")

# %% [markdown]
# ## A case greedy decoding gets wrong
#
# A "model" given as a table of next-token probabilities (`lessonkit.toy.TableModel` answers
# the same calls a Transformer does), so the most likely output can be found by trying every
# sequence.

# %%
# A "model" given as a table of next-token probabilities (ids: 0 pad, 1 bos, 2 eos, 3 A, 4 B):
# after nothing, A is likelier (0.6); but after A every continuation is poor, after B eos is 0.9.
table = {(): [0, 0, 0.0, 0.6, 0.4], (3,): [0, 0, 0.3, 0.35, 0.35], (4,): [0, 0, 0.9, 0.05, 0.05]}
m = TableModel(table, [0, 0, 0.98, 0.01, 0.01], vocab_size=5)
name = {2: "eos", 3: "A", 4: "B", 0: "."}


def beam_of_2(model):
    return beam_search(model, np.array([[3]]), beam_size=2, alpha=0.0, max_len=4)[0][0].tokens


def greedy(model):
    out = greedy_decode(model, np.array([[3]]), max_len=4)[0].tolist()
    return out[:out.index(2) + 1] if 2 in out else out


print("greedy:", [name[t] for t in greedy(m)], " beam of 2:", [name[t] for t in beam_of_2(m)])
# the check scores every sequence of at most 4 tokens ending in eos, and compares
best = checks.finds_the_most_likely(beam_of_2, m, symbols=[3, 4], eos=2, max_len=4)
print("beam search found the most likely sequence,", [name[t] for t in best])
try:
    checks.finds_the_most_likely(greedy, m, symbols=[3, 4], eos=2, max_len=4)
    raise SystemExit("greedy should have missed it")
except AssertionError as e:
    print("greedy did not:", e)
results["most_likely"] = [name[t] for t in best]

# %% [markdown]
# ## One step of beam search
#
# Each step scores every one-token extension of every open beam by the beam's log-probability
# plus the token's, and keeps the best. `rank_extensions` does that ranking for a batch of
# sentences at once: beams of log-probability −0.5 and −2.0, three tokens.

# %%
from transformer.decoding import rank_extensions  # noqa: E402

scores = np.array([[-0.5, -2.0]])
logp = np.log(np.array([[[0.2, 0.3, 0.5], [0.9, 0.05, 0.05]]]))
beam, token, total = rank_extensions(scores, logp, 3)
for b, t, sc in zip(beam[0], token[0], total[0]):
    print(f"beam {b} + token {t}: {scores[0, b]:.2f} + {logp[0, b, t]:.2f} = {sc:.2f}")
checks.agree(total[0], np.sort((scores[0][:, None] + logp[0]).ravel())[::-1][:3], "the 3 best extensions' scores",
             atol=1e-12)

# %% [markdown]
# ## The length penalty
#
# With $\alpha = 0$ beam search prefers short outputs (fewer negative terms); $\alpha > 0$
# divides by a factor growing with length. The curve shows $lp$ for the paper's
# $\alpha = 0.6$.

# %%
checks.length_penalty_is_gnmt(length_penalty)
print("length_penalty follows ((5 + |Y|) / 6)^α; at |Y| = 20, α = 0.6:", round(float(length_penalty(20, 0.6)), 4))

# %% tags=["fold"]
lengths = np.arange(1, 61)
fig, ax = plt.subplots(figsize=(5, 3))
for alpha in (0.0, 0.6, 1.0):
    ax.plot(lengths, length_penalty(lengths, alpha), label=f"α = {alpha}")
ax.set_xlabel("|Y|")
ax.set_ylabel("lp(Y)")
ax.legend()
show(fig, "15", "length_penalty.png")

# %% [markdown]
# ## Exercise
#
# Exercise 15 of the track, `lessons/exercises/ex15_decoding.py`, asks for `greedy_decode` with
# your layers' caches, `rank_extensions` (one step of beam search) and `beam_search`.
# `python lessons/check.py 15` grades it and, at the first case it gets wrong, shows the input,
# what it expected and what it got.

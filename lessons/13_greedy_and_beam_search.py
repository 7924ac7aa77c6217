# %% [markdown]
# # Lesson 13 — Greedy decoding and beam search (Section 6.1)
#
# Greedy decoding takes the most likely token at every step; it can commit early to a prefix
# whose continuations are all poor. Beam search keeps the `beam_size` best prefixes by total
# log-probability. Longer outputs accumulate more negative log-probability, so finished
# hypotheses are compared by log P(Y) / lp(Y) with GNMT's length penalty
# lp(Y) = ((5 + |Y|) / 6)^α. The paper uses beam 4, α = 0.6, maximum length input + 50.

# %%
import itertools

import numpy as np

from transformer.decoding import beam_search, greedy_decode, length_penalty
from transformer.lesson import figure_dir, smoke
from transformer.toy import TableModel


# A "model" given as a table of next-token probabilities (ids: 0 pad, 1 bos, 2 eos, 3 A, 4 B):
# after nothing, A is likelier (0.6); but after A every continuation is poor, after B eos is 0.9.
table = {(): [0, 0, 0.0, 0.6, 0.4], (3,): [0, 0, 0.3, 0.35, 0.35], (4,): [0, 0, 0.9, 0.05, 0.05]}
m = TableModel(table, [0, 0, 0.98, 0.01, 0.01], vocab_size=5)
greedy = greedy_decode(m, np.array([[3]]), max_len=4)[0].tolist()
beam = beam_search(m, np.array([[3]]), beam_size=2, alpha=0.0, max_len=4)[0][0]
name = {2: "eos", 3: "A", 4: "B", 0: "."}
print("greedy:", [name[t] for t in greedy], " beam:", [name[t] for t in beam.tokens], f"log P {beam.log_prob:.3f}")
best = max((sum(np.log(max(m.probs(s[:i])[s[i]], 1e-12)) for i in range(len(s))), s)
           for n in range(1, 5) for s in (list(b) + [2] for b in itertools.product([3, 4], repeat=n - 1)))
assert beam.tokens == best[1] == [4, 2] and greedy[0] == 3
print("beam search found the best sequence by exhaustive search; greedy did not")

# %% [markdown]
# ## The length penalty
#
# With α = 0 beam search prefers short outputs (fewer negative terms); α > 0 divides by a
# factor growing with length. The curve shows lp for the paper's α = 0.6.

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

lengths = np.arange(1, 61)
fig, ax = plt.subplots(figsize=(5, 3))
for alpha in (0.0, 0.6, 1.0):
    ax.plot(lengths, length_penalty(lengths, alpha), label=f"α = {alpha}")
ax.set_xlabel("|Y|")
ax.set_ylabel("lp(Y)")
ax.legend()
fig.tight_layout()
fig.savefig(figure_dir("13") / "length_penalty.png")
assert length_penalty(7, 0.6) == 2**0.6
print("saved", figure_dir("13") / "length_penalty.png", "| smoke" if smoke() else "")

# %% [markdown]
# ## Exercise
#
# Write `rank_extensions` yourself (one step of beam search): the stub and what it must
# do are in `lessons/exercises/13_beam_step.py`. Then `python lessons/check.py 13` grades it with the
# package's own checks, and shows the smallest input it gets wrong, if any.

# %% [markdown]
# # Lesson 13 — Greedy decoding and beam search (Section 6.1)
#
# Greedy decoding takes the most likely token at every step; it can commit early to a prefix
# whose continuations are all poor. Beam search keeps the `beam_size` best prefixes by total
# log-probability. Longer outputs accumulate more negative log-probability, so finished
# hypotheses are compared by log P(Y) / lp(Y) with GNMT's length penalty
# lp(Y) = ((5 + |Y|) / 6)^α. The paper uses beam 4, α = 0.6, maximum length input + 50.

# %%
import numpy as np

from transformer import checks
from transformer.decoding import beam_search, greedy_decode, length_penalty
from transformer.lesson import figure_dir, smoke
from transformer.toy import TableModel


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
checks.length_penalty_is_gnmt(length_penalty)
print("saved", figure_dir("13") / "length_penalty.png", "| smoke" if smoke() else "")

# %% [markdown]
# ## Exercise
#
# Write `rank_extensions` yourself (one step of beam search): the stub and what it must
# do are in `lessons/exercises/13_beam_step.py`. Then `python lessons/check.py 13` grades it with the
# package's own checks, and shows the smallest input it gets wrong, if any.

# %% [markdown]
# # Lesson 24 — Data parallelism
#
# The paper trained on one machine with 8 GPUs (Section 5.2); it does not say how the work
# was split among them. The usual way is data parallelism: with $R$ processes (ranks), each
# computes the gradient of its share of the batch; one *all-reduce* sums the gradients
# (and the token counts) across the ranks, and every rank applies the same update, as if one
# process had seen the whole batch. It is lesson 21's micro-batch arithmetic with processes in
# place of micro-batches: dividing by the *global* number of target tokens, not by each
# rank's own, is what makes it exact. Here we simulate two ranks inside one process, then run
# the real thing with `mpiexec` if it is installed (`pip install -e ".[mpi]"`).
#
# **Teaches:** `distributed`, `all_reduce`, `rank`, `world_size`; data parallelism,
# all-reduce.
#
# **Uses:** micro-batches, the whole model, padding.

# %%
import json
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from transformer import Transformer, TransformerConfig
from lessonkit import Results, checks, figure_dir, show, smoke

results = Results("24")
rng = np.random.default_rng(0)
cfg = TransformerConfig(20, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0)
mt.manual_seed(0)
model = Transformer(cfg).astype(np.float64)
src = rng.integers(3, 20, (6, 5))
tgt = rng.integers(3, 20, (6, 7))
tgt[3:, 4:] = 0                          # the second half has padding: uneven token counts
shards = [slice(0, 3), slice(3, 6)]   # two ranks, three sentences each


def all_reduce_then_divide(grads, tokens):
    """What DistributedTrainer does: sum the ranks' summed-loss gradients, divide by all tokens."""
    return [(a + b) / sum(tokens) for a, b in zip(*grads)]


def average_of_means(grads, tokens):
    """The tempting mistake: each rank's per-token mean, then the mean over ranks."""
    return [(a / tokens[0] + b / tokens[1]) / 2 for a, b in zip(*grads)]


err = checks.sharded_gradients_match(model, src, tgt, 0, shards, all_reduce_then_divide)
print(f"summing then dividing by all the tokens equals the whole batch's gradient to {err:.1e}")
results["sum_then_divide_error"] = err
try:
    checks.sharded_gradients_match(model, src, tgt, 0, shards, average_of_means)
    raise SystemExit("averaging per-rank means should differ")
except AssertionError as e:
    print("averaging the ranks' means does not:", e)

# %% [markdown]
# ## The real thing: two MPI processes

# %%
mpiexec = Path(sys.executable).parent / "mpiexec"
mpiexec = str(mpiexec) if mpiexec.exists() else shutil.which("mpiexec")
if mpiexec:
    script = figure_dir("24") / "allreduce.py"
    script.write_text(
        "import numpy as np\nfrom minitensor import distributed\n"
        "comm = distributed.init()\n"
        "g = np.full(4, float(comm.rank + 1), dtype=np.float32)\n"
        "comm.all_reduce(g)\n"
        "if comm.rank == 0:\n"
        "    print('rank 0 of', comm.world_size, 'after all_reduce:', g.tolist())\n")
    out = subprocess.run([mpiexec, "-n", "2", sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    print(out.stdout)
    checks.agree(out.returncode, 0, f"mpiexec's exit status ({out.stderr[-300:]})", atol=0)
    checks.agree(json.loads(out.stdout.split("after all_reduce:")[1]), [3.0] * 4, "rank 0's array after the all-reduce of 1s and 2s", atol=0)
else:
    print("mpiexec not found: pip install -e '.[mpi]' to run this part")

# %% tags=["fold"]
whole, per_rank, tokens = checks.shard_gradients(model, src, tgt, 0, shards)
summed, wrong = all_reduce_then_divide(per_rank, tokens), average_of_means(per_rank, tokens)
fig, ax = plt.subplots(figsize=(5, 3))
flat_whole = np.concatenate([w.ravel() for w in whole])
ax.scatter(flat_whole, np.concatenate([s.ravel() for s in summed]), s=4, label="sum, / global tokens")
ax.scatter(flat_whole, np.concatenate([w.ravel() for w in wrong]), s=4, label="mean of per-rank means")
ax.set_xlabel("gradient from the whole batch")
ax.set_ylabel("gradient from 2 ranks")
ax.legend()
show(fig, "24", "exact_data_parallel.png")

# %% [markdown]
# ## Exercise
#
# Exercise 24 of the track, `lessons/exercises/ex24_ring_all_reduce.py`, asks for
# `ring_all_reduce`, the sum across ranks by a ring, and what each rank sends.
# `python lessons/check.py 24` grades it and, at the first case it gets wrong, shows the input,
# what it expected and what it got.

# %% [markdown]
# # Lesson 16 — The learning-rate schedule (Section 5.3, equation 3)
#
# $$\mathit{lrate} = d_{\text{model}}^{-0.5} \cdot \min\left(\mathit{step}^{-0.5},\ \mathit{step} \cdot \mathit{warmup}^{-1.5}\right) \qquad (3)$$
#
# is a linear warm-up for $\mathit{warmup}$ steps (4000 in the paper), then a decay with the
# inverse square root of the step. The paper gives the schedule without a reason for its
# shape. Two are commonly given: Adam's second-moment estimates rest on few gradients at the
# start (lesson 5), and post-norm Transformers are known to diverge with a large learning
# rate early on.
#
# To see what the warm-up itself does, we compare two schedules that differ *only* in their
# first $w$ steps. Both peak at the same rate and decay the same way after it:
#
# - with warm-up: $\mathit{peak} \cdot \min(t / w,\ \sqrt{w / t})$, which is equation (3) up to a constant;
# - without: $\mathit{peak} \cdot \min(1,\ \sqrt{w / t})$, the peak rate from the first step.
#
# A third run asks what lesson 11 left open: later work (Xiong et al., 2020) found that
# pre-norm layers, $x + \mathrm{Sublayer}(\mathrm{LayerNorm}(x))$, train without a warm-up. Same
# schedule without warm-up, the layers switched to pre-norm (`norm_first=True`).
#
# **Teaches:** `noam_lr`, `NoamSchedule`, `paper_adam`; the learning-rate schedule, warm-up.
#
# **Uses:** the copy task, Adam, pre-norm, greedy decoding, exact match.

# %%
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from transformer import NoamSchedule, Transformer, TransformerConfig, noam_lr, paper_adam
from transformer.copytask import CopyTaskSettings, evaluate, make_batch
from transformer.loss import label_smoothed_loss
from lessonkit import Results, checks, show, smoke, spread

results = Results("16")
steps = np.arange(1, 100_001)
lr = [noam_lr(s, 512, 4000) for s in steps[::100]]
print(f"base model: peak {max(lr):.2e} at step 4000; {noam_lr(100_000, 512, 4000):.2e} at step 100k")
checks.follows_equation_3(noam_lr, [(1, 512, 4000), (4000, 512, 4000), (4001, 512, 4000), (100_000, 512, 4000)])

# %% [markdown]
# `paper_adam(params)` is Adam with the paper's $\beta_1 = 0.9$, $\beta_2 = 0.98$,
# $\epsilon = 10^{-9}$; `NoamSchedule(optimizer, d_model, warmup)` sets its `lr` from
# equation (3) at every `step()`, to be called before the optimizer's.

# %%
mt.manual_seed(0)
opt = paper_adam([mt.nn.Parameter(np.zeros(3, np.float32))])
sched = NoamSchedule(opt, 512, warmup=4000)
seen = []
for _ in range(3):
    sched.step()
    seen.append(opt.lr)
checks.agree(seen, [noam_lr(t, 512, 4000) for t in (1, 2, 3)], "the optimizer's rate after 1, 2, 3 schedule steps",
             atol=0, rtol=1e-12)

# %% [markdown]
# The experiment: the copy task (lesson 14) with Adam as the paper sets it, warm-up $w = 100$,
# and the peak that equation (3) gives this model at step $w$. Several seeds each.

# %%
if smoke():
    s = CopyTaskSettings(batch=64, show_progress=False, model=TransformerConfig(13, d_model=32, n_heads=4, d_ff=64,
                                                                             n_encoder_layers=1, n_decoder_layers=1,
                                                                             dropout=0.0))
    n_steps, seeds = 150, [0, 1]
else:
    s = CopyTaskSettings(batch=64, show_progress=False)           # d_model 64, 2+2 layers
    n_steps, seeds = 500, [0, 1, 2]
w = 100
peak = noam_lr(w, s.model.d_model, w)
schedules = {"with warm-up": lambda t: peak * min(t / w, (w / t) ** 0.5),
             "without warm-up": lambda t: peak * min(1.0, (w / t) ** 0.5)}
arms = {"with warm-up": (schedules["with warm-up"], False),
        "without warm-up": (schedules["without warm-up"], False),
        "pre-norm, without warm-up": (schedules["without warm-up"], True)}
curves, final, exact = {}, {}, {}
val = make_batch(np.random.default_rng(9), 100, s)
for name, (schedule, norm_first) in arms.items():
    curves[name], final[name], exact[name] = [], [], []
    for seed in seeds:
        mt.manual_seed(seed)
        model = Transformer(replace(s.model_config(), norm_first=norm_first))  # the task's model, post- or pre-norm
        opt = paper_adam(model.parameters())  # Adam with beta2 0.98 and eps 1e-9, as in the paper
        rng = np.random.default_rng(seed)
        losses = []
        for t in range(1, n_steps + 1):
            src, ti, to = make_batch(rng, s.batch, s)
            loss = label_smoothed_loss(model(src, ti), mt.tensor(to), 0, 0.0)
            opt.zero_grad()
            loss.backward()
            opt.lr = schedule(t)
            opt.step()
            losses.append(loss.item())
        curves[name].append(losses)
        final[name].append(float(np.mean(losses[-20:])))
        exact[name].append(evaluate(model, val, s)[0])
        print(f"{name}, seed {seed}: final loss {final[name][-1]:.3f}, exact match {exact[name][-1]:.0%}")
    key = name.replace(" ", "_").replace(",", "")
    results[f"final_loss_{key}"] = final[name]
    results[f"exact_match_{key}"] = exact[name]
checks.always_lower(final["with warm-up"], final["without warm-up"], "warm-up vs none at the same peak")
results.finding(
    f"Copy task, d_model {s.model.d_model}, {n_steps} updates, peak rate {peak:.4f} (equation 3 at step {w}), "
    f"{len(seeds)} seeds: with warm-up the final loss is {spread(final['with warm-up'])} and greedy decoding "
    f"copies a fraction {spread(exact['with warm-up'])} of 100 test sequences exactly; starting at the peak "
    f"instead, the loss is {spread(final['without warm-up'])} and the fraction {spread(exact['without warm-up'])}; "
    f"pre-norm layers without warm-up reach {spread(final['pre-norm, without warm-up'])} and "
    f"{spread(exact['pre-norm, without warm-up'])}.")
if not smoke():  # at the smoke budget (one layer, 150 updates) the two norms are not told apart
    checks.always_lower(final["pre-norm, without warm-up"], final["without warm-up"], "pre-norm vs post-norm, no warm-up")
    checks.between(final["without warm-up"], 2.0, 2.8, "post-norm without warm-up: the final loss (log 11 ≈ 2.4)")

# %% [markdown]
# The finding line above sums up the seeds. What follows describes the full run (two layers,
# 500 updates); the smoke run (one layer, 150 updates) is too small and too short to show it,
# and its finding line says only what it saw. Started at the peak rate, the first updates of
# Adam are large (its second-moment estimate is built from a handful of gradients), and the
# model falls to predicting the same distribution over symbols for every position: the loss
# sits at about $\log 11 \approx 2.4$ and does not come back down, although the rate decays after
# step 100. (Why 11: the ten symbols and the end token.) With the warm-up the same peak is reached gently, and the model learns the task.
# The pre-norm model, whose residual path bypasses every LayerNorm, survives the same start
# without warm-up.

# %% tags=["fold"]
fig, axes = plt.subplots(1, 3, figsize=(14, 3.5))
axes[0].plot(steps[::100], lr)
axes[0].set_xlabel("step")
axes[0].set_ylabel("learning rate")
axes[0].set_title("equation (3), d_model 512, warm-up 4000")
ts = np.arange(1, n_steps + 1)
for (name, schedule), color in zip(schedules.items(), ("tab:blue", "tab:red")):
    axes[1].plot(ts, [schedule(t) for t in ts], color=color, label=name)
for name, color in zip(arms, ("tab:blue", "tab:red", "tab:green")):
    c = np.array(curves[name])
    axes[2].fill_between(ts, c.min(0), c.max(0), color=color, alpha=0.25)
    axes[2].plot(ts, c.mean(0), color=color, label=f"{name} (mean, min–max of {len(seeds)} seeds)")
axes[1].set_xlabel("step")
axes[1].set_ylabel("learning rate")
axes[1].set_title("the two schedules of the experiment")
axes[1].legend(fontsize=7)
axes[2].set_yscale("log")
axes[2].set_xlabel("step")
axes[2].set_ylabel("copy-task loss")
axes[2].legend(fontsize=7)
fig.tight_layout()
show(fig, "16", "schedule.png")

# %% [markdown]
# ## Exercise
#
# Exercise 16 of the track, `lessons/exercises/ex16_schedule.py`, asks for `noam_lr`, equation
# (3), and the `Noam` schedule that sets your Adam's rate. With exercises 01–16 passed,
# `python lessons/check.py capstone` trains the copy task on your engine and model, and prints
# your engine's time per update beside minitensor's. `python lessons/check.py 16` grades it and,
# at the first case it gets wrong, shows the input, what it expected and what it got.

# %% [markdown]
# # Lesson 15 — The learning-rate schedule (Section 5.3, equation 3)
#
# lrate = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5): a linear warm-up for `warmup`
# steps (4000 in the paper), then decay with the inverse square root of the step. Adam's
# second-moment estimates are poor at the start, and post-norm Transformers are known to
# diverge with a large learning rate early on; warm-up avoids both. We plot the schedule and
# train the copy task with and without warm-up at the same peak rate.

# %%
import numpy as np

import minitensor as mt
from transformer import noam_lr
from transformer.copytask import CopyTaskSettings, build_model, evaluate, make_batch
from transformer.lesson import figure_dir, smoke
from transformer.loss import label_smoothed_loss
from transformer.schedule import paper_adam

steps = np.arange(1, 100_001)
lr = [noam_lr(s, 512, 4000) for s in steps[::100]]
print(f"base model: peak {max(lr):.2e} at step 4000; {noam_lr(100_000, 512, 4000):.2e} at step 100k")
assert abs(noam_lr(4000, 512) - 512**-0.5 * 4000**-0.5) < 1e-15

n_steps = 120 if smoke() else 500
s = CopyTaskSettings(batch=64, show_progress=False)
peak = noam_lr(100, 64, 100) * 2
runs = {}
for name, schedule in {"warm-up 100, then 1/√step": lambda t: 2 * noam_lr(t, 64, 100),
                       "constant at the same peak": lambda t: peak}.items():
    mt.manual_seed(0)
    model = build_model(s)
    opt = paper_adam(model.parameters())
    rng = np.random.default_rng(0)
    losses = []
    for t in range(1, n_steps + 1):
        src, ti, to = make_batch(rng, s.batch, s)
        loss = label_smoothed_loss(model(src, ti), mt.tensor(to), 0, 0.0)
        opt.zero_grad()
        loss.backward()
        opt.lr = schedule(t)
        opt.step()
        losses.append(loss.item())
    runs[name] = losses
    val = make_batch(np.random.default_rng(9), 100, s)
    print(f"{name}: final loss {np.mean(losses[-20:]):.3f}, exact match {evaluate(model, val, s)[0]:.0%}")
if not smoke():
    first, second = runs.values()
    assert np.mean(first[-20:]) < np.mean(second[-20:])

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
axes[0].plot(steps[::100], lr)
axes[0].set_xlabel("step")
axes[0].set_ylabel("learning rate")
axes[0].set_title("equation (3), d_model 512, warm-up 4000")
for name, losses in runs.items():
    axes[1].plot(losses, label=name)
axes[1].set_yscale("log")
axes[1].set_xlabel("step")
axes[1].set_ylabel("copy-task loss")
axes[1].legend()
fig.tight_layout()
fig.savefig(figure_dir("15") / "schedule.png")
print("saved", figure_dir("15") / "schedule.png")

# %% [markdown]
# # Lesson 4 — Modules and optimizers
#
# A `nn.Module` registers every `Parameter` and sub-module you assign to it, so
# `model.parameters()` finds all weights, `state_dict()` saves them and `train()/eval()` flip
# dropout everywhere. An optimizer holds the parameters and updates them from `.grad`.
# Adam (Kingma & Ba) is what the paper uses (Section 5.3), with β1 = 0.9, β2 = 0.98, ε = 1e-9.

# %%
import numpy as np

import minitensor as mt
import minitensor.functional as F
from minitensor import nn, optim
from transformer.lesson import figure_dir, smoke


class MLP(nn.Module):
    def __init__(self, d_in, d_hidden, d_out):
        super().__init__()
        self.hidden = nn.Linear(d_in, d_hidden)   # weight (d_in, d_hidden): the paper's x W + b
        self.out = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.out(F.relu(self.hidden(x)))


mt.manual_seed(0)
model = MLP(2, 32, 3)
print(model)
print([name for name, _ in model.named_parameters()], model.num_parameters(), "weights")

# %% [markdown]
# ## Adam, written out
#
# For each parameter θ with gradient g, Adam keeps running averages of g and g², corrects
# their bias towards 0 (both start at 0), and scales the step by the inverse root of the second:
#
#     m ← β1·m + (1−β1)·g          v ← β2·v + (1−β2)·g²
#     m̂ = m / (1 − β1^t)           v̂ = v / (1 − β2^t)
#     θ ← θ − lr · m̂ / (√v̂ + ε)
#
# So every weight moves by about lr per step whatever the size of its gradient, and early
# steps rest on few gradients: lesson 15 comes back to that. The check below runs
# `optim.Adam` for three steps and compares it with these lines.

# %%
from transformer import checks  # noqa: E402

checks.adam_step_matches_the_formula(lambda ps: optim.Adam(ps, lr=0.01, betas=(0.9, 0.98), eps=1e-9))
print("optim.Adam follows the update above, step for step")

# %% [markdown]
# ## SGD with momentum against Adam
#
# Three interleaved spirals, 3 classes. The loss is the cross entropy of the network's three
# outputs (logits) against the class, −log softmax(logits)[class]: lesson 5 derives it; here
# it is the number to push down. Two optimisers differ in more than their update: each has a
# learning rate that suits it. So each gets the best of three rates, on the same model from
# the same initial weights for the same number of steps.

# %%
rng = np.random.default_rng(0)
n = 100
t = rng.uniform(0.2, 1.0, (3, n))
pts = np.concatenate([np.stack([t[k] * np.cos(4 * t[k] + 2.1 * k), t[k] * np.sin(4 * t[k] + 2.1 * k)], 1)
                      for k in range(3)]).astype(np.float32)
labels = np.repeat(np.arange(3), n)
X, Y = mt.tensor(pts), mt.tensor(labels)
steps = 150 if smoke() else 600
optimisers = {"SGD momentum 0.9": (lambda p, lr: optim.SGD(p, lr=lr, momentum=0.9), (0.03, 0.1, 0.3)),
              "Adam (0.9, 0.98, 1e-9)": (lambda p, lr: optim.Adam(p, lr=lr, betas=(0.9, 0.98), eps=1e-9),
                                         (0.003, 0.01, 0.03))}
curves = {}
for name, (make, rates) in optimisers.items():
    best = None
    for lr in rates:
        mt.manual_seed(0)
        net = MLP(2, 32, 3)
        opt = make(net.parameters(), lr)
        losses = []
        for _ in range(steps):
            loss = F.cross_entropy(net(X), Y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        acc = (net(X).numpy().argmax(-1) == labels).mean()
        print(f"{name}, lr {lr}: loss {losses[0]:.3f} -> {losses[-1]:.3f}, accuracy {acc:.1%}")
        if best is None or losses[-1] < best[1][-1]:
            best = (lr, losses, acc, net)
    lr, losses, acc, net = best
    curves[f"{name}, lr {lr}"] = losses
    checks.always_lower([losses[-1]], [losses[0] / 2], f"{name}: final loss vs half the first")  # training works at all
    print(f"  best: lr {lr}")

# %% [markdown]
# ## Saving and loading
#
# `state_dict()` maps dotted names to tensors; `load_state_dict` checks names and shapes.

# %%
clone = MLP(2, 32, 3)
clone.load_state_dict(net.state_dict())
checks.agree(clone(X).numpy(), net(X).numpy(), "the loaded clone vs the original", atol=0)
message = checks.load_is_refused(MLP(2, 16, 3), net.state_dict())  # a narrower model must refuse these weights
print("shape mismatch is reported:", message[:90], "...")

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(5, 3))
for name, losses in curves.items():
    ax.plot(losses, label=name)
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("cross entropy")
ax.legend()
fig.tight_layout()
fig.savefig(figure_dir("04") / "sgd_vs_adam.png")
print("saved", figure_dir("04") / "sgd_vs_adam.png")

# %% [markdown]
# ## Exercise
#
# Write `adam_update` yourself (one Adam update, written out): the stub and what it must
# do are in `lessons/exercises/04_adam_update.py`. Then `python lessons/check.py 04` grades it with the
# package's own checks, and shows the smallest input it gets wrong, if any.

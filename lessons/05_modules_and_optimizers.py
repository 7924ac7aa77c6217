# %% [markdown]
# # Lesson 5 — Modules and optimizers (Section 5.3)
#
# A `nn.Module` registers every `Parameter` and sub-module you assign to it, so
# `model.parameters()` finds all the weights and `state_dict()` saves them. An optimizer
# holds the parameters and updates them from their `.grad`; lesson 4 did that update by hand.
# Adam (Kingma & Ba, 2015) is what the paper uses (Section 5.3), with $\beta_1 = 0.9$,
# $\beta_2 = 0.98$ and $\epsilon = 10^{-9}$.
#
# **Teaches:** `nn.Module`, `nn.Linear`, `nn.Embedding`, `nn.ModuleList`,
# `F.relu`, `parameters`, `named_parameters`, `num_parameters`, `state_dict`,
# `load_state_dict`, `astype`, `zero_grad`, `optim.SGD`, `optim.Adam`, `mt.manual_seed`;
# modules, optimizers, Adam.
#
# **Uses:** cross-entropy, reverse-mode differentiation.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
import minitensor.functional as F
from minitensor import nn, optim
from lessonkit import Results, checks, show, smoke

results = Results("05")


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
# For each parameter $\theta$ with gradient $g$, Adam keeps running averages of $g$ and $g^2$,
# corrects their bias towards 0 (both start at 0), and scales the step by the inverse root of
# the second. At step $t$, with learning rate $\eta$:
#
# $$m \leftarrow \beta_1 m + (1 - \beta_1) g, \qquad v \leftarrow \beta_2 v + (1 - \beta_2) g^2,$$
#
# $$\hat m = \frac{m}{1 - \beta_1^t}, \qquad \hat v = \frac{v}{1 - \beta_2^t}, \qquad
# \theta \leftarrow \theta - \eta \frac{\hat m}{\sqrt{\hat v} + \epsilon}.$$
#
# So every weight moves by about $\eta$ per step whatever the size of its gradient, and the
# first steps rest on few gradients: lesson 16 comes back to that. The check below runs
# `optim.Adam` for three steps and compares it with these lines.

# %%
checks.adam_step_matches_the_formula(lambda ps: optim.Adam(ps, lr=0.01, betas=(0.9, 0.98), eps=1e-9))
print("optim.Adam follows the update above, step for step")

# %% [markdown]
# ## SGD with momentum against Adam
#
# Three interleaved spirals, 3 classes, learned by a small network of two `nn.Linear` layers
# with a ReLU, $\max(0, x)$, between them. The loss is the cross-entropy of its three outputs
# (lesson 4). Two optimisers differ in more than their update: each has a learning rate that
# suits it. So each gets the best of three rates, on the same model from the same initial
# weights for the same number of steps.

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
        print(f"{name}, lr {lr}: loss {losses[0]:.3g} -> {losses[-1]:.3g}, accuracy {acc:.1%}")
        if best is None or losses[-1] < best[1][-1]:
            best = (lr, losses, acc, net)
    lr, losses, acc, net = best
    curves[f"{name}, lr {lr}"] = losses
    results[f"final_loss/{name}"] = losses[-1]
    results[f"accuracy/{name}"] = float(acc)
    checks.always_lower([losses[-1]], [losses[0] / 2], f"{name}: final loss vs half the first")  # training works at all
    print(f"  best: lr {lr}")

# %% tags=["fold"]
fig, ax = plt.subplots(figsize=(5, 3))
for name, losses in curves.items():
    ax.plot(losses, label=name)
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("cross entropy")
ax.legend()
show(fig, "05", "sgd_vs_adam.png")

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

# %% [markdown]
# ## Three more tools the lessons use
#
# - `nn.Embedding(n, d)` is a table of $n$ learned vectors of width $d$; called with integer
#   ids it returns their rows. It is how a token id becomes a vector.
# - `nn.ModuleList` holds a list of sub-modules so that their parameters are registered too.
# - `module.astype(np.float64)` converts every parameter; gradient checks (lesson 3) need
#   float64.

# %%
mt.manual_seed(0)
table = nn.Embedding(10, 4)
rows = table(mt.tensor(np.array([[3, 3, 7]])))
checks.agree(rows.numpy()[0], table.weight.numpy()[[3, 3, 7]], "embedding rows vs the table's rows 3, 3, 7", atol=0)
rows.backward(mt.tensor(np.ones(rows.shape)))
checks.agree(table.weight.grad.numpy()[[3, 7, 0]].sum(1), [8.0, 4.0, 0.0],
             "the table's gradient: row 3 used twice, row 7 once, row 0 never", atol=0)
stack = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)]).astype(np.float64)
print(f"{len(stack.parameters())} parameter tensors registered through the ModuleList, dtype {stack[0].weight.dtype}")
checks.agree(len(stack.parameters()), 6, "parameters of three Linear layers in a ModuleList", atol=0)

# %% [markdown]
# ## Exercise
#
# Exercise 05 of the track, `lessons/exercises/ex05_module_and_adam.py`, asks for a `Module`
# that finds its parameters by name, a `Linear` layer, and `Adam.step`.
# `python lessons/check.py 05` grades it and, at the first case it gets wrong, shows the input,
# what it expected and what it got.

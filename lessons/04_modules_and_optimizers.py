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
# Three interleaved spirals, 3 classes. SGD with momentum against Adam, same model, same steps.

# %%
rng = np.random.default_rng(0)
n = 100
t = rng.uniform(0.2, 1.0, (3, n))
pts = np.concatenate([np.stack([t[k] * np.cos(4 * t[k] + 2.1 * k), t[k] * np.sin(4 * t[k] + 2.1 * k)], 1)
                      for k in range(3)]).astype(np.float32)
labels = np.repeat(np.arange(3), n)
X, Y = mt.tensor(pts), mt.tensor(labels)
steps = 150 if smoke() else 600
curves = {}
for name, make in {"SGD momentum 0.9": lambda p: optim.SGD(p, lr=0.1, momentum=0.9),
                   "Adam (0.9, 0.98, 1e-9)": lambda p: optim.Adam(p, lr=0.02, betas=(0.9, 0.98), eps=1e-9)}.items():
    mt.manual_seed(0)
    net = MLP(2, 32, 3)
    opt = make(net.parameters())
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(net(X), Y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    acc = (net(X).numpy().argmax(-1) == labels).mean()
    curves[name] = losses
    print(f"{name}: loss {losses[0]:.3f} -> {losses[-1]:.3f}, accuracy {acc:.1%}")
    assert losses[-1] < losses[0] / 2

# %% [markdown]
# ## Saving and loading
#
# `state_dict()` maps dotted names to tensors; `load_state_dict` checks names and shapes.

# %%
clone = MLP(2, 32, 3)
clone.load_state_dict(net.state_dict())
assert np.allclose(clone(X).numpy(), net(X).numpy())
try:
    MLP(2, 16, 3).load_state_dict(net.state_dict())
except ValueError as e:
    print("shape mismatch is reported:", str(e)[:90], "...")

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

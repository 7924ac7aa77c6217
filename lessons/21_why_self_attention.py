# %% [markdown]
# # Lesson 21 — Why self-attention: Table 1, measured (Section 4)
#
# Section 4 compares a self-attention layer with a recurrent and a convolutional one that map
# n vectors of width d to n vectors of width d, on three counts (Table 1):
#
# | layer | complexity per layer | sequential operations | maximum path length |
# |---|---|---|---|
# | self-attention | O(n²·d) | O(1) | O(1) |
# | recurrent | O(n·d²) | O(n) | O(n) |
# | convolutional (kernel k) | O(k·n·d²) | O(1) | O(log_k n) dilated, O(n/k) contiguous |
#
# Here the three layers are written with minitensor and each count is measured, not quoted:
# the operations that must run one after another are counted in the autograd graph, the path
# length between the first and the last position is found by asking which inputs each output
# depends on (lesson 10's influence map), and the cost is timed.

# %%
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import minitensor as mt  # noqa: E402
import minitensor.functional as F  # noqa: E402
from minitensor import nn  # noqa: E402
from minitensor.autograd import Context  # noqa: E402
from transformer import MultiHeadAttention, checks  # noqa: E402
from transformer.lesson import Results, figure_dir, smoke  # noqa: E402

results = Results("21")
out = figure_dir("21")


class Recurrent(nn.Module):
    """h_t = tanh(x_t U + h_(t-1) W): each position waits for the one before it."""

    def __init__(self, d):
        super().__init__()
        self.U, self.W = nn.Linear(d, d), nn.Linear(d, d, bias=False)

    def forward(self, x):
        h, outs = None, []
        for t in range(x.shape[1]):
            z = self.U(x[:, t])
            h = F.tanh(z if h is None else z + self.W(h))
            outs.append(h)
        return F.stack(outs, axis=1)


class Convolution(nn.Module):
    """y_t = ReLU(Concat(x_t, x_(t−dil), …, x_(t−(k−1)·dil)) W): k taps looking back (causal, as a
    decoder's must be, like ByteNet's and WaveNet's), zeros before the start."""

    def __init__(self, d, k=3, dilation=1):
        super().__init__()
        self.k, self.dilation = k, dilation
        self.proj = nn.Linear(k * d, d)

    def forward(self, x):
        B, n, d = x.shape
        back = (self.k - 1) * self.dilation
        xp = F.concat([mt.tensor(np.zeros((B, back, d), x.dtype)), x], axis=1)
        taps = [xp[:, back - j * self.dilation:back - j * self.dilation + n] for j in range(self.k)]
        return F.relu(self.proj(F.concat(taps, axis=-1)))


class SelfAttention(nn.Module):
    """The Transformer's multi-head self-attention (lesson 8), 4 heads."""

    def __init__(self, d):
        super().__init__()
        self.mha = MultiHeadAttention(d, 4)

    def forward(self, x):
        return self.mha(x, x, x)


def sequential_ops(y: mt.Tensor) -> int:
    """The longest chain of ops in y's autograd graph: how many must run one after another."""
    depth, stack = {}, [(y._ctx, False)]
    while stack:
        node, ready = stack.pop()
        if ready:
            depth[id(node)] = 1 + max((depth[id(e)] for e in node.edges if isinstance(e, Context)), default=0)
        elif id(node) not in depth:
            stack.append((node, True))
            stack.extend((e, False) for e in node.edges if isinstance(e, Context) and id(e) not in depth)
    return depth[id(y._ctx)]


# %% [markdown]
# ## Sequential operations
#
# A GPU runs every op of the graph on all positions at once, so what bounds the time of one
# layer is the chain of ops that must wait for one another. We count that chain.

# %%
d = 32
lengths = [8, 16, 32] if smoke() else [8, 16, 32, 64, 128]
layers = {"self-attention": SelfAttention(d), "recurrent": Recurrent(d), "convolution, k = 3": Convolution(d)}
chain = {name: [] for name in layers}
for n in lengths:
    x = mt.tensor(np.random.default_rng(0).standard_normal((1, n, d)).astype(np.float32), requires_grad=True)
    for name, layer in layers.items():
        chain[name].append(sequential_ops(layer(x)))
for name, c in chain.items():
    print(f"{name:>20}: longest chain of ops for n = {lengths}: {c}")
    results[f"sequential_ops/{name}"] = dict(zip(lengths, c))
checks.agree(chain["self-attention"], [chain["self-attention"][0]] * len(lengths), "self-attention's chain, any n", atol=0)
checks.agree(chain["convolution, k = 3"], [chain["convolution, k = 3"][0]] * len(lengths), "the convolution's chain", atol=0)
per_step = np.diff(chain["recurrent"]) / np.diff(lengths)
checks.agree(per_step, np.full(len(per_step), per_step[0]), "the recurrent chain's growth per position", atol=0)
results.finding(f"the longest chain of ops one layer must run in order stays at {chain['self-attention'][0]} for "
                f"self-attention and {chain['convolution, k = 3'][0]} for a convolution at every n from {lengths[0]} to "
                f"{lengths[-1]}; for the recurrent layer it grows by {per_step[0]:g} per position, to {chain['recurrent'][-1]}.")

# %% [markdown]
# ## Maximum path length
#
# How many layers must a signal cross to get from position 0 to position n − 1? One
# self-attention layer already connects every pair. A stack of (causal) convolutions with
# k = 3 taps looks k − 1 = 2 positions further back per layer, so it needs ⌈(n − 1)/2⌉
# layers; with dilations 1, 3, 9, … it reaches 3^L − 1 positions back after L layers, so it
# needs ⌈log_3 n⌉. We stack layers until output n − 1 depends on input 0. In a recurrent
# layer the path from x_0 to y_(n−1) runs through n − 1 applications of W, inside a single
# layer.

# %%
def layers_to_connect(make, n):
    x = np.random.default_rng(0).standard_normal((1, n, d)).astype(np.float64)
    stack = []
    for depth_ in range(1, n):
        stack.append(make(depth_ - 1).astype(np.float64))
        h = mt.tensor(x, requires_grad=True)
        y = _run(stack, h)
        cot = np.zeros(y.shape)
        cot[0, n - 1] = 1.0                      # ∂(sum of output n − 1) / ∂ input
        y.backward(mt.tensor(cot))
        if np.abs(h.grad.numpy()[0, 0]).max() > 0:
            return depth_
    raise AssertionError(f"position 0 never reaches position {n - 1}")


def _run(stack, h):
    for layer in stack:
        h = layer(h)
    return h


path_lengths = [5, 9, 17] if smoke() else [5, 9, 17, 33, 65, 129]
hops = {"self-attention": [], "convolution, k = 3": [], "dilated convolution, k = 3": []}
for n in path_lengths:
    hops["self-attention"].append(layers_to_connect(lambda i: SelfAttention(d), n))
    hops["convolution, k = 3"].append(layers_to_connect(lambda i: Convolution(d), n))
    hops["dilated convolution, k = 3"].append(layers_to_connect(lambda i: Convolution(d, 3, 3**i), n))
for name, h in hops.items():
    print(f"{name:>27}: layers before position {[n - 1 for n in path_lengths]} sees position 0: {h}")
    results[f"layers_to_connect/{name}"] = dict(zip(path_lengths, h))
checks.agree(hops["self-attention"], [1] * len(path_lengths), "self-attention: layers to connect 0 and n - 1", atol=0)
checks.agree(hops["convolution, k = 3"], [int(np.ceil((n - 1) / 2)) for n in path_lengths],
             "convolutions: layers to connect 0 and n - 1 (= ⌈(n − 1) / (k − 1)⌉)", atol=0)
checks.agree(hops["dilated convolution, k = 3"], [int(np.ceil(np.log(n) / np.log(3) - 1e-9)) for n in path_lengths],
             "dilated convolutions: layers to connect 0 and n - 1 (= ⌈log_3 n⌉)", atol=0)
results.finding(f"layers needed before the last of n positions sees the first, for n = {path_lengths}: self-attention "
                f"{hops['self-attention']}, contiguous convolutions (k = 3) {hops['convolution, k = 3']}, dilated "
                f"convolutions {hops['dilated convolution, k = 3']}.")

# %% [markdown]
# ## Complexity per layer, timed
#
# Forward and backward of one layer, batch 8, width d = 64, on this CPU. Self-attention does
# about 4·n·d² (the projections) + 2·n²·d (scores and weighted sum) multiply-adds; the
# recurrent layer 2·n·d², in n steps of one small product each; the convolution 3·n·d².
# Table 1's argument is that n²·d is the smaller term while n < d, which is the usual case
# for sentences, so self-attention is the cheaper layer there; its cost per position grows
# with n while the recurrent layer's stays flat. On a CPU every one of the recurrent layer's
# n steps also pays a fixed cost, the "sequential operations" column showing up as time.
# What the measurement can test: at n = d self-attention is the faster layer, and its time
# grows faster than the recurrent layer's as n passes d.

# %%
def seconds(layer, n, width, repeat):
    x = mt.tensor(np.random.default_rng(0).standard_normal((8, n, width)).astype(np.float32), requires_grad=True)
    layer(x).sum().backward()                     # a first call, untimed: memory, caches
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        layer(x).sum().backward()
        best = min(best, time.perf_counter() - t0)
    return best


width = 64
time_lengths = [16, 64, 256] if smoke() else [16, 32, 64, 128, 256, 512, 1024]
mt.manual_seed(0)
timed = {"self-attention": SelfAttention(width), "recurrent": Recurrent(width), "convolution, k = 3": Convolution(width)}
times = {name: [seconds(layer, n, width, 3 if smoke() else 7) for n in time_lengths] for name, layer in timed.items()}
slopes = {}
for name, t in times.items():
    slopes[name] = float(np.polyfit(np.log(time_lengths[-3:]), np.log(t[-3:]), 1)[0])
    print(f"{name:>20}: " + "  ".join(f"n={n}: {s * 1e3:.2f} ms" for n, s in zip(time_lengths, t)) +
          f"  | slope over the three longest {slopes[name]:.2f}")
    results[f"ms/{name}"] = dict(zip(time_lengths, [round(s * 1e3, 3) for s in t]))
    results[f"slope/{name}"] = slopes[name]
ratio = np.array(times["self-attention"]) / np.array(times["recurrent"])
print("self-attention / recurrent time:", "  ".join(f"n={n}: {r:.2f}" for n, r in zip(time_lengths, ratio)))
results["attention_over_recurrent"] = dict(zip(time_lengths, [round(float(r), 3) for r in ratio]))
at_d = time_lengths.index(width)                # n = d, where Table 1's two terms n²·d and n·d² meet
checks.between([ratio[at_d]], 0, 1, f"self-attention / recurrent time at n = d = {width}")
checks.between([ratio[-1] / ratio[at_d]], 1.0 if smoke() else 2.5, np.inf,
               f"the self-attention / recurrent time ratio, n = {time_lengths[-1]} vs n = {width}")
slower = [n for n, r in zip(time_lengths, ratio) if r > 1]
results.finding(f"timed on this CPU (d = {width}, batch 8, forward + backward), self-attention takes {ratio[at_d]:.2f}× the "
                f"recurrent layer's time at n = d = {width} and {ratio[-1]:.2f}× at n = {time_lengths[-1]}; "
                + (f"it becomes the slower one from n = {slower[0]}." if slower else
                   f"it stays the faster one up to n = {time_lengths[-1]}."))

fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
for name, t in times.items():
    axes[0].loglog(time_lengths, np.array(t) * 1e3, marker="o", label=name)
axes[0].set_xticks(time_lengths, [str(n) for n in time_lengths])
axes[0].minorticks_off()
axes[0].set_xlabel("sequence length n")
axes[0].set_ylabel("ms, forward + backward")
axes[0].legend(fontsize=8)
axes[0].grid(alpha=0.3)
for name, h in hops.items():
    axes[1].plot(path_lengths, h, marker="o", label=name)
axes[1].set_xlabel("n")
axes[1].set_ylabel("layers until position n−1 sees 0")
axes[1].legend(fontsize=8)
axes[1].grid(alpha=0.3)
fig.tight_layout()
fig.savefig(out / "table1.png")
print("saved", out / "table1.png")

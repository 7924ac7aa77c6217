# %% [markdown]
# # Lesson 13 — Why self-attention: Table 1, measured (Section 4)
#
# Section 4 compares a self-attention layer with a recurrent and a convolutional one that map
# $n$ vectors of width $d$ to $n$ vectors of width $d$, on three counts (Table 1; the
# contiguous kernels' $O(n/k)$ is from Section 4's text, the table gives the dilated case):
#
# | layer | complexity per layer | sequential operations | maximum path length |
# |---|---|---|---|
# | self-attention | $O(n^2 \cdot d)$ | $O(1)$ | $O(1)$ |
# | recurrent | $O(n \cdot d^2)$ | $O(n)$ | $O(n)$ |
# | convolutional (kernel $k$) | $O(k \cdot n \cdot d^2)$ | $O(1)$ | $O(\log_k n)$ dilated, $O(n/k)$ contiguous |
#
# Here the three layers are written with minitensor and each column is measured, not quoted,
# from the layer's own autograd graph: the multiply-adds of its matrix products, the longest
# chain of operations that must run one after another, and the number of layers a signal
# must cross from the first position to the last (with lesson 11's influence map).
#
# **Teaches:** `Context`, `edges`, `fn`, `Output`, `F.stack`, `F.concat`; operations per layer,
# sequential operations, maximum path length.
#
# **Uses:** multi-head attention, modules, influence maps, batched matrix products,
# reverse-mode differentiation.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
import minitensor.functional as F
from minitensor import nn
from minitensor.autograd import Context, Output
from transformer import MultiHeadAttention
from lessonkit import Results, checks, show, smoke

results = Results("13")


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
    """The Transformer's multi-head self-attention (lesson 9), 4 heads."""

    def __init__(self, d):
        super().__init__()
        self.mha = MultiHeadAttention(d, 4)

    def forward(self, x):
        return self.mha(x, x, x)


def sequential_ops(y: mt.Tensor) -> int:
    """The longest chain of ops in y's autograd graph: how many must run one after another. (An
    ``Output`` node hands on one output of an op with several, such as the Q, K and V
    projections made in one product: it is not an op of its own.)"""
    depth, stack = {}, [(y._ctx, False)]
    while stack:
        node, ready = stack.pop()
        if ready:
            depth[id(node)] = (node.fn is not Output) + max((depth[id(e)] for e in node.edges if isinstance(e, Context)),
                                                            default=0)
        elif id(node) not in depth:
            stack.append((node, True))
            stack.extend((e, False) for e in node.edges if isinstance(e, Context) and id(e) not in depth)
    return depth[id(y._ctx)]


def nodes(y: mt.Tensor) -> list:
    """Every node (Context) of y's autograd graph."""
    seen, stack = {}, [y._ctx]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            stack.extend(e for e in node.edges if isinstance(e, Context))
    return list(seen.values())


def multiply_adds(y: mt.Tensor) -> dict:
    """The multiply-adds of the matrix products in y's graph: the attention's own products
    (Q Kᵀ and the weights times V) and all the others (projections, recurrence, taps)."""
    count = {"attention": 0, "other products": 0}
    for node in nodes(y):
        name = node.fn.__name__
        if name == "ScaledDotProductAttention":            # q (..., n, d_k) against k and v (..., n, d_k)
            q, k, v = (e.shape for e in node.edges[:3])
            count["attention"] += int(np.prod(q[:-1])) * k[-2] * (q[-1] + v[-1])
        elif name in ("Linear", "Matmul"):                 # output (..., m, n), inner size from the first input
            count["other products"] += int(np.prod(node.shape)) * node.edges[0].shape[-1]
        elif name == "Linears":                            # several outputs (Q, K, V) of one input
            count["other products"] += sum(int(np.prod(s)) for s in node.shape) * node.edges[0].shape[-1]
    return count


# %% [markdown]
# ## Complexity per layer: multiply-adds, counted
#
# Each node of the graph records its op (`node.fn`) and where its inputs came from
# (`node.edges`), so the products can be counted from the graph a forward pass leaves behind.
# `MultiHeadAttention` makes Q, K and V of its one input in a single product (`Linears`), an op
# with three outputs: its node's `shape` lists the three, and each output has a small node of
# its own, `Output`, that only hands that output's gradient back to the op. `Output` computes
# nothing, so the chain counted below skips it.
# Expected, for one sequence of $n$ positions: the attention itself does $n^2 d$ multiply-adds
# for the scores $QK^\top$ and $n^2 d$ for the weighted sum of $V$; the four projections
# $W^Q, W^K, W^V, W^O$ do $4 n d^2$; the recurrent layer $h_t = \tanh(x_t U + h_{t-1} W)$
# does $2 n d^2$ (its first step has no $h_{t-1}$, so $d^2$ fewer); a convolution with
# $k = 3$ taps, $3 n d^2$.

# %%
d = 32
count_lengths = [8, 16, 32] if smoke() else [8, 16, 32, 64, 128]
counted = {name: [] for name in ("self-attention: attention", "self-attention: projections", "recurrent", "convolution, k = 3")}
for n in count_lengths:
    x = mt.tensor(np.random.default_rng(0).standard_normal((1, n, d)).astype(np.float32), requires_grad=True)
    sa = multiply_adds(SelfAttention(d)(x))
    counted["self-attention: attention"].append(sa["attention"])
    counted["self-attention: projections"].append(sa["other products"])
    counted["recurrent"].append(multiply_adds(Recurrent(d)(x))["other products"])
    counted["convolution, k = 3"].append(multiply_adds(Convolution(d)(x))["other products"])
ns = np.array(count_lengths)
checks.agree(counted["self-attention: attention"], 2 * ns**2 * d, "attention's own multiply-adds vs 2·n²·d", atol=0)
checks.agree(counted["self-attention: projections"], 4 * ns * d**2, "the projections' multiply-adds vs 4·n·d²", atol=0)
checks.agree(counted["recurrent"], 2 * ns * d**2 - d**2, "the recurrent layer's multiply-adds vs 2·n·d² − d²", atol=0)
checks.agree(counted["convolution, k = 3"], 3 * ns * d**2, "the convolution's multiply-adds vs 3·n·d²", atol=0)
for name, c in counted.items():
    print(f"{name:>28}: " + "  ".join(f"n={n}: {m:,}" for n, m in zip(count_lengths, c)))
    results[f"multiply_adds/{name}"] = dict(zip(count_lengths, c))
core_ratio = np.array(counted["self-attention: attention"]) / np.array(counted["recurrent"])
whole_ratio = (np.array(counted["self-attention: attention"]) + counted["self-attention: projections"]) / \
    np.array(counted["recurrent"])
print("attention's own products / the recurrent layer's:", "  ".join(f"n={n}: {r:.2f}" for n, r in zip(count_lengths, core_ratio)))
print("the whole self-attention layer / the recurrent layer's:", "  ".join(f"n={n}: {r:.2f}" for n, r in zip(count_lengths, whole_ratio)))
below, above = core_ratio[ns < d], core_ratio[ns > d]
checks.between(below, 0, 1, "attention's own products / the recurrent layer's, for n < d")
checks.between(above, 1, np.inf, "attention's own products / the recurrent layer's, for n > d")
results.finding(f"counted in the graph at d = {d}: the attention's own products (n²·d for the scores, n²·d for the "
                f"weighted sum) cost {core_ratio[0]:.2f}× the recurrent layer's multiply-adds at n = {count_lengths[0]} "
                f"and {core_ratio[-1]:.2f}× at n = {count_lengths[-1]}, crossing 1 near n = d, as Section 4 says; with its "
                f"four projections the whole self-attention layer costs {whole_ratio[0]:.2f}× to {whole_ratio[-1]:.2f}×.")

# %% [markdown]
# So Table 1's "complexity per layer" compares the attention operation itself, $n^2 d$,
# with the recurrence, $n d^2$: the attention is the cheaper of the two while $n < d$, the
# usual case for sentences cut into subwords. The projections around it are not in that
# column: a multi-head self-attention layer as a whole does $2 + n/d$ times the plain
# recurrent layer's arithmetic, more at every $n$. Its advantage lies in the next two columns.
#
# ## Sequential operations
#
# Parallel hardware runs each op of the graph on all positions at once, so what bounds the
# time of one layer is the chain of ops that must wait for one another. We count that chain.

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
# How many layers must a signal cross to get from position 0 to position $n - 1$? One
# self-attention layer already connects every pair. A stack of (causal) convolutions with
# $k = 3$ taps looks $k - 1 = 2$ positions further back per layer, so it needs
# $\lceil (n - 1)/2 \rceil$ layers; with dilations 1, 3, 9, … it reaches $3^L - 1$ positions
# back after $L$ layers, so it needs $\lceil \log_3 n \rceil$. We stack layers until output
# $n - 1$ depends on input 0. In a recurrent layer the path from $x_0$ to $y_{n-1}$ runs
# through $n - 1$ applications of $W$, inside a single layer.

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
# ## What a clock says on this machine
#
# Time is not one of Table 1's columns, and on a CPU it measures something else again.
# Forward and backward of one layer, batch 8, width $d = 64$, the median of several runs
# after a warm-up run. NumPy runs each op on all positions at once, but every op also pays
# a fixed cost in Python (tens of microseconds), and the recurrent layer runs its ops once
# per position: for small $d$ that fixed cost, the "sequential operations" column, can be
# most of its time. The numbers are shown, not checked: they depend on the machine, its BLAS and
# what else it is doing.

# %%
def median_seconds(layer, n, width, repeat):
    x = mt.tensor(np.random.default_rng(0).standard_normal((8, n, width)).astype(np.float32), requires_grad=True)
    layer(x).sum().backward()                     # a first call, untimed: memory, caches
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        layer(x).sum().backward()
        runs.append(time.perf_counter() - t0)
    return float(np.median(runs))


width = 64
time_lengths = [16, 64, 256] if smoke() else [16, 32, 64, 128, 256, 512, 1024]
mt.manual_seed(0)
timed = {"self-attention": SelfAttention(width), "recurrent": Recurrent(width), "convolution, k = 3": Convolution(width)}
times = {name: [median_seconds(layer, n, width, 3 if smoke() else 7) for n in time_lengths] for name, layer in timed.items()}
for name, t in times.items():
    print(f"{name:>20}: " + "  ".join(f"n={n}: {s * 1e3:.2f} ms" for n, s in zip(time_lengths, t)))
    results[f"median_ms_on_this_machine/{name}"] = dict(zip(time_lengths, [round(s * 1e3, 3) for s in t]))

# %% tags=["fold"]
# one colour per kind of layer in all three panels; the self-attention layer's projections dashed
colour = {"self-attention": "C0", "recurrent": "C1", "convolution, k = 3": "C2", "dilated convolution, k = 3": "C3"}
style = lambda name: {"color": colour[name.split(":")[0]], "linestyle": "--" if "projections" in name else "-"}  # noqa: E731
fig, axes = plt.subplots(1, 3, figsize=(13, 3.2))
for name, c in counted.items():
    axes[0].loglog(count_lengths, c, marker="o", label=name, **style(name))
axes[0].set_xlabel("sequence length n (d = 32)")
axes[0].set_ylabel("multiply-adds, counted")
axes[0].legend(fontsize=7)
axes[0].grid(alpha=0.3)
for name, h in hops.items():
    axes[1].plot(path_lengths, h, marker="o", label=name, **style(name))
axes[1].set_xlabel("n")
axes[1].set_ylabel("layers until position n−1 sees 0")
axes[1].legend(fontsize=7)
axes[1].grid(alpha=0.3)
for name, t in times.items():
    axes[2].loglog(time_lengths, np.array(t) * 1e3, marker="o", label=name, **style(name))
axes[2].set_xticks(time_lengths, [str(n) for n in time_lengths])
axes[2].minorticks_off()
axes[2].set_xlabel("sequence length n (d = 64)")
axes[2].set_ylabel("ms, forward + backward (this machine)")
axes[2].legend(fontsize=7)
axes[2].grid(alpha=0.3)
show(fig, "13", "table1.png")

# %% [markdown]
# ## Exercise
#
# Exercise 13 of the track, `lessons/exercises/ex13_path_length.py`, asks for `multiply_adds`
# and `sequential_products`, Table 1's counts, read from your engine's own graph.
# `python lessons/check.py 13` grades it and, at the first case it gets wrong, shows the input,
# what it expected and what it got.

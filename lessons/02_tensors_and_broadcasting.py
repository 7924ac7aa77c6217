# %% [markdown]
# # Lesson 2 — Tensors and broadcasting
#
# A `minitensor.Tensor` is an n-d array (NumPy here, CuPy on a GPU) plus what autograd needs.
# Ops broadcast like NumPy: shapes are aligned on the right, and an axis of size 1 (or a
# missing one) is stretched. The gradient must then be *summed back* over the stretched axes:
# the engine does that in exactly one place, `sum_to` in `minitensor/autograd.py`, so no op's
# backward ever thinks about broadcasting.
#
# **Teaches:** `sum_to`, `F.matmul`, `mt.cuda.is_available`; broadcasting, batched matrix
# products, dtypes and devices.
#
# **Uses:** reverse-mode differentiation.

# %%
import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
import minitensor.functional as F
from minitensor.autograd import sum_to
from lessonkit import Results, checks, show, smoke

results = Results("02")

x = mt.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)   # (2, 3)
b = mt.tensor(np.array([10.0, 20.0, 30.0]), requires_grad=True)    # (3,)  -> stretched over 2 rows
c = mt.tensor(np.array([[1.0], [2.0]]), requires_grad=True)         # (2, 1) -> stretched over 3 columns
y = (x + b) * c
print("y =\n", y.numpy())
y.sum().backward()
print("dL/db =", b.grad.numpy(), " (each b_j was used in 2 rows, scaled by c)")
print("dL/dc =", c.grad.numpy().ravel(), " (row sums of x + b)")
checks.agree(b.grad.numpy(), np.full(3, c.numpy().sum()), "dL/db", atol=1e-12)
checks.agree(c.grad.numpy().ravel(), (x.numpy() + b.numpy()).sum(1), "dL/dc", atol=1e-12)
checks.broadcast_gradient_is_summed(lambda u, v: u + v)  # the same with a random cotangent

# %% [markdown]
# ## `sum_to`: undoing a broadcast
#
# A gradient of shape (4, 2, 3) flowing to an input of shape (2, 1) is summed over the leading
# axis (which did not exist) and over the axis that had size 1.

# %%
g = np.ones((4, 2, 3))
print("sum_to((4, 2, 3) of ones, (2, 1)):", sum_to(g, (2, 1)).ravel(), "(each entry sums 4 x 3 ones)")
checks.agree(sum_to(g, (2, 1)), np.full((2, 1), 12.0), "sum_to of a (4, 2, 3) array of ones onto (2, 1)", atol=0)

# %% [markdown]
# ## Batched matrix products
#
# `a @ b` multiplies the last two axes and broadcasts the leading ones, so one weight matrix
# of shape $(d_{\text{in}}, d_{\text{out}})$ applies to every position of a batch of shape
# $(B, T, d_{\text{in}})$ at once: exactly what the Transformer's projections need. Its
# gradient is then a sum over the $B \cdot T$ positions it was applied to.

# %%
rng = np.random.default_rng(0)
h = mt.tensor(rng.standard_normal((5, 7, 4)), requires_grad=True)
W = mt.tensor(rng.standard_normal((4, 3)), requires_grad=True)
out = F.matmul(h, W)                # the same as h @ W
checks.agree(out.shape, (5, 7, 3), "the shape of (5, 7, 4) @ (4, 3)", atol=0)
cot = rng.standard_normal(out.shape)
out.backward(mt.tensor(cot))
flat_h, flat_cot = h.numpy().reshape(35, 4), cot.reshape(35, 3)
checks.agree(W.grad.numpy(), flat_h.T @ flat_cot, "dW: summed over the 5 x 7 positions it was applied to", atol=1e-10)
checks.agree(h.grad.numpy(), cot @ W.numpy().T, "dh: the cotangent times Wᵀ at every position", atol=1e-10)
print("batched matmul:", h.shape, "@", W.shape, "->", out.shape, "; both gradients agree with the formulas")

# %% [markdown]
# ## Devices and dtypes
#
# Python floats become float32 (the training dtype); arrays keep theirs (float64 is for
# gradient checks). A tensor can also live on a GPU, when CuPy and one are present;
# lesson 23 is about that.

# %%
print(mt.tensor([1.0, 2.0]).dtype, mt.tensor(np.zeros(2)).dtype, mt.tensor([1, 2]).dtype)
print("CUDA available:", mt.cuda.is_available())
checks.agree(np.dtype(mt.tensor([1.0, 2.0]).dtype).itemsize, 4, "bytes per entry of a tensor made from floats", atol=0)

# %% [markdown]
# ## Picture: which entries of the input feed one output entry
#
# A row (1, n) times a column (n, 1) broadcasts to an (n, n) grid. Send a gradient of 1 into a
# single entry of the grid, [2, 3]: exactly one entry of the row and one of the column
# receive it.

# %%
n = 6 if smoke() else 12
row = mt.tensor(np.ones((1, n)), requires_grad=True)
col = mt.tensor(np.ones((n, 1)), requires_grad=True)
grid = row * col  # (n, n) from (1, n) and (n, 1)
cot = np.zeros((n, n))
cot[2, 3] = 1.0
grid.backward(mt.tensor(cot))
checks.agree(row.grad.numpy(), np.eye(1, n, 3), "d grid[2,3] / d row: 1 at column 3, 0 elsewhere", atol=0)
checks.agree(col.grad.numpy(), np.eye(n, 1, -2), "d grid[2,3] / d col: 1 at row 2, 0 elsewhere", atol=0)

# %% tags=["fold"]
fig, axes = plt.subplots(1, 2, figsize=(7, 3), gridspec_kw={"width_ratios": [3, 1]})
for ax, g, title in ((axes[0], row.grad.numpy(), "d grid[2,3] / d row (1 x n)"),
                     (axes[1], col.grad.numpy(), "d grid[2,3] / d col (n x 1)")):
    im = ax.imshow(g, cmap="viridis", vmin=0, vmax=1)
    ax.set_title(title, fontsize=9)
    ax.set_xticks(range(g.shape[1]))
    ax.set_yticks(range(g.shape[0]))
fig.colorbar(im, ax=axes, label="gradient", shrink=0.8)
show(fig, "02", "broadcast_gradient.png")

# %% [markdown]
# ## Exercise
#
# Exercise 02 of the track, `lessons/exercises/ex02_broadcasting.py`, asks for `sum_to`, which
# brings a broadcast gradient back to its input's shape, and the backward of the matrix product;
# the file then gives your `Tensor` the rest of its operations. `python lessons/check.py 02`
# grades it and, at the first case it gets wrong, shows the input, what it expected and what it
# got.

# %% [markdown]
# # Lesson 3 — Gradient checking with hypothesis
#
# Every op of minitensor is a `Function`: a `forward` on plain arrays and, beside it, a
# `backward` that turns the gradient of the output into the gradients of the inputs. How do
# we know a backward is right? Compare it with central differences (lesson 1) for **every**
# entry of every input, in float64. And use a **random cotangent** $v$: check the gradient of
# $\langle v, f(x) \rangle$, not of $\sum f(x)$.
#
# Why that matters is easiest to see on the op this lesson writes: the softmax, which turns a
# vector of scores into probabilities,
#
# $$\mathrm{softmax}(x)_i = \frac{e^{x_i}}{\sum_j e^{x_j}} .$$
#
# Its outputs always sum to 1, so the gradient of their sum is 0 whatever $x$ is, and a
# backward that gets the Jacobian wrong can still return 0 there. Then let **hypothesis** pick
# the shapes: it tries many (size-1 axes and broadcasting included) and, when one fails,
# shrinks it to the smallest failing example.
#
# **Teaches:** `Function`, `apply`, `save_for_backward`, `saved`, `mt.gradcheck`, `F.softmax`,
# `arrays`, `broadcastable_shapes`, `matmul_pairs`; gradient checking, random cotangents,
# softmax, property-based testing.
#
# **Uses:** reverse-mode differentiation, finite differences, broadcasting, batched matrix
# products.

# %%
import matplotlib.pyplot as plt
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor.autograd import Function
from minitensor.testing import arrays, broadcastable_shapes, matmul_pairs
from lessonkit import Results, checks, show, smoke

results = Results("03")
examples = 5 if smoke() else 40

# %% [markdown]
# ## An op of our own
#
# The Jacobian of the softmax is $\mathrm{diag}(y) - y y^\top$ (with $y = \mathrm{softmax}(x)$),
# so the gradient for a cotangent $g$ is $y \odot (g - \sum_j g_j y_j)$. `forward` saves $y$
# with `ctx.save_for_backward`; `backward` finds it in `ctx.saved`. A second version makes a
# plausible mistake: it subtracts the plain mean of $g$ instead of its $y$-weighted sum.

# %%
class MySoftmax(Function):
    """y = softmax(x) over the last axis; dx = y ⊙ (g − Σ_j g_j y_j)."""

    @staticmethod
    def forward(ctx, x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))    # shifting by the max changes nothing but avoids overflow
        y = e / e.sum(axis=-1, keepdims=True)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return y * (grad - (grad * y).sum(axis=-1, keepdims=True))


class WrongSoftmax(MySoftmax):
    """The same forward; the backward subtracts the mean of g, not its y-weighted sum."""

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return y * (grad - grad.mean(axis=-1, keepdims=True))


x = mt.tensor(np.random.default_rng(0).standard_normal((3, 5)), requires_grad=True)
checks.agree(MySoftmax.apply(x).numpy(), F.softmax(x).numpy(), "our softmax vs minitensor's F.softmax", atol=1e-15)

# the gradient of sum(): both give zero, the bug is invisible
WrongSoftmax.apply(x).sum().backward()
print("the gradient of sum(softmax) from the wrong backward:", np.abs(x.grad.numpy()).max())
results["wrong_backward_gradient_of_sum"] = float(np.abs(x.grad.numpy()).max())

# a random cotangent exposes it
message = checks.gradcheck_rejects(WrongSoftmax.apply, [x], "the wrong softmax")
print("gradcheck caught it:", message.splitlines()[0])
checks.passes_gradcheck(MySoftmax.apply, [x], "our softmax")
checks.passes_gradcheck(F.softmax, [x], "minitensor's softmax")
print("ours and minitensor's pass")

# %% [markdown]
# ## Property-based: let hypothesis choose the shapes
#
# Two properties, each tried on many shapes: a product of two broadcast operands, and a
# batched matrix product (lesson 2). `arrays`, `broadcastable_shapes` and `matmul_pairs` come
# from `minitensor.testing`; the project's own tests use them on every op.

# %%
@settings(max_examples=examples, deadline=None, derandomize=True)
@given(data=st.data())
def mul_broadcasts_and_differentiates(data):
    sa, sb = data.draw(broadcastable_shapes(2))
    a = mt.tensor(data.draw(arrays(sa)), requires_grad=True)
    b = mt.tensor(data.draw(arrays(sb)), requires_grad=True)
    checks.passes_gradcheck(lambda u, v: u * v, [a, b], f"mul of shapes {sa} and {sb}")


@settings(max_examples=examples, deadline=None, derandomize=True)
@given(pair=matmul_pairs())
def matmul_differentiates(pair):
    a, b = (mt.tensor(m, requires_grad=True) for m in pair)
    checks.passes_gradcheck(F.matmul, [a, b], f"matmul of shapes {a.shape} and {b.shape}")


mul_broadcasts_and_differentiates()
matmul_differentiates()
print(f"hypothesis: {examples} shapes each for mul (broadcasting) and matmul (batched), all pass")
results["examples_per_property"] = examples

# %% [markdown]
# ## The error of central differences against the step $h$
#
# Too large an $h$: the truncation error, of order $h^2$. Too small: float rounding, of order
# $\epsilon / h$ with $\epsilon \approx 10^{-16}$ in float64. `mt.gradcheck`'s default
# $h = 10^{-6}$ sits near the bottom of the valley.

# %%
hs = np.logspace(-12, -1, 23)
true = np.cos(1.0)
err = [abs((np.sin(1 + h) - np.sin(1 - h)) / (2 * h) - true) for h in hs]
best_h = hs[int(np.argmin(err))]
print(f"smallest error {min(err):.1e} at h = {best_h:.0e}; at h = 0.1 the error is {err[-1]:.1e}")
checks.between([min(err)], 0, 1e-9, "the error at the best h")
checks.between([err[-1]], 1e-4, np.inf, "the error at h = 0.1 (truncation)")

# %% tags=["fold"]
fig, ax = plt.subplots(figsize=(5, 3))
ax.loglog(hs, err, marker="o")
ax.set_xlabel("h")
ax.set_ylabel("|error| of d sin/dx at 1")
ax.grid(alpha=0.3)
show(fig, "03", "finite_difference_error.png")

# %% [markdown]
# ## Exercise
#
# Exercise 03 of the track, `lessons/exercises/ex03_gradcheck.py`, asks for `numerical_gradient`
# (central differences) and `gradcheck`, which checks your engine's backward of any function
# against it. `python lessons/check.py 03` grades it and, at the first case it gets wrong, shows
# the input, what it expected and what it got.

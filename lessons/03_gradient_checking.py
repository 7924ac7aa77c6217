# %% [markdown]
# # Lesson 3 — Gradient checking with hypothesis
#
# How do we know a backward is right? Compare it with central differences,
# (f(x + h e_j) - f(x - h e_j)) / 2h, for **every** entry j, in float64. And use a **random
# cotangent** v: we check d<v, f(x)>/dx, not the gradient of sum(f). Why that matters: the sum
# of a softmax is always 1, so the gradient of sum(softmax) is 0 — a backward that returns
# zeros passes that check while being completely wrong.
#
# Then let **hypothesis** pick the shapes: it tries many (including size-1 axes and
# broadcasting) and, if one fails, shrinks it to the smallest failing example.

# %%
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import minitensor as mt
import minitensor.functional as F
from minitensor.ops.softmax import Softmax
from minitensor.testing import arrays, broadcastable_shapes, shapes
from transformer import checks
from transformer.lesson import figure_dir, smoke

examples = 5 if smoke() else 40


class WrongSoftmax(Softmax):
    """Forward is right; backward forgets to weight the subtracted term by y."""

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return y * (grad - grad.mean(axis=ctx.axis, keepdims=True))


x = mt.tensor(np.random.default_rng(0).standard_normal((3, 5)), requires_grad=True)

# the gradient of sum(): both give zero, the bug is invisible
WrongSoftmax.apply(x, axis=-1).sum().backward()
print("sum-only check, wrong backward gives:", np.abs(x.grad.numpy()).max())

# a random cotangent exposes it
message = checks.gradcheck_rejects(lambda t: WrongSoftmax.apply(t, axis=-1), [x], "the wrong softmax")
print("gradcheck caught it:", message[:120], "...")
checks.passes_gradcheck(lambda t: F.softmax(t, axis=-1), [x], "softmax")
print("and the real softmax passes")

# %% [markdown]
# ## Property-based: let hypothesis choose the shapes

# %%
@settings(max_examples=examples, deadline=None, derandomize=True)
@given(data=st.data())
def mul_broadcasts_and_differentiates(data):
    sa, sb = data.draw(broadcastable_shapes(2))
    a = mt.tensor(data.draw(arrays(sa)), requires_grad=True)
    b = mt.tensor(data.draw(arrays(sb)), requires_grad=True)
    checks.passes_gradcheck(lambda u, v: u * v, [a, b], f"mul of shapes {sa} and {sb}")


@settings(max_examples=examples, deadline=None, derandomize=True)
@given(x=arrays(shapes(min_dims=1, max_dims=3, min_side=2)))
def layer_norm_differentiates(x):
    checks.passes_gradcheck(F.layer_norm, [mt.tensor(x, requires_grad=True)], f"layer_norm of shape {x.shape}")


mul_broadcasts_and_differentiates()
layer_norm_differentiates()
print(f"hypothesis: {examples} shapes each for mul (broadcasting) and layer_norm, all pass")

# %% [markdown]
# ## Picture: the error of central differences against the step h
#
# Too large an h: truncation error O(h²). Too small: float rounding ~ eps/h. The default
# h = 1e-6 in float64 sits near the bottom of the valley.

# %%
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

hs = np.logspace(-12, -1, 23)
true = np.cos(1.0)
err = [abs((np.sin(1 + h) - np.sin(1 - h)) / (2 * h) - true) for h in hs]
fig, ax = plt.subplots(figsize=(5, 3))
ax.loglog(hs, err, marker="o")
ax.set_xlabel("h")
ax.set_ylabel("|error| of d sin/dx at 1")
ax.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(figure_dir("03") / "finite_difference_error.png")
checks.between([min(err)], 0, 1e-9, "the error at the best h")
checks.between([err[-1]], 1e-4, np.inf, "the error at h = 0.1 (truncation)")
print("saved", figure_dir("03") / "finite_difference_error.png")

# %% [markdown]
# ## Exercise
#
# Write `numerical_gradient` yourself (numerical gradients by central differences): the stub and what it must
# do are in `lessons/exercises/03_numerical_gradient.py`. Then `python lessons/check.py 03` grades it with the
# package's own checks, and shows the smallest input it gets wrong, if any.

# %% [markdown]
# # Lesson 1 — Autograd on scalars
#
# Everything in this project rests on one idea: **reverse-mode automatic differentiation**.
# We build it here from nothing, on plain Python floats, in about fifty lines, and then check
# that `minitensor` (the real engine, which does the same on whole arrays) agrees with it.
#
# A computation is a graph. Every value remembers the values it was made from and how to send
# a gradient back to them (the *local* derivative times the gradient arriving from above: the
# chain rule). `backward()` visits the graph from the output back to the inputs, in reverse
# topological order, so each node has received *all* of its gradient before passing it on.
#
# **Teaches:** `mt.tensor`, `backward`, `grad`, `item`, `tanh`; reverse-mode differentiation,
# the chain rule, finite differences.
#
# **Uses:** nothing: this is where the course starts.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np

import minitensor as mt
from lessonkit import Results, checks, show, smoke

results = Results("01")


class Value:
    """A scalar that records how it was computed."""

    def __init__(self, data, parents=(), backward=lambda: None):
        self.data, self.grad = float(data), 0.0
        self._parents, self._backward = parents, backward

    def __add__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = Value(self.data + other.data, (self, other))

        def backward():  # d(a+b)/da = d(a+b)/db = 1
            self.grad += out.grad
            other.grad += out.grad

        out._backward = backward
        return out

    def __mul__(self, other):
        other = other if isinstance(other, Value) else Value(other)
        out = Value(self.data * other.data, (self, other))

        def backward():  # d(ab)/da = b, d(ab)/db = a
            self.grad += other.data * out.grad
            other.grad += self.data * out.grad

        out._backward = backward
        return out

    def tanh(self):
        t = math.tanh(self.data)
        out = Value(t, (self,))

        def backward():  # d tanh(x)/dx = 1 - tanh(x)^2
            self.grad += (1 - t * t) * out.grad

        out._backward = backward
        return out

    def backward(self):
        order, seen = [], set()
        stack = [(self, False)]
        while stack:  # iterative depth-first search: no recursion limit
            node, done = stack.pop()
            if done:
                order.append(node)
            elif id(node) not in seen:
                seen.add(id(node))
                stack.append((node, True))
                stack.extend((p, False) for p in node._parents)
        self.grad = 1.0
        for node in reversed(order):
            node._backward()


# %% [markdown]
# A tiny neuron, $y = \tanh(w_1 x_1 + w_2 x_2 + b)$, and $z = x_1 x_1 + y$. Note that $x_1$
# is used three times: the `+=` in every backward is what makes a value used more than once
# receive every contribution.

# %%
x1, x2, w1, w2, b = Value(0.5), Value(-1.5), Value(2.0), Value(0.7), Value(0.1)
y = (w1 * x1 + w2 * x2 + b).tanh()
z = x1 * x1 + y
z.backward()
print(f"y = {y.data:.6f}, dz/dx1 = {x1.grad:.6f}, dz/dw2 = {w2.grad:.6f}")

# %% [markdown]
# ## The same with minitensor
#
# `minitensor` does exactly this, but each node is an op on an n-d array, and its backward is
# written once, next to its forward (see `minitensor/ops/`). The answers agree:

# %%
t = {k: mt.tensor(v.data, dtype=np.float64, requires_grad=True) for k, v in dict(x1=x1, x2=x2, w1=w1, w2=w2, b=b).items()}
ty = (t["w1"] * t["x1"] + t["w2"] * t["x2"] + t["b"]).tanh()
tz = t["x1"] * t["x1"] + ty
tz.backward()
leaves = dict(x1=x1, x2=x2, w1=w1, w2=w2, b=b)
checks.agree({k: t[k].grad.item() for k in leaves}, {k: v.grad for k, v in leaves.items()},
             "minitensor vs the scalar engine", atol=1e-12)
print("minitensor agrees with the scalar engine on every gradient")

# %% [markdown]
# ## Check against finite differences
#
# A derivative is a limit; the central difference $\frac{f(x+h) - f(x-h)}{2h}$ approximates it
# with an error of order $h^2$. If backward is right, the two agree to many digits.

# %%
def z_of(p):
    """The neuron's z at the point p, through the engine's forward only."""
    v = {k: Value(x) for k, x in p.items()}
    return (v["x1"] * v["x1"] + (v["w1"] * v["x1"] + v["w2"] * v["x2"] + v["b"]).tanh()).data


point = {k: v.data for k, v in leaves.items()}
worst = checks.matches_finite_differences(z_of, point, {k: v.grad for k, v in leaves.items()}, h=1e-6, tol=1e-8)
for k, v in leaves.items():
    up, down = dict(point, **{k: point[k] + 1e-6}), dict(point, **{k: point[k] - 1e-6})
    print(f"dz/d{k}: backward {v.grad:+.10f}  finite difference {(z_of(up) - z_of(down)) / 2e-6:+.10f}")
print(f"largest difference {worst:.1e}")
results["largest_finite_difference_error"] = worst

# %% [markdown]
# The `+=` matters: if `__mul__`'s backward *assigned* its gradients instead, $x_1$ would keep
# only the last of its three contributions, and this check would name it (the project's
# tests plant exactly that bug and watch the check fail).

# %% [markdown]
# ## A deep chain
#
# Because the topological sort is iterative, a graph far deeper than Python's recursion limit
# (1,000 calls by default) is fine: $v$ multiplied by 1.0001 again and again has the gradient
# $1.0001^{\text{depth}}$.

# %%
depth = 2_000 if smoke() else 20_000
v = Value(1.0)
w = v
for _ in range(depth):
    w = w * 1.0001
w.backward()
checks.agree(v.grad, 1.0001**depth, f"the gradient through a {depth}-deep chain", atol=0, rtol=1e-9)
print(f"depth {depth}: dv = {v.grad:.6f} (expected {1.0001**depth:.6f})")

# %% [markdown]
# ## Picture: tanh and its derivative from backward
#
# One backward per point gives the derivative of tanh along a whole interval; it must be
# $1 - \tanh^2 x$ everywhere.

# %%
xs = np.linspace(-3, 3, 61)
grads = []
for x in xs:
    v = Value(x)
    v.tanh().backward()
    grads.append(v.grad)
checks.agree(grads, 1 - np.tanh(xs) ** 2, "backward of tanh vs 1 - tanh²", atol=1e-12)

# %% tags=["fold"]
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(xs, np.tanh(xs), label="tanh(x)")
ax.plot(xs, grads, label="d tanh / dx (from backward)")
ax.set_xlabel("x")
ax.legend(loc="lower right", fontsize=8)
ax.grid(alpha=0.3)
show(fig, "01", "tanh_and_gradient.png")

# %% [markdown]
# ## Exercise
#
# Exercise 01 of the track, `lessons/exercises/ex01_tensor.py`, asks for the start of your
# engine, a Tensor and a Function of your own, the backward of + and ·, and its backward pass,
# which walks the graph in reverse topological order and adds up the gradients that reach a
# tensor along different paths. The 25 exercises build one engine of your own, each file
# importing your earlier ones; `lessons/README.md` describes the track.
# `python lessons/check.py 01` grades it and, at the first case it gets wrong, shows the input,
# what it expected and what it got.

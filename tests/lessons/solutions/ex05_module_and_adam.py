"""Exercise 05 (lesson 5) — a Module, a Linear layer and Adam.

A ``Module`` owns parameters and other modules, as attributes. A parameter is a Tensor with
``requires_grad=True`` (what ``Parameter`` makes); a Tensor without it is a constant. Write:

1. ``Module.named_parameters()``: every parameter of the module and of the modules inside it,
   as a list of (name, Tensor) pairs, in the order the attributes were set: a parameter attribute
   ``weight`` is "weight"; a parameter of a module attribute ``ffn`` is "ffn.weight"; the
   items of a list attribute ``layers``, modules or parameters, are "layers.0", "layers.1",
   ... (so "layers.0.ffn.weight"). Each parameter once, named by the first attribute that
   holds it.
2. ``Linear.forward(x)``: x W + b, W of shape (in, out) as the paper writes it.
3. ``Adam.step()``: one update of every parameter p with gradient g (``p.grad``; skip
   parameters without one), step t counting the calls of ``step`` from 1:
   m ← β1·m + (1 − β1)·g,  v ← β2·v + (1 − β2)·g²,
   p ← p − lr · m̂ / (√v̂ + ε),  with m̂ = m / (1 − β1ᵗ) and v̂ = v / (1 − β2ᵗ).
   Change ``p.data`` in place (``p.data -= ...``: the array itself, which others may hold), and
   keep m and v for the next step. Read ``self.lr`` at every step (exercise 16's schedule
   changes it between steps), and leave ``p.grad`` as it is.

Check by hand: at the first step every entry moves by almost exactly lr against the sign of
its gradient.

Check it with:  python lessons/check.py 05
"""
import numpy as np

from ex01_tensor import Tensor
import ex02_broadcasting  # noqa: F401 - the engine's operators


def Parameter(data):
    """A Tensor the optimiser updates."""
    return Tensor(np.asarray(data), requires_grad=True)


def uniform_init(fan_in, fan_out, rng):
    """U(±1/√fan_in) (exercise 06 writes the Transformer's own initialisation)."""
    a = 1 / np.sqrt(fan_in)
    return rng.uniform(-a, a, size=(fan_in, fan_out))


class Module:
    training = True

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def children(self):
        """The modules held by attributes (lists of modules included), in order."""
        for value in vars(self).values():
            for item in (value if isinstance(value, list) else [value]):
                if isinstance(item, Module):
                    yield item

    def named_parameters(self):
        # >>> exercise: write Module.named_parameters
        seen = set()

        def walk(module, prefix):
            for name, value in vars(module).items():
                if isinstance(value, list):
                    items = [(f"{name}.{i}", v) for i, v in enumerate(value)]
                else:
                    items = [(name, value)]
                for key, item in items:
                    if isinstance(item, Tensor) and item.requires_grad and id(item) not in seen:
                        seen.add(id(item))
                        yield prefix + key, item
                    elif isinstance(item, Module):
                        yield from walk(item, prefix + key + ".")

        return list(walk(self, ""))
        # <<<

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def state_dict(self):
        return {name: p.data.copy() for name, p in self.named_parameters()}

    def load_state_dict(self, state):
        mine = dict(self.named_parameters())
        if set(mine) != set(state):
            raise KeyError(f"names differ: missing {sorted(set(mine) - set(state))}, "
                           f"unexpected {sorted(set(state) - set(mine))}")
        for name, p in mine.items():
            if p.shape != np.shape(state[name]):
                raise ValueError(f"{name}: shape {p.shape}, the state's {np.shape(state[name])}")
            p.data[...] = state[name]

    def astype(self, dtype):
        for p in self.parameters():
            p.data = p.data.astype(dtype)
        return self

    def train(self, mode=True):
        self.training = mode
        for child in self.children():
            child.train(mode)
        return self

    def eval(self):
        return self.train(False)


class Linear(Module):
    """y = x W + b, W of shape (n_in, n_out), b zeros."""

    def __init__(self, n_in, n_out, rng, init=uniform_init):
        self.weight = Parameter(init(n_in, n_out, rng))
        self.bias = Parameter(np.zeros(n_out))

    def forward(self, x):
        # >>> exercise: write Linear.forward
        return x @ self.weight + self.bias
        # <<<


class Adam:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.98), eps=1e-9):
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.m = [np.zeros_like(p.data) for p in self.params]
        self.v = [np.zeros_like(p.data) for p in self.params]
        self.t = 0

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        # >>> exercise: write Adam.step
        self.t += 1
        b1, b2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            m *= b1
            m += (1 - b1) * p.grad
            v *= b2
            v += (1 - b2) * p.grad**2
            m_hat = m / (1 - b1**self.t)
            v_hat = v / (1 - b2**self.t)
            p.data -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
        # <<<

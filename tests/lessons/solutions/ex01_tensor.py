"""Exercise 01 (lesson 1) — a Tensor and a Function with backward.

Your engine starts here. A ``Tensor`` holds a NumPy array (``.data``) and, once ``backward``
has run, its gradient (``.grad``, an array of the same shape and dtype). A ``Function`` is one operation:
``forward`` computes the output from the inputs' arrays, ``backward`` turns the gradient of
the output into one gradient per input (the chain rule, one step). ``Function.apply`` runs
``forward`` and, when an input needs a gradient, remembers in the output which Function made
it (``out.creator``), whose ``inputs`` lead further back: that chain is the graph.

Write:
1. ``Add.backward`` and ``Mul.backward``: z = x + y and z = x · y, entry by entry (x and y
   have one shape here; exercise 02 adds broadcasting).
2. ``Tensor.backward(grad=None)``: the gradient of this tensor with respect to every tensor
   it was computed from. Visit the graph in reverse topological order (a tensor only after
   every tensor that used it, so that each Function's backward runs once per pass), start
   from ``grad`` as an array of this tensor's dtype (ones of its shape when None), and add
   up the gradients that reach a tensor along different paths. A Function's backward may
   give None for an input: no gradient flows back along that edge (a tensor that receives
   none passes none on). Store the result in ``.grad`` of every leaf: a tensor you made
   yourself with ``Tensor(..., requires_grad=True)``, not one a Function returned (those
   need no ``.grad``). Add it to what ``.grad`` already holds, so that a second backward
   adds up, and never change an array in place that someone else holds: ``grad`` is the
   caller's, and one array may reach several tensors (x + y gives both the same). Each leaf's
   ``.grad`` is an array of its own, which its owner may change in place (clipping does).
   (``backward`` is only called on tensors that need a gradient.)

Check by hand: x = Tensor(3.0, requires_grad=True); (x * x + x).backward() gives x.grad = 7.

Check it with:  python lessons/check.py 01
"""
from contextlib import contextmanager

import numpy as np

_grad_enabled = True


@contextmanager
def no_grad():
    """Inside ``with no_grad():`` no graph is recorded (decoding and evaluation need none)."""
    global _grad_enabled
    before, _grad_enabled = _grad_enabled, False
    try:
        yield
    finally:
        _grad_enabled = before


class Tensor:
    """An array with a gradient. ``creator`` is the Function that made it (None for inputs)."""

    def __init__(self, data, requires_grad=False):
        data = np.asarray(data)
        self.data = data if data.dtype.kind == "f" else data.astype(np.float64)
        self.requires_grad = requires_grad
        self.grad = None
        self.creator = None

    shape = property(lambda self: self.data.shape)
    ndim = property(lambda self: self.data.ndim)
    dtype = property(lambda self: self.data.dtype)

    def __repr__(self):
        return f"Tensor({self.data!r}, requires_grad={self.requires_grad})"

    def numpy(self):
        return self.data

    def item(self):
        return self.data.item()

    def __add__(self, other):
        return Add.apply(self, other)

    def __mul__(self, other):
        return Mul.apply(self, other)

    __radd__, __rmul__ = __add__, __mul__

    def backward(self, grad=None):
        # >>> exercise: write Tensor.backward
        order, seen = [], set()
        stack = [(self, False)]
        while stack:                        # depth first, each tensor after all it was made from
            t, done = stack.pop()
            if done:
                order.append(t)
                continue
            if id(t) in seen:
                continue
            seen.add(id(t))
            stack.append((t, True))
            if t.creator is not None:
                stack.extend((x, False) for x in t.creator.inputs)
        grads = {id(self): np.ones_like(self.data) if grad is None else np.asarray(grad, dtype=self.data.dtype)}
        for t in reversed(order):           # each tensor after every tensor that used it
            g = grads.pop(id(t), None)
            if g is None:
                continue
            if t.creator is None:
                if t.requires_grad:
                    t.grad = g.copy() if t.grad is None else t.grad + g
                continue
            for x, gx in zip(t.creator.inputs, t.creator.backward(g)):
                if gx is not None and x.requires_grad:
                    grads[id(x)] = gx if id(x) not in grads else grads[id(x)] + gx
        # <<<


class Function:
    """One operation. Subclasses write ``forward(*arrays, **params) -> array`` and
    ``backward(grad) -> tuple`` (one gradient per input, None where an input needs none);
    ``forward`` keeps on ``self`` whatever ``backward`` will need."""

    @classmethod
    def apply(cls, *inputs, **params):
        like = next((x.dtype for x in inputs if isinstance(x, Tensor)), None)   # numbers take the tensors' dtype
        inputs = tuple(x if isinstance(x, Tensor) else Tensor(np.asarray(x, like)) for x in inputs)
        fn = cls()
        out = Tensor(fn.forward(*(x.data for x in inputs), **params))
        if _grad_enabled and any(x.requires_grad for x in inputs):
            fn.inputs = inputs
            out.requires_grad, out.creator = True, fn
        return out

    def forward(self, *arrays, **params):
        raise NotImplementedError

    def backward(self, grad):
        raise NotImplementedError


class Add(Function):
    """z = x + y."""

    def forward(self, x, y):
        return x + y

    def backward(self, grad):
        # >>> exercise: write Add.backward
        return grad, grad
        # <<<


class Mul(Function):
    """z = x · y."""

    def forward(self, x, y):
        self.x, self.y = x, y
        return x * y

    def backward(self, grad):
        # >>> exercise: write Mul.backward
        return grad * self.y, grad * self.x
        # <<<
